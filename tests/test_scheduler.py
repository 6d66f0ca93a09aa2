"""The collector daemon: concurrent scrape rounds, the nightly job (ingest, rollups, report
hook), catch-up of missed days, the run log, and a SIGKILLed daemon restarting cleanly.
/metrics endpoints are real HTTP servers on loopback; the nightly job reads a real Prometheus."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, date, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

import kvplan.collectors.schedule.scheduler as sch
from kvplan.app.data.window import stats
from kvplan.collectors.schedule.scheduler import Nightly, Scraper, days_to_run, fetch_rw, run_daemon
from kvplan.models.inputs.settings import DeploymentConfig, PrometheusConfig, ScheduleConfig, Settings, TargetConfig
from kvplan.models.metrics.window import Increase, window_stats
from kvplan.sql.db import Database
from tests.loopback import Loopback
from tests.payloads import vllm_text
from tests.test_prom_ingest import DEP, END, T0, import_direct, prom, same  # noqa: F401 (fixture)
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]


class MetricsServer(Loopback):
    """Real /metrics endpoints: /fast/<name> answers at once (counters grow per request),
    /slow/<name> answers after ``slow_s``, or as soon as ``release`` is set."""

    def __init__(self, slow_s: float = 4.0):
        self.hits: dict[str, int] = {}
        self.release = threading.Event()
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                kind, name = self.path.strip("/").split("/")[:2]
                if kind == "slow":
                    outer.release.wait(slow_s)
                n = outer.hits[self.path] = outer.hits.get(self.path, 0) + 1
                body = vllm_text({("m", "0"): {"hits": 10 * n, "queries": 20 * n, "ttft": [n, 2 * n, 2 * n],
                                               "created": 1.0e9}}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *a):
                pass

        super().__init__(H)


@pytest.fixture
def metrics():
    m = MetricsServer()
    yield m
    m.release.set()
    m.close()


def settings_for(db: Database, targets: list[tuple[str, str]], **schedule) -> Settings:
    return Settings(db=db.path, scrape_timeout_s=5,
                    deployments=[DeploymentConfig(name="d", targets=[TargetConfig(name=n, url=u) for n, u in targets])],
                    schedule=ScheduleConfig(**{"scrape_interval_s": 1.0, **schedule}))


def scrape_counts(db: Database) -> dict[str, tuple[int, int]]:
    with db.read() as con:
        rows = con.execute("SELECT t.name, count(*) FILTER (WHERE sc.ok), count(*) FILTER (WHERE NOT sc.ok) "
                           "FROM scrapes sc JOIN targets t USING (target_id) GROUP BY 1").fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def test_a_slow_target_delays_no_other(db):
    metrics = MetricsServer(slow_s=600.0)                      # the slow target hangs until released
    s = settings_for(db, [("fast1", f"{metrics.url}/fast/1"), ("fast2", f"{metrics.url}/fast/2"),
                          ("slow", f"{metrics.url}/slow/1")], scrape_interval_s=10.0)
    # a round waits 0.9 x the interval for its scrapes (room for a busy machine); the slow one
    # stays in flight through both rounds (its timeout is longer) until released
    s = s.model_copy(update={"scrape_timeout_s": 60})
    scraper = Scraper(s, db)
    scraper.ensure_targets()
    try:
        first = scraper.round()                                # returned while slow still hangs
        assert first.errors == 1 and "d/slow: still running" in first.message
        second = scraper.round()                               # slow still in flight: skipped, not queued
        assert "d/slow: previous scrape still running, skipped" in second.message
        assert "/slow/1" not in metrics.hits                   # it had not answered through both rounds
    finally:
        metrics.release.set()
        scraper.close()                                        # waits for the slow scrape to finish
        metrics.close()
    # the round that skipped slow recorded it as a failed scrape (a gap at that round's time)
    assert scrape_counts(db) == {"fast1": (2, 0), "fast2": (2, 0), "slow": (1, 1)}
    assert metrics.hits["/slow/1"] == 1
    runs = db.fetch("collector_runs", limit=10)
    assert [(r["job"], r["status"], r["n_errors"]) for r in runs] == [("scrape", "errors", 1)] * 2
    assert runs[0]["n_rows"] == 2 * 7


def test_the_daemon_scrapes_on_its_interval_while_one_target_hangs(db):
    """The slow target hangs until released (up to 10 minutes): the fast one is scraped again
    and again meanwhile, and the hung scrape is stored once it answers."""
    metrics = MetricsServer(slow_s=600.0)
    s = settings_for(db, [("fast", f"{metrics.url}/fast/1"), ("slow", f"{metrics.url}/slow/1")],
                     scrape_interval_s=0.5)
    stop = threading.Event()
    th = threading.Thread(target=run_daemon, args=(s, db, stop))
    th.start()
    try:
        wait_until(lambda: metrics.hits.get("/fast/1", 0) >= 4, "4 scrapes of the fast target")
        assert "/slow/1" not in metrics.hits                   # still hanging: the fast ones did not wait
    finally:
        metrics.release.set()
        stop.set()
        th.join(60)
        metrics.close()
    assert not th.is_alive()
    c = scrape_counts(db)
    assert c["fast"][0] >= 4, c
    assert c["slow"][0] == 1, c


def _nightly_row(db: Database, day: date, status: str) -> None:
    with db.write() as con:
        Database.run(con, "insert_collector_run", job="nightly", deployment=None, day=day,
                     started_at=datetime(2026, 1, 1), ended_at=datetime(2026, 1, 1), status=status, n_rows=0,
                     n_errors=0 if status == "ok" else 1, message=None)


def test_days_to_run_catches_up_missed_and_failed_days_within_the_bound(db):
    today = date(2026, 3, 10)
    assert days_to_run(db, today, 7) == [date(2026, 3, 9)]     # never ran: yesterday only
    _nightly_row(db, date(2026, 3, 5), "ok")
    _nightly_row(db, date(2026, 3, 6), "errors")
    _nightly_row(db, date(2026, 3, 7), "ok")
    assert days_to_run(db, today, 7) == [date(2026, 3, 6), date(2026, 3, 8), date(2026, 3, 9)]
    assert days_to_run(db, today, 2) == [date(2026, 3, 8), date(2026, 3, 9)]
    _nightly_row(db, date(2026, 3, 6), "ok")                   # a later success settles a failed day
    assert days_to_run(db, today, 7) == [date(2026, 3, 8), date(2026, 3, 9)]


@pytest.mark.prometheus
def test_nightly_ingests_the_day_rolls_it_up_and_calls_the_report(prom, db, monkeypatch, caplog):  # noqa: F811 (the fixture imported above)
    import_direct(db)
    s = Settings(db=db.path, deployments=[DEP, DeploymentConfig(name="direct")],
                 prometheus=PrometheusConfig(url=prom.url, chunk="6h", retries=0))
    calls, gauge_days = [], []
    jobs = sch.NightlyJobs(rollup_gauges=lambda db_, dep, d: gauge_days.append((dep, d)) or 0,
                           report=lambda settings, d: calls.append((settings.db, d)) or [])
    day = T0.date()
    out = Nightly(s, db, jobs).run_day(day)
    assert out.errors == 0 and out.rows > 0
    assert calls == [(db.path, day)]                           # the report job the caller gave, once
    assert gauge_days == [("direct", day), ("prom", day)]
    runs = db.fetch("collector_runs", limit=5)
    assert (runs[0]["job"], runs[0]["day"], runs[0]["status"]) == ("nightly", day, "ok")
    day_rows = {}
    for dep in ("prom", "direct"):
        rows = day_rows[dep] = db.fetch("daily_increases", deployment=dep, t_from=datetime(2026, 1, 5),
                                        t_to=datetime(2026, 1, 6), model_name=None)
        from_rollups = window_stats([Increase(**r) for r in rows]).to_dict()
        raw = stats(db, dep, T0 - timedelta(hours=1), END + timedelta(hours=1)).to_dict()
        assert from_rollups["prefix_cache_hits"] > 0
        assert same(from_rollups, raw), {k: (from_rollups[k], raw[k]) for k in raw if not same(from_rollups[k], raw[k])}
    n = fetch_rw(db, "daily_series", deployment="prom", t_from=datetime(2026, 1, 5), t_to=datetime(2026, 1, 6),
                 model_name=None, names=["vllm:prefix_cache_hits_total"])
    assert len(n) == 1 and n[0]["increase"] == stats(db, "prom", T0, END).prefix_cache_hits
    Nightly(s, db).run_day(day)                                # again: replaced, not added
    assert db.fetch("daily_increases", deployment="prom", t_from=datetime(2026, 1, 5), t_to=datetime(2026, 1, 6),
                    model_name=None) == day_rows["prom"]
    # a failing report is an error of the night, logged with its traceback; the rollups stay
    caplog.set_level(logging.INFO, logger="kvplan.collector")

    def broken(settings, d):
        raise RuntimeError("disk full")

    out = Nightly(s, db, sch.NightlyJobs(report=broken)).run_day(day)
    assert out.errors == 1 and "report: RuntimeError: disk full" in out.message
    assert "Traceback" in caplog.text
    assert db.fetch("daily_increases", deployment="prom", t_from=datetime(2026, 1, 5), t_to=datetime(2026, 1, 6),
                    model_name=None) == day_rows["prom"]


@pytest.fixture
def no_report():
    """Tests about something else run the nightly job without a report (``NightlyJobs()``)."""


def test_prometheus_down_at_night_is_logged_and_retried_on_the_next_start(db, no_report):
    s = Settings(db=db.path, deployments=[DEP],
                 prometheus=PrometheusConfig(url="http://127.0.0.1:9", chunk="1d", retries=0, timeout_s=2))
    out = Nightly(s, db).run_day(date(2026, 1, 5))
    assert out.errors == 1 and "http://127.0.0.1:9/api/v1/query" in out.message
    run = db.fetch("collector_runs", limit=1)[0]
    assert run["status"] == "errors" and "cannot connect" in run["message"]
    assert days_to_run(db, date(2026, 1, 7), 7) == [date(2026, 1, 5), date(2026, 1, 6)]
    gaps = db.fetch("ingest_gaps", deployment="prom", t_from=datetime(2026, 1, 5), t_to=datetime(2026, 1, 6))
    assert [(g["t_from"], g["t_to"]) for g in gaps] == [(datetime(2026, 1, 5), datetime(2026, 1, 6))]


def test_on_start_missed_nights_are_run_and_killed_runs_marked(db, no_report):
    today = datetime.now(UTC).date()
    _nightly_row(db, today - timedelta(days=3), "ok")
    with db.write() as con:
        Database.run(con, "insert_collector_run", job="nightly", deployment=None, day=today - timedelta(days=2),
                     started_at=datetime(2026, 1, 1), ended_at=None, status="running", n_rows=0, n_errors=0,
                     message=None)
    s = Settings(db=db.path)
    stop = threading.Event()
    th = threading.Thread(target=run_daemon, args=(s, db, stop))
    th.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and days_to_run(db, today, 7):
        time.sleep(0.2)
    stop.set()
    th.join(30)
    rows = db.fetch("collector_runs", limit=10)
    assert sorted((r["day"], r["status"]) for r in rows) == [
        (today - timedelta(days=3), "ok"), (today - timedelta(days=2), "interrupted"),
        (today - timedelta(days=2), "ok"), (today - timedelta(days=1), "ok")]


# -- SIGKILL ---------------------------------------------------------------------------------
def _daemon(conf: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from kvplan.app.cli import main; main()", "collect", "--daemon",
                             "--config", str(conf)],
                            cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            env={k: v for k, v in os.environ.items() if not k.startswith("KVPLAN_")})


def _wait_scrapes(db: Database, n: int, proc: subprocess.Popen, log: Path, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        if db.path.exists():
            try:
                with db.read() as con:
                    got = con.execute("SELECT count(*) FROM scrapes WHERE ok").fetchone()[0]
            except Exception:  # not migrated yet
                got = 0
            if got >= n:
                return got
        time.sleep(0.1)
    pytest.fail(f"daemon did not reach {n} scrapes in {timeout}s:\n{log.read_text()}")


def _consistent(db: Database) -> int:
    """Every stored scrape holds exactly its samples; returns the number of scrapes."""
    with db.read() as con:
        bad = con.execute("""
            SELECT sc.scrape_id FROM scrapes sc JOIN series se ON se.target_id = sc.target_id
            LEFT JOIN samples sa ON sa.series_id = se.series_id AND sa.ts = sc.ts
            WHERE sc.ok GROUP BY sc.scrape_id, sc.n_samples HAVING count(sa.ts) != sc.n_samples""").fetchall()
        assert bad == []
        return con.execute("SELECT count(*) FROM scrapes WHERE ok").fetchone()[0]


def test_a_killed_daemon_loses_nothing_committed_and_restarts_cleanly(tmp_path, metrics):
    db = Database(tmp_path / "k.duckdb", lock_timeout_s=30)
    conf = tmp_path / "kvplan.toml"
    conf.write_text(f'db = "{db.path}"\n[schedule]\nscrape_interval_s = 0.2\nreport_format = "html"\n'
                    f'[[deployments]]\nname = "d"\n'
                    f'[[deployments.targets]]\nname = "a"\nurl = "{metrics.url}/fast/a"\n'
                    f'[[deployments.targets]]\nname = "b"\nurl = "{metrics.url}/fast/b"\n')
    log = tmp_path / "daemon.log"
    p = _daemon(conf, log)
    _wait_scrapes(db, 20, p, log)
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    before = _consistent(db)
    with db.read() as con:
        ids = {r[0] for r in con.execute("SELECT scrape_id FROM scrapes").fetchall()}
    offset = len(log.read_bytes())
    p = _daemon(conf, log)
    _wait_scrapes(db, before + 20, p, log)
    # SIGTERM lets the running jobs finish. On start the daemon catches up last night if the
    # killed one had not finished it; its capacity report (charts through vl-convert) took from
    # 10 s on a quiet machine to over 180 s on a loaded one. Wait for that job's own end (a hang
    # guard, not a speed goal), then for the daemon's exit.
    mine = lambda: log.read_bytes()[offset:].decode(errors="replace")  # noqa: E731
    if "catching up nightly runs" in mine():
        wait_until(lambda: p.poll() is not None or re.search(r"nightly run for \S+: \d+ rows", mine()),
                   "the restarted daemon to finish catching up last night", timeout_s=900, every_s=0.5)
    p.send_signal(signal.SIGTERM)
    try:
        assert p.wait(120) == 0, log.read_text()
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail(f"the daemon did not stop within 120 s of SIGTERM:\n{log.read_text()}", pytrace=False)
    after = _consistent(db)
    with db.read() as con:
        assert ids <= {r[0] for r in con.execute("SELECT scrape_id FROM scrapes").fetchall()}
    assert after >= before + 20
    text = log.read_text()
    assert text.count("collector started") == 2 and "Traceback" not in text
    s = stats(db, "d", datetime(2000, 1, 1), datetime.now(UTC))
    assert s.prefix_cache_hit_rate == pytest.approx(0.5)


def test_collect_command_scrapes_once_and_runs_a_night(tmp_path, metrics, no_report):
    from typer.testing import CliRunner

    from kvplan.app.cli import app

    conf = tmp_path / "kvplan.toml"
    conf.write_text(f'db = "{tmp_path / "k.duckdb"}"\n[[deployments]]\nname = "d"\n'
                    f'[[deployments.targets]]\nname = "a"\nurl = "{metrics.url}/fast/a"\n'
                    f'[[deployments.targets]]\nname = "dead"\nurl = "http://127.0.0.1:9/metrics"\n')
    r = CliRunner().invoke(app, ["collect", "--config", str(conf)])
    assert r.exit_code == 1 and "scraped 2 targets: 7 samples, 1 errors" in r.output
    r = CliRunner().invoke(app, ["collect", "--nightly", "--day", "2026-01-05", "--config", str(conf)])
    assert r.exit_code == 0 and "nightly:" in r.output, r.output
    r = CliRunner().invoke(app, ["collect", "--nightly", "--day", "yesterday", "--config", str(conf)])
    assert r.exit_code == 2 and "--day: 'yesterday' is not a date" in r.output
