"""Aggregated ingestion: the per-step sums across a deployment's engines, as one "fleet" target
per engine kind and model (``prometheus_mode = "aggregated"``).

Per chunk (t0, t1] kvplan asks, for every family of ``collectors.prometheus.rules.queries`` (the
catalog plus older spellings), either

* ``prometheus_sums = "query"``: the sums themselves, one ``query_range`` per sample name
  evaluated at every step end (Prometheus does the per-series work), or
* ``prometheus_sums = "rules"``: the raw samples of the rule pack's outputs
  (``deployment_model:*``), each covering the minute that ended ``kvplan_delay`` before its
  timestamp, added up into kvplan's steps (a multiple of the minute),

and stores them in the same tables as raw ingestion: counters and buckets in
``prom_increments`` (one pair per step), each gauge's max over the engines in ``samples``, and
the engines (servers) reporting per step as the gauge ``kvplan:vllm_engines`` (and
``kvplan:sglang_engines``, ``kvplan:lmcache_mp_servers``) that the prefill fit, the replica
check and the GPU count read. What is lost against raw mode: every per-engine series (targets,
engines and nodes show as fleets), and exact restart handling inside a step (a restart's or a
new series' value before its first sample in a step is not counted; ``_created`` is not read).
"""

from __future__ import annotations

import json
import logging
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...models.core.redact import redact
from ..scrape.relabel import model_label
from ..scrape.store import series_id
from .rules import DELAY_LABEL, MAX_COUNTER, RULE_STEP_S, Query, Window, queries
from .step_math import Raw, silent_stretches
from .stream import stream_matrix

if TYPE_CHECKING:
    from ...models.inputs.settings import DeploymentConfig
    from .client import PromClient
    from .rows import Rows

LOST = ("aggregated: per-engine series are not kept (one fleet target per engine kind and model), and a "
        "restart's or a new series' count before its first sample in a step is not counted")
"""What an aggregated ingestion says it leaves out (CLI, ledger)."""
log = logging.getLogger(__name__)
_DROP = ("__name__", "job", "model_name", "le", DELAY_LABEL)
_DUR = re.compile(r"^(\d+)(s|m|h)$")


def fleet_target(kind: str, model_name: str | None) -> str:
    return f"fleet/{kind}" + (f"/{model_name}" if model_name else "")


@dataclass
class FleetChunk:
    """What one chunk (t0, t1] of sums produced (times in ms, values per step end)."""

    t0: int
    t1: int
    parts: list[tuple[Query, Raw]] = field(default_factory=list)
    error: str | None = None
    refused: dict[str, int] = field(default_factory=dict)
    """Counter sample name -> step ends at which a series' latest sample was NaN, infinite,
    negative or above 2**53: what the sums leave out (``rules._good``), as raw mode refuses it."""
    refused_query: str = ""
    """Where the refused samples were counted (URL, query_range, span), for the note."""

    @property
    def n_raw(self) -> int:
        return sum(int(r.t.size) for _, r in self.parts)

    @property
    def series(self) -> list[Raw]:
        return [r for _, r in self.parts]


def fetch_sums(client: PromClient, qs: list[Query], t0: int, t1: int, step_s: int) -> FleetChunk:
    """Query-time sums: one query_range per sample name, at every step end in (t0, t1]."""
    from .client import PromError, iso

    ch = FleetChunk(t0, t1)
    form = {"start": f"{(t0 + step_s * 1000) / 1000:.3f}", "end": f"{t1 / 1000:.3f}", "step": str(step_s)}
    try:
        for q in qs:
            where = f"{client.safe_url}/api/v1/query_range {q.sample!r} sum, {iso(t0 / 1000)}..{iso(t1 / 1000)}"
            ch.parts += [(q, r) for r in stream_matrix(client, "/api/v1/query_range", {**form, "query": q.expr}, where)]
    except PromError as e:
        ch.parts, ch.error = [], redact(str(e))
    return ch


