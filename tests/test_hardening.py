"""Regression tests of issue 13 (hardening): hostile or careless inputs.

Each test names the item of the issue it covers. Servers are real loopback HTTP servers
bounded in time and bytes, so a regression fails the test instead of eating the machine.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.collectors.parse import PayloadError
from kvplan.collectors.scrape import Target, import_file, scrape_target
from kvplan.collectors.settings import DeploymentConfig, ScheduleConfig, Settings, TargetConfig
from kvplan.sql.db import Database
from tests.conftest import PAYLOADS
from tests.loopback import Loopback
from tests.payloads import vllm_text

GOOD = PAYLOADS / "restart" / "00_start_vllm-0.prom"
AT = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


class Server(Loopback):
    """A loopback HTTP server; ``mode`` picks the behaviour of GET:

    * ``endless``: 200 text/plain, 64 KiB chunks with no end, up to ``limit`` bytes;
    * ``trickle``: 200 text/plain, one byte a second, up to ``limit`` seconds;
    * ``ok``: the good payload.
    Every response's bytes sent are counted in ``sent``."""

    def __init__(self, mode: str, limit: float, body: Path = GOOD):
        outer = self
        self.sent = 0
        self.finished = threading.Event()

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    if mode == "ok":
                        data = body.read_bytes()
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    self.end_headers()
                    t0 = time.monotonic()
                    line = b"# HELP x a comment line that never ends the payload, sent again and again\n"
                    chunk = line * (65536 // len(line))
                    while True:
                        if mode == "endless":
                            if outer.sent >= limit:
                                break
                            self.wfile.write(chunk)
                            outer.sent += len(chunk)
                        else:
                            if time.monotonic() - t0 >= limit:
                                break
                            self.wfile.write(b"#")
                            self.wfile.flush()
                            outer.sent += 1
                            time.sleep(1.0)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    outer.finished.set()

            def log_message(self, *a):
                pass

        super().__init__(H)
        self.url += "/metrics"


@pytest.fixture
def server(request):
    made = []

    def make(mode: str, limit: float = 0, body: Path = GOOD) -> Server:
        made.append(Server(mode, limit, body))
        return made[-1]

    yield make
    for s in made:
        s.close()


def gaps(db: Database) -> list[str]:
    with db.read() as con:
        return [r[0] for r in con.execute("SELECT error FROM scrapes WHERE NOT ok ORDER BY ts").fetchall()]


# -- 1. scrapes: a total deadline and a body-size cap ------------------------------------------
def test_endless_body_stops_at_the_cap_and_is_a_gap(db, server):
    srv = server("endless", limit=64 * 2**20)      # the server gives up after 64 MiB
    t0 = time.monotonic()
    r = scrape_target(db, "d", Target("t", srv.url), timeout_s=20, max_bytes=2**20)
    assert time.monotonic() - t0 < 10
    assert r.status == "failed-recorded"
    [error] = gaps(db)
    assert "1 MiB" in error and "scrape_max_bytes" in error
    srv.finished.wait(5)
    assert srv.sent < 16 * 2**20                     # reading stopped near the cap, not at the end


def test_trickling_body_stops_at_the_total_deadline(db, server):
    srv = server("trickle", limit=12)
    t0 = time.monotonic()
    r = scrape_target(db, "d", Target("t", srv.url), timeout_s=2, max_bytes=2**20)
    took = time.monotonic() - t0
    assert took < 3.5, took
    assert r.status == "failed-recorded"
    [error] = gaps(db)
    assert "2s" in error and "scrape_timeout_s" in error


def test_daemon_round_applies_the_cap(db, server):
    from kvplan.collectors.scheduler import Scraper

    srv = server("endless", limit=64 * 2**20)
    ok = server("ok")
    s = Settings(db=db.path, scrape_timeout_s=20, scrape_max_bytes=2**20,
                 deployments=[DeploymentConfig(name="d", targets=[TargetConfig(name="big", url=srv.url),
                                                                  TargetConfig(name="good", url=ok.url)])],
                 schedule=ScheduleConfig(scrape_interval_s=30.0))
    scraper = Scraper(s, db)
    scraper.ensure_targets()
    out = scraper.round()
    scraper.close()
    assert out.errors == 1 and out.rows > 0
    [error] = gaps(db)
    assert "scrape_max_bytes" in error


def test_scrape_limits_have_defaults_and_bounds():
    s = Settings()
    assert s.scrape_timeout_s == 10 and s.scrape_max_bytes == 16 * 2**20
    with pytest.raises(ValueError, match='scrape_max_bytes'):
        Settings(scrape_max_bytes=0)


# -- 2. poisoned rows: refused before storing; stored ones never crash an analysis --------------

CREATED = 1.7e9  # 2023-11-14


def payload(tmp_path: Path, name: str = "v.prom", **v) -> Path:
    p = tmp_path / name
    p.write_text(vllm_text({("m", "0"): {"created": CREATED, "hits": 10, "queries": 20, "ttft": [1, 2, 2], **v}}))
    return p


def replace_line(path: Path, start: str, value: str) -> int:
    """Set the value of the first sample line starting with ``start``; returns its line number."""
    lines = path.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(start))
    lines[i] = lines[i].rsplit(" ", 1)[0] + " " + value
    path.write_text("\n".join(lines) + "\n")
    return i + 1


