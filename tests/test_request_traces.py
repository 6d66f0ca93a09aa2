"""Request logs as a trace (issue 26, item 8): `kvplan import-trace` renders, tokenizes and hashes
request logs and stores hashes, lengths, times and the instance (never text); the what-if reads
them as it reads LMCache's logs. Checked against vLLM's own counts recorded for the same logs
(deploy/demo/prompts/recording.json), and with a canary: no prompt text reaches DuckDB, the
CLI's output, the logs or the report (the prompts check's short redacted example aside).
"""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.report.whatif import whatif_section
from kvplan.app.views.whatif import WhatIfQuery, whatif
from kvplan.collectors.demo import demo_prompts, load_demo_prompts
from kvplan.collectors.traces import ingest as traces
from kvplan.collectors.traces.request_logs import model_bytes_per_chunk
from kvplan.sql.db import Database
from tests import prompts_compare as pc

runner = CliRunner()
RECORDING = pc.STACK / "recording.json"
RUNS = {r["name"]: r for r in json.loads(RECORDING.read_text())["runs"]} if RECORDING.exists() else {}
CANARY = "QZXCANARY"


def _import(db: Database, files: list[Path], **kw) -> traces.ImportResult:
    return traces.import_trace(db, "vllm-only", files, tokenizer=str(pc.TOKENIZER), chat_template=pc.TEMPLATE, **kw)


def test_kv_bytes_per_chunk_from_the_model_config():
    # the tiny Llama: 4 layers, 2 KV heads of 64, bf16; K and V; 256 tokens (what LMCache's own
    # log says for it: shapes [[4, 256, 256]] bfloat16 = 524,288 bytes, tests/fixtures/traces)
    assert model_bytes_per_chunk(pc.TOKENIZER, 256) == 4 * 256 * 256 * 2
    assert model_bytes_per_chunk(pc.TOKENIZER.parent, 256) is None  # no config.json there


def _lines(name: str) -> int:
    """Requests in one of the recorded logs (one a line), counted independently of the reader."""
    import gzip

    raw = (pc.LOGS / name).read_bytes()
    return len((gzip.decompress(raw) if name.endswith(".gz") else raw).splitlines())


@pytest.mark.skipif(not RECORDING.exists(), reason="deploy/demo/prompts/recording.json not recorded yet")
def test_block_sized_chunks_give_the_hits_vllm_measured(db):
    """At vLLM's block size, a trace's unlimited hits are the full blocks seen before: what vLLM
    served from cache for the same requests (recorded), but for the last-token rule, which costs a
    block only when a whole prompt of a multiple of 128 tokens was seen."""
    run = RUNS["chats"]
    r = _import(db, [pc.LOGS / run["file"]], chunk_size=128)
    assert (r.format, r.trace, r.requests) == ("requests", "requests", run["requests"])
    assert r.bytes_per_chunk == 4 * 128 * 256 * 2
    d = whatif(db, "vllm-only", WhatIfQuery(ranks=2, latency=False))
    assert d.trace.requests == run["requests"]
    assert d.trace.total_tokens == run["prompt_tokens"]
    whole = sum(1 for q in run["per_request"] if q["prompt_tokens"] % 128 == 0)
    hit_tokens = round(d.infinite_hit_rate * d.trace.total_tokens)
    assert run["cached_tokens"] <= hit_tokens <= run["cached_tokens"] + 128 * whole
    assert d.points and d.shared_vs_private.private


def test_timed_logs_keep_their_arrival_times_and_reimport_is_a_noop(db):
    files = [pc.LOGS / "agent-tools.jsonl", pc.LOGS / "ts-top.jsonl"]
    first = _import(db, files)
    assert first.requests == _lines("agent-tools.jsonl") + _lines("ts-top.jsonl") == 55
    assert {f.instance for f in first.files} == {"logs"}
    with db.read() as con:
        ts = [row[0] for row in con.execute(
            "SELECT ts FROM trace_requests WHERE file = 'ts-top.jsonl' ORDER BY line").fetchall()]
    stamps = [json.loads(line)["arrival_time"] for line in (pc.LOGS / "ts-top.jsonl").read_text().splitlines()]
    assert ts == pytest.approx([datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() for s in stamps])
    again = _import(db, files)
    assert again.requests == 0 and {f.status for f in again.files} == {"unchanged"}
    with pytest.raises(Exception, match="chunks of 256 tokens, not 128"):
        _import(db, files, chunk_size=128)


