"""Issue 27, the adversary's cases 19 to 22 (config and --instance) and 23 (the daemon): each
failed on the code before its fix. Real files, real environment variables, the real CLI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.config import ConfigError, load_settings

runner = CliRunner()
BASE = '[[deployments]]\nname = "prod"\ngpus = 2\n[prices]\nusd_per_gpu_hour = 3.0\n'


def write(tmp_path: Path, body: str = BASE) -> Path:
    p = tmp_path / "kvplan.toml"
    p.write_text(f'db = "{tmp_path / "k.duckdb"}"\n' + body)
    return p


def check(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, ["config", "check", *args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception  # never a traceback
    return r.exit_code, " ".join(r.output.split())


# -- 19: a binary file or a directory as --config, broken JSON in KVPLAN_DEPLOYMENTS ------------
def test_a_binary_config_file_is_a_clear_error_naming_it(tmp_path):
    p = tmp_path / "kvplan.toml"
    p.write_bytes(bytes(range(256)) * 4)          # not text at all
    code, out = check("--config", str(p))
    assert code == 2 and str(p) in out and "not a UTF-8 text file" in out


def test_a_directory_as_config_is_a_clear_error_naming_it(tmp_path):
    code, out = check("--config", str(tmp_path))
    assert code == 2 and str(tmp_path) in out and "is a directory" in out


def test_broken_json_in_an_environment_variable_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPLAN_DEPLOYMENTS", '[{"name": "x",')
    with pytest.raises(ConfigError, match="KVPLAN_DEPLOYMENTS: not valid JSON"):
        load_settings(write(tmp_path))
    code, out = check("--config", str(write(tmp_path)))
    assert code == 2 and "KVPLAN_DEPLOYMENTS" in out


# -- 20: environment overrides of prices and of one deployment's key -----------------------------
def test_a_price_from_the_environment_overrides_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPLAN_PRICES__USD_PER_GPU_HOUR", "2.5")
    s = load_settings(write(tmp_path))
    assert s.prices == {"usd_per_gpu_hour": 2.5}


def test_a_bad_price_from_the_environment_blames_the_variable_not_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPLAN_PRICES__USD_PER_GPU_HOUR", "-1")
    conf = write(tmp_path)
    with pytest.raises(ConfigError) as e:
        load_settings(conf)
    assert "KVPLAN_PRICES__USD_PER_GPU_HOUR" in str(e.value) and str(conf) not in str(e.value)


def test_one_deployments_key_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPLAN_DEPLOYMENTS__0__GPUS", "4")
    s = load_settings(write(tmp_path, BASE + '[[deployments]]\nname = "other"\n'))
    assert [(d.name, d.gpus) for d in s.deployments] == [("prod", 4), ("other", None)]
    monkeypatch.setenv("KVPLAN_DEPLOYMENTS__0__GPUS", "0")
    conf = write(tmp_path)
    with pytest.raises(ConfigError) as e:
        load_settings(conf)
    assert "KVPLAN_DEPLOYMENTS__0__GPUS" in str(e.value) and str(conf) not in str(e.value)
    monkeypatch.setenv("KVPLAN_DEPLOYMENTS__3__GPUS", "4")   # no deployment 3 in the file
    monkeypatch.delenv("KVPLAN_DEPLOYMENTS__0__GPUS")
    with pytest.raises(ConfigError, match="KVPLAN_DEPLOYMENTS__3__GPUS"):
        load_settings(conf)


# -- 21: tokens in URL queries ---------------------------------------------------------------------
TOKEN = "tok-qu3ry-Xy71ab"


def test_a_token_in_a_url_query_is_redacted_in_config_check(tmp_path):
    body = (f'[prometheus]\nurl = "http://prom:9090/?access_token={TOKEN}"\n[[deployments]]\nname = "d"\n'
            f'[[deployments.targets]]\nname = "v"\nurl = "http://10.0.0.1:8000/metrics?token={TOKEN}"\n'
            f'[[deployments.targets]]\nname = "w"\nurl = "http://10.0.0.1:8000/metrics?x=1&token={TOKEN}"\n')
    r = runner.invoke(app, ["config", "check", "--config", str(write(tmp_path, body))])
    assert r.exit_code == 0, r.output
    assert TOKEN not in r.output and "access_token=<redacted>" in r.output


def test_a_token_in_a_scraped_url_never_reaches_the_target_name(tmp_path):
    from kvplan.collectors.scrape.scrape import default_target_name, redact_url

    url = f"http://10.0.0.1:8000/metrics?token={TOKEN}&x=1"
    assert TOKEN not in default_target_name(url) and TOKEN not in redact_url(url)
    assert default_target_name(url) == "10.0.0.1:8000/metrics?token=<redacted>&x=1"
    assert default_target_name("http://10.0.0.1:8000/metrics?x=1") == "10.0.0.1:8000/metrics?x=1"


def test_the_scrape_command_stores_no_token_in_duckdb(tmp_path):
    from tests.hostile import Server

    srv = Server("ok", 0)
    db = tmp_path / "k.duckdb"
    try:
        r = runner.invoke(app, ["scrape", "--deployment", "d", "--db", str(db), f"{srv.url}?access_token={TOKEN}"])
    finally:
        srv.close()
    assert r.exit_code == 0, r.output
    assert TOKEN not in r.output
    for f in tmp_path.glob("k.duckdb*"):
        assert TOKEN.encode() not in f.read_bytes(), f


# -- 22: --instance like a deployment name; gpus = true is not a number ----------------------------
@pytest.mark.parametrize("name", ["rank\u202e0", "rank\x1b[31m0", "rank\u200b0", " rank0"])
def test_instance_refuses_control_and_bidi_characters(tmp_path, name):
    log = tmp_path / "lookup_hashes_20261201_124735_000000.jsonl"
    log.write_text('{"timestamp": 1.0, "request_id": "a", "model_name": "m", "chunk_size": 4, "seq_len": 9, '
                   '"chunk_hashes": ["0x1", "0x2"]}\n')
    r = runner.invoke(app, ["import-trace", "--deployment", "d", "--db", str(tmp_path / "k.duckdb"),
                            "--instance", name, str(log)])
    assert r.exit_code == 2 and "instance" in r.output and "not a usable" in r.output, r.output


@pytest.mark.parametrize("line", ["gpus = true", "gpus_per_engine = true", "gpus = false"])
def test_a_boolean_is_not_a_number_of_gpus(tmp_path, line):
    with pytest.raises(ConfigError, match="a number, not true or false"):
        load_settings(write(tmp_path, f'[[deployments]]\nname = "prod"\n{line}\n'))


@pytest.mark.parametrize("body", ['[schedule]\nscrape_interval_s = true\n', '[prometheus]\nretries = true\n',
                                  'scrape_timeout_s = true\n'])
def test_no_number_setting_takes_a_boolean(tmp_path, body):
    with pytest.raises(ConfigError, match="true or false"):
        load_settings(write(tmp_path, body))


def test_the_environment_still_sets_numbers_and_booleans(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPLAN_SCHEDULE__SCRAPE_INTERVAL_S", "7")
    monkeypatch.setenv("KVPLAN_PROMETHEUS__VERIFY_TLS", "false")
    s = load_settings(write(tmp_path))
    assert s.schedule.scrape_interval_s == 7 and s.prometheus.verify_tls is False
    assert os.environ["KVPLAN_SCHEDULE__SCRAPE_INTERVAL_S"] == "7"


# -- 23: a round the daemon skipped is a recorded gap -----------------------------------------------
def _poll(cond, deadline_s: float, what: str):
    import time

    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    pytest.fail(f"not within {deadline_s}s: {what}")


def test_a_skipped_daemon_round_is_recorded_as_a_gap(tmp_path, caplog):
    import logging
    import threading

    from kvplan.collectors.schedule.scheduler import run_daemon
    from kvplan.models.inputs.settings import DeploymentConfig, ScheduleConfig, Settings, TargetConfig
    from kvplan.sql.db import Database
    from tests.hostile import Server

    caplog.set_level(logging.WARNING)
    srv = Server("ok", 0)
    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    s = Settings(db=db.path, scrape_timeout_s=5, schedule=ScheduleConfig(scrape_interval_s=1.0),
                 deployments=[DeploymentConfig(name="d", targets=[TargetConfig(name="v", url=srv.url)])])

    def scrapes(ok: bool) -> list:
        with db.read() as con:
            return con.execute("SELECT ts, error FROM scrapes WHERE ok = ? ORDER BY ts", [ok]).fetchall()

    stop = threading.Event()
    th = threading.Thread(target=run_daemon, args=(s, db, stop), daemon=True)
    th.start()
    try:
        _poll(lambda: scrapes(True), 30, "a first scrape")
        # another writer keeps the database for a while (an 800-file import, a backfill chunk): the
        # round in flight cannot write its run row, so the next ones find it still running
        with db.write():
            _poll(lambda: any("skipped" in r.getMessage() for r in caplog.records), 30, "a skipped round")
        gaps = _poll(lambda: [g for g in scrapes(False) if "round skipped" in (g[1] or "")], 30,
                     "the skipped round recorded in scrapes")
        assert "previous round was still running" in gaps[0][1] and "scrape_interval_s = 1s" in gaps[0][1]
        runs = [r for r in db.fetch("collector_runs", limit=50) if (r["message"] or "").startswith("round skipped")]
        assert runs and runs[0]["status"] == "errors" and runs[0]["n_errors"] == 1
    finally:
        stop.set()
        th.join(30)
        srv.close()
    assert not th.is_alive()
