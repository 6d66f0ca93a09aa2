"""Direct scrapes and saved-payload imports: deadlines and byte caps, target identity, batches
that are all or nothing, times and sizes refused."""

from __future__ import annotations

import json
import time

import pytest

from kvplan.app.cli import app
from kvplan.collectors.scrape.scrape import Target, import_file, scrape_target
from kvplan.models.inputs.settings import DeploymentConfig, ScheduleConfig, Settings, TargetConfig
from tests.hostile import AT, GOOD, bucket_line, gaps, payload, runner, targets


# -- hostile or careless inputs --------------------------------------------------------------
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
    from kvplan.collectors.schedule.scheduler import Scraper

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


def test_two_endpoints_on_one_host_port_are_two_targets(db, server):
    from kvplan.collectors.scrape.scrape import default_target_name

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
    from kvplan.collectors.scrape.scrape import import_files

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


def test_import_has_a_size_cap(db, tmp_path, monkeypatch):
    big = tmp_path / "big.prom"
    big.write_text(GOOD.read_text() + "# padding\n" * 200_000)        # ~2 MB
    monkeypatch.setenv("KVPLAN_SCRAPE_MAX_BYTES", str(2**20))
    r = runner.invoke(app, ["import-metrics", str(big), "--at", "2026-11-30T10:00:00Z", "--deployment", "d",
                            "--db", str(db.path)])
    assert r.exit_code == 2 and "1 MiB" in r.output and "scrape_max_bytes" in r.output, r.output
