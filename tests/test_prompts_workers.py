"""`kvplan prompts check --workers 2` (collectors/requests/workers.py) gives what `--workers 1`
gives, byte for byte: the --json object and the --per-request lines, on a timestamp log with bad
lines and refused requests among dated ones, and on a thinking agent's log with its template;
a bad line and a refused request are still named by file and line."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.deploy.local.recorders.thinking_logs import THINK_TEMPLATE, agent_log
from tests.test_prompts_check import DOC, TOKENIZER, timestamp_log

runner = CliRunner()
DAY0 = 1796083200  # 2026-12-01T00:00:00Z
BAD_TOOL_CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}


def mixed_log(path: Path) -> tuple[Path, list[int], list[int]]:
    """A timestamp log, a dated one (the template writes the day) in between, 3 lines that are
    not requests and 2 requests vLLM refuses (a tool call's arguments not JSON): the file, the
    bad lines' and the refused requests' line numbers (1-based)."""
    lines: list[str] = []
    bad: list[int] = []
    refused: list[int] = []
    for i, b in enumerate(timestamp_log(40)):
        if i in (3, 17, 31):
            lines.append('{"messages": 5}')
            bad.append(len(lines))
        if i in (9, 25):
            lines.append(json.dumps({"messages": [{"role": "user", "content": "hi"}, BAD_TOOL_CALL,
                                                  {"role": "user", "content": "again"}]}))
            refused.append(len(lines))
        if i % 5 == 0:
            lines.append(json.dumps({"created": DAY0 + i * 3600, "chat_template_kwargs": {"add_date": True},
                                     "messages": [{"role": "system", "content": "You are a support agent.\n" + DOC},
                                                  {"role": "user", "content": f"Question {i}?"}]}))
        lines.append(json.dumps(b))
    path.write_text("".join(x + "\n" for x in lines))
    return path, bad, refused


def run(tmp_path: Path, log: Path, workers: int, *extra: str) -> tuple[dict, list[dict]]:
    out = tmp_path / f"{log.stem}-{workers}.jsonl"
    r = runner.invoke(app, ["prompts", "check", str(log), "--tokenizer", str(TOKENIZER), "--json",
                            "--per-request", str(out), "--workers", str(workers), *extra])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    return json.loads(r.stdout), [json.loads(x) for x in out.read_text().splitlines()]


def test_two_workers_give_what_one_gives_with_bad_lines_named(tmp_path):
    log, bad, refused = mixed_log(tmp_path / "mixed.jsonl")
    one, rows1 = run(tmp_path, log, 1)
    two, rows2 = run(tmp_path, log, 2)
    assert two == one
    assert rows2 == rows1
    # every line but the 3 bad ones and the 2 refused is a request, each predicted once, in file order
    n = len(log.read_text().splitlines())
    assert [r["line"] for r in rows2] == [i for i in range(1, n + 1) if i not in bad + refused]
    assert one["requests"] == n - 5 and one["findings"], one
    (note,) = [x for x in two["notes"] if "bad line(s) skipped" in x]
    assert note.startswith("5 bad line(s) skipped")
    # named by file and line, in file order (a refusal found in a worker keeps its place)
    places = [f"{log}:{i}" for i in sorted(bad + refused)]
    at = [note.index(p + ":") for p in places]
    assert at == sorted(at), note
    assert any("the server's date" in x for x in two["notes"])


def test_two_workers_give_what_one_gives_on_the_thinking_agent(tmp_path):
    log = tmp_path / "think.jsonl"
    log.write_text("".join(json.dumps(b) + "\n" for b in agent_log()))
    template = tmp_path / "think.jinja"
    template.write_text(THINK_TEMPLATE)
    one, rows1 = run(tmp_path, log, 1, "--chat-template", str(template))
    two, rows2 = run(tmp_path, log, 2, "--chat-template", str(template))
    assert two == one and rows2 == rows1
    assert any(f["kind"] == "template_history" for f in two["findings"])


def test_a_bad_line_alone_is_still_an_error_naming_it(tmp_path):
    p = tmp_path / "only_bad.jsonl"
    p.write_text('{"prompt": 5}\n')
    r = runner.invoke(app, ["prompts", "check", str(p), "--tokenizer", str(TOKENIZER), "--workers", "2"])
    assert r.exit_code == 2 and f"{p}:1" in r.output and "no request could be read" in r.output