def test_a_log_without_times_is_in_file_order(db):
    _import(db, [pc.LOGS / "rag.completions.jsonl.gz"])
    with db.read() as con:
        ts = [row[0] for row in con.execute("SELECT ts FROM trace_requests ORDER BY line").fetchall()]
    assert ts == [float(i) for i in range(_lines("rag.completions.jsonl.gz"))]


def test_a_grown_log_is_imported_from_where_it_stopped(db, tmp_path):
    lines = (pc.LOGS / "ts-top.jsonl").read_text().splitlines(keepends=True)
    f = tmp_path / "inst-a" / "log.jsonl"
    f.parent.mkdir()
    f.write_text("".join(lines[:10]))
    assert _import(db, [f]).requests == 10
    f.write_text("".join(lines))
    r = _import(db, [f])
    assert (r.requests, r.files[0].status, r.files[0].instance) == (len(lines) - 10, "extended", "inst-a")
    f.write_text("".join(lines[1:]))
    with pytest.raises(Exception, match="changed since it was imported"):
        _import(db, [f])


def test_a_bad_line_is_named_and_skipped_and_the_good_ones_stored(db, tmp_path):
    """A bad line is skipped, named by file and line, within the budget of bad lines
    (``requests.read.MAX_SKIPPED``; past it the import fails and stores nothing:
    tests/test_adversary_requests.py); it no longer stops the day's import."""
    f = tmp_path / "bad.jsonl"
    good = (pc.LOGS / "ts-top.jsonl").read_text().splitlines()[0]
    f.write_text(good + "\n" + '{"messages": "not a list"}\n')
    res = _import(db, [f], fmt="requests")
    assert res.requests == 1
    (note,) = res.files[0].notes
    assert "bad.jsonl:2" in note and "messages must be a non-empty list" in note
    with db.read() as con:
        assert con.execute("SELECT count(*) FROM trace_requests").fetchone()[0] == 1
    r = runner.invoke(app, ["import-trace", "--deployment", "d", "--db", str(tmp_path / "k.duckdb"),
                            "--tokenizer", str(pc.TOKENIZER), "--chat-template", str(pc.TEMPLATE), str(f)])
    text = "".join(r.output.split())  # whatever the console's width
    assert r.exit_code == 0 and "1badline(s)skipped" in text and "bad.jsonl:2" in text, r.output
    assert "1request(s)" in text


