"""The collector daemon (``kvplan collect --daemon``): APScheduler 3 in one process.

* ``scrape``: every ``schedule.scrape_interval_s``, one round scrapes every configured
  target, each in its own thread, so a slow target delays no other; a target whose previous
  scrape is still running is skipped this round (counted as an error), never queued twice.
* ``nightly``: on ``schedule.nightly_cron`` (local time by default), for every UTC day not
  yet done: ingest the day from Prometheus (deployments with a ``prometheus_selector``),
  import new LMCache lookup-hash logs (``lookup_hash_log_dir``) for the what-if, compute
  ``daily_rollups`` for every deployment, then the ``NightlyJobs`` the caller gave
  (the CLI: the dashboard's gauge rollups and the capacity reports).

Jobs never overlap themselves (``max_instances=1``, ``coalesce``). A nightly run missed while
the daemon was busy runs late within ``misfire_grace_s``; one missed while it was DOWN is
found on start from ``collector_runs`` (every day since the last successful night, at most
``catchup_days`` back, failed days included) and run at once. Every run is a row of
``collector_runs``; a run still ``running`` when the daemon starts was killed and is marked
``interrupted``. Writes are short transactions (see ``kvplan.sql.db``): a SIGKILL loses only the
transaction in flight.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from ...models.core.errors import KvplanError
from ...models.core.redact import redact
from ...models.core.timeutil import aware_utc, day_start, naive_utc, utcnow
from ...models.inputs.settings import Settings
from ...models.metrics.catalog import PREFILL_NAMES
from ...models.metrics.spans import EDGE_LOOKBACK
from ...models.metrics.spellings import CACHED_RULE_NAMES, cached_of_interval_rows
from ...sql.db import Database
from ..scrape.scrape import Target, scrape_target
from ..scrape.store import ensure_target
from ..traces.ingest import ingest_trace_dir

log = logging.getLogger("kvplan.collector")


# -- the run log -------------------------------------------------------------------------
@dataclass
class Outcome:
    """What one run did; ``message`` ends up in collector_runs (no secrets: errors name URLs
    without credentials)."""

    rows: int = 0
    errors: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def message(self) -> str | None:
        return redact("; ".join(self.notes))[:2000] or None


def fetch_rw(db: Database, query: str, **params: Any) -> list[dict[str, Any]]:
    """A read inside the daemon: through a read-write connection, which shares the process's
    database instance with the scrape threads instead of waiting for them to close."""
    with db.write() as con:
        cur = Database.run(con, query, **params)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


@contextmanager
def logged_run(db: Database, job: str, *, deployment: str | None = None, day: date | None = None) -> Iterator[Outcome]:
    """A collector_runs row written at the start (status running) and closed at the end."""
    out = Outcome()
    with db.write() as con:
        run_id = Database.scalar(con, "insert_collector_run", job=job, deployment=deployment, day=day,
                                 started_at=utcnow(), ended_at=None, status="running", n_rows=0, n_errors=0,
                                 message=None)
    try:
        yield out
    except Exception as e:
        out.errors += 1
        out.notes.append(f"{type(e).__name__}: {e}")
        raise
    finally:
        with db.write() as con:
            Database.run(con, "finish_collector_run", run_id=run_id, ended_at=utcnow(),
                         status="ok" if out.errors == 0 else "errors", n_rows=out.rows, n_errors=out.errors,
                         message=out.message)


# -- direct scrapes --------------------------------------------------------------------------
TARGETS_PER_CORE_AT_15S = 80
"""vLLM targets (a 749-sample recorded payload) one core scrapes, parses and stores every 15 s:
measured by bench/scrape_bench.py on this project's 2-core machine under load (about 175 ms of
kvplan CPU per scrape). Threads do not add cores (the parse holds the GIL): past this many per
core, Prometheus should scrape (``kvplan config check`` says so)."""
class Scraper:
    """Scrape rounds over every configured target, concurrently."""

    def __init__(self, settings: Settings, db: Database):
        self.settings, self.db = settings, db
        self.targets = [(d.name, Target(t.name, t.url, t.kind)) for d in settings.deployments for t in d.targets]
        self.pool = ThreadPoolExecutor(max_workers=max(1, len(self.targets)), thread_name_prefix="scrape")
        self.inflight: dict[tuple[str, str], Future] = {}
        # skipped rounds are written from here, never from the scheduler's own thread
        self.recorder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scrape-skips")
        self._skips: list[tuple[datetime, str]] = []
        self._skips_lock = threading.Lock()
        self._draining = False

    def ensure_targets(self) -> None:
        """Create every deployment and target up front, so concurrent first scrapes never race
        to insert the same rows."""
        with self.db.write() as con:
            for dep, t in self.targets:
                ensure_target(con, dep, t.name, t.kind or "unknown", None)

    def round(self) -> Outcome:
        started = utcnow()
        out = Outcome()
        futures: dict[tuple[str, str], Future] = {}
        skipped: list[tuple[str, Target]] = []
        for dep, t in self.targets:
            key = (dep, t.name)
            prev = self.inflight.get(key)
            if prev is not None and not prev.done():
                out.errors += 1
                out.notes.append(f"{dep}/{t.name}: previous scrape still running, skipped")
                skipped.append((dep, t))
                continue
            futures[key] = self.inflight[key] = self.pool.submit(
                scrape_target, self.db, dep, t, timeout_s=self.settings.scrape_timeout_s,
                max_bytes=self.settings.scrape_max_bytes)
        wait(futures.values(), timeout=self.settings.schedule.scrape_interval_s * 0.9)
        for (dep, name), f in futures.items():
            if not f.done():
                out.errors += 1
                out.notes.append(f"{dep}/{name}: still running at the end of the round")
            elif f.exception() is not None:
                out.errors += 1
                out.notes.append(f"{dep}/{name}: {f.exception()}")
                log.error("scrape %s/%s: %s", dep, name, redact(str(f.exception())))
            elif f.result().status == "failed-recorded":
                out.errors += 1
                out.notes.append(f"{dep}/{name}: failed (see the scrape log)")
            else:
                out.rows += f.result().samples
        with self.db.write() as con:
            for dep, t in skipped:  # a gap at this round's time, as a failed scrape is
                _gap(con, dep, t, started, "not scraped: its previous scrape was still running")
            Database.run(con, "insert_collector_run", job="scrape", deployment=None, day=None, started_at=started,
                         ended_at=utcnow(), status="ok" if out.errors == 0 else "errors", n_rows=out.rows,
                         n_errors=out.errors, message=out.message)
        return out

    def record_skipped(self, when: datetime, why: str) -> None:
        """A whole round the scheduler did not run (the previous one still running, or the daemon
        too busy to start it in time): every target gets a failed scrape at the round's time (a
        gap, as a failed scrape is) and the run log a row; written off the scheduler's thread."""
        log.warning("scrape round of %s skipped: %s", when.isoformat(), why)
        with self._skips_lock:
            self._skips.append((when, why))
            if self._draining:
                return
            self._draining = True
        self.recorder.submit(self._write_skips)

    def _write_skips(self) -> None:
        """Every skipped round noted so far, in one transaction (an overloaded daemon skips many:
        one write each would add to the load that made it skip)."""
        with self._skips_lock:
            skips, self._skips, self._draining = self._skips, [], False
        try:
            with self.db.write() as con:
                for when, why in skips:
                    for dep, t in self.targets:
                        _gap(con, dep, t, when, f"scrape round skipped: {why}")
                    Database.run(con, "insert_collector_run", job="scrape", deployment=None, day=None,
                                 started_at=when, ended_at=utcnow(), status="errors", n_rows=0,
                                 n_errors=len(self.targets), message=f"round skipped: {why}")
        except Exception:  # the daemon goes on; the log says it
            log.exception("recording %d skipped scrape rounds", len(skips))

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.recorder.shutdown(wait=True)