@pytest.mark.parametrize("value", ["9.9e12", "1e26", "NaN", "-5", "+Inf"])
def test_impossible_created_is_refused_naming_file_line_and_series(db, tmp_path, value):
    p = payload(tmp_path)
    line = replace_line(p, "vllm:prefix_cache_hits_created", value)
    with pytest.raises(PayloadError) as e:
        import_file(db, "d", p, AT)
    msg = str(e.value)
    assert f"{p}:{line}:" in msg and "vllm:prefix_cache_hits_created" in msg and "_created" in msg
    with db.read() as con:
        assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == 0


@pytest.mark.parametrize("value, why", [("-3", "negative"), ("1e308", "above"), ("1.5e16", "above")])
def test_impossible_counter_values_are_refused(db, tmp_path, value, why):
    p = payload(tmp_path)
    line = replace_line(p, "vllm:prefix_cache_queries_total", value)
    with pytest.raises(PayloadError) as e:
        import_file(db, "d", p, AT)
    assert f"{p}:{line}:" in str(e.value) and "vllm:prefix_cache_queries_total" in str(e.value)
    assert why in str(e.value)


def test_hits_above_queries_in_one_payload_are_refused(db, tmp_path):
    p = payload(tmp_path, hits=30, queries=20)
    with pytest.raises(PayloadError) as e:
        import_file(db, "d", p, AT)
    msg = str(e.value)
    assert str(p) in msg and "vllm:prefix_cache_hits_total" in msg and "vllm:prefix_cache_queries_total" in msg
    assert "model_name=\"m\"" in msg


def poison(db: Database, **set_sql) -> None:
    """What an older kvplan let in: rewrite stored samples in place."""
    with db.write() as con:
        for col, (expr, where) in set_sql.items():
            con.execute(f"UPDATE samples SET {col} = {expr} WHERE series_id IN "
                        f"(SELECT series_id FROM series WHERE {where})")


@pytest.mark.parametrize("col, expr", [("created", "9.9e12"), ("created", "1e26"), ("created", "'NaN'::DOUBLE"),
                                       ("value", "1e308"), ("value", "-5"), ("value", "'Infinity'::DOUBLE")])
def test_stored_poisoned_rows_are_reported_not_raised(db, tmp_path, col, expr):
    from datetime import timedelta

    from kvplan.app.data.window import stats
    from kvplan.app.views.overview import plan_range as plan

    import_file(db, "d", payload(tmp_path, "a.prom", hits=0, queries=0, ttft=[0, 0, 0]), AT)
    import_file(db, "d", payload(tmp_path, "b.prom", hits=10, queries=20, ttft=[1, 2, 2]), AT + timedelta(minutes=5))
    poison(db, **{col: (expr, "name = 'vllm:prefix_cache_hits_total'")})
    t0, t1 = AT - timedelta(hours=1), AT + timedelta(hours=1)
    st = stats(db, "d", t0, t1)
    assert st.prefix_cache_hit_rate is None or 0 <= st.prefix_cache_hit_rate <= 1
    assert any("vllm:prefix_cache_hits_total" in n and "not used" in n for n in st.notes), st.notes
    plan(db, "d", t0, t1)


# -- 3. counters checked for sense: a decrease without a new _created is not a reset -------------
def two_scrapes(db, tmp_path, first: dict, second: dict, target: str = "v"):
    from datetime import timedelta

    from kvplan.app.data.window import stats

    import_file(db, "d", payload(tmp_path, "a.prom", **first), AT, target=target)
    import_file(db, "d", payload(tmp_path, "b.prom", **second), AT + timedelta(minutes=5), target=target)
    return stats(db, "d", AT - timedelta(hours=1), AT + timedelta(hours=1))


def test_decrease_with_unchanged_created_is_not_traffic(db, tmp_path):
    st = two_scrapes(db, tmp_path, dict(hits=100, queries=200, ttft=[5, 8, 8]),
                     dict(hits=50, queries=100, ttft=[2, 3, 3]))
    assert st.prefix_cache_hits == 0 and st.prefix_cache_queries == 0 and st.requests == 0
    assert st.counter_resets == 0 and st.counter_decreases >= 3
    assert any("unchanged _created" in n and "vllm:prefix_cache_hits_total" in n for n in st.notes), st.notes


