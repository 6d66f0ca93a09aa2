"""kvplan CLI: `kvplan plan`, the buy-vs-reuse decision for a measured window."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from app.cli import USER_ERRORS, ConfigOpt, DbOpt, app, fail, open_db, out, parse_window, require_deployment, settings


@app.command()
def plan(
    deployment: Annotated[str, typer.Option(help="Deployment name.")],
    from_: Annotated[str, typer.Option("--from", help="Window start (ISO 8601).")],
    to: Annotated[str, typer.Option(help="Window end (ISO 8601).")],
    model: Annotated[Optional[str], typer.Option(help="Only this model_name.")] = None,
    gpus: Annotated[Optional[int], typer.Option(help="GPUs serving the deployment (default: config, else engines seen).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Monthly benefit of KV-cache reuse and the decision (BUY, REUSE, NOT_WORTH_IT, NEED_DATA)
    for a measured window, with the price book saved in the database (or the defaults)."""
    from app.service import plan as make_plan

    t0, t1 = parse_window(from_, to)
    try:
        s = settings(config, db)
        database = open_db(s)
        require_deployment(database, deployment)
        dep = s.deployment(deployment)
        result = make_plan(database, deployment, t0, t1, model, num_gpus=gpus if gpus is not None else (dep.gpus if dep else None))
    except USER_ERRORS as e:
        fail(str(e))
    d = result.to_dict()
    if as_json:
        sys.stdout.write(json.dumps(d, indent=2, sort_keys=True) + "\n")
        return
    out.print(f"[bold]{d['decision']}[/bold]: {d['reason']}")
    for note in (a for a in d["assumptions"] if a.startswith("note: ")):
        out.print(note.removeprefix("note: "), highlight=False, soft_wrap=True)
    mb = d["monthly_benefit_usd"]
    out.print("monthly benefit: " + ("n/a" if mb is None else f"${mb:,.0f} (${d['monthly_benefit_low_usd']:,.0f} .. "
                                      f"${d['monthly_benefit_high_usd']:,.0f})"))
    for k, v in d["terms"].items():
        out.print(f"  {k:<20} {'n/a' if v is None else f'${v:,.0f}'}")