def _gap(con: Any, deployment: str, t: Target, ts: datetime, error: str) -> None:
    """A failed scrape of ``t`` at ``ts`` (a gap), leaving the target's row as it is (its kind
    was read off its payloads; a skipped round knows nothing new about it)."""
    dep = Database.run(con, "get_deployment_id", name=deployment).fetchone()
    row = Database.run(con, "get_target", deployment_id=dep[0], name=t.name).fetchone() if dep else None
    target_id = row[0] if row else ensure_target(con, deployment, t.name, t.kind or "unknown", None)
    ts = naive_utc(ts)
    if Database.run(con, "get_scrape", target_id=target_id, ts=ts).fetchone() is None:
        Database.run(con, "insert_scrape", target_id=target_id, ts=ts, ok=False, error=redact(error), duration_s=None,
                     source="scrape", payload_sha256=None, n_samples=0, warnings=None)


# -- the nightly job -------------------------------------------------------------------------
@dataclass(frozen=True)
class NightlyJobs:
    """What the nightly job runs after ingestion and rollups, given by the caller (the CLI
    passes the dashboard's gauge rollup and the capacity report), so this module never
    imports the app. ``None``: not run."""

    rollup_gauges: Callable[[Database, str, date], int] | None = None
    """Summarise one UTC day of a deployment's gauges; returns rows written."""
    report: Callable[[Settings, date], list] | None = None
    """Write the capacity reports for the month of the day; returns the paths written."""