def fetch_recorded(client: PromClient, qs: list[Query], selector: str, t0: int, t1: int, step_s: int) -> FleetChunk:
    """The rule pack's outputs: their raw samples, each moved back by its ``kvplan_delay`` to
    the end of the minute it covers and added into kvplan's step holding that end."""
    from .client import PromError, iso

    by_record = {q.record: q for q in qs}
    names = "|".join(re.escape(r) for r in by_record)
    slack = 3600  # outputs are stamped after the minute they cover (by kvplan_delay, <= 1h)
    query = f'{{__name__=~"{names}"{"," + selector if selector else ""}}}[{(t1 - t0) // 1000 + slack}s]'
    at = t1 / 1000 + slack
    where = f"{client.safe_url}/api/v1/query (rule pack outputs, {len(by_record)} names) at {iso(at)}"
    ch = FleetChunk(t0, t1)
    step = step_s * 1000
    try:
        for r in stream_matrix(client, "/api/v1/query", {"query": query, "time": f"{at:.3f}"}, where):
            q = by_record.get(r.name)
            if q is None or r.t.size == 0:
                continue
            covered = r.t - _delay_ms(r.labels.get(DELAY_LABEL), where)
            keep = (covered > t0) & (covered <= t1)
            ends = (covered[keep] + step - 1) // step * step
            if ends.size:
                uniq, inv = np.unique(ends, return_inverse=True)
                ch.parts.append((q, Raw(r.name, r.labels, uniq, np.bincount(inv, weights=r.v[keep]))))
    except PromError as e:
        ch.parts, ch.error = [], redact(str(e))
    return ch


def _delay_ms(text: str | None, where: str) -> int:
    from .client import PromError

    m = _DUR.match(text or "")
    if not m:
        raise PromError(f"{where}: a rule output without a {DELAY_LABEL} label like 1m ({text!r}): "
                        "load deploy/prometheus/rules/kvplan.rules.yml (or `kvplan rules`) unchanged")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)] * 1000


def fetch_fleet_chunk(client: PromClient, deployment: DeploymentConfig, step_s: int, lookback_s: int, t0: int,
                      t1: int) -> FleetChunk:
    """The chunk's sums, from the rule pack's outputs or computed at query time, and the
    counter samples they leave out (``count_refused``)."""
    if deployment.prometheus_sums == "rules":
        qs = queries(Window(RULE_STEP_S, lookback_s, 60))
        ch = fetch_recorded(client, qs, deployment.prometheus_selector, t0, t1, step_s)
    else:
        qs = queries(Window(step_s, lookback_s, 0), selector=deployment.prometheus_selector,
                     without=tuple(deployment.prometheus_per_engine_labels))
        ch = fetch_sums(client, qs, t0, t1, step_s)
    if ch.error is None:
        count_refused(client, ch, qs, deployment.prometheus_selector, step_s)
    return ch


def refused_expr(samples: list[str], selector: str) -> str:
    """Per counter sample name (label ``kvplan_name``), the series whose latest sample is one a
    direct import refuses: NaN, infinite, negative or above 2**53. The sums drop exactly those
    (``rules._good``, a comparison); ``unless`` keeps them (NaN fails every comparison). The
    name is copied to a label first: set operators match without ``__name__``."""
    names = "|".join(re.escape(x) for x in samples)
    sel = f'{{__name__=~"{names}"{"," + selector if selector else ""}}}'

    def named(x: str) -> str:
        return f'label_replace({x}, "kvplan_name", "$1", "__name__", "(.+)")'

    return f"count by (kvplan_name) ({named(sel)} unless {named(f'({sel} >= 0 <= {MAX_COUNTER})')})"


