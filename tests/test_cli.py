"""The kvplan CLI end to end on files: import, stats --json, and clean errors."""

from __future__ import annotations

import json
import threading
import time

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.collectors.scrape.scrape import import_file
from tests import hostile
from tests.hostile import AT, payload
from tests.payloads import vllm_text

runner = CliRunner()


def write(tmp_path, name, **v):
    p = tmp_path / name
    p.write_text(vllm_text({("m", "0"): {"created": 1.0e9, **v}}))
    return p


def test_import_then_stats_json(tmp_path):
    a = write(tmp_path, "vllm-a.prom", hits=0, queries=0, ttft=[0, 0, 0])
    b = write(tmp_path, "vllm-b.prom", hits=30, queries=40, ttft=[3, 4, 4])
    db = str(tmp_path / "k.duckdb")
    r = runner.invoke(app, ["import-metrics", "--deployment", "prod", "--at", "2026-11-30T10:00:00Z",
                            str(a), "--target", "vllm", "--db", db])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["import-metrics", "--deployment", "prod", "--at", "2026-11-30T10:05:00Z",
                            str(b), "--target", "vllm", "--db", db])
    assert r.exit_code == 0 and "stored" in r.output
    r = runner.invoke(app, ["stats", "--deployment", "prod", "--from", "2026-11-30T09:59:00Z",
                            "--to", "2026-11-30T10:06:00", "--json", "--db", db])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    for k in ("prefix_cache_hit_rate", "external_prefix_cache_hit_rate", "cached_prompt_tokens", "prompt_tokens",
              "requests", "ttft_p50_s", "ttft_p99_s", "lmcache_lookup_hit_rate"):
        assert k in d
    assert d["prefix_cache_hit_rate"] == 0.75 and d["requests"] == 4
    assert d["external_prefix_cache_hit_rate"] is None and d["lmcache_lookup_hit_rate"] is None
    # p50: rank 2 of 4, all 3 first in (0, 0.1] -> 0.1 * 2/3
    assert abs(d["ttft_p50_s"] - 0.1 * 2 / 3) < 1e-12
    # these payloads have no TPOT/ITL histograms: null (not reported), never 0
    for k in ("tpot_p50", "tpot_p99", "itl_p50", "itl_p99"):
        assert d[f"{k}_s"] is None and d[f"{k}_bucket"] is None
    assert d["ttft_p50_bucket"] == {"lower_s": 0.0, "upper_s": 0.1, "in_inf": False}


def test_stats_json_tpot_and_itl_on_the_scenario(tmp_path):
    from tests.test_app_fixtures import DEPLOYMENT, scenario_db, scenario_expected

    db = scenario_db(tmp_path, runs=False, collection=False)
    exp = scenario_expected()
    r = runner.invoke(app, ["stats", "--deployment", DEPLOYMENT, "--from", "2026-11-02T00:00:00Z",
                            "--to", "2026-11-04T00:00:00Z", "--json", "--db", str(db.path)])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert abs(d["tpot_p50_s"] - exp["tpot_p50_s"]) < 1e-12 and abs(d["tpot_p99_s"] - exp["tpot_p99_s"]) < 1e-12
    assert d["tpot_p99_bucket"] == {"lower_s": 0.025, "upper_s": 0.05, "in_inf": False}
    assert abs(d["itl_p50_s"] - exp["itl_p50_s"]) < 1e-12 and abs(d["itl_p99_s"] - exp["itl_p99_s"]) < 1e-12
    assert d["itl_p50_bucket"] == {"lower_s": 0.01, "upper_s": 0.025, "in_inf": False}
    assert d["itl_p99_bucket"] == {"lower_s": 0.075, "upper_s": 0.1, "in_inf": False}
    r = runner.invoke(app, ["stats", "--deployment", DEPLOYMENT, "--from", "2026-11-02T00:00:00Z",
                            "--to", "2026-11-04T00:00:00Z", "--db", str(db.path)])
    assert r.exit_code == 0 and "itl_p99_s" in r.output and "0.0963" in r.output  # 96.25 ms