def day_bounds(day: date) -> tuple[datetime, datetime]:
    start = day_start(day)
    return start, start + timedelta(days=1)


def rollup_day(db: Database, deployment: str, day: date) -> int:
    """Recompute one UTC day's rollups of a deployment (delete + insert, one transaction): the
    day's increases, its cached prompt tokens with the rule chosen per target and scrape
    interval (``cached_day_rows``), which the summed increases cannot give back, the prefill
    cost model's per-interval rows (``prefill_rollups``: the plan reads long windows from them),
    and what a raw read of the day alone gives (``edge_rollups``, ``prefill_edge_rollups``: a
    window starting at the day's midnight, a month, reads its first day from them)."""
    t0, t1 = day_bounds(day)
    with db.write() as con:
        row = Database.run(con, "get_deployment_id", name=deployment).fetchone()
        if row is None:
            return 0
        Database.run(con, "delete_rollups_day", deployment_id=row[0], day=t0)
        n = Database.run(con, "rollup_day", deployment_id=row[0], deployment=deployment,
                         t_from=t0, t_to=t1, t_lookback=t0 - EDGE_LOOKBACK).fetchone()
        cur = Database.run(con, "cached_intervals_span", deployment=deployment, t_lookback=t0 - EDGE_LOOKBACK,
                           t_after=t0, t_to=t1, model_name=None, names=list(CACHED_RULE_NAMES))
        cols = [d[0] for d in cur.description]
        for model_name, labels, value in cached_day_rows([dict(zip(cols, r, strict=True)) for r in cur.fetchall()]):
            Database.run(con, "put_daily_cached", deployment_id=row[0], day=t0, model_name=model_name,
                         labels=labels, n_cached_tokens=value)
        # the prefill cost model's intervals of the day (the plan prices long windows from them)
        Database.run(con, "delete_prefill_rollups_day", deployment_id=row[0], day=t0)
        Database.run(con, "delete_prefill_rollup_mark", deployment_id=row[0], day=t0)
        Database.run(con, "rollup_prefill_day", deployment_id=row[0], deployment=deployment,
                     t_lookback=t0 - EDGE_LOOKBACK, t_after=t0, t_to=t1, names=PREFILL_NAMES)
        Database.run(con, "mark_prefill_day", deployment_id=row[0], day=t0)
        # the day as a window starting at its midnight reads it (a month's first day): pairs inside it only
        for q in ("delete_edge_rollups_day", "delete_prefill_edge_rollups_day", "delete_edge_rollup_mark"):
            Database.run(con, q, deployment_id=row[0], day=t0)
        Database.run(con, "rollup_edge_day", deployment_id=row[0], deployment=deployment, t_from=t0, t_to=t1,
                     cached_names=list(CACHED_RULE_NAMES))
        Database.run(con, "rollup_prefill_edge_day", deployment_id=row[0], deployment=deployment, t_from=t0,
                     t_to=t1, names=PREFILL_NAMES)
        Database.run(con, "mark_edge_day", deployment_id=row[0], day=t0)
    return int(n[0]) if n else 0


