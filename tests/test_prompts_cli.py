"""`kvplan prompts check` end to end: the --json keys, errors naming file and line (exit 2, no
traceback), the deployment's block size and capacity from vllm:cache_config_info, the report
section, and no prompt text anywhere (DuckDB file, outputs, per-request file, report)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kvplan.app.cli import app
from tests.test_prompts_check import TOKENIZER, timestamp_log

runner = CliRunner()
PAYLOADS = Path(__file__).resolve().parent / "fixtures" / "payloads" / "engines" / "vllm-0.31.0"
CANARY = "CANARY-q7Zx91"
KEYS = {"requests", "prompt_tokens", "cached_tokens_predicted", "hit_rate_predicted", "hit_rate_unlimited",
        "hit_rate_if_fixed", "findings", "missed_by_cause"}
FINDING_KEYS = {"kind", "message_index", "role", "line", "example", "requests_affected", "tokens_lost",
                "hit_rate_if_fixed"}


def log(path: Path, bodies: list[dict]) -> Path:
    path.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    return path


def canary_log(tmp_path: Path) -> Path:
    bodies = timestamp_log(10)
    for b in bodies:
        b["messages"][0]["content"] += f"\nSecret word: {CANARY}"
        b["messages"][1]["content"] += f" ({CANARY})"
    return log(tmp_path / "canary.jsonl", bodies)


def test_json_keys_and_per_request_output(tmp_path):
    per = tmp_path / "per.jsonl"
    r = runner.invoke(app, ["prompts", "check", str(log(tmp_path / "l.jsonl", timestamp_log(8))), "--tokenizer",
                            str(TOKENIZER), "--per-request", str(per), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert KEYS <= set(d) and set(d["missed_by_cause"]) == {"cold", "evicted", "busted", "partial"}
    assert d["findings"] and FINDING_KEYS <= set(d["findings"][0])
    rows = [json.loads(x) for x in per.read_text().splitlines()]
    assert len(rows) == d["requests"] == 8
    assert sum(x["cached_tokens_predicted"] for x in rows) == d["cached_tokens_predicted"]
    assert rows[0]["line"] == 1 and rows[0]["cached_tokens_predicted"] == 0


def test_a_bad_line_and_a_missing_tokenizer_exit_2_with_the_input_named(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"prompt": "a"}\n{"prompt": 5}\n')
    r = runner.invoke(app, ["prompts", "check", str(p), "--tokenizer", str(TOKENIZER), "--json"])
    # a bad line is skipped and named (round 5: one bad line no longer ends the day's run) ...
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    d = json.loads(r.stdout)
    assert d["requests"] == 1 and any(f"{p}:2" in n and "1 bad line" in n for n in d["notes"]), d["notes"]
    only_bad = tmp_path / "only_bad.jsonl"
    only_bad.write_text('{"prompt": 5}\n')
    r = runner.invoke(app, ["prompts", "check", str(only_bad), "--tokenizer", str(TOKENIZER)])
    # ... and a log of nothing but bad lines is an error naming them, not a silent zero
    assert r.exit_code == 2 and f"{only_bad}:1" in r.output and "no request could be read" in r.output
    r = runner.invoke(app, ["prompts", "check", str(p), "--tokenizer", str(tmp_path / "none")])
    assert r.exit_code == 2 and "--tokenizer" in r.output and "never downloads" in r.output
    ids = tmp_path / "ids.jsonl"
    ids.write_text('{"prompt": [1, 2, 3]}\n{"prompt": "text"}\n')
    r = runner.invoke(app, ["prompts", "check", str(ids)])  # token ids need no tokenizer; text does
    assert r.exit_code == 2 and f"{ids}:2" in r.output and "--tokenizer" in r.output


def test_block_size_and_capacity_come_from_the_deployment_and_no_prompt_text_is_stored(tmp_path):
    db = tmp_path / "k.duckdb"
    for f, at in (("00_before.prom", "2026-11-03T10:00:00Z"), ("01_after.prom", "2026-11-03T10:05:00Z")):
        r = runner.invoke(app, ["import-metrics", "--db", str(db), "--deployment", "d", "--target", "vllm-0",
                                "--at", at, str(PAYLOADS / f)])
        assert r.exit_code == 0, r.output
    per = tmp_path / "per.jsonl"
    r = runner.invoke(app, ["prompts", "check", str(canary_log(tmp_path)), "--db", str(db), "--deployment", "d",
                            "--tokenizer", str(TOKENIZER), "--per-request", str(per), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    # the fixture's vllm:cache_config_info: block_size="128", num_gpu_blocks="4096"
    assert (d["block_size"], d["gpu_blocks"]) == (128, 4096)
    assert any("vllm:cache_config_info" in n for n in d["notes"])
    saved = tmp_path / "check.json"
    saved.write_text(r.stdout)
    text = runner.invoke(app, ["prompts", "check", str(canary_log(tmp_path)), "--db", str(db), "--deployment", "d",
                               "--tokenizer", str(TOKENIZER)])
    assert text.exit_code == 0 and "iso_timestamp" in text.stdout
    html = tmp_path / "r.html"
    rep = runner.invoke(app, ["report", "--db", str(db), "--deployment", "d", "--month", "2026-11", "-o", str(html),
                              "--prompts-check", str(saved)])
    assert rep.exit_code == 0, rep.output
    page = html.read_text()
    assert "9. Prompt cacheability" in page and "iso_timestamp" in page
    for where, content in (("json", r.output), ("text output", text.output), ("report", page),
                           ("per-request", per.read_text()), ("report cli", rep.output)):
        assert CANARY not in content, where
        assert "Secret word" not in content and "support agent" not in content, where
    for f in tmp_path.glob("k.duckdb*"):
        assert CANARY.encode() not in f.read_bytes() and b"support agent" not in f.read_bytes()


def test_a_bad_saved_check_is_named(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"requests": 1}')
    assert runner.invoke(app, ["migrate", "--db", str(tmp_path / "k.duckdb")]).exit_code == 0  # a reader needs one
    r = runner.invoke(app, ["report", "--db", str(tmp_path / "k.duckdb"), "--deployment", "d", "--month", "2026-11",
                            "-o", str(tmp_path / "r.html"), "--prompts-check", str(bad)])
    assert r.exit_code == 2 and "--prompts-check" in r.output and "not a `kvplan prompts check --json`" in r.output
