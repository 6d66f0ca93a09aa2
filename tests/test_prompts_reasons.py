"""A miss reason per request (issue 34, item 3) and ``--measured`` (prediction against the engine's
own usage, request by request).

The expected reasons are read off each log by hand (which message differs from which earlier
request); the first divergent block is the longest token prefix shared with any earlier request,
computed with transformers directly (``tests.test_prompts_check.reference_hit_rate``'s method);
``--measured`` is checked against what vLLM itself reported on the recorded demo logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.collectors.requests.check import CheckOptions, check
from kvplan.collectors.requests.render import Renderer
from tests import prompts_compare as pc
from tests.prompts_reference import hit_tokens
from tests.test_prompts_check import BS, DOC, TOKENIZER, write

runner = CliRunner()
SYSTEM = f"You are a support agent.\n{DOC}"
OTHER_SYSTEM = "You translate poems.\nKeep the metre.\nNever explain."
NORMS = DOC.replace("Rule", "Norm")


def chat(system: str, user: str) -> dict:
    return {"model": "m", "max_tokens": 4, "messages": [{"role": "system", "content": system},
                                                         {"role": "user", "content": user}]}


def token_ids(bodies: list[dict]) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    return [tok(tok.apply_chat_template(b["messages"], tokenize=False, add_generation_prompt=True),
                add_special_tokens=False)["input_ids"] for b in bodies]


def shared_blocks(seqs: list[list[int]], i: int) -> int:
    """Full blocks of request ``i`` within prompt_tokens - 1 that some earlier request shares."""
    return hit_tokens(seqs, i, BS) // BS


@pytest.fixture(scope="module")
def renderer():
    return Renderer(TOKENIZER)


def reasons_of(path: Path, renderer: Renderer, opts: CheckOptions) -> tuple[list, dict]:
    got: list = []
    r = check([path], renderer, opts, on_request=lambda req, o, miss: got.append((req, o, miss)))
    return got, r.as_json()


def test_each_request_gets_the_reason_read_off_the_log(tmp_path, renderer):
    ts = [f"Current time: 2026-11-30T12:00:{s:02d}.{s * 37 % 1000:03d}Z" for s in range(2)]
    bodies = [
        chat(SYSTEM, "Question 0: how do I reset my password?"),        # 1: nothing before it
        chat(SYSTEM, "Question 0: how do I reset my password?"),        # 2: the same again
        chat(SYSTEM, "Question 2: where is my invoice for October?"),   # 3: the user message differs
        chat(OTHER_SYSTEM, "Question 0: how do I reset my password?"),  # 4: another system prompt
        chat(f"You are a billing agent.\n{ts[0]}\n{NORMS}", "Hello"),   # 5: a new system prompt, then
        chat(f"You are a billing agent.\n{ts[1]}\n{NORMS}", "Hello"),   # 6: only its timestamp changes
    ]
    log = write(tmp_path / "log.jsonl", bodies)
    got, d = reasons_of(log, renderer, CheckOptions(block_size=BS))
    seqs = token_ids(bodies)
    expected = [("cold", None, None), ("partial", None, None), ("messages_changed", 1, f"{log}:2"),
                ("system_changed", 0, f"{log}:3"), ("system_changed", 0, f"{log}:4"),
                ("iso_timestamp", 0, f"{log}:5")]
    assert [(m.reason, m.message_index, m.earlier) for _, _, m in got] == expected
    for i, (_, o, m) in enumerate(got):
        assert m.first_divergent_block == shared_blocks(seqs, i), i
        assert m.missed_tokens == len(seqs[i]) - o.cached
    assert d["miss_reasons"] == {"cold": 1, "partial": 1, "messages_changed": 1, "system_changed": 2,
                                 "iso_timestamp": 1}


def test_a_request_whose_blocks_the_pool_evicted_says_so(tmp_path, renderer):
    a = chat(SYSTEM, "Question 0: how do I reset my password?")
    b = chat(OTHER_SYSTEM + "\n" + NORMS, "Question 9: shipping times?")
    log = write(tmp_path / "evict.jsonl", [a, b, a])
    seqs = token_ids([a, b, a])
    blocks = max(-(-len(s) // BS) for s in seqs) + 2  # room for one request at a time, not two
    got, _ = reasons_of(log, renderer, CheckOptions(block_size=BS, gpu_blocks=blocks))
    _, o, m = got[2]
    assert o.cached_unlimited == min(len(seqs[2]) - 1, len(seqs[0])) // BS * BS  # an unlimited cache hits it
    assert o.cached < o.cached_unlimited
    assert m.reason == "evicted"
    assert m.first_divergent_block == o.cached // BS


def test_per_request_lines_carry_the_reason_of_every_request(tmp_path):
    bodies = [chat(SYSTEM, f"Question {i % 3}: topic {i % 2}") for i in range(8)]
    log = write(tmp_path / "log.jsonl", bodies)
    per = tmp_path / "per.jsonl"
    r = runner.invoke(app, ["prompts", "check", str(log), "--tokenizer", str(TOKENIZER), "--block-size", str(BS),
                            "--per-request", str(per), "--json"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in per.read_text().splitlines()]
    assert len(rows) == 8
    seqs = token_ids(bodies)
    for i, row in enumerate(rows):
        assert row["miss_reason"], row
        assert row["missed_tokens"] == row["prompt_tokens"] - row["cached_tokens_predicted"] > 0
        assert row["first_divergent_block"] == shared_blocks(seqs, i)
    assert rows[0]["miss_reason"] == "cold"
    # requests 7 and 8 repeat requests 1 and 2 (i % 6 equal): they hit all they could
    assert [row["miss_reason"] for row in rows[6:]] == ["partial", "partial"]
    assert {row["miss_reason"] for row in rows[1:6]} == {"messages_changed"}
    d = json.loads(r.stdout)
    assert sum(d["miss_reasons"].values()) == 8


def with_usage(run: dict, log: Path, out: Path, tamper: int | None = None) -> Path:
    """The recorded log with vLLM's usage of each request logged beside it, as a gateway logs it."""
    meas = {q["line"]: q for q in run["per_request"]}
    lines = []
    for n, line in enumerate(log.read_text().splitlines(), start=1):
        body = json.loads(line)
        q = meas[n]
        cached = q["cached_tokens"] + (1 if tamper == n else 0)
        body["response"] = {"usage": {"prompt_tokens": q["prompt_tokens"], "completion_tokens": 1,
                                      "prompt_tokens_details": {"cached_tokens": cached}}}
        lines.append(json.dumps(body))
    out.write_text("\n".join(lines) + "\n")
    return out


