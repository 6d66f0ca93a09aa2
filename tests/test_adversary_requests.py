"""Adversary round 5 on `kvplan prompts check`: inputs that ended in a traceback, were counted twice
or stopped the whole day's run. Each case fails on the code before its fix. A bad line is now
skipped and named (file:line) within a budget of ``MAX_SKIPPED`` lines; a log with no good line is
an error; configuration errors (a missing tokenizer, a template that is not text) still end the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.collectors.requests.read import MAX_LINE_BYTES, MAX_SKIPPED
from tests.test_prompts_check import TOKENIZER

runner = CliRunner()
GOOD = {"messages": [{"role": "user", "content": "what is in the cache?"}]}


def check(*args: str) -> tuple[int, dict | None, str]:
    r = runner.invoke(app, ["prompts", "check", *args, "--tokenizer", str(TOKENIZER), "--json"])
    assert "Traceback" not in r.output and not (r.exception and not isinstance(r.exception, SystemExit)), r.output
    return r.exit_code, (json.loads(r.stdout) if r.exit_code == 0 else None), r.output


def lines(path: Path, *objs: object, raw_tail: str = "") -> Path:
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs) + raw_tail)
    return path


BAD_LINES = {
    "a 400-digit arrival time": '{"timestamp": ' + "9" * 400 + ', "messages": [{"role": "user", "content": "x"}]}',
    "a hash_ids value over 64 bits": json.dumps({"timestamp": 0, "input_length": 600, "hash_ids": [2**70, 1]}),
    "a lone surrogate": '{"messages": [{"role": "user", "content": "a\\ud800b"}]}',
    "tool-call arguments nested 5,000 deep": json.dumps({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "f", "arguments": "[" * 5000 + "]" * 5000}}]},
        {"role": "user", "content": "x"}]}),
}


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_a_bad_line_is_skipped_and_named_not_a_traceback(tmp_path, case):
    p = lines(tmp_path / "day.jsonl", GOOD, BAD_LINES[case], GOOD)
    code, d, out = check(str(p))
    assert code == 0, out
    assert d is not None and d["requests"] == 2  # the two good lines, the bad one left out
    assert any(f"{p}:2" in n and "1 bad line" in n for n in d["notes"]), d["notes"]


def test_a_line_over_the_memory_bound_is_skipped_and_named_not_read(tmp_path):
    """A line longer than ``MAX_LINE_BYTES`` would take about 180 bytes of memory per byte to
    tokenize (a single 64 MiB line, the old bound, about 11 GB): it is skipped as a bad line
    naming its size and the bound, and the lines after it are still read."""
    long_line = json.dumps({"messages": [{"role": "user", "content": "x " * (MAX_LINE_BYTES // 2 + 10)}]})
    assert len(long_line) > MAX_LINE_BYTES
    p = lines(tmp_path / "day.jsonl", GOOD, long_line, GOOD)
    code, d, out = check(str(p))
    assert code == 0, out
    assert d is not None and d["requests"] == 2
    note = next(n for n in d["notes"] if f"{p}:2" in n)
    assert f"longer than the {MAX_LINE_BYTES // 2**20} MiB" in note and "1 bad line" in note


def test_a_log_of_only_bad_lines_is_an_error_not_zero(tmp_path):
    p = lines(tmp_path / "day.jsonl", BAD_LINES["a lone surrogate"])
    code, _, out = check(str(p))
    assert code == 2 and "no request could be read" in out and "lone surrogate" in out


def test_more_bad_lines_than_the_budget_fail_the_run(tmp_path):
    p = lines(tmp_path / "day.jsonl", GOOD, *(['{"prompt": 5}'] * (MAX_SKIPPED + 1)))
    code, _, out = check(str(p))
    assert code == 2 and f"more than {MAX_SKIPPED} bad lines" in out and f"{p.name}:2" in out


def test_an_unfinished_last_line_is_left_for_the_next_run(tmp_path):
    p = lines(tmp_path / "live.jsonl", GOOD, GOOD, raw_tail='{"messages": [{"role": "us')
    code, d, out = check(str(p))
    assert code == 0, out
    assert d is not None and d["requests"] == 2
    assert any("unfinished last line" in n and f"{p}:3" in n for n in d["notes"]), d["notes"]


@pytest.mark.parametrize("how", ["same path", "symlink"])
def test_the_same_file_twice_is_refused_not_counted_twice(tmp_path, how):
    p = lines(tmp_path / "day.jsonl", GOOD, GOOD)
    other = p
    if how == "symlink":
        other = tmp_path / "again.jsonl"
        other.symlink_to(p)
    code, _, out = check(str(p), str(other))
    assert code == 2 and "given twice" in " ".join(out.split())


def test_a_template_that_is_not_utf8_is_an_error_naming_it(tmp_path):
    t = tmp_path / "t.jinja"
    t.write_bytes(b"\xff\xfe{{ messages }}")
    p = lines(tmp_path / "day.jsonl", GOOD)
    code, _, out = check(str(p), "--chat-template", str(t))
    assert code == 2 and "--chat-template" in out and "not UTF-8" in out


def test_a_block_id_trace_gives_no_lmcache_hit_rate_rather_than_zero(tmp_path):
    """LMCache's 256-token chunks cannot be rebuilt from Mooncake's 512-token block ids: the log
    cannot tell, so the figure is null with a note (it was 0.0), while vLLM's rate is computed."""
    p = lines(tmp_path / "trace.jsonl",
              {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]},
              {"timestamp": 10, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 4]})
    r = runner.invoke(app, ["prompts", "check", str(p), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["lmcache"]["hit_rate_unlimited"] is None
    assert any("LMCache's hit rate: not known from block ids" in n for n in d["notes"])
    # vLLM's own prediction stands: the second request shares blocks 1 and 2 (1,024 of 2,200 tokens)
    assert d["cached_tokens_predicted"] == 1024


def test_max_tokens_is_a_bound_and_a_logged_output_length_wins(tmp_path):
    """With --gpu-blocks, the blocks a request holds while decoding count: max_tokens was taken as
    the output length. A logged ``usage.completion_tokens`` is used instead, and the note says how
    many lengths came from where. Expected: the same log with max_tokens set to the logged length."""
    from tests.test_prompts_check import timestamp_log

    def log(name: str, max_tokens: int, logged: int | None) -> Path:
        bodies = []
        for b in timestamp_log(16):
            b = {**b, "max_tokens": max_tokens}
            bodies.append({**b, "usage": {"completion_tokens": logged}} if logged is not None else b)
        return lines(tmp_path / name, *bodies)

    def run(p: Path) -> dict:
        r = runner.invoke(app, ["prompts", "check", str(p), "--tokenizer", str(TOKENIZER), "--gpu-blocks", "300",
                                "--json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    logged = run(log("logged.jsonl", 4096, 5))
    exact = run(log("exact.jsonl", 5, None))
    bound = run(log("bound.jsonl", 4096, None))
    assert logged["cached_tokens_predicted"] == exact["cached_tokens_predicted"]
    assert bound["cached_tokens_predicted"] < exact["cached_tokens_predicted"]  # 4096 tokens hold the pool
    assert any("16 logged, 0 taken from max_tokens" in n for n in logged["notes"]), logged["notes"]
    assert any("0 logged, 16 taken from max_tokens" in n for n in bound["notes"]), bound["notes"]


@pytest.mark.timeout(120)
def test_a_huge_gpu_block_count_costs_memory_only_for_the_blocks_used(tmp_path):
    """``--gpu-blocks`` allocated ~110 bytes a block up front, once per fix variant (2 M blocks
    with 3 findings: 1.35 GB; 2^40 accepted and never finishing). The pool now holds only the
    blocks the log touched: 2^40 blocks predict what an unlimited cache does, in little memory."""
    import tracemalloc

    from kvplan.models.prompts.predict import BlockPool

    tracemalloc.start()
    pool = BlockPool(2**40)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1_000_000 and pool.free_count() == 2**40 - 1
    from tests.test_prompts_check import timestamp_log

    p = lines(tmp_path / "day.jsonl", *timestamp_log(12))
    r = runner.invoke(app, ["prompts", "check", str(p), "--tokenizer", str(TOKENIZER), "--gpu-blocks", str(2**40),
                            "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["cached_tokens_predicted"] == round(d["hit_rate_unlimited"] * d["prompt_tokens"])


def test_a_piped_log_is_read_as_a_stream_and_twice_through_its_copy(tmp_path):
    """``<(zcat day.jsonl.gz)`` failed on "not seekable": a pipe is copied once, so the fix pass
    can read it again; the answer equals the regular file's."""
    import gzip
    import shutil
    import subprocess
    import sys

    from tests.test_prompts_check import timestamp_log

    p = lines(tmp_path / "day.jsonl", *timestamp_log(10))
    gz = tmp_path / "day.jsonl.gz"
    gz.write_bytes(gzip.compress(p.read_bytes()))
    kvplan = str(Path(sys.executable).parent / "kvplan")
    if not shutil.which("bash") or not Path(kvplan).exists():
        pytest.skip("needs bash and the installed kvplan command")
    piped = subprocess.run(["bash", "-c", f'"{kvplan}" prompts check <(zcat "{gz}") --tokenizer "{TOKENIZER}" --json'],
                           capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0, piped.stderr
    code, d, out = check(str(p))
    got = json.loads(piped.stdout)
    assert got["findings"] and (got["cached_tokens_predicted"], got["hit_rate_if_fixed"]) == \
        (d["cached_tokens_predicted"], d["hit_rate_if_fixed"])


def test_a_fifo_nobody_writes_to_is_an_error_not_a_hang(tmp_path):
    import os
    import time

    from kvplan.collectors.requests.read import spooled
    from kvplan.collectors.scrape.payload import PayloadError

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(PayloadError, match="nothing wrote to this pipe within 0.5 s"), spooled([fifo], wait_s=0.5):
        pass
    assert time.monotonic() - t0 < 30


def test_a_clock_format_outside_the_known_ones_is_rendered_at_each_requests_time(tmp_path):
    """A template writing ``strftime_now("Day %j of %Y")`` (none of the ten formats the check
    looked for) was rendered with the checker's clock: every request the same day, no flush. The
    format the template asks for is now recorded, so each request gets its own day. Expected: the
    template rendered by transformers with each request's day put in by hand."""
    from datetime import UTC, datetime

    from transformers import AutoTokenizer

    from tests.test_prompts_check import DOC, reference_hit_rate

    template = ("{{ bos_token }}<|system|>\nClock: {{ strftime_now('Day %j of %Y') }}\n"
                "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}<|end|>\n{% endfor %}<|assistant|>\n")
    t = tmp_path / "clock.jinja"
    t.write_text(template)
    day0 = 1796083200  # 2026-12-01T00:00:00Z
    bodies = [{"created": day0 + (i // 4) * 86400 + (i % 4) * 60,
               "messages": [{"role": "system", "content": "You are a support agent.\n" + DOC},
                            {"role": "user", "content": f"Question {i}?"}]} for i in range(12)]
    p = lines(tmp_path / "dated.jsonl", *bodies)
    r = runner.invoke(app, ["prompts", "check", str(p), "--tokenizer", str(TOKENIZER), "--chat-template", str(t),
                            "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    served = []
    for b in bodies:
        day = datetime.fromtimestamp(b["created"], tz=UTC).strftime("Day %j of %Y")
        text = tok.apply_chat_template(b["messages"], chat_template=template.replace(
            "{{ strftime_now('Day %j of %Y') }}", day), tokenize=False)
        served.append(text)
    assert d["hit_rate_predicted"] == pytest.approx(reference_hit_rate(bodies, served), abs=1e-12)
    assert any("the server's date" in n for n in d["notes"])


UNRENDERABLE = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [
    {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]},
    {"role": "user", "content": "x"}]}
"""A line that reads as a request but that the template cannot render (its tool-call arguments
are not JSON): found only in the import's second pass, after the trace was created."""


def import_trace(p: Path, db: Path, *more: str):
    return runner.invoke(app, ["import-trace", "--deployment", "d", str(p), "--tokenizer", str(TOKENIZER),
                               "--db", str(db), *more])


def test_a_failed_import_leaves_no_trace_behind(tmp_path):
    """More unrenderable lines than the budget fail the import after the trace was created: an
    empty trace stayed, and `whatif` then answered 0.0 %. The trace an import creates goes when
    the import fails."""
    from kvplan.sql.db import Database

    p = lines(tmp_path / "day.jsonl", GOOD, *([UNRENDERABLE] * (MAX_SKIPPED + 1)))
    db = tmp_path / "k.duckdb"
    r = import_trace(p, db)
    assert r.exit_code == 2 and "not JSON" in r.output and f"more than {MAX_SKIPPED} bad lines" in r.output, r.output
    assert Database(db).fetch("traces", deployment="d") == []
    w = runner.invoke(app, ["whatif", "--deployment", "d", "--db", str(db)])
    assert w.exit_code == 2 and "no trace" in w.output


def stored_requests(db: Path) -> list[int]:
    """The file lines of the requests stored in trace ``requests`` of deployment d."""
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        return [r[0] for r in con.execute("SELECT line FROM trace_requests ORDER BY line").fetchall()]


def test_an_import_skips_bad_lines_by_name_and_reimports_nothing(tmp_path):
    """A bad line (not a request, or one the template cannot render) stopped the whole import:
    it is skipped and named by file:line, the good lines stored, and a second import adds nothing."""
    p = lines(tmp_path / "day.jsonl", GOOD, '{"prompt": 5}', UNRENDERABLE, GOOD)
    db = tmp_path / "k.duckdb"
    r = import_trace(p, db)
    assert r.exit_code == 0, r.output
    text = "".join(r.output.split())  # whatever the console's width
    assert "2badline(s)skipped" in text and f"{p.name}:2" in text and f"{p.name}:3" in text, r.output
    assert stored_requests(db) == [1, 4]
    again = import_trace(p, db)
    assert again.exit_code == 0 and "unchanged,0request(s)" in "".join(again.output.split()), again.output
    assert stored_requests(db) == [1, 4]


def test_a_live_logs_unfinished_last_line_waits_for_the_next_import(tmp_path):
    """A log still being written ends in a line without its newline: it failed the whole import.
    It is left for the next import, which stores it once it is whole, and never twice."""
    whole = json.dumps(GOOD) + "\n"
    p = tmp_path / "live.jsonl"
    p.write_text(whole * 2 + whole[:20])
    db = tmp_path / "k.duckdb"
    r = import_trace(p, db)
    assert r.exit_code == 0 and "leftforthenextimport" in "".join(r.output.split()), r.output
    assert stored_requests(db) == [1, 2]
    assert import_trace(p, db).exit_code == 0 and stored_requests(db) == [1, 2]  # still unfinished
    with p.open("a") as fh:
        fh.write(whole[20:])
    r = import_trace(p, db)
    assert r.exit_code == 0 and "extended,1request(s)" in "".join(r.output.split()), r.output
    assert stored_requests(db) == [1, 2, 3]


MOONCAKE = {"timestamp": 1, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]}


@pytest.mark.parametrize("order", ["text first", "trace first"])
def test_block_id_lines_and_text_requests_in_one_check_are_refused(tmp_path, order):
    """A text request's keys are blocks of --block-size tokens, a Mooncake line's are its
    512-token blocks. Mixed, the check keyed both and replayed at 16: two identical Mooncake
    requests then "hit" 32 tokens where vLLM at 512-token blocks hits 512. One format per check."""
    rows = (GOOD, MOONCAKE, MOONCAKE) if order == "text first" else (MOONCAKE, MOONCAKE, GOOD)
    p = lines(tmp_path / "mix.jsonl", *rows)
    code, _, out = check(str(p))
    text = "".join(out.split())  # whatever the console's width
    assert code == 2 and "oneformatpercheck" in text, out
    assert f"{p.name}:{2 if order == 'text first' else 3}" in text
    q = lines(tmp_path / "trace.jsonl", MOONCAKE, MOONCAKE)  # the trace alone is read at its own blocks
    code, d, out = check(str(q))
    assert code == 0 and d is not None and d["block_size"] == 512, out
    assert d["cached_tokens_predicted"] == 512  # the second request: its first block (1,023 hittable tokens)
