"""kvplan CLI: `kvplan plan`, the buy-vs-reuse decision for a measured window."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from ...models.core.vocabulary import NoteKind
from ..data.store import deployment_settings, require_deployment
from .common import ConfigOpt, DbOpt, err, json_text, open_reader, out, parse_window, settings

if TYPE_CHECKING:
    from ...models.cache.alternatives import TopologyFinding
    from ...sql.db import Snapshot
    from ..data.history import History


def plan_command(
    deployment: Annotated[str, typer.Option(help="Deployment name.")],
    from_: Annotated[str, typer.Option("--from", help="Window start (ISO 8601).")],
    to: Annotated[str, typer.Option(help="Window end (ISO 8601).")],
    model_name: Annotated[str | None, typer.Option("--model", help="Only this model_name.")] = None,
    gpus: Annotated[int | None, typer.Option(min=1, max=100_000, help="GPUs serving the deployment, for this "
                    "plan only (default: config deployments[].gpus, else vLLM engines seen x "
                    "gpus_per_engine).")] = None,
    topology: Annotated[bool, typer.Option(
        "--topology", help="Add the TTFT what-if's finding: a cache set-up that holds the TTFT SLO where "
        "today's misses, and the GPUs each needs (needs a trace).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Monthly benefit of KV-cache reuse and the decision (BUY, REUSE, NOT_WORTH_IT, NEED_DATA)
    for a measured window, with the price book saved in the database (or the defaults)."""
    from ...models.decision.plan import tier_attribution
    from ..data.history import load_history
    from ..data.plan import plan_range
    from ..report import fmt

    t0, t1 = parse_window(from_, to)
    s = settings(config, db)
    cfg = deployment_settings(s, deployment)
    with open_reader(s).snapshot() as src:
        require_deployment(src, deployment)
        history = load_history(src, deployment, t1, t_from=t0, model_name=model_name, cfg=cfg)
        finding = _topology_finding(src, deployment, model_name, t0, t1, history) if topology else None
        result = plan_range(src, deployment, t0, t1, model_name, cfg=cfg, gpus=gpus, topology=finding,
                            history=history)
    d = result.to_dict()
    if as_json:
        sys.stdout.write(json_text(d, indent=2, sort_keys=True) + "\n")
        return
    out.print(f"[bold]{d['headline']}[/bold]", highlight=False)
    out.print(f"[bold]{d['decision']}[/bold]: {d['reason']}", highlight=False)
    if d.get("topology_finding"):
        out.print(f"topology: {d['topology_finding']['sentence']}", highlight=False, soft_wrap=True)
    for note in (a for a in d["assumptions"] if NoteKind.NOTE.tags(a)):
        out.print(note.removeprefix(NoteKind.NOTE), highlight=False, soft_wrap=True)
    mb = d["monthly_benefit_usd"]
    out.print("monthly benefit: " + ("n/a" if mb is None else
                                      f"{fmt.usd(mb)} ({fmt.usd(d['monthly_benefit_low_usd'])} .. "
                                      f"{fmt.usd(d['monthly_benefit_high_usd'])})"))
    for k, v in d["terms"].items():
        out.print(f"  {k:<20} {fmt.usd(v)}")
    for r in tier_attribution(result):
        out.print(f"saved by {r['tier']}: {fmt.number(r['gpu_hours_per_month'])} GPU-h/month "
                  f"({fmt.number(r['low'])} .. {fmt.number(r['high'])}), {fmt.usd(r['usd_per_month'])}/month, "
                  f"{r['source']}", highlight=False)
    out.print(f"$ per 1M prompt tokens: {fmt.usd_cents(d['usd_per_1m_prompt_tokens_with_reuse'])} with reuse, "
              f"{fmt.usd_cents(d['usd_per_1m_prompt_tokens_without_reuse'])} without; per 1M output tokens: "
              f"{fmt.usd_cents(d['usd_per_1m_output_tokens_with_reuse'])}", highlight=False)
    out.print(fmt.cost_model_line(result), highlight=False, soft_wrap=True)


def _topology_finding(src: Snapshot, deployment: str, model_name: str | None, t0: datetime, t1: datetime,
                      history: History) -> TopologyFinding | None:
    """``--topology``: the TTFT what-if's finding over the window, priced with the plan's own
    history. Without one (no trace, no request in the window, no TTFT prediction) the plan stands
    without it and a note on stderr says why: stdout stays the plan (one JSON object with --json)."""
    from ...collectors.traces.parse import TraceError
    from ..views.whatif import WhatIfQuery, whatif

    try:
        w = whatif(src, deployment, WhatIfQuery(model_name=model_name, t_from=t0, t_to=t1, dollars=False),
                   history=history)
    except TraceError as e:
        err.print(f"note: --topology: no topology finding, the plan stands without it: {e}", highlight=False,
                  soft_wrap=True)
        return None
    finding = w.topology.finding if w.topology is not None else None
    if finding is None:
        err.print("note: --topology: no TTFT prediction for this window (see kvplan whatif)", highlight=False,
                  soft_wrap=True)
    return finding