def measured_check(path: Path, run: dict, *extra: str):
    cc = run["cache_config"]
    return runner.invoke(app, ["prompts", "check", str(path), "--tokenizer", str(pc.TOKENIZER), "--chat-template",
                               str(pc.TEMPLATE), "--block-size", str(int(cc["block_size"])), "--measured", *extra])


@pytest.mark.skipif(not (pc.STACK / "recording.json").exists(), reason="the demo's prompt recording is not there")
def test_measured_compares_each_request_with_what_vllm_reported(tmp_path):
    run = next(r for r in json.loads((pc.STACK / "recording.json").read_text())["runs"] if r["name"] == "chats")
    log = with_usage(run, pc.LOGS / run["file"], tmp_path / "chats-usage.jsonl")
    r = measured_check(log, run, "--json")
    assert r.exit_code == 0, r.output
    c = json.loads(r.stdout)["measured"]
    n = len(run["per_request"])
    assert (c["requests"], c["cached_equal"], c["prompt_tokens_equal"], c["mismatches"]) == (n, n, n, [])
    assert c["hit_rate_measured"] == pytest.approx(run["cached_tokens"] / run["prompt_tokens"])
    # one measured value off by a token: that request, and only it, is named
    bad = with_usage(run, pc.LOGS / run["file"], tmp_path / "tampered.jsonl", tamper=2)
    r = measured_check(bad, run)
    assert r.exit_code == 0, r.output
    flat = "".join(r.output.split())
    assert f"cachedtokensequalon{n - 1:,}" in flat
    assert f"{bad}:2:predicted" in flat
    assert f"{bad}:1:predicted" not in flat


def test_measured_without_usage_in_the_log_names_the_file(tmp_path):
    log = write(tmp_path / "plain.jsonl", [chat(SYSTEM, "Hi")])
    r = runner.invoke(app, ["prompts", "check", str(log), "--tokenizer", str(TOKENIZER), "--measured"])
    assert r.exit_code == 2
    assert "plain.jsonl" in r.output and "cached_tokens" in r.output
    assert "Traceback" not in r.output


