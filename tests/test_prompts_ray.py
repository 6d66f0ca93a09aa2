"""``kvplan prompts check --ray``: the first pass rendered and tokenized on a local Ray cluster
(2 CPUs, started once for the module) gives the same JSON and the same per-request rows as the
check in this process, on three logs (a timestamp buster with a bad line and a refused request,
the thinking agent's log with its own template, a template that writes the date); an address
nothing answers at is an error naming --ray (exit 2, no traceback)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.views.prompts import prompts_check, request_row
from kvplan.collectors.requests import distributed
from kvplan.deploy.local.recorders.thinking_logs import THINK_TEMPLATE, agent_log
from tests.test_prompts_check import DOC, TOKENIZER, timestamp_log

runner = CliRunner()
RAY_NOTE = "ran on Ray"


@pytest.fixture(scope="module")
def address():
    import ray

    t0 = time.monotonic()
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    try:
        @ray.remote
        def ping() -> int:
            return 1

        assert ray.get(ping.remote(), timeout=60) == 1, "the local Ray cluster did not run a task within 60 s"
    except Exception:
        for f in sorted(Path("/tmp/ray/session_latest/logs").glob("*.err"))[:10]:  # Ray's default temp dir
            print(f, f.read_text(errors="replace")[-2000:])
        ray.shutdown()
        raise
    print(f"local Ray up in {time.monotonic() - t0:.1f} s")
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(x + "\n" for x in lines))
    return path


def timestamp_with_bad_lines(tmp_path: Path) -> tuple[Path, Path | None]:
    lines = [json.dumps(b) for b in timestamp_log(24)]
    lines.insert(13, "not json")
    refused = {"model": "m", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "",
               "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{bad"}}]}]}
    lines.insert(4, json.dumps(refused))  # vLLM refuses arguments that are not JSON: skipped, named
    return write(tmp_path / "ts.jsonl", lines), None


def think(tmp_path: Path) -> tuple[Path, Path | None]:
    (tmp_path / "think.jinja").write_text(THINK_TEMPLATE)
    return write(tmp_path / "think.jsonl", [json.dumps(b) for b in agent_log()]), tmp_path / "think.jinja"


def dated(tmp_path: Path) -> tuple[Path, Path | None]:
    day0 = 1796083200  # 2026-12-01T00:00:00Z; the fixture template writes the date (add_date)
    bodies = [{"created": day0 + (i // 4) * 86400 + (i % 4) * 60, "chat_template_kwargs": {"add_date": True},
               "messages": [{"role": "system", "content": "You are a support agent.\n" + DOC},
                            {"role": "user", "content": f"Question {i}?"}]} for i in range(12)]
    return write(tmp_path / "dated.jsonl", [json.dumps(b) for b in bodies]), None


def run(log: Path, template: Path | None, ray: str | None) -> tuple[dict[str, Any], list[dict[str, Any]], float]:
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    d = prompts_check([log], tokenizer=str(TOKENIZER), chat_template=template, gpu_blocks=40, ray=ray,
                      on_request=lambda r, o, miss: rows.append(request_row(r, o, miss)))
    return d, rows, time.monotonic() - t0


@pytest.mark.parametrize("make", [timestamp_with_bad_lines, think, dated])
def test_the_check_on_ray_is_the_check_in_process(tmp_path, address, monkeypatch, make):
    monkeypatch.setattr(distributed, "CHUNK", 3)  # many chunks over both workers, several in flight
    log, template = make(tmp_path)
    here, here_rows, t_here = run(log, template, None)
    there, there_rows, t_there = run(log, template, address)
    print(f"{log.name}: {here['requests']} requests, {t_here:.2f} s in process, {t_there:.2f} s on Ray")
    (note,) = [n for n in there["notes"] if RAY_NOTE in n]
    remote, total = (int(x) for x in note.split(": ")[1].split(" requests")[0].split(" of "))
    # the requests that went to the workers: all but the first few (one rendered here first; on the
    # dated log, the first chat request, whose template date check the workers are given)
    parsed = sum(x.startswith("{") for x in log.read_text().splitlines())  # the bad line is not a request
    assert "2 worker(s)" in note and total == parsed and remote >= total - 2
    there["notes"] = [n for n in there["notes"] if RAY_NOTE not in n]
    assert there == here
    assert there_rows == here_rows and len(here_rows) == here["requests"] > 0
    if make is timestamp_with_bad_lines:  # the skipped lines named in the log's order, as in process
        (skip,) = [n for n in here["notes"] if "bad line" in n]  # (the bad line is read before the refused
        assert "2 bad line(s)" in skip and skip.index(f"{log}:5") < skip.index(f"{log}:15")  # one comes back)
    if make is dated:
        assert any("the server's date" in n for n in here["notes"]) and here["findings"][0]["kind"] == "date"


def test_the_cli_on_ray_prints_the_same_json_and_rows(tmp_path, address):
    log, _ = timestamp_with_bad_lines(tmp_path)
    kvplan = Path(sys.executable).parent / "kvplan"
    per_ray, per_here = tmp_path / "ray.jsonl", tmp_path / "here.jsonl"
    args = ["prompts", "check", str(log), "--tokenizer", str(TOKENIZER), "--json"]
    p = subprocess.run([str(kvplan), *args, "--per-request", str(per_ray), "--ray", address],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    r = runner.invoke(app, [*args, "--per-request", str(per_here)])
    assert r.exit_code == 0, r.output
    there, here = json.loads(p.stdout), json.loads(r.stdout)  # stdout holds the JSON alone
    assert any(RAY_NOTE in n and address in n for n in there["notes"])
    there["notes"] = [n for n in there["notes"] if RAY_NOTE not in n]
    assert there == here
    assert per_ray.read_text() == per_here.read_text() and per_here.read_text().count("\n") == 24


@pytest.mark.parametrize("addr", ["127.0.0.1:9", "no-port-here"])
def test_an_address_nothing_answers_at_exits_2_naming_ray(tmp_path, addr):
    log, _ = timestamp_with_bad_lines(tmp_path)
    t0 = time.monotonic()
    r = runner.invoke(app, ["prompts", "check", str(log), "--tokenizer", str(TOKENIZER), "--ray", addr])
    assert r.exit_code == 2 and f"--ray {addr}" in r.output and "Traceback" not in r.output, r.output
    assert time.monotonic() - t0 < 15