def count_refused(client: PromClient, ch: FleetChunk, qs: list[Query], selector: str, step_s: int) -> None:
    """Fill ``ch.refused``: one query_range over the chunk at its step ends counting, per counter
    sample name, the series whose latest sample the sums leave out (raw mode counts and notes
    such samples; aggregated mode would otherwise drop them without a word). Histogram ``_sum``
    samples may be negative and are not checked. A failure of this check leaves the sums
    standing and says so in the log."""
    from .client import PromError, iso

    samples = sorted({q.sample for q in qs if q.typ != "gauge" and not q.family.startswith("kvplan:")
                      and not q.sample.endswith("_sum")})
    if not samples:
        return
    ch.refused_query = (f"{client.safe_url}/api/v1/query_range (samples not finite, negative or above 2**53, "
                        f"{len(samples)} counter names), {iso(ch.t0 / 1000)}..{iso(ch.t1 / 1000)}")
    form = {"start": f"{(ch.t0 + step_s * 1000) / 1000:.3f}", "end": f"{ch.t1 / 1000:.3f}", "step": str(step_s),
            "query": refused_expr(samples, selector)}
    try:
        for r in stream_matrix(client, "/api/v1/query_range", form, ch.refused_query):
            name = r.labels.get("kvplan_name")
            n = int(np.nansum(r.v)) if r.v.size else 0
            if name and n:
                ch.refused[name] = ch.refused.get(name, 0) + n
    except PromError as e:
        log.warning("could not count the refused counter samples: %s", redact(str(e)))


def fleet_names(ch: FleetChunk) -> dict[str, tuple[str, dict]]:
    """Fleet target name -> (kind, labels for prom_targets) of every series in the chunk."""
    out: dict[str, tuple[str, dict]] = {}
    for q, r in ch.parts:
        name = fleet_target(q.kind, model_label(r.labels.get("model_name")))
        out.setdefault(name, (q.kind, {"job": r.labels.get("job"), "instance": name}))
    return out


def fleet_rows(ch: FleetChunk, target_ids: dict[str, int], rows: Rows) -> dict[str, np.ndarray]:
    """Fill ``rows`` (collectors.prometheus.ingest.Rows) from the chunk; returns each fleet target's
    step ends with engines reporting (for the silent-stretch gaps)."""
    seen: dict[str, list] = defaultdict(list)
    added: set[int] = set()
    for q, r in ch.parts:
        model_name = model_label(r.labels.get("model_name"))
        tname = fleet_target(q.kind, model_name)
        rest = tuple(sorted((k, v) for k, v in r.labels.items() if k not in _DROP))
        le = float(r.labels["le"]) if "le" in r.labels else None
        sid = series_id(target_ids[tname], q.sample, model_name, None, le, rest)
        ok = np.isfinite(r.v)
        t, v = r.t[ok], r.v[ok]
        if q.typ == "gauge":
            rows.gauge["series_id"].append(np.full(t.size, sid, dtype=np.int64))
            rows.gauge["ts"].append(t)
            rows.gauge["value"].append(v)
            if q.family.startswith("kvplan:"):
                seen[tname].append(t[v > 0])
        else:
            for k, arr in (("series_id", np.full(t.size, sid, dtype=np.int64)), ("ts", t), ("delta", v),
                           ("pairs", np.ones(t.size, dtype=np.int64)), ("resets", np.zeros(t.size, dtype=np.int64))):
                rows.inc[k].append(arr)
        if sid in added:
            continue
        added.add(sid)
        se = rows.series
        for k, val in (("series_id", sid), ("target_id", target_ids[tname]), ("name", q.sample), ("family", q.family),
                       ("type", q.typ), ("model_name", model_name), ("engine", None), ("le", le),
                       ("labels", json.dumps(dict(rest), sort_keys=True, separators=(",", ":")))):
            se[k].append(val)
    return {k: np.concatenate(v) if v else np.array([], np.int64) for k, v in seen.items()}


def fleet_gaps(engine_steps: dict[str, np.ndarray], known: set[str], t0: int, t1: int, step_ms: int,
               gap_after_ms: int) -> list[tuple]:
    """Fleet targets that count engines (``known``: seen with an engine count before this
    chunk) with no engine reporting for longer than gap_after: a gap, never zeros."""
    gaps = []
    for tname in sorted(known | engine_steps.keys()):
        ends = engine_steps.get(tname, np.array([], np.int64))
        for a, b in silent_stretches(ends, t0, t1, max(gap_after_ms, step_ms), tname in known):
            gaps.append((tname, a, b, "no engine reported in Prometheus (aggregated)"))
    return gaps
