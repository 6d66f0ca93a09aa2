"""kvplan CLI: collection commands.

* ``kvplan collect``            one scrape round of every configured target
* ``kvplan collect --daemon``   the scheduler: scrapes every N s, nightly ingestion + rollups + report
* ``kvplan collect --nightly``  the nightly job once (missed days, or ``--day``)
* ``kvplan ingest``             a one-off backfill of a range from Prometheus
* ``kvplan config check``       validate the configuration, naming every bad key
"""

from __future__ import annotations

import logging
from datetime import date
from pathlib import Path
from typing import Annotated

import typer

from ...models.core.errors import KvplanError
from ..data.collection import ingest_gaps
from .common import ConfigOpt, DbOpt, err, fail, open_writer, out, parse_time, settings


def _logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("urllib3", "apscheduler", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def ingest(
    deployment: Annotated[str, typer.Option(help="Deployment (from the config) to ingest.")],
    from_: Annotated[str, typer.Option("--from", help="Range start (ISO 8601; UTC if no zone).")],
    to: Annotated[str, typer.Option(help="Range end (ISO 8601); capped at now.")],
    step: Annotated[str | None, typer.Option(
        help="Step of the stored increases, e.g. 1m (default: prometheus.step).")] = None,
    chunk: Annotated[str | None, typer.Option(
        help="Range per query and transaction, e.g. 1h (default: prometheus.chunk).")] = None,
    selector: Annotated[str | None, typer.Option(
        help="Label matchers, e.g. 'job=\"vllm\"' (default: the deployment's prometheus_selector).")] = None,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Backfill a range of one deployment from Prometheus (re-running a range never duplicates).

    Long on purpose: the option checks, the progress bar and the report of gaps are the
    command's whole job, read top to bottom."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from ...collectors.prometheus.ingest import ingest_range, ingest_window
    from ...collectors.schedule.scheduler import logged_run
    from ...models.inputs.settings import DeploymentConfig
    from ...models.inputs.settings_checks import check_selector, duration_s

    t0, t1 = ingest_window(parse_time(from_, "--from"), parse_time(to, "--to"))
    if t1 <= t0:
        fail(f"--to ({to}) must be after --from ({from_}) and not in the future")
    s = settings(config, db)
    for opt, v in (("--step", step), ("--chunk", chunk)):
        if v is not None:
            try:
                duration_s(v)
            except ValueError as e:
                raise KvplanError(str(e), source=opt) from None
    dep = s.deployment(deployment)
    if selector is not None:
        try:
            dep = DeploymentConfig(name=deployment, prometheus_selector=check_selector(selector))
        except ValueError as e:
            raise KvplanError(str(e), source="--selector") from None
    elif dep is None:
        known = ", ".join(d.name for d in s.deployments) or "none"
        fail(f"no deployment {deployment!r} in the configuration (known: {known}); add it or pass --selector")
    if not dep.prometheus_selector:
        fail(f"deployment {deployment!r} has no prometheus_selector: set one (e.g. 'job=\"vllm\"') or pass "
             "--selector, so kvplan never ingests every series of a shared Prometheus by accident")
    if not s.prometheus.url:
        fail("no Prometheus URL: set prometheus.url in the config or KVPLAN_PROMETHEUS__URL")
    database = open_writer(s)
    with Progress(TextColumn(f"ingest {deployment}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[rows]} rows"), TimeRemainingColumn(), console=err,
                  transient=True) as bar:
        task = bar.add_task("ingest", total=None, rows=0)

        def tick(i, n, res):
            bar.update(task, completed=i, total=n, rows=res.rows)

        with logged_run(database, "ingest", deployment=deployment) as run:
            res = ingest_range(database, s.prometheus, dep, t0, t1, step=step, chunk=chunk, on_chunk=tick)
            run.rows, run.errors, run.notes = res.rows, res.failed, res.errors[:3]
    gaps = ingest_gaps(database, deployment, t0, t1)
    what = "raw samples" if res.lost is None else "per-step sums"
    out.print(f"{deployment}: {res.chunks} chunks ({res.failed} failed), {res.raw_samples} {what} -> "
              f"{res.increments} step increases + {res.gauges} gauge values [{res.mode}]", highlight=False)
    if res.lost is not None:
        out.print(f"{res.lost}; at most {res.engines_max} engines reported in one step", highlight=False,
                  soft_wrap=True)
    if res.far_pairs:
        err.print(f"[yellow]warning:[/yellow] {res.far_pairs} increases not counted: consecutive samples more than "
                  f"prometheus.lookback ({s.prometheus.lookback}) apart; raise lookback above the scrape interval",
                  highlight=False, soft_wrap=True)
    if res.refused_samples and res.mode == "raw":
        err.print(f"[yellow]warning:[/yellow] {res.refused_samples} samples not stored: not finite, negative or above "
                  f"2**53, as a direct import refuses them (e.g. {'; '.join(res.refused_examples)}); the good "
                  "samples around them are paired", highlight=False, soft_wrap=True)
    elif res.refused_samples:
        err.print(f"[yellow]warning:[/yellow] {res.refused_samples} counter samples not finite, negative or above "
                  f"2**53 were left out of the {res.mode} sums, as a direct import refuses them (e.g. "
                  f"{'; '.join(res.refused_examples)}); each step holding one, and the step after it, lack "
                  "that series' increase", highlight=False, soft_wrap=True)
    for target, what in res.refused.items():
        err.print(f"[yellow]warning:[/yellow] target {target} is {what}, not an engine: not stored (point kvplan "
                  "at the engines' own /metrics)", highlight=False, soft_wrap=True)
    for g in gaps:
        out.print(f"gap {g['t_from'].isoformat()}Z .. {g['t_to'].isoformat()}Z "
                  f"{g['target'] or '(all targets)'}: {g['reason']}", highlight=False, soft_wrap=True)
    for message in res.errors[:5]:
        err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    if res.failed:  # Prometheus failed (down, timeout, bad answer): recorded as gaps, exit 2 as for any bad input
        raise typer.Exit(2)


def collect(
    daemon: Annotated[bool, typer.Option("--daemon", help="Run the scheduler until SIGTERM/SIGINT.")] = False,
    nightly: Annotated[bool, typer.Option("--nightly",
                                          help="Run the nightly job once (missed days, or --day).")] = False,
    day: Annotated[str | None, typer.Option(help="With --nightly: this UTC day (YYYY-MM-DD) only.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Collect: one scrape round of every configured target, or run the daemon / the nightly job."""
    from ...collectors.schedule.scheduler import Nightly, NightlyJobs, Scraper, run_daemon
    from ..data.store import rollup_gauges_day
    from ..report import nightly_reports

    jobs = NightlyJobs(rollup_gauges=rollup_gauges_day, report=nightly_reports)

    if daemon and nightly:
        fail("--daemon already runs the nightly job; pass one of --daemon, --nightly")
    s = settings(config, db)
    database = open_writer(s)
    if daemon:
        _logging(verbose)
        run_daemon(s, database, jobs=jobs)
        return
    if nightly:
        _logging(verbose)
        n = Nightly(s, database, jobs)
        if day:
            try:
                outcomes = [n.run_day(date.fromisoformat(day))]
            except ValueError:
                fail(f"--day: {day!r} is not a date like 2026-11-30")
        else:
            outcomes = n.run()
        for o in outcomes:
            out.print(f"nightly: {o.rows} rows, {o.errors} errors" + (f" ({o.message})" if o.message else ""),
                      highlight=False, soft_wrap=True)
        if any(o.errors for o in outcomes):  # each error is recorded (gaps, collector_runs): exit 2
            raise typer.Exit(2)
        return
    scraper = Scraper(s, database)
    if not scraper.targets:
        fail("no targets configured: add [[deployments.targets]] to the config")
    scraper.ensure_targets()
    o = scraper.round()
    scraper.close()
    out.print(f"scraped {len(scraper.targets)} targets: {o.rows} samples, {o.errors} errors", highlight=False)
    for note in o.notes:
        err.print(f"[red]{note}[/red]", highlight=False, soft_wrap=True)
    if o.errors:
        raise typer.Exit(1)


def _scrape_capacity(s) -> None:
    """Say where direct scraping should hand over to Prometheus (bench/scrape_bench.py)."""
    import os

    from ...collectors.schedule.scheduler import TARGETS_PER_CORE_AT_15S

    n = sum(len(d.targets) for d in s.deployments)
    cores = os.cpu_count() or 1
    can = int(TARGETS_PER_CORE_AT_15S * cores * s.schedule.scrape_interval_s / 15)
    if n > can:
        err.print(f"[yellow]warning:[/yellow] {n} direct targets every {s.schedule.scrape_interval_s:g}s: one core "
                  f"parses and stores about {TARGETS_PER_CORE_AT_15S} vLLM targets per 15 s (measured, "
                  f"bench/scrape_bench.py), so this machine ({cores} cores) keeps up with about {can}. Past that, "
                  "let Prometheus scrape the engines and ingest with prometheus_selector "
                  "(prometheus_mode = \"aggregated\" for fleets).", highlight=False, soft_wrap=True)


def config_check(config: ConfigOpt = None, db: DbOpt = None) -> None:
    """Validate the configuration (TOML + KVPLAN_* environment + secret files); errors name the key."""
    from ...collectors.scrape.scrape import redact_url

    s = settings(config, db)
    p = s.prometheus
    out.print(f"configuration OK: {len(s.deployments)} deployment(s), "
              f"{sum(len(d.targets) for d in s.deployments)} direct target(s)", highlight=False)
    for d in s.deployments:
        sel = f", Prometheus selector {{{d.prometheus_selector}}}" if d.prometheus_selector else ""
        mode = "" if not d.prometheus_selector else (
            ", raw samples (exact)" if d.prometheus_mode == "raw" else
            f", aggregated ({'rule pack outputs' if d.prometheus_sums == 'rules' else 'query-time sums'}): "
            "one fleet target per engine kind and model, no per-engine detail")
        out.print(f"  {d.name}: {len(d.targets)} target(s){sel}{mode}", highlight=False, soft_wrap=True)
        if d.prometheus_mode == "aggregated" and d.prometheus_sums == "rules" and p.step_s() % 60:
            err.print(f"[yellow]warning:[/yellow] {d.name}: prometheus.step {p.step} is not a multiple of the rule "
                      "pack's minute; ingestion will refuse it", highlight=False, soft_wrap=True)
    _scrape_capacity(s)
    secrets = [n for n, v in (("bearer token", p.bearer_token), ("password", p.password)) if v is not None]
    out.print(f"  prometheus: {redact_url(p.url) if p.url else 'not configured'}, step {p.step}, chunk {p.chunk}"
              + (f", {' and '.join(secrets)} set" if secrets else ""), highlight=False)
    out.print(f"  schedule: scrape every {s.schedule.scrape_interval_s:g}s, nightly '{s.schedule.nightly_cron}'"
              f" ({s.schedule.timezone or 'local time'})", highlight=False)
    out.print(f"  database: {Path(s.db)}; prices: {len(s.prices)} key(s)", highlight=False)
    from ...models.inputs.settings_checks import same_server_notes

    for note in same_server_notes((d.name, t.name, t.url) for d in s.deployments for t in d.targets):
        err.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)

