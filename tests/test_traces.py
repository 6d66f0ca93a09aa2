"""Trace import: both formats, validation naming file and line, re-import, growing logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.collectors.scrape.payload import PayloadError
from kvplan.collectors.scrape.store import ConflictError
from kvplan.collectors.traces import ingest as traces
from kvplan.models.cache import sim

# shared/ sits next to the repository (worktrees and CI's clone alike)
MOONCAKE = Path(__file__).parent / "fixtures" / "mooncake" / "conversation_trace_head400.jsonl"
"""The first 400 requests of the Mooncake FAST'25 conversation trace (Apache-2.0; its README says
how the expected figures below were counted)."""
FIX = Path(__file__).resolve().parent / "fixtures" / "traces"


def lm_line(ts, rid, hashes, seq_len=None, chunk_size=4, model_name="tiny-llama",
            shapes=([2, 2, 4, 8],), dtypes=("float16",)):
    return json.dumps({"timestamp": ts, "request_id": rid, "model_name": model_name,
                       "chunk_size": chunk_size,
                       "seq_len": seq_len if seq_len is not None else len(hashes) * chunk_size + 1,
                       "dtypes": list(dtypes), "shapes": [list(s) for s in shapes],
                       "chunk_hashes": hashes})


def write(path: Path, lines: list[str], newline_at_end: bool = True) -> Path:
    path.write_text("\n".join(lines) + ("\n" if newline_at_end else ""))
    return path


def test_lmcache_logs_import_and_replay(db, tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    write(d / "lookup_hashes_20261201_000000_000000.jsonl",
          [lm_line(1.0, "a", ["0xaa", "0xbb"]), lm_line(3.0, "c", ["0xaa", "0xcc"])])
    write(d / "lookup_hashes_20261201_000001_000001.jsonl", [lm_line(2.0, "b", ["0xaa", "0xbb"])])
    r = traces.import_trace(db, "dep", [d])
    assert (r.trace, r.format, r.requests) == ("lmcache", "lmcache", 3)
    assert r.bytes_per_chunk == 2 * 2 * 4 * 8 * 2  # elements x 2 bytes (float16)
    trace, info = traces.load_trace(db, "dep")
    assert info.bytes_source == "shapes/dtypes"
    # replay order is by timestamp across files: a(1.0), b(2.0), c(3.0)
    assert trace.offsets.tolist() == [0, 2, 4, 6]
    keys = trace.chunk_ids.tolist()
    assert keys[0:2] == keys[2:4] and keys[4] == keys[0] and keys[5] not in keys[:4]
    assert trace.seq_len.tolist() == [9, 9, 9] and trace.chunk_size.tolist() == [4, 4, 4]
    curve = sim.lru_curve(trace)
    assert curve.infinite_hit_tokens == 8 + 4  # b hits both chunks, c hits 0xaa


def test_reimport_is_a_noop_and_a_growing_log_is_taken_from_where_it_stopped(db, tmp_path):
    f = write(tmp_path / "lookup_hashes_1.jsonl", [lm_line(1.0, "a", ["0x1"])])
    assert traces.import_trace(db, "dep", [f]).requests == 1
    again = traces.import_trace(db, "dep", [f])
    assert again.requests == 0 and again.files[0].status == "unchanged"
    # LMCache appends; a half-written last line is left for the next import
    with open(f, "a") as fh:
        fh.write(lm_line(2.0, "b", ["0x1", "0x2"]) + "\n" + '{"timestamp": 3.0, "req')
    grown = traces.import_trace(db, "dep", [f])
    assert grown.requests == 1 and grown.files[0].status == "extended"
    assert grown.files[0].partial_tail
    with open(f, "a") as fh:
        fh.write('uest_id": "c", "chunk_size": 4, "seq_len": 4, "chunk_hashes": ["0x1"]}\n')
    assert traces.import_trace(db, "dep", [f]).requests == 1
    trace, _ = traces.load_trace(db, "dep")
    assert trace.requests == 3
    assert db.fetch("traces", deployment="dep")[0]["requests"] == 3


def test_a_changed_file_is_refused(db, tmp_path):
    f = write(tmp_path / "lookup_hashes_1.jsonl", [lm_line(1.0, "a", ["0x1"])])
    traces.import_trace(db, "dep", [f])
    write(f, [lm_line(1.0, "a", ["0x9"])])
    with pytest.raises(ConflictError, match="changed since it was imported"):
        traces.import_trace(db, "dep", [f])


@pytest.mark.parametrize("bad, message", [
    ("{not json", "not JSON"),
    (json.dumps({"timestamp": 1.0, "chunk_size": 4, "seq_len": 8}), "missing field 'chunk_hashes'"),
    (json.dumps({"timestamp": 1.0, "chunk_size": 4, "seq_len": 4, "chunk_hashes": ["0x1", "0x2"]}),
     "exceed seq_len"),
    (json.dumps({"timestamp": 1.0, "chunk_size": 0, "seq_len": 4, "chunk_hashes": []}),
     "'chunk_size' = 0"),
    (json.dumps({"timestamp": "x", "chunk_size": 4, "seq_len": 4, "chunk_hashes": []}),
     "'timestamp' must be a finite number"),
    (lm_line(1.0, "z", ["0x1"], shapes=([2, 2, 4, 9],)), "bytes per chunk"),
])
def test_errors_name_the_file_and_line_and_nothing_is_written(db, tmp_path, bad, message):
    f = write(tmp_path / "lookup_hashes_1.jsonl",
              [lm_line(1.0, "a", ["0x1"]), "", bad, lm_line(5.0, "e", ["0x1"])])
    with pytest.raises(PayloadError, match=message) as e:
        traces.import_trace(db, "dep", [f])
    assert str(e.value).startswith(f"{f}:3: ")
    assert db.fetch("traces", deployment="dep") == []


def test_mooncake_format_keeps_full_blocks(db, tmp_path):
    f = write(tmp_path / "conv.jsonl", [
        json.dumps({"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [7, 8, 9]}),
        json.dumps({"timestamp": 1500, "input_length": 1024, "output_length": 5, "hash_ids": [7, 8]}),
    ], newline_at_end=False)  # a final line without newline is taken when it is whole JSON
    r = traces.import_trace(db, "dep", [f], bytes_per_chunk=1 << 20)
    assert (r.trace, r.format, r.requests, r.bytes_per_chunk) == ("conv", "mooncake", 2, 1 << 20)
    trace, info = traces.load_trace(db, "dep", "conv")
    assert trace.chunk_ids.tolist() == [7, 8, 7, 8]  # block 9 is partial (76 tokens)
    assert info.bytes_source == "option"
    assert sim.lru_curve(trace).infinite_hit_tokens == 1024
    bad = write(tmp_path / "bad.jsonl", [json.dumps(
        {"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [1, 2]})])
    with pytest.raises(PayloadError, match=r"bad.jsonl:1: 2 hash_ids for input_length 100"):
        traces.import_trace(db, "dep", [bad])


def test_formats_are_not_mixed_and_unknown_lines_are_named(db, tmp_path):
    lm = write(tmp_path / "lookup_hashes_1.jsonl", [lm_line(1.0, "a", ["0x1"])])
    mc = write(tmp_path / "m.jsonl", [json.dumps(
        {"timestamp": 0, "input_length": 512, "hash_ids": [1]})])
    with pytest.raises(PayloadError, match="both formats"):
        traces.import_trace(db, "dep", [lm, mc])
    other = write(tmp_path / "x.jsonl", [json.dumps({"hello": 1})])
    with pytest.raises(PayloadError, match=r"x.jsonl:1: neither"):
        traces.import_trace(db, "dep", [other])
    with pytest.raises(PayloadError, match="no such file"):
        traces.import_trace(db, "dep", [tmp_path / "missing.jsonl"])


def test_unknown_trace_names_the_choice(db):
    with pytest.raises(traces.TraceError, match="no trace"):
        traces.load_trace(db, "dep")


def test_nightly_hook_ingests_only_what_is_new(db, tmp_path):
    d = tmp_path / "lookup-hash-logs"
    assert traces.ingest_trace_dir(db, "dep", d) is None  # not there yet: nothing to do
    d.mkdir()
    write(d / "lookup_hashes_a.jsonl", [lm_line(1.0, "a", ["0x1"])])
    assert traces.ingest_trace_dir(db, "dep", d).requests == 1
    write(d / "lookup_hashes_b.jsonl", [lm_line(2.0, "b", ["0x1"])])
    r = traces.ingest_trace_dir(db, "dep", d)
    assert [f.status for f in r.files] == ["unchanged", "imported"] and r.requests == 1


def test_the_mooncake_conversation_trace_imports(db):
    r = traces.import_trace(db, "mooncake", [MOONCAKE])
    assert (r.format, r.requests) == ("mooncake", 400)
    trace, _ = traces.load_trace(db, "mooncake", r.trace)
    curve = sim.lru_curve(trace)
    assert curve.total_tokens == 5_710_530
    assert curve.infinite_hit_tokens == 780_800


def test_the_nightly_job_imports_a_deployments_lookup_hash_logs(db, tmp_path):
    """kvplan.collectors.schedule.scheduler.Nightly imports lookup_hash_log_dir of every deployment that sets it."""
    import shutil
    from datetime import date

    from kvplan.collectors.schedule.scheduler import Nightly
    from kvplan.models.inputs.settings import DeploymentConfig, Settings

    logs = tmp_path / "logs"
    shutil.copytree(FIX / "lmcache-stack", logs)
    s = Settings(db=db.path, deployments=[DeploymentConfig(name="d", lookup_hash_log_dir=logs),
                                          DeploymentConfig(name="no-logs")])
    n = sum(1 for f in logs.glob("lookup_hashes_*.jsonl") for line in f.read_text().splitlines() if line.strip())
    first = Nightly(s, db).run_day(date(2026, 12, 1))
    assert first.errors == 0 and first.rows >= n
    again = Nightly(s, db).run_day(date(2026, 12, 1))
    assert again.rows == first.rows - n  # the same logs again: nothing new from them
    assert db.fetch("trace_span", trace_id=1)[0]["t0"] is not None


# ---- bounded values, no traceback, line numbers, streaming ---------------------------------
def lm_obj(**change):
    return {**{"timestamp": 1767614400.0, "request_id": "r", "chunk_size": 256, "seq_len": 512,
               "chunk_hashes": ["0xa"]}, **change}


@pytest.mark.parametrize("line, message", [
    # seq_len 2**31 was stored as -2**31 (INTEGER) and 2**32 + 1024 as 1024: bounded at parse now
    (json.dumps(lm_obj(seq_len=2**31)), "'seq_len' = 2147483648 is out of range (0 .. 100,000,000)"),
    (json.dumps(lm_obj(seq_len=2**32 + 1024)), "'seq_len' = 4294968320 is out of range"),
    (json.dumps(lm_obj(chunk_size=2**31)), "'chunk_size' = 2147483648 is out of range"),
    # these raised a traceback (ValueError, RecursionError, DuckDB's BIGINT overflow, year 57983)
    (json.dumps(lm_obj()).replace('"r"', "9" * 5000), "not a usable JSON line"),
    ('{"timestamp": 1.0, "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    (json.dumps(lm_obj(shapes=[[2**40, 2**40]], dtypes=["bfloat16"])), "beyond 1,099,511,627,776 (1 TiB)"),
    (json.dumps(lm_obj(timestamp=1767614400000.0)), "is not unix seconds between 1970 and 2100 (milliseconds?)"),
    # the last one of two keys won silently
    ('{"timestamp": 1767614400.0, "chunk_size": 256, "seq_len": 512, "seq_len": 100, "chunk_hashes": []}',
     "the key 'seq_len' is given twice"),
])
def test_lmcache_lines_beyond_bounds_are_refused_naming_file_and_line(db, tmp_path, line, message):
    f = write(tmp_path / "lookup_hashes_1.jsonl", [json.dumps(lm_obj()), line])
    with pytest.raises(PayloadError) as e:
        traces.import_trace(db, "dep", [f])
    assert str(e.value).startswith(f"{f}:2: ") and message in str(e.value), str(e.value)
    assert db.fetch("traces", deployment="dep") == []


@pytest.mark.parametrize("change, message", [
    # input_length 2,147,484,160 gave an infinite hit rate of -0.5
    ({"input_length": 2_147_484_160, "hash_ids": []}, "'input_length' = 2147484160 is out of range"),
    ({"output_length": 2**31}, "'output_length' = 2147483648 is out of range"),
    ({"timestamp": 1e20}, "is not milliseconds between 1970 and 2100"),
])
def test_mooncake_lines_beyond_bounds_are_refused(db, tmp_path, change, message):
    ok = {"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1]}
    f = write(tmp_path / "m.jsonl", [json.dumps(ok), json.dumps({**ok, **change})])
    with pytest.raises(PayloadError) as e:
        traces.import_trace(db, "dep", [f])
    assert str(e.value).startswith(f"{f}:2: ") and message in str(e.value), str(e.value)


def test_import_trace_exits_2_on_every_such_line(tmp_path):
    from typer.testing import CliRunner

    from kvplan.app.cli import app

    for i, line in enumerate(['{"timestamp": 1.0, "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
                              json.dumps(lm_obj()).replace('"r"', "9" * 5000),
                              json.dumps({"timestamp": 0, "input_length": 512, "output_length": 2**31,
                                          "hash_ids": [1]})]):
        f = write(tmp_path / f"lookup_hashes_{i}.jsonl", [line])
        r = CliRunner().invoke(app, ["import-trace", "--db", str(tmp_path / "k.duckdb"), "--deployment", "d",
                                     str(f), "--format", "mooncake" if "hash_ids" in line else "lmcache"])
        assert r.exit_code == 2, r.output
        assert f"{f}:1: " in r.output and "Traceback" not in r.output


def test_counts_that_pass_2_to_the_31_are_summed_exactly(db, tmp_path):
    # 30 prompts of 100M tokens (the bound) are 3e9 tokens: INTEGER sums wrapped; BIGINT now
    from kvplan.app.views.whatif import WhatIfQuery, whatif

    lines = [json.dumps(lm_obj(timestamp=1767614400.0 + i, seq_len=100_000_000, chunk_hashes=["0xa", "0xb"]))
             for i in range(30)]
    traces.import_trace(db, "dep", [write(tmp_path / "lookup_hashes_1.jsonl", lines)])
    d = whatif(db, "dep", WhatIfQuery(seconds_per_cached_token=1e-6, tokens_per_month=1e9))
    assert d.trace.total_tokens == 3_000_000_000
    # 29 repeats x 512 hit tokens of 3e9
    assert d.infinite_hit_rate == pytest.approx(29 * 512 / 3e9)


def test_a_resumed_import_names_the_right_line(db, tmp_path):
    # the first import takes a complete last line without its newline; LMCache then writes the newline and
    # the next line: line 4 of the file was reported as line 5
    f = write(tmp_path / "lookup_hashes_1.jsonl", [json.dumps(lm_obj(timestamp=1767614400.0 + i))
                                                    for i in range(3)], newline_at_end=False)
    assert traces.import_trace(db, "dep", [f]).requests == 3
    with open(f, "a") as fh:
        fh.write("\n" + json.dumps(lm_obj(seq_len="bad")) + "\n")
    with pytest.raises(PayloadError) as e:
        traces.import_trace(db, "dep", [f])
    assert str(e.value).startswith(f"{f}:4: ")


def test_a_resumed_import_stores_the_next_line_under_its_number(db, tmp_path):
    f = write(tmp_path / "lookup_hashes_1.jsonl", [json.dumps(lm_obj(timestamp=1767614400.0 + i))
                                                    for i in range(3)], newline_at_end=False)
    traces.import_trace(db, "dep", [f])
    with open(f, "a") as fh:
        fh.write("\n" + json.dumps(lm_obj(timestamp=1767614403.0)) + "\n")
    assert traces.import_trace(db, "dep", [f]).requests == 1
    with db.read() as con:
        assert [r[0] for r in con.execute("SELECT line FROM trace_requests ORDER BY line").fetchall()] == [1, 2, 3, 4]


def test_two_first_imports_at_once_never_raise_a_database_error(tmp_path):
    # two `kvplan import-trace` of one new trace at the same time: the second died with DuckDB's
    # ConstraintException (duplicate trace name). Now one of them is told to run again (exit 2) or both pass
    import subprocess
    import sys

    from kvplan.sql.db import Database

    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    files = []
    for name in ("a", "b"):
        files.append(write(tmp_path / f"lookup_hashes_{name}.jsonl", [json.dumps(lm_obj(
            timestamp=1767614400.0 + i, chunk_hashes=[f"0x{name}{i:x}"])) for i in range(20_000)]))
    cmd = [sys.executable, "-m", "kvplan.app.cli", "import-trace", "--db", str(db.path), "--deployment", "d",
           "--trace", "x"]
    procs = [subprocess.Popen(cmd + [str(f)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for f in files]
    outs = [(p.wait(timeout=300), p.stdout.read()) for p in procs]
    for rc, text in outs:
        assert "Traceback" not in text and "ConstraintException" not in text, text
        assert rc == 0 or (rc == 2 and "another process meanwhile: run again" in text), text
    imported = sum(20_000 for rc, _ in outs if rc == 0)
    assert db.fetch("traces", deployment="d")[0]["requests"] == imported