def _canary_log(tmp_path: Path) -> Path:
    """Chat, Batch and completions lines whose every text holds the canary; a timestamp line at
    the top of the system prompt makes the prompts check find a buster (its example is allowed)."""
    tool = {"type": "function", "function": {"name": "lookup", "description": f"{CANARY} tool text",
                                              "parameters": {"type": "object", "properties": {
                                                  "q": {"type": "string", "description": CANARY}}}}}
    body_text = " ".join(f"{CANARY} secret customer record {i}." for i in range(60))
    rows = []
    for i in range(6):
        stamp = f"2026-12-01T10:00:{i:02d}.{i * 7:03d}Z"
        msgs = [{"role": "system", "content": f"Now: {stamp}\n{CANARY} system prompt. {body_text}"},
                {"role": "user", "content": f"{CANARY} question {i}"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function", "function": {
                    "name": "lookup", "arguments": json.dumps({"q": CANARY})}}]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": f"{CANARY} tool result"}]
        body = {"model": "tiny-llama", "messages": msgs, "tools": [tool], "max_tokens": 4,
                "chat_template_kwargs": {"date_string": "01 Dec 2026"}}
        rows.append({"arrival_time": stamp, **body} if i % 2 else
                    {"arrival_time": stamp, "custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                     "body": body})
    rows.append({"arrival_time": "2026-12-01T10:01:00Z", "model": "tiny-llama", "prompt": f"{CANARY} {body_text}"})
    f = tmp_path / "canary.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def _no_canary(text: str, where: str) -> None:
    assert CANARY not in text and CANARY.lower() not in text.lower(), f"prompt text in {where}"


def test_no_prompt_text_reaches_duckdb_logs_or_reports(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    log = _canary_log(tmp_path)
    dbf = tmp_path / "k.duckdb"
    common = ["--db", str(dbf)]
    r = runner.invoke(app, ["import-trace", "--deployment", "d", *common, "--tokenizer", str(pc.TOKENIZER),
                            "--chat-template", str(pc.TEMPLATE), "--chunk-size", "128", str(log)])
    assert r.exit_code == 0, r.output
    assert "7 new request(s)" in r.output
    _no_canary(r.output, "import-trace's output")
    w = runner.invoke(app, ["whatif", "--deployment", "d", *common, "--json"])
    assert w.exit_code == 0, w.output
    assert json.loads(w.stdout)["trace"]["requests"] == 7
    _no_canary(w.output, "whatif --json")
    db = Database(dbf)
    _no_canary(whatif_section(db, "d", WhatIfQuery(latency=False)), "the report's what-if section")
    # every value of every table, as text
    with db.read() as con:
        tables = [t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
        assert "trace_requests" in tables
        for t in tables:
            for row in con.execute(f'SELECT * FROM "{t}"').fetchall():
                _no_canary(repr(row), f"DuckDB table {t}")
    for f in tmp_path.iterdir():  # the database file and its write-ahead log, byte for byte
        if f.name.startswith("k.duckdb"):
            assert CANARY.encode() not in f.read_bytes(), f.name
    # the prompts check shows a short redacted example of each finding, nothing else of the text
    per = tmp_path / "per.jsonl"
    c = runner.invoke(app, ["prompts", "check", str(log), "--tokenizer", str(pc.TOKENIZER), "--chat-template",
                            str(pc.TEMPLATE), "--block-size", "128", "--json", "--per-request", str(per)])
    assert c.exit_code == 0, c.output
    d = json.loads(c.stdout)
    assert d["findings"], "the timestamp at the top is a buster"
    for f in d["findings"]:
        assert len(f["example"]) <= 120
        f["example"] = ""
    _no_canary(json.dumps(d), "prompts check --json")
    _no_canary(per.read_text(), "prompts check --per-request")
    _no_canary(re.sub(r"\{.*\}", "", c.stderr, flags=re.S), "prompts check's progress")
    _no_canary("\n".join(rec.getMessage() for rec in caplog.records), "the logs")


@pytest.mark.skipif(not RECORDING.exists(), reason="deploy/demo/prompts/recording.json not recorded yet")
def test_the_demo_labels_its_request_logs():
    d = demo_prompts()
    assert "CPU stack" in d["label"] and "not GPU results" in d["label"]
    assert {r["name"] for r in d["runs"]} >= {"ts-top", "ts-end"}
    assert all(r["file"].exists() for r in d["runs"])


def test_the_demo_loads_its_request_logs_as_a_vllm_only_trace(db):
    n = load_demo_prompts(db)
    assert n == _lines("agent-tools.jsonl") + _lines("chats.batch.jsonl") + _lines("ts-top.jsonl") == 85
    d = {"deployment": "demo-requests"}
    assert load_demo_prompts(db) == 0
    w = whatif(db, d["deployment"], WhatIfQuery(ranks=2, latency=False))
    assert w.trace.format == "requests" and w.trace.bytes_per_chunk == 4 * 256 * 256 * 2
    assert list(w.trace.instances) == ["vllm-0"]
