"""kvplan CLI: `kvplan report`, the capacity report of one deployment and month."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ...models.inputs.settings import deployment_settings
from .common import ConfigOpt, DbOpt, open_reader, out, parse_time, refuse_overwriting, settings


def report(
    deployment: Annotated[str, typer.Option(help="Deployment name.")],
    month: Annotated[str, typer.Option(help="UTC month, YYYY-MM (every figure over the whole month; the "
                                            "charts span the data in it).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="report.pdf or report.html.")],
    model_name: Annotated[str | None, typer.Option("--model", help="Only this model_name.")] = None,
    measured_on: Annotated[str | None, typer.Option(
        help="What served the metrics, e.g. '8x H100 80GB, Qwen3-235B' (default: the runs' measured_on "
             "when they agree, else 'not recorded').")] = None,
    generated_at: Annotated[str | None, typer.Option(
        help="Print this time (ISO 8601) as the generation time; by default none, so the same data "
             "gives the same report.")] = None,
    prompts_check: Annotated[Path | None, typer.Option(
        help="Add a prompts section from a saved `kvplan prompts check --json` output.")] = None,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Write the capacity report (measured reuse, tail baseline, topology, pilot runs, pricing,
    assumptions and price book, data provenance) as PDF or HTML."""
    from ..report import write_report
    from ..report.prompts import load_check

    when = parse_time(generated_at, "--generated-at") if generated_at else None
    s = settings(config, db)
    refuse_overwriting(output, "-o", [("--db", s.db), ("--config", config), ("--prompts-check", prompts_check)])
    path = write_report(open_reader(s), deployment, month, output, model_name=model_name, generated_at=when,
                        measured_on=measured_on, cfg=deployment_settings(s, deployment),
                        prompts_check=load_check(prompts_check) if prompts_check is not None else None)
    out.print(f"{path}: capacity report of {deployment!r} for {month} ({path.stat().st_size:,} bytes)")
