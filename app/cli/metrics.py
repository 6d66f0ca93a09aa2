"""``kvplan import-metrics``, ``scrape`` and ``stats``: metrics into DuckDB, numbers out; ``migrate``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ...models.core.errors import KvplanError
from ...models.core.redact import redact
from ...models.metrics.catalog import KINDS
from ..data.collection import recent_scrapes
from ..data.store import require_deployment
from .common import (
    ConfigOpt,
    DbOpt,
    err,
    json_text,
    open_reader,
    open_writer,
    out,
    parse_time,
    parse_window,
    settings,
)


def migrate(db: DbOpt = None, config: ConfigOpt = None) -> None:
    """Create the database, or bring it to this kvplan's schema and increase rule (what every
    command that writes does first; the commands that only read never do, and ask for this)."""
    from ...sql.db import Database, code_version

    s = settings(config, db)
    database = Database(s.db, lock_timeout_s=s.lock_timeout_s)
    applied = database.migrate()
    done = f"applied {', '.join(applied)}" if applied else "nothing to apply"
    out.print(f"{database.path}: schema {code_version()} ({done}); increase rule current", highlight=False)


def import_metrics(
    files: Annotated[list[Path], typer.Argument(help="Saved /metrics payloads (one vLLM or LMCache server each).")],
    deployment: Annotated[str, typer.Option(help="Deployment the scrapes belong to.")],
    at: Annotated[str | None, typer.Option(help="Time the payloads were taken (ISO 8601; UTC if no zone); "
                                                "not needed for files named NAME@TIME.prom.")] = None,
    target: Annotated[str | None, typer.Option(help="Target name (default: NAME of NAME@TIME.prom, else the "
                                                    "file's name without extension).")] = None,
    kind: Annotated[str | None, typer.Option(help=f"Force the kind: {', '.join(KINDS)}.")] = None,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Import saved /metrics texts as scrapes taken at --at (air-gapped clusters: curl now, import later).

    Importing the same file for the same time again changes nothing."""
    from ...collectors.scrape.scrape import import_files

    ts = parse_time(at, "--at") if at else None
    s = settings(config, db)
    database = open_writer(s)
    results = import_files(database, deployment, [(f, ts, target) for f in files], kind=kind,
                           max_bytes=s.scrape_max_bytes)
    for f, r in zip(files, results, strict=True):
        out.print(f"{f}: {r.status} ({r.samples} samples) as target {r.target!r} at {r.ts.isoformat()}Z")
        for w in r.warnings:
            err.print(f"[yellow]{f}: {redact(w)}[/yellow]", highlight=False, soft_wrap=True)


def scrape(
    urls: Annotated[list[str], typer.Argument(help="/metrics URLs of vLLM or LMCache servers.")],
    deployment: Annotated[str, typer.Option(help="Deployment the scrapes belong to.")],
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Scrape /metrics URLs once and store the result (a failed scrape is recorded as a gap)."""
    from ...collectors.scrape.scrape import Target, default_target_name, redact_url, scrape_target
    from ...models.inputs.settings_checks import check_url

    for url in urls:
        try:
            check_url(url)
        except ValueError as e:
            raise KvplanError(str(e), source="url") from None
    s = settings(config, db)
    database = open_writer(s)
    failed = 0
    for url in urls:
        r = scrape_target(database, deployment, Target(default_target_name(url), url),
                          timeout_s=s.scrape_timeout_s, max_bytes=s.scrape_max_bytes)
        if r.status == "failed-recorded":
            failed += 1
            last = recent_scrapes(database, deployment, limit=50)
            msg = next((x["error"] for x in last if x["target"] == r.target and not x["ok"]), "failed")
            err.print(f"[red]{redact_url(url)}[/red]: {msg}", highlight=False, soft_wrap=True)
        else:
            out.print(f"{redact_url(url)}: {r.status} ({r.samples} samples) as target {r.target!r}")
    if failed:  # every URL was tried; a failed one is a recorded gap and exit 2
        raise typer.Exit(2)


def stats(
    deployment: Annotated[str, typer.Option(help="Deployment name.")],
    from_: Annotated[str, typer.Option("--from", help="Window start (ISO 8601).")],
    to: Annotated[str, typer.Option(help="Window end (ISO 8601).")],
    model_name: Annotated[str | None, typer.Option("--model", help="Only this model_name.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Hit rates, cached tokens and TTFT/TPOT/ITL p50/p99 of a deployment over a window (exact:
    sums of counter increases between scrapes inside the window, then ratios)."""
    from ..data.window import stats as window

    t0, t1 = parse_window(from_, to)
    database = open_reader(settings(config, db))
    require_deployment(database, deployment)
    st = window(database, deployment, t0, t1, model_name)
    d = st.to_dict()
    d.update(deployment=deployment, model_name=model_name, window_from=t0.isoformat(), window_to=t1.isoformat())
    if as_json:
        sys.stdout.write(json_text(d, indent=2, sort_keys=True, default=str) + "\n")
        return
    from rich.table import Table

    table = Table(title=f"{deployment} {t0.isoformat()} .. {t1.isoformat()}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k in ("prefix_cache_hit_rate", "external_prefix_cache_hit_rate", "lmcache_lookup_hit_rate",
              "cached_prompt_tokens", "prompt_tokens", "requests", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s",
              "tpot_p99_s", "itl_p50_s", "itl_p99_s"):
        v = d[k]
        table.add_row(k, "not reported" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v)))
    out.print(table)
    for note in st.notes:
        err.print(note, highlight=False, soft_wrap=True)
