"""The comparison of ``kvplan prompts check`` with what vLLM reported for the same request logs
(issue 26, item 11), shared by the fast test on the recording (tests/test_prompts_recorded.py)
and the live one (tests/test_prompts_stack.py).

A run is ``record_prompts.RunResult.to_json()``: per request vLLM's ``usage.prompt_tokens``
and ``usage.prompt_tokens_details.cached_tokens`` (and the /metrics increase over it), per run
the /metrics prefix-cache hits and queries and ``vllm:cache_config_info``'s labels. The
prediction is the CLI's own output (``--json`` and ``--per-request``), given the block size and
(small-cache run) the KV blocks that the server reported, never assumed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from kvplan.app.cli import app

ROOT = Path(__file__).resolve().parents[1]
STACK = ROOT / "deploy" / "demo" / "prompts"
LOGS = STACK / "logs"
TOKENIZER = STACK / "tokenizer"
TEMPLATE = ROOT / "deploy" / "local" / "templates" / "tiny-llama-tools.jinja"

runner = CliRunner()


def predict(log: Path, run: dict[str, Any], out_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``kvplan prompts check LOG --json --per-request`` with the run server's block size (and its
    KV blocks when the run forced a small cache)."""
    cc = run["cache_config"]
    per = out_dir / f"{run['name']}.per-request.jsonl"
    args = ["prompts", "check", str(log), "--tokenizer", str(TOKENIZER), "--chat-template", str(TEMPLATE),
            "--block-size", str(int(cc["block_size"])), "--json", "--per-request", str(per)]
    if run["gpu_blocks_override"] is not None:
        args += ["--gpu-blocks", str(int(cc["num_gpu_blocks"]))]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout), [json.loads(line) for line in per.read_text().splitlines()]


def measured_hit_rate(run: dict[str, Any]) -> float:
    m = run["metrics"]
    return m["prefix_cache_hits"] / m["prefix_cache_queries"]


def compare(run: dict[str, Any], d: dict[str, Any], per: list[dict[str, Any]]) -> dict[str, Any]:
    """Per request and overall, prediction against measurement (the numbers a test asserts on
    and a report quotes)."""
    meas = run["per_request"]
    assert [p["line"] for p in per] == [q["line"] for q in meas], "requests out of step"
    same_len = sum(p["prompt_tokens"] == q["prompt_tokens"] for p, q in zip(per, meas, strict=True))
    same_cached = sum(p["cached_tokens_predicted"] == q["cached_tokens"] for p, q in zip(per, meas, strict=True))
    return {
        "run": run["name"], "requests": len(meas), "prompt_tokens_equal": same_len, "cached_equal": same_cached,
        "predicted_hit_rate": d["hit_rate_predicted"], "measured_hit_rate": measured_hit_rate(run),
        "points": abs(d["hit_rate_predicted"] - measured_hit_rate(run)) * 100,
        "mismatches": [(q["line"], q["prompt_tokens"], q["cached_tokens"], p["prompt_tokens"],
                        p["cached_tokens_predicted"])
                       for p, q in zip(per, meas, strict=True)
                       if (p["prompt_tokens"], p["cached_tokens_predicted"])
                       != (q["prompt_tokens"], q["cached_tokens"])][:5],
    }


def check_run(run: dict[str, Any], log: Path, out_dir: Path) -> dict[str, Any]:
    """The issue's targets for one run: every prompt tokenized to vLLM's length; without eviction
    every request's cached tokens exact; with a small KV cache within 1 point overall."""
    d, per = predict(log, run, out_dir)
    c = compare(run, d, per)
    assert c["prompt_tokens_equal"] == c["requests"], c
    assert d["prompt_tokens"] == sum(q["prompt_tokens"] for q in run["per_request"])
    if run["gpu_blocks_override"] is None:
        assert c["cached_equal"] == c["requests"], c
        assert d["cached_tokens_predicted"] == run["cached_tokens"]
    else:
        assert c["points"] <= 1.0, c
    return {**c, "json": d}


def check_timestamp_case(top: dict[str, Any], end: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """The timestamp-at-the-top log: the buster is named (a timestamp or id in the system
    prompt's first lines) and fixing it predicts, within 3 points, the hit rate vLLM measured for
    the same requests with those lines at the end of the user message."""
    d, _ = predict(LOGS / top["file"], top, out_dir)
    kinds = {(f["kind"], f["message_index"], f["role"]) for f in d["findings"]}
    assert any(role == "system" and mi == 0 and ("timestamp" in kind or kind in ("uuid", "hex id", "id"))
               for kind, mi, role in kinds), d["findings"]
    assert all(len(f["example"]) <= 120 for f in d["findings"])
    fixed, measured = d["hit_rate_if_fixed"], measured_hit_rate(end)
    assert abs(fixed - measured) <= 0.03, (fixed, measured)
    return {"hit_rate_now": d["hit_rate_predicted"], "hit_rate_if_fixed": fixed, "measured_fixed": measured,
            "measured_now": measured_hit_rate(top), "findings": d["findings"]}
