"""The report's what-if follows ``--month`` and equals the page's for that month: both call
``views.whatif.month_whatif``. The database holds the recorded topology A/B (metrics and LMCache
lookup logs of December 2026) and, imported after it, the same lookup logs moved 40 days later
(a newer trace, in January): the report of December replayed the newest trace whatever the month."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kvplan.app.report.data import build
from kvplan.app.views.whatif import WhatIfQuery, month_whatif, whatif
from kvplan.collectors.traces import ingest as traces
from kvplan.collectors.traces.parse import TraceError
from tests.topology_ab import FIX, load_side

SHIFT_S = 40 * 86400.0


@pytest.fixture(scope="module")
def two_months(tmp_path_factory) -> tuple:
    tmp = tmp_path_factory.mktemp("month")
    db = load_side(tmp / "k.duckdb", FIX / "shared")
    moved = tmp / "later" / "lmcache"
    moved.mkdir(parents=True)
    for f in (FIX / "shared" / "lookup-logs" / "lmcache").iterdir():
        rows = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        (moved / f.name).write_text("".join(json.dumps({**r, "timestamp": r["timestamp"] + SHIFT_S}) + "\n"
                                            for r in rows))
    traces.import_trace(db, "ab-shared", [moved.parent], name="later")
    first = min(json.loads(x)["timestamp"] for f in (FIX / "shared" / "lookup-logs" / "lmcache").iterdir()
                for x in f.read_text().splitlines() if x.strip())
    month = datetime.fromtimestamp(first, UTC).strftime("%Y-%m")
    later = datetime.fromtimestamp(first + SHIFT_S, UTC).strftime("%Y-%m")
    assert month != later  # the two traces lie in different months (checked, not assumed)
    return db, month, later


def test_the_report_replays_the_months_trace_not_the_newest(two_months):
    db, month, _ = two_months
    with db.snapshot() as src:
        newest = whatif(src, "ab-shared", WhatIfQuery(latency=False)).trace.name
    assert newest == "later"  # what the report used to replay
    data = build(db, "ab-shared", month)
    assert data.whatif is not None and data.whatif.trace.name == "lmcache"
    assert data.whatif.trace.window is not None and data.whatif.trace.window[0].startswith(month)


def test_the_reports_whatif_equals_the_pages_for_the_month(two_months):
    db, month, _ = two_months
    report = build(db, "ab-shared", month).whatif
    with db.snapshot() as src:  # the page's month: the same call, its own read of the history
        page = month_whatif(src, "ab-shared", month)
    assert report is not None
    assert report.to_dict() == page.to_dict()
    assert report.trace.requests > 0 and report.topology is not None


def test_a_month_without_a_request_in_any_trace_says_so(two_months):
    db, _, _ = two_months
    with db.snapshot() as src, pytest.raises(TraceError, match="no trace of 'ab-shared' has a request in 2020-01"):
        month_whatif(src, "ab-shared", "2020-01")


def test_the_later_month_replays_the_later_trace(two_months):
    db, _, later = two_months
    with db.snapshot() as src:
        d = month_whatif(src, "ab-shared", later, WhatIfQuery(latency=False))
    assert d.trace.name == "later"


def test_an_empty_trace_is_refused_not_answered_zero(tmp_path: Path):
    """A trace row with no request (an import that stopped early) says so instead of 0.0 %."""
    from kvplan.models.core.timeutil import utcnow
    from kvplan.sql.db import Database

    db = Database(tmp_path / "e.duckdb")
    db.migrate()
    with db.write() as con:
        Database.scalar(con, "insert_trace", deployment="d", name="t", format="lmcache", n_bytes_per_chunk=None,
                        bytes_source=None, created_at=utcnow())
    with pytest.raises(TraceError, match="holds no request"):
        whatif(db, "d", WhatIfQuery(latency=False))


def test_the_cli_month_gives_the_reports_numbers(two_months):
    from typer.testing import CliRunner

    from kvplan.app.cli import app

    db, month, _ = two_months
    r = CliRunner().invoke(app, ["whatif", "--deployment", "ab-shared", "--month", month, "--json",
                                 "--db", str(db.path)])
    assert r.exit_code == 0, r.output
    cli = json.loads(r.stdout)
    report = build(db, "ab-shared", month).whatif
    assert report is not None
    assert cli["trace"]["name"] == "lmcache"
    assert cli["infinite_hit_rate"] == report.infinite_hit_rate
    assert cli["shared_vs_private"]["shared_hit_rate"] == report.shared_vs_private.shared_hit_rate
    bad = CliRunner().invoke(app, ["whatif", "--deployment", "ab-shared", "--month", month, "--trace", "later",
                                   "--db", str(db.path)])
    assert bad.exit_code == 2 and "--month" in bad.output


def test_the_pages_month_shows_the_reports_numbers(two_months, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from kvplan.app.report import fmt

    db, month, _ = two_months
    report = build(db, "ab-shared", month).whatif
    assert report is not None
    monkeypatch.setenv("KVPLAN_DB", str(db.path))
    t = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app" / "streamlit_app.py"), default_timeout=180)
    t.switch_page("pages/whatif.py")
    t.run()
    assert not t.exception, t.exception
    assert month in t.selectbox(key="whatif_month").options
    t.selectbox(key="whatif_month").set_value(month).run()
    assert not t.exception, t.exception
    m = {x.label: x.value for x in t.metric}
    assert m["Infinite-capacity hit rate"] == fmt.pct(report.infinite_hit_rate)
    assert any("trace 'lmcache'" in c.value for c in t.caption)


def test_the_report_reads_each_data_module_once(two_months, monkeypatch):
    """The report's reads go through the data modules in one pass (``app.data.month``): once it has
    left a module it never reads through it again, and no section reads after the load. Every
    function of a data module that reads (its first parameter is the source) is wrapped to log its
    module on entry; the log, with runs of the same module collapsed, holds each module once. Only
    this thread's calls count: a page test before it in the same worker can leave the Report page's
    prewarm thread (``app.state.prewarm_reports``) still reading, which failed this test in CI."""
    import importlib
    import inspect
    import threading

    names = ["store", "traces", "window", "sweeps", "prefill", "latency", "runs", "collection", "history", "plan",
             "whatif", "month"]
    log: list[str] = []

    me = threading.get_ident()

    def logged(mod: str, fn):
        def wrapper(*a, **kw):
            if threading.get_ident() == me:  # not a page's report prewarm left running by an earlier test
                log.append(mod)
            return fn(*a, **kw)
        return wrapper

    modules = {n: importlib.import_module(f"kvplan.app.data.{n}") for n in names}
    for n, mod in modules.items():
        for attr, fn in list(vars(mod).items()):
            if not inspect.isfunction(fn) or fn.__module__ != mod.__name__:
                continue
            if list(inspect.signature(fn).parameters)[:1] in (["source"], ["db"]):
                wrapped = logged(n, fn)
                monkeypatch.setattr(mod, attr, wrapped)
                for other in modules.values():  # the same function imported by name elsewhere
                    if other is not mod and getattr(other, attr, None) is fn:
                        monkeypatch.setattr(other, attr, wrapped)
    import kvplan.app.report.data as report_data
    monkeypatch.setattr(report_data, "load_month", modules["month"].load_month)
    db, month, _ = two_months
    build(db, "ab-shared", month)
    stays = [m for i, m in enumerate(log) if i == 0 or log[i - 1] != m]
    assert stays[0] == "month", stays  # the month's loader first: the sections read nothing of their own
    assert len(stays) == len(set(stays)), " > ".join(stays)  # each module entered once
    assert {"store", "traces", "window", "sweeps", "prefill", "latency", "runs", "collection"} <= set(stays), stays
