"""Dashboard pages through Streamlit's AppTest, on a real DuckDB file; assertions are on
content (numbers, warnings, chart data), not on 'no exception'."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.test_store_stats import at, one, put

APP = str(Path(__file__).resolve().parents[1] / "app" / "streamlit_app.py")


def run_app(monkeypatch, db_path) -> AppTest:
    monkeypatch.setenv("KVPLAN_DB", str(db_path))
    t = AppTest.from_file(APP, default_timeout=30)
    t.run()
    assert not t.exception, t.exception
    return t


def test_overview_shows_window_numbers(db, monkeypatch):
    put(db, 0, one(0, 0, [0, 0, 0]))
    put(db, 1, one(10, 100, [2, 4, 4]))
    put(db, 2, one(70, 200, [4, 9, 10]))
    t = run_app(monkeypatch, db.path)
    metrics = {m.label: m.value for m in t.metric}
    assert metrics["Prefix-cache hit rate"] == "35.0%"
    assert metrics["Requests"] == "10"
    # over all data: buckets 0.1:4, 1.0:9, +Inf:10 -> p50 rank 5 -> 0.1 + 0.9 * 1/5 = 0.28 s
    assert metrics["TTFT p50"] == "280 ms"
    assert metrics["TTFT p99"].endswith("(≥, in +Inf bucket)")
    assert any("no upper bound" in w.value for w in t.warning)
    assert metrics["LMCache hit rate (external)"] == "not reported"


def test_overview_empty_database_says_what_to_do(db, monkeypatch):
    t = run_app(monkeypatch, db.path)
    assert any("kvplan scrape" in i.value for i in t.info)
    assert not t.metric


def test_missing_database_is_an_error_not_a_traceback(tmp_path, monkeypatch):
    t = run_app(monkeypatch, tmp_path / "nope.duckdb")
    assert any("no such database" in e.value for e in t.error)


def test_model_selector_filters(db, monkeypatch):
    put(db, 0, one(0, 0, [0, 0, 0], model="a") | one(0, 0, [0, 0, 0], model="b"))
    put(db, 1, one(10, 100, [1, 1, 1], model="a") | one(0, 100, [1, 1, 1], model="b"))
    t = run_app(monkeypatch, db.path)
    assert {m.label: m.value for m in t.metric}["Prefix-cache hit rate"] == "5.0%"
    t.sidebar.selectbox(key="model").select("b").run()
    assert {m.label: m.value for m in t.metric}["Prefix-cache hit rate"] == "0.0%"