TOOLS = [{"type": "function", "function": {"name": f"tool_{k}", "description": f"Does step {k} of the job.",
                                           "parameters": {"type": "object", "properties": {}}}} for k in range(3)]


def agent_log(fixed: bool = False, conversations: int = 6, turns: int = 4) -> list[dict]:
    """Agents in conversation (interleaved), two shared system prompts (one with tools); a third of
    the conversations put the current time on line 1 of the system prompt. ``fixed``: the same
    requests as a client makes the fix: the time appended to each new user message and kept there
    when the message comes back as history."""
    out: list[dict] = []
    history: list[list[dict]] = [[] for _ in range(conversations)]
    sent_at: list[list[str]] = [[] for _ in range(conversations)]
    second = 0
    for t in range(turns):
        for c in range(conversations):
            second += 7
            stamp = f"Current time: 2026-11-30T12:{second // 60:02d}:{second % 60:02d}Z"
            system = (SYSTEM if c % 2 == 0 else f"You are an operations agent.\n{NORMS}")
            dated = c % 3 == 0
            user = f"Conversation {c}, step {t}: please continue with item {c * 10 + t}."
            sent_at[c].append(stamp)
            if fixed or not dated:
                msgs = [{"role": "system", "content": system}]
            else:
                msgs = [{"role": "system", "content": f"{stamp}\n{system}"}]
            for k, m in enumerate(history[c] + [{"role": "user", "content": user}]):
                if fixed and dated and m["role"] == "user":
                    m = {**m, "content": m["content"] + "\n" + sent_at[c][k // 2]}
                msgs.append(m)
            body = {"model": "m", "max_tokens": 8, "messages": msgs}
            if c % 2 == 0:
                body["tools"] = TOOLS
            out.append(body)
            history[c] += [{"role": "user", "content": user},
                           {"role": "assistant", "content": f"Done with item {c * 10 + t}; next."}]
    return out


def reference_unlimited(bodies: list[dict]) -> float:
    """Each request hits the longest token prefix it shares with any earlier one, in full blocks
    within prompt_tokens - 1 (transformers called directly, the tools passed to the template)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    seqs = [tok(tok.apply_chat_template(b["messages"], tools=b.get("tools"), tokenize=False,
                                        add_generation_prompt=True), add_special_tokens=False)["input_ids"]
            for b in bodies]
    hit = sum(shared_blocks(seqs, i) * BS for i in range(len(seqs)))
    return hit / sum(len(s) for s in seqs)


def test_the_multi_turn_timestamp_fix_is_the_clients(tmp_path, renderer):
    """The fix moves the time to the end of the message it is sent with and keeps it there in the
    conversation's later requests: its predicted rate is the rate of the log a client writes with
    that fix (and above today's)."""
    log = write(tmp_path / "agents.jsonl", agent_log())
    d = check([log], renderer, CheckOptions(block_size=BS)).as_json()
    # the dated line against an undated request of the same system prompt: a line that differs ("other")
    ts = [f for f in d["findings"] if (f["message_index"], f["role"], f["line"]) == (0, "system", 1)]
    assert len(ts) == 1 and ts[0]["fix"] != "normalised", d["findings"]
    assert "message it is sent with" in ts[0]["fix"]
    today = reference_unlimited(agent_log())
    client = reference_unlimited(agent_log(fixed=True))
    assert d["hit_rate_predicted"] == pytest.approx(today, abs=1e-12)
    assert client > today + 0.05
    assert abs(ts[0]["hit_rate_if_fixed"] - client) * 100 <= 1.0, (ts[0]["hit_rate_if_fixed"], client, today)


def test_a_fix_below_today_always_says_why():
    from kvplan.collectors.requests.check import below_today
    from kvplan.models.prompts.predict import Totals

    base = Totals(requests=2, prompt_tokens=1000, hittable=900, cached=500, cached_unlimited=600)
    assert below_today(Totals(2, 1000, 900, 600, 700), base) is None  # above today: nothing to say
    evicts = below_today(Totals(2, 1000, 900, 400, 650), base)
    assert evicts is not None and "evicts more" in evicts and "65.0%" in evicts and "60.0%" in evicts
    worse = below_today(Totals(2, 1000, 900, 400, 450), base)
    assert worse is not None and "does not pay" in worse