def test_decrease_with_a_new_created_is_a_reset(db, tmp_path):
    # restarted 2 minutes after the first scrape: counted from 0 (Prometheus's rule + the zero point)
    st = two_scrapes(db, tmp_path, dict(hits=100, queries=200, ttft=[5, 8, 8]),
                     dict(hits=50, queries=100, ttft=[2, 3, 3], created=AT.timestamp() + 120))
    assert st.prefix_cache_hits == 50 and st.prefix_cache_queries == 100 and st.requests == 3
    assert st.counter_resets > 0 and st.counter_decreases == 0 and st.notes == []


def test_created_going_backwards_is_not_traffic(db, tmp_path):
    # two processes behind one URL answering in turn: the older one's counters are not an increase
    st = two_scrapes(db, tmp_path, dict(hits=10, queries=20, ttft=[1, 2, 2], created=AT.timestamp() - 7200),
                     dict(hits=15, queries=30, ttft=[1, 3, 3], created=AT.timestamp() - 10800))
    assert st.prefix_cache_hits == 0 and st.counter_decreases > 0


def test_hit_rate_outside_0_1_is_not_reported():
    from kvplan.models.metrics.window import Increase, window_stats

    st = window_stats([Increase("vllm:prefix_cache_hits_total", 30.0), Increase("vllm:prefix_cache_queries_total", 20.0)])
    assert st.prefix_cache_hit_rate is None and "outside [0, 1]" in st.notes[0]


def test_prometheus_ingestion_applies_the_same_decrease_rule():
    import numpy as np

    from kvplan.collectors.prom_math import step_increments

    t = np.array([60_000, 120_000, 180_000], dtype=np.int64)
    v = np.array([100.0, 40.0, 50.0])
    same = np.array([5_000.0] * 3)                   # _created known and unchanged: not a restart
    _, delta, _, resets, _ = step_increments(t, v, same, 60_000, 180_000, 60_000, 600_000)
    assert delta.tolist() == [0.0, 10.0] and resets.tolist() == [0, 0]
    _, delta, _, resets, _ = step_increments(t, v, np.full(3, np.nan), 60_000, 180_000, 60_000, 600_000)
    assert delta.tolist() == [40.0, 10.0] and resets.tolist() == [1, 0]   # unknown: Prometheus's rule


# -- 4. target identity; snapshots of one server; why a figure is null ---------------------------



runner = CliRunner()


def targets(db: Database) -> dict[str, int]:
    with db.read() as con:
        return dict(con.execute("SELECT t.name, count(sc.scrape_id) FROM targets t "
                                "LEFT JOIN scrapes sc USING (target_id) GROUP BY 1").fetchall())


def test_two_endpoints_on_one_host_port_are_two_targets(db, server):
    from kvplan.collectors.scrape import default_target_name

    ok = server("ok")
    base = ok.url.rsplit("/", 1)[0]
    r = runner.invoke(app, ["scrape", f"{base}/a/metrics", f"{base}/b/metrics", "--deployment", "d",
                            "--db", str(db.path)])
    assert r.exit_code == 0, r.output
    hostport = base.split("//")[1]
    assert targets(db) == {f"{hostport}/a/metrics": 1, f"{hostport}/b/metrics": 1}
    assert default_target_name("http://h:9/metrics") == "h:9"          # the usual path keeps host:port
    assert default_target_name("http://u:p@h:9/x?y=1") == "h:9/x?y=1"


def test_same_file_name_in_two_folders_is_two_targets(db, tmp_path):
    from kvplan.collectors.scrape import import_files

    (tmp_path / "n1").mkdir()
    (tmp_path / "n2").mkdir()
    a = payload(tmp_path / "n1", "vllm.prom")
    b = payload(tmp_path / "n2", "vllm.prom", hits=1)
    res = import_files(db, "d", [(a, AT, None), (b, AT, None)])
    assert sorted(r.target for r in res) == ["n1/vllm", "n2/vllm"]
    assert targets(db) == {"n1/vllm": 1, "n2/vllm": 1}


def test_snapshots_named_name_at_time_are_one_target(db, tmp_path):
    a = payload(tmp_path, "vllm-0@2026-01-05T12:00:00Z.prom", hits=0, queries=0, ttft=[0, 0, 0])
    b = payload(tmp_path, "vllm-0@2026-01-05T12:05:00Z.prom", hits=30, queries=40, ttft=[3, 4, 4])
    r = runner.invoke(app, ["import-metrics", str(a), str(b), "--deployment", "d", "--db", str(db.path)])
    assert r.exit_code == 0, r.output
    assert targets(db) == {"vllm-0": 2}
    r = runner.invoke(app, ["stats", "--deployment", "d", "--from", "2026-01-05T11:00:00Z",
                            "--to", "2026-01-05T13:00:00Z", "--json", "--db", str(db.path)])
    assert json.loads(r.stdout)["prefix_cache_hit_rate"] == 0.75


