"""kvplan CLI: `kvplan rules`, the recording-rule pack for Prometheus, Thanos Ruler, the Mimir
ruler or vmalert (deploy/prometheus/rules/kvplan.rules.yml is its default output)."""

from __future__ import annotations

import re
import sys
from typing import Annotated, Literal

import typer

from ...models.core.errors import KvplanError


def rules(
    per_engine_labels: Annotated[str | None, typer.Option(
        help="Comma-separated labels that tell one engine from another, summed away (default: "
             "instance,pod,engine,worker_id,tp_rank,pp_rank,dp_rank,moe_ep_rank).")] = None,
    delay: Annotated[str, typer.Option(help="How long after a minute its sums are recorded (late scrapes, "
                                            "remote-write lag), e.g. 1m or 3m.")] = "1m",
    lookback: Annotated[str, typer.Option(help="How far before a minute a series' previous sample may lie.")] = "10m",
    fmt: Annotated[Literal["rules", "prometheusrule"], typer.Option("--format", help="rules: a rule file; "
                   "prometheusrule: a Prometheus Operator PrometheusRule.")] = "rules",
    namespace: Annotated[str, typer.Option(help="--format prometheusrule: its namespace.")] = "monitoring",
    label: Annotated[list[str] | None, typer.Option(help="--format prometheusrule: a label k=v for the "
                     "operator's ruleSelector (repeatable), e.g. release=kube-prometheus-stack.")] = None,
) -> None:
    """Print kvplan's recording-rule pack: per-minute sums across engines by deployment, model
    and bucket, for aggregated ingestion (prometheus_mode = "aggregated", prometheus_sums = "rules")."""
    from ...collectors.prometheus.rules import PER_ENGINE_LABELS, Window, render, render_prometheusrule
    from ...models.inputs.settings_checks import duration_s

    without = tuple(x.strip() for x in per_engine_labels.split(",") if x.strip()) if per_engine_labels \
        else PER_ENGINE_LABELS
    bad = [x for x in without if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", x) or x in ("model_name", "le")]
    if bad or not without:
        raise KvplanError(f"{bad or per_engine_labels!r}: label names other than model_name and le",
                          source="--per-engine-labels")
    secs = {}
    for opt, v in (("--delay", delay), ("--lookback", lookback)):
        try:
            secs[opt] = int(duration_s(v))
        except ValueError as e:
            raise KvplanError(str(e), source=opt) from None
        if secs[opt] % 60:
            raise KvplanError(f"{v!r}: whole minutes", source=opt)
    w = Window(60, secs["--lookback"], secs["--delay"])
    if fmt == "rules":
        sys.stdout.write(render(w, without))
        return
    labels = {}
    for kv in label or []:
        k, sep, v = kv.partition("=")
        if not sep or not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_./-]*", k):
            raise KvplanError(f"{kv!r} is not k=v", source="--label")
        labels[k] = v
    sys.stdout.write(render_prometheusrule(w, without, namespace=namespace, labels=labels))