def cached_day_rows(rows: list[dict[str, Any]]) -> list[tuple[str | None, str, float]]:
    """(model_name, labels, cached tokens) rows of one day: the whole deployment (scope all,
    model NULL) and each model (scope model); ``found`` 1 when some interval had a rule, ``known``
    0 when one with prompt tokens had none (the figure is unknown, as ``kvplan stats`` says)."""
    from ...models.metrics.increase import Increase

    out = []
    scopes: list[tuple[str | None, str, list[dict[str, Any]]]] = [(None, "all", rows)]
    scopes += [(m, "model", [r for r in rows if r["model_name"] == m])
               for m in sorted({r["model_name"] for r in rows if r["model_name"] is not None})]
    for model_name, scope, part in scopes:  # the whole deployment's row even for a day without any
        total, _how, found, unknown = cached_of_interval_rows(part, Increase)
        out.append((model_name, json.dumps({"found": str(int(found)), "known": str(int(not unknown)),
                                            "scope": scope}, sort_keys=True, separators=(",", ":")),
                    0.0 if unknown else total))
    return out


def days_to_run(db: Database, today: date, catchup_days: int) -> list[date]:
    """Yesterday, plus every earlier day since the first nightly run (at most
    ``catchup_days`` back) that has no successful run."""
    yesterday = today - timedelta(days=1)
    rows = fetch_rw(db, "nightly_days")
    if not rows:
        return [yesterday]
    first = min(r["day"] for r in rows)
    done = {r["day"] for r in rows if r["ok"]}
    start = max(first, yesterday - timedelta(days=catchup_days - 1))
    return [start + timedelta(days=i) for i in range((yesterday - start).days + 1)
            if start + timedelta(days=i) not in done]


class Nightly:
    """Ingest, roll up and report every day that needs it."""

    def __init__(self, settings: Settings, db: Database, jobs: NightlyJobs = NightlyJobs()):
        self.settings, self.db, self.jobs = settings, db, jobs

    def run(self, today: date | None = None) -> list[Outcome]:
        today = today or utcnow().date()
        days = days_to_run(self.db, today, self.settings.schedule.catchup_days)
        return [self.run_day(d) for d in days]

    def run_day(self, day: date) -> Outcome:
        from ..prometheus.ingest import ingest_range

        s = self.settings
        t0, t1 = day_bounds(day)
        log.info("nightly run for %s", day)
        with logged_run(self.db, "nightly", day=day) as out:
            for dep in s.deployments:
                if not (dep.prometheus_selector and s.prometheus.url):
                    continue
                try:
                    res = ingest_range(self.db, s.prometheus, dep, t0, t1)
                except Exception as e:  # a bad deployment must not stop the others
                    out.errors += 1
                    out.notes.append(f"{dep.name}: {type(e).__name__}: {e}")
                    log.error("nightly %s: ingest %s: %s", day, dep.name, redact(str(e)))
                    continue
                out.rows += res.rows
                out.errors += res.failed
                out.notes += [f"{dep.name}: {m}" for m in res.errors[:3]]
            for dep in s.deployments:
                if dep.lookup_hash_log_dir is None:
                    continue
                try:
                    trace = ingest_trace_dir(self.db, dep.name, dep.lookup_hash_log_dir)
                except KvplanError as e:  # a bad log file must not stop the night
                    out.errors += 1
                    out.notes.append(f"{dep.name}: trace: {e}")
                    continue
                out.rows += trace.requests if trace is not None else 0
            names = {d["deployment"] for d in fetch_rw(self.db, "deployments")}
            for name in sorted(names):
                out.rows += rollup_day(self.db, name, day)
                if self.jobs.rollup_gauges is not None:
                    out.rows += self.jobs.rollup_gauges(self.db, name, day)
            if self.jobs.report is not None:
                try:
                    self.jobs.report(s, day)
                except KvplanError as e:  # e.g. the database stayed locked: said, no traceback
                    out.errors += 1
                    out.notes.append(f"report: {e}")
                    log.error("nightly %s: report: %s", day, e)
                except Exception as e:  # a bug; the report must not undo the night's ingestion
                    out.errors += 1
                    out.notes.append(f"report: {type(e).__name__}: {e}")
                    log.exception("nightly %s: report", day)
            keep = utcnow() - timedelta(days=s.schedule.keep_scrape_runs_days)
            with self.db.write() as con:
                Database.run(con, "prune_scrape_runs", t_from=keep)
        log.info("nightly run for %s: %d rows, %d errors", day, out.rows, out.errors)
        return out