def test_db_from_environment(tmp_path, monkeypatch):
    a = write(tmp_path, "v.prom", hits=0, queries=0, ttft=[0, 0, 0])
    monkeypatch.setenv("KVPLAN_DB", str(tmp_path / "env.duckdb"))
    r = runner.invoke(app, ["import-metrics", "--deployment", "p", "--at", "2026-11-30T10:00:00Z", str(a)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "env.duckdb").exists()


def test_bad_file_is_a_clean_error_naming_file_and_line(tmp_path):
    bad = tmp_path / "bad.prom"
    bad.write_text("# TYPE vllm:x_total counter\nvllm:x_total{engine=\"0\" 1\n")
    r = runner.invoke(app, ["import-metrics", "--deployment", "p", "--at", "2026-11-30T10:00:00Z", str(bad),
                            "--db", str(tmp_path / "k.duckdb")])
    assert r.exit_code == 2
    assert f"{bad}:2: cannot parse" in r.output and "Traceback" not in r.output


def test_missing_file_bad_time_and_unknown_deployment(tmp_path):
    db = str(tmp_path / "k.duckdb")
    r = runner.invoke(app, ["import-metrics", "--deployment", "p", "--at", "2026-11-30T10:00:00Z",
                            str(tmp_path / "nope.prom"), "--db", db])
    assert r.exit_code == 2 and "nope.prom" in r.output
    r = runner.invoke(app, ["import-metrics", "--deployment", "p", "--at", "yesterday", "x", "--db", db])
    assert r.exit_code == 2 and "not an ISO 8601 time" in r.output
    r = runner.invoke(app, ["stats", "--deployment", "ghost", "--from", "2026-11-30T10:00:00Z",
                            "--to", "2026-11-30T11:00:00Z", "--db", db])
    assert r.exit_code == 2 and "no deployment 'ghost'" in r.output


def test_scrape_of_a_dead_url_is_recorded_and_reported(tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    db = str(tmp_path / "k.duckdb")
    r = runner.invoke(app, ["scrape", "--deployment", "p", f"http://127.0.0.1:{port}/metrics", "--db", db])
    assert r.exit_code == 2                        # the README's promise for an unreachable URL
    assert f"http://127.0.0.1:{port}/metrics" in r.output and "ConnectError" in r.output


def test_dashboard_opens_the_browser_only_once_streamlit_answers():
    import http.server

    from kvplan.app.cli.dashboard import _open_when_up

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/_stcore/health" else 404)
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    opened = []
    try:
        url = f"http://127.0.0.1:{srv.server_port}"
        assert _open_when_up(url, opened.append, timeout_s=5)
        assert opened == [url]
    finally:
        srv.shutdown()
    assert not _open_when_up("http://127.0.0.1:9", opened.append, timeout_s=1)  # nothing listens
    assert opened == [url]


# -- hostile or careless inputs --------------------------------------------------------------
@pytest.mark.parametrize("gpus", ["-5", "0", "1000000000"])
def test_plan_gpus_is_bounded(db, tmp_path, gpus):
    from datetime import timedelta

    import_file(db, "d", payload(tmp_path, "a.prom"), AT)
    import_file(db, "d", payload(tmp_path, "b.prom", hits=20, queries=40), AT + timedelta(minutes=5))
    t0 = time.monotonic()
    r = hostile.runner.invoke(app, ["plan", "--deployment", "d", "--from", "2026-01-05T11:00:00Z", "--to",
                            "2026-01-05T13:00:00Z", "--gpus", gpus, "--db", str(db.path)])
    assert r.exit_code == 2 and "--gpus" in r.output and time.monotonic() - t0 < 30, r.output


def test_plan_with_saved_facts_beyond_a_bound_exits_2_naming_them(tmp_path):
    # a row saved before the bounds existed (total_model_params = 1e308): plan raised OverflowError in the
    # replica memory check; now the saved row no longer validates and the error names it
    import json

    from kvplan.sql.db import Database
    from tests.test_store_stats import one, put

    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    put(db, 0, one(0, 0, [0, 0, 0]), deployment="p")
    put(db, 1, one(10, 100, [2, 4, 4]), deployment="p")
    with db.write() as con:
        Database.run(con, "put_facts", deployment="p", facts=json.dumps({"total_model_params": 1e308}))
    r = runner.invoke(app, ["plan", "--db", str(db.path), "--deployment", "p", "--from", "2026-11-30T09:00:00Z",
                            "--to", "2026-11-30T11:00:00Z"])
    assert r.exit_code == 2, r.output
    assert "deployment facts saved for 'p'" in r.output and "total_model_params" in r.output
    assert "Traceback" not in r.output and "OverflowError" not in r.output


READERS = [["stats", "--deployment", "d", "--from", "2026-11-30T10:00:00Z", "--to", "2026-11-30T11:00:00Z"],
           ["plan", "--deployment", "d", "--from", "2026-11-30T10:00:00Z", "--to", "2026-11-30T11:00:00Z"],
           ["report", "--deployment", "d", "--month", "2026-11", "-o", "r.html"],
           ["whatif", "--deployment", "d"]]


@pytest.mark.parametrize("cmd", READERS, ids=lambda c: c[0])
def test_a_reader_refuses_a_database_that_does_not_exist_and_creates_none(tmp_path, cmd):
    """Issue 27 case 18: a mistyped --db used to be created (and migrated) by every command."""
    path = tmp_path / "typo.duckdb"
    r = runner.invoke(app, [*cmd, "--db", str(path)])
    assert r.exit_code == 2, r.output
    assert "no such database" in r.output and "typo.duckdb" in r.output and "Traceback" not in r.output
    assert list(tmp_path.iterdir()) == []


def _schema_rows(path):
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        return (con.execute("SELECT version, name FROM schema_migrations ORDER BY 1").fetchall(),
                con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'schema_macros'").fetchone())
    finally:
        con.close()


@pytest.mark.parametrize("cmd", READERS, ids=lambda c: c[0])
def test_a_reader_never_migrates_and_says_what_to_run(tmp_path, cmd):
    """A database migrated by an older kvplan (here: the migrations as of 013, before the macro
    file; see tests/test_increase_rule.py) is read by no reader: each names `kvplan migrate`
    with the file, and leaves the file as it was. `kvplan migrate` then brings it up to date."""
    from tests.test_increase_rule import _migrate_as_of_013

    path = tmp_path / "old.duckdb"
    _migrate_as_of_013(path)
    before = _schema_rows(path)
    r = runner.invoke(app, [*cmd, "--db", str(path)])
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    assert f"run `kvplan migrate --db {path}`" in out, out
    assert "014_prefill_rollups, 015_edge_rollups, macros/increase.sql, macros/prefill.sql not applied" in out, out
    assert _schema_rows(path) == before
    r = runner.invoke(app, ["migrate", "--db", str(path)])
    assert r.exit_code == 0 and "applied 014_prefill_rollups" in r.output, r.output
    assert _schema_rows(path) != before
    r = runner.invoke(app, [*cmd, "--db", str(path)])
    out = " ".join(r.output.split())
    assert "kvplan migrate" not in out and ("no deployment 'd'" in out or "'d' has no trace" in out), out


def test_a_database_of_a_newer_kvplan_is_refused_by_readers_and_writers(tmp_path):
    import duckdb

    from kvplan.sql.db import code_version

    path = tmp_path / "new.duckdb"
    r = runner.invoke(app, ["migrate", "--db", str(path)])
    assert r.exit_code == 0, r.output
    con = duckdb.connect(str(path))
    con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, 'from_the_future')", [code_version() + 1])
    con.close()
    a = write(tmp_path, "v.prom", hits=0, queries=0, ttft=[0, 0, 0])
    for cmd in (READERS[0], ["import-metrics", "--deployment", "d", "--at", "2026-11-30T10:00:00Z", str(a)],
                ["migrate"]):
        r = runner.invoke(app, [*cmd, "--db", str(path)])
        out = " ".join(r.output.split())
        assert r.exit_code == 2 and f"written by a newer kvplan (schema {code_version() + 1};" in out, out
        assert "upgrade kvplan" in out