def test_one_target_many_times_with_target_option(db, tmp_path):
    a = payload(tmp_path, "x@20260105T120000Z.prom", hits=0, queries=0, ttft=[0, 0, 0])
    b = payload(tmp_path, "y@20260105T120500Z.prom", hits=30, queries=40, ttft=[3, 4, 4])
    r = runner.invoke(app, ["import-metrics", str(a), str(b), "--target", "vllm-0", "--deployment", "d",
                            "--db", str(db.path)])
    assert r.exit_code == 0, r.output
    assert targets(db) == {"vllm-0": 2}


def stats_json(db: Database, *extra: str) -> dict:
    r = runner.invoke(app, ["stats", "--deployment", "d", "--from", "2026-01-05T11:00:00Z",
                            "--to", "2026-01-05T13:00:00Z", "--json", "--db", str(db.path), *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_stats_say_why_figures_are_null(db, tmp_path):
    # the natural mistake: snapshots of one server imported under their file names
    a = payload(tmp_path, "vllm-0-1200.prom", hits=0, queries=0, ttft=[0, 0, 0])
    b = payload(tmp_path, "vllm-0-1205.prom", hits=30, queries=40, ttft=[3, 4, 4])
    for f, at in ((a, "2026-01-05T12:00:00Z"), (b, "2026-01-05T12:05:00Z")):
        assert runner.invoke(app, ["import-metrics", str(f), "--at", at, "--deployment", "d",
                                   "--db", str(db.path)]).exit_code == 0
    d = stats_json(db)
    assert d["prefix_cache_hit_rate"] is None
    assert any("one scrape" in n and "NAME@TIME" in n for n in d["notes"]), d["notes"]
    r = runner.invoke(app, ["stats", "--deployment", "d", "--from", "2026-02-05T11:00:00Z",
                            "--to", "2026-02-05T13:00:00Z", "--json", "--db", str(db.path)])
    assert any("no data in the window" in n for n in json.loads(r.stdout)["notes"])
    r = runner.invoke(app, ["plan", "--deployment", "d", "--from", "2026-01-05T11:00:00Z",
                            "--to", "2026-01-05T13:00:00Z", "--db", str(db.path)])
    assert r.exit_code == 0 and "one scrape" in r.output, r.output


# -- 5. errors, not tracebacks -------------------------------------------------------------------
def bucket_line(path: Path, new: str) -> int:
    lines = path.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("vllm:time_to_first_token_seconds_bucket"))
    lines[i] = new
    path.write_text("\n".join(lines) + "\n")
    return i + 1


def test_bucket_without_le_names_file_and_line(db, tmp_path):
    p = payload(tmp_path)
    line = bucket_line(p, 'vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m"} 1.0')
    r = runner.invoke(app, ["import-metrics", str(p), "--at", "2026-01-05T12:00:00Z", "--deployment", "d",
                            "--db", str(db.path)])
    assert r.exit_code == 2 and f"{p}:{line}:" in r.output and "without an le" in r.output, r.output


def test_non_numeric_le_on_scrape_is_a_gap_and_the_other_urls_go_on(db, tmp_path, server):
    p = payload(tmp_path)
    line = bucket_line(p, 'vllm:time_to_first_token_seconds_bucket{engine="0",le="fast",model_name="m"} 1.0')
    import_error = runner.invoke(app, ["import-metrics", str(p), "--at", "2026-01-05T12:00:00Z",
                                       "--deployment", "d", "--db", str(db.path)])
    assert import_error.exit_code == 2 and f"{p}:{line}:" in import_error.output and "'fast'" in import_error.output
    bad = server("ok", body=p)
    good = server("ok")
    r = runner.invoke(app, ["scrape", bad.url, good.url, "--deployment", "d", "--db", str(db.path)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"{bad.url}:{line}:" in r.output or "not a number" in r.output, r.output
    assert len(gaps(db)) == 1 and sum(targets(db).values()) == 2


@pytest.mark.parametrize("where", ["dir", "under_file", "unwritable"])
def test_report_output_that_cannot_be_written_is_an_error(db, tmp_path, where):
    import os

    from tests.recorded import import_case

    import_case(db, "restart", deployment="d")
    month = db.fetch("deployments")[0]["first_scrape"].strftime("%Y-%m")
    if where == "dir":
        out = tmp_path / "r.html"
        out.mkdir()
    elif where == "under_file":
        (tmp_path / "f").write_text("x")
        out = tmp_path / "f" / "r.html"
    else:
        if os.geteuid() == 0:
            out = Path("/proc/kvplan-test/r.html")     # root writes anywhere else
        else:
            (tmp_path / "ro").mkdir(mode=0o500)
            out = tmp_path / "ro" / "r.html"
    r = runner.invoke(app, ["report", "--deployment", "d", "--month", month, "-o", str(out), "--db", str(db.path)])
    assert r.exit_code == 2 and "Traceback" not in r.output and "cannot write" in r.output, r.output


def test_empty_window_report_is_refused(db, tmp_path):
    from datetime import timedelta

    import_file(db, "d", payload(tmp_path, "a.prom"), AT)      # one scrape per target: no increase
    import_file(db, "d", payload(tmp_path, "b.prom"), AT + timedelta(minutes=5))
    out = tmp_path / "r.html"
    r = runner.invoke(app, ["report", "--deployment", "d", "--month", "2026-01", "-o", str(out),
                            "--db", str(db.path)])
    assert r.exit_code == 2 and "one scrape" in r.output and not out.exists(), r.output


@pytest.mark.parametrize("value", ["inf", "nan", "1e12"])
def test_scrape_interval_must_be_finite_and_bounded(tmp_path, value):
    cfg = tmp_path / "k.toml"
    cfg.write_text(f"[schedule]\nscrape_interval_s = {value}\n")
    r = runner.invoke(app, ["config", "check", "--config", str(cfg)])
    assert r.exit_code == 2 and "schedule.scrape_interval_s" in r.output, r.output


def test_openmetrics_with_underscored_vllm_names_is_mapped_with_a_warning(db, tmp_path):
    from kvplan.collectors.parse import parse_payload

    text = vllm_text({("m", "0"): {"created": CREATED, "hits": 1, "queries": 2, "ttft": [1, 2, 2]}})
    text = text.replace("vllm:", "vllm_")
    p = parse_payload(text, "x.prom")
    assert p.kind == "vllm" and any(s.name == "vllm:prefix_cache_hits_total" for s in p.samples)
    assert any("vllm_" in w and "vllm:" in w for w in p.warnings)


def test_unknown_model_is_refused_with_the_known_ones(db, tmp_path):
    import_file(db, "d", payload(tmp_path), AT)
    for cmd in ("stats", "plan"):
        r = runner.invoke(app, [cmd, "--deployment", "d", "--from", "2026-01-05T11:00:00Z", "--to",
                                "2026-01-05T13:00:00Z", "--model", "ghost", "--db", str(db.path)])
        assert r.exit_code == 2 and "'ghost'" in r.output and "'m'" in r.output, r.output


def test_nan_summary_quantiles_are_accepted(db, tmp_path):
    p = payload(tmp_path)
    p.write_text(p.read_text() + "# TYPE vllm:x_seconds summary\n"
                 'vllm:x_seconds{model_name="m",quantile="0.5"} NaN\n'
                 'vllm:x_seconds_count{model_name="m"} 0\nvllm:x_seconds_sum{model_name="m"} 0\n')
    r = import_file(db, "d", p, AT)
    assert r.status == "stored"


# -- 6. a batch import is all or nothing -----------------------------------------------------------
def test_batch_import_with_a_conflict_stores_nothing(db, tmp_path):
    (tmp_path / "old").mkdir()
    import_file(db, "d", payload(tmp_path / "old", "x.prom"), AT)
    y = payload(tmp_path, "y.prom")
    x = payload(tmp_path, "x.prom", hits=1)                     # another payload for x at the same time
    r = runner.invoke(app, ["import-metrics", str(y), str(x), "--at", "2026-01-05T12:00:00Z", "--deployment", "d",
                            "--db", str(db.path)])
    assert r.exit_code == 2 and "already has a different payload" in r.output
    assert "nothing from this batch of 2 file(s) was stored" in r.output, r.output
    assert targets(db) == {"x": 1}


# -- 7. secrets never reach the database, the output or the report -------------------------------
TOKEN = "tok-h4rden-Zq81xv"
PASSWORD = "pw-h4rden-Hh27kd"


class Echo(Loopback):
    """Answers every request with ``status`` and a body echoing the request's headers, as a
    careless server or proxy does in its error pages."""

    def __init__(self, status: int, ctype: str = "text/plain"):
        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                echoed = "".join(f"{k}: {v}\n" for k, v in self.headers.items())
                body = (json.dumps({"status": "error", "errorType": "bad_data", "error": "denied; you sent " + echoed})
                        if ctype == "application/json" else "denied; you sent\n" + echoed).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET

            def log_message(self, *a):
                pass

        super().__init__(H)


def secret_free(db: Database, *texts: str) -> None:
    import base64

    b64 = base64.b64encode(f"bob:{PASSWORD}".encode()).decode()
    with db.read() as con:
        for table in ("scrapes", "gaps", "prom_chunks", "collector_runs", "targets"):
            for row in con.execute(f"SELECT * FROM {table}").fetchall():
                for v in row:
                    assert not (isinstance(v, str) and (TOKEN in v or PASSWORD in v or b64 in v)), (table, row)
    for t in texts:
        assert TOKEN not in t and PASSWORD not in t and b64 not in t, t


def test_echoed_authorization_never_reaches_db_or_report(db, tmp_path, monkeypatch, caplog):
    from datetime import timedelta

    from kvplan.collectors.prometheus import ingest_range
    from kvplan.collectors.scheduler import logged_run
    from kvplan.collectors.settings import PrometheusConfig
    from kvplan.models.core.redact import register_secret

    import_file(db, "d", payload(tmp_path, "a.prom", hits=0, queries=0, ttft=[0, 0, 0]), AT, target="v")
    import_file(db, "d", payload(tmp_path, "b.prom"), AT + timedelta(minutes=5), target="v")
    echo = Echo(400, "application/json")
    try:
        cfg = PrometheusConfig(url=echo.url, step="1m", chunk="10m", retries=0, timeout_s=5, bearer_token=TOKEN)
        register_secret(TOKEN)                       # what load_settings does for configured secrets
        with logged_run(db, "ingest", deployment="d") as run:
            res = ingest_range(db, cfg, DeploymentConfig(name="d", prometheus_selector='job="v"'),
                               AT, AT + timedelta(minutes=10))
            run.errors, run.notes = res.failed, res.errors[:3]
        assert res.failed == 1 and "denied" in res.errors[0]
    finally:
        echo.close()
    out = tmp_path / "r.html"
    r = runner.invoke(app, ["report", "--deployment", "d", "--month", "2026-01", "-o", str(out), "--db", str(db.path)])
    assert r.exit_code == 0, r.output
    html = out.read_text()
    assert "denied" in html or "denied" in db.fetch("collector_runs", limit=5)[0]["message"]
    secret_free(db, html, r.output, caplog.text, "\n".join(res.errors))


def test_scrape_never_prints_or_stores_user_password(db):
    echo = Echo(500)
    try:
        url = echo.url.replace("http://", f"http://bob:{PASSWORD}@") + "/metrics"
        r = runner.invoke(app, ["scrape", url, "--deployment", "d", "--db", str(db.path)])
    finally:
        echo.close()
    assert r.exit_code == 2 and "HTTP 500" in r.output, r.output
    secret_free(db, r.output)


def test_password_inside_prometheus_url_is_refused_in_the_toml(tmp_path):
    cfg = tmp_path / "k.toml"
    cfg.write_text(f'[prometheus]\nurl = "http://bob:{PASSWORD}@prom:9090"\n')
    r = runner.invoke(app, ["config", "check", "--config", str(cfg)])
    assert r.exit_code == 2 and "prometheus.url" in r.output and PASSWORD not in r.output, r.output


def test_one_redaction_function():
    from kvplan.models.core.redact import redact

    assert redact(f"GET http://bob:{PASSWORD}@h/x?access_token={TOKEN} Authorization: Bearer {TOKEN}") == \
        "GET http://<redacted>@h/x?access_token=<redacted> Authorization: <redacted>"


# -- 8. smaller checks ------------------------------------------------------------------------------
@pytest.mark.parametrize("toml, key", [
    ('[[deployments]]\nname = "p"\ngpus = -5\n', "deployments.0.gpus"),
    ('[[deployments]]\nname = "p"\ngpus = 1000000000\n', "deployments.0.gpus"),
    ('[[deployments]]\nname = " "\n', "deployments.0.name"),
    ('[[deployments]]\nname = "p"\n[[deployments.targets]]\nname = "t"\nurl = "http://h:99999/metrics"\n',
     "deployments.0.targets.0.url"),
])
def test_impossible_config_values_are_refused(tmp_path, toml, key):
    cfg = tmp_path / "k.toml"
    cfg.write_text(toml)
    r = runner.invoke(app, ["config", "check", "--config", str(cfg)])
    assert r.exit_code == 2 and key in r.output, r.output


def test_scrape_url_with_port_99999_and_empty_deployment_are_refused(db):
    r = runner.invoke(app, ["scrape", "http://127.0.0.1:99999/metrics", "--deployment", "d", "--db", str(db.path)])
    assert r.exit_code == 2 and "port" in r.output and "Traceback" not in r.output, r.output
    r = runner.invoke(app, ["import-metrics", str(GOOD), "--at", "2026-11-30T10:00:00Z", "--deployment", "",
                            "--db", str(db.path)])
    assert r.exit_code == 2 and "--deployment" in r.output, r.output
    assert targets(db) == {}


@pytest.mark.parametrize("at", ["0001-01-01T00:00:00Z", "2099-01-01T00:00:00Z"])
def test_at_outside_2000_to_now_is_refused(db, tmp_path, at):
    r = runner.invoke(app, ["import-metrics", str(payload(tmp_path)), "--at", at, "--deployment", "d",
                            "--db", str(db.path)])
    assert r.exit_code == 2 and "outside 2000-01-01" in r.output, r.output


def test_environment_errors_blame_the_variable(tmp_path, monkeypatch):
    cfg = tmp_path / "k.toml"
    cfg.write_text('[schedule]\nnightly_cron = "0 2 * * *"\n')
    monkeypatch.setenv("KVPLAN_SCHEDULE__SCRAPE_INTERVAL_S", "-1")
    r = runner.invoke(app, ["config", "check", "--config", str(cfg)])
    assert r.exit_code == 2 and "KVPLAN_SCHEDULE__SCRAPE_INTERVAL_S" in r.output, r.output
    assert f"{cfg}:" not in r.output


def test_import_has_a_size_cap(db, tmp_path, monkeypatch):
    big = tmp_path / "big.prom"
    big.write_text(GOOD.read_text() + "# padding\n" * 200_000)        # ~2 MB
    monkeypatch.setenv("KVPLAN_SCRAPE_MAX_BYTES", str(2**20))
    r = runner.invoke(app, ["import-metrics", str(big), "--at", "2026-11-30T10:00:00Z", "--deployment", "d",
                            "--db", str(db.path)])
    assert r.exit_code == 2 and "1 MiB" in r.output and "scrape_max_bytes" in r.output, r.output


# -- 9. planning bounds everywhere a value enters ------------------------------------------------------
@pytest.mark.parametrize("field, value", [("horizon_months", 10_000_000), ("growth_rate_per_month", 1e6)])
def test_planning_bounds_name_the_field(field, value):
    from kvplan.models.inputs.planning import PlanningInputs

    with pytest.raises(Exception) as e:
        PlanningInputs(**{field: value})
    assert f"PlanningInputs.{field}" in str(e.value)


def test_price_book_bounds():
    from kvplan.models.inputs.pricebook import PriceBook

    with pytest.raises(Exception) as e:
        PriceBook.from_dict({"usd_per_gpu_hour": 1e9})
    assert "usd_per_gpu_hour" in str(e.value)


@pytest.mark.parametrize("gpus", ["-5", "0", "1000000000"])
def test_plan_gpus_is_bounded(db, tmp_path, gpus):
    from datetime import timedelta

    import_file(db, "d", payload(tmp_path, "a.prom"), AT)
    import_file(db, "d", payload(tmp_path, "b.prom", hits=20, queries=40), AT + timedelta(minutes=5))
    t0 = time.monotonic()
    r = runner.invoke(app, ["plan", "--deployment", "d", "--from", "2026-01-05T11:00:00Z", "--to",
                            "2026-01-05T13:00:00Z", "--gpus", gpus, "--db", str(db.path)])
    assert r.exit_code == 2 and "--gpus" in r.output and time.monotonic() - t0 < 30, r.output


def test_form_refuses_huge_planning_values(db):
    from kvplan.app.data.store import save_price_form

    with pytest.raises(Exception) as e:
        save_price_form(db, "d", {}, {"horizon_months": 10_000_000})
    assert "horizon_months" in str(e.value)


# -- 9. the dashboard: loopback unless configured, no outbound call at start ----------------------
def test_dashboard_flags_bind_loopback_and_make_no_outbound_call(monkeypatch, tmp_path):
    import subprocess

    seen = {}
    monkeypatch.setattr(subprocess, "call", lambda cmd, **kw: seen.setdefault("cmd", cmd) and 0)
    r = runner.invoke(app, ["dashboard", "--headless", "--port", "8599", "--db", str(tmp_path / "k.duckdb")])
    assert r.exit_code == 0, r.output
    cmd = seen["cmd"]
    flags = dict(zip(cmd[cmd.index("run") + 2::2], cmd[cmd.index("run") + 3::2], strict=False))
    assert flags["--server.address"] == "127.0.0.1" and flags["--server.port"] == "8599"
    assert flags["--browser.gatherUsageStats"] == "false" and flags["--server.headless"] == "true"
    assert flags["--logger.hideWelcomeMessage"] == "true"          # no external-IP lookup
    seen.clear()
    r = runner.invoke(app, ["dashboard", "--headless", "--address", "0.0.0.0", "--db", str(tmp_path / "k.duckdb")])
    assert r.exit_code == 0 and seen["cmd"][seen["cmd"].index("--server.address") + 1] == "0.0.0.0"


@pytest.mark.browser
def test_dashboard_listens_on_loopback_only_and_connects_nowhere(tmp_path):
    """A real start under strace: the only listening socket is 127.0.0.1:PORT and every
    outbound connect() goes to loopback (or a local unix socket)."""
    import os
    import re
    import shutil
    import socket
    import subprocess
    import sys

    import httpx

    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (make sysdeps installs it)")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    trace = tmp_path / "trace"
    env = dict(os.environ, KVPLAN_DB=str(tmp_path / "k.duckdb"))
    proc = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace), sys.executable, "-m",
                             "kvplan.app.cli", "dashboard", "--headless", "--port", str(port), "--db", str(tmp_path / "k.duckdb")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            cwd=Path(__file__).resolve().parents[1], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        else:
            pytest.fail("the dashboard did not answer in 60 s")
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200
        time.sleep(2)
        listening = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
        mine = [line.split()[3] for line in listening.splitlines() if line.split()[3].endswith(f":{port}")]
        assert mine == [f"127.0.0.1:{port}"], mine
    finally:
        import signal

        os.killpg(proc.pid, signal.SIGTERM)          # strace, kvplan and Streamlit: this test's group
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(20)
    outbound = [line for line in trace.read_text().splitlines() if "sin_addr" in line or "sin6_addr" in line]
    foreign = [line for line in outbound if not re.search(r'inet_addr\("127\.|inet_pton\(AF_INET6, "::1"', line)]
    assert foreign == [], foreign


@pytest.mark.browser
def test_dashboard_oidc_login_in_the_browser(db, tmp_path):
    """Streamlit's OpenID Connect login against a real local provider (oidc-provider-mock),
    driven in Chromium: nothing but a login button before, the pages after."""
    import os
    import signal
    import socket
    import subprocess
    import sys

    import httpx
    from oidc_provider_mock import run_server_in_thread
    from playwright.sync_api import sync_playwright

    from tests.recorded import import_case

    import_case(db, "restart", deployment="d")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with run_server_in_thread() as idp:
        secrets = tmp_path / "secrets.toml"
        secrets.write_text(f'[auth]\nredirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
                           f'cookie_secret = "{"c" * 48}"\nclient_id = "kvplan"\nclient_secret = "{PASSWORD}"\n'
                           f'server_metadata_url = "http://127.0.0.1:{idp.server_port}/.well-known/openid-configuration"\n')
        log = open(tmp_path / "streamlit.log", "w")
        proc = subprocess.Popen([sys.executable, "-m", "kvplan.app.cli", "dashboard", "--headless", "--port", str(port),
                                 "--auth-secrets", str(secrets), "--db", str(db.path)],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=Path(__file__).resolve().parents[1])
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"{url}/_stcore/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.3)
            else:
                pytest.fail("the dashboard did not start:\n" + (tmp_path / "streamlit.log").read_text())
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
                pg = browser.new_page()
                pg.set_default_timeout(60_000)
                pg.goto(url)
                pg.get_by_role("button", name="Log in").wait_for()
                assert pg.locator("[data-testid='stMetric']").count() == 0          # no data before the login
                pg.get_by_role("button", name="Log in").click()
                pg.wait_for_url(f"http://127.0.0.1:{idp.server_port}/**")           # at the identity provider
                pg.fill("input[name=sub]", "alice@example.com")
                pg.get_by_role("button", name="Authorize").click()
                pg.wait_for_url(f"{url}/**")
                pg.wait_for_selector("[data-testid='stMetric']")                    # the overview, logged in
                assert "alice@example.com" in pg.locator("[data-testid='stSidebar']").inner_text()
                other = browser.new_page()                                           # another browser session
                other.goto(url)
                other.get_by_role("button", name="Log in").wait_for()
                assert other.locator("[data-testid='stMetric']").count() == 0
                browser.close()
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(20)
            log.close()
    assert PASSWORD not in (tmp_path / "streamlit.log").read_text()


def test_auth_secrets_are_checked(tmp_path):
    bad = tmp_path / "s.toml"
    bad.write_text('[auth]\nclient_id = "x"\n')
    r = runner.invoke(app, ["dashboard", "--headless", "--auth-secrets", str(bad), "--db", str(tmp_path / "k.duckdb")])
    assert r.exit_code == 2 and "cookie_secret" in r.output and "--auth-secrets" in r.output, r.output