# -- the daemon ------------------------------------------------------------------------------
def build_scheduler(settings: Settings, db: Database,
                    jobs: NightlyJobs = NightlyJobs()) -> tuple[BackgroundScheduler, Scraper, Nightly]:
    from zoneinfo import ZoneInfo

    sc = settings.schedule
    tz = ZoneInfo(sc.timezone) if sc.timezone else None
    sched = BackgroundScheduler(timezone=tz) if tz else BackgroundScheduler()
    scraper, nightly = Scraper(settings, db), Nightly(settings, db, jobs)
    defaults = dict(coalesce=True, max_instances=1, replace_existing=True)
    if scraper.targets:
        sched.add_job(scraper.round, IntervalTrigger(seconds=sc.scrape_interval_s), id="scrape",
                      next_run_time=datetime.now(sched.timezone), misfire_grace_time=max(1, int(sc.scrape_interval_s)),
                      **defaults)
    sched.add_job(nightly.run, CronTrigger.from_crontab(sc.nightly_cron, timezone=sched.timezone), id="nightly",
                  misfire_grace_time=int(sc.misfire_grace_s), **defaults)
    sched.add_listener(_on_skipped(scraper, sc.scrape_interval_s), EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)
    return sched, scraper, nightly


def _on_skipped(scraper: Scraper, interval_s: float) -> Callable[[Any], None]:
    """APScheduler's listener of rounds it did not run: recorded (``Scraper.record_skipped``),
    not only logged."""
    def on(event: Any) -> None:
        if getattr(event, "job_id", None) != "scrape" or not scraper.targets:
            return
        if event.code == EVENT_JOB_MAX_INSTANCES:
            why = f"the previous round was still running (schedule.scrape_interval_s = {interval_s:g}s)"
        else:
            why = "the daemon was too busy to start it in time (missed its start by more than the interval)"
        times = getattr(event, "scheduled_run_times", None) or [event.scheduled_run_time]
        for when in times:
            scraper.record_skipped(aware_utc(when), why)
    return on


def run_daemon(settings: Settings, db: Database, stop: threading.Event | None = None,
               jobs: NightlyJobs = NightlyJobs()) -> None:
    """Run until SIGTERM/SIGINT (or ``stop`` is set)."""
    stop = stop or threading.Event()
    db.migrate()
    with db.write() as con:
        killed = Database.run(con, "mark_interrupted_runs").fetchall()
    for run_id, job, day in killed:
        log.warning("run %s (%s%s) was interrupted by a previous shutdown", run_id, job, f" {day}" if day else "")
    sched, scraper, nightly = build_scheduler(settings, db, jobs)
    scraper.ensure_targets()
    missed = days_to_run(db, utcnow().date(), settings.schedule.catchup_days)
    if missed:
        log.info("catching up nightly runs for %s", ", ".join(map(str, missed)))
        sched.modify_job("nightly", next_run_time=datetime.now(sched.timezone))
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    sched.start()
    log.info("collector started: %d targets every %gs, nightly '%s'", len(scraper.targets),
             settings.schedule.scrape_interval_s, settings.schedule.nightly_cron)
    try:
        # Wake each second: Python runs a signal's handler only when the main thread runs
        # bytecode, and a SIGTERM the kernel hands to another thread (the scrape and report
        # workers' native code) does not interrupt a main thread blocked in a plain wait. The
        # daemon of tests/test_scheduler.py once went on scraping for 25 minutes after its SIGTERM.
        while not stop.wait(1.0):
            pass
    finally:
        log.info("collector stopping")
        sched.shutdown(wait=True)
        scraper.close()
