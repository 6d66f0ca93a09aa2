"""`kvplan prompts check --sample-sessions FRACTION`: whole conversations kept (by a session field,
else by the first user message), the same ones in every run and process, 1 the full check, the
sample stated in the output, and bad fractions refused (exit 2, the option named)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from typer.testing import CliRunner

from kvplan.app.cli import app
from tests.test_prompts_check import DOC, TOKENIZER

runner = CliRunner()
CANARY = "CANARY-s3Lk28"
CONVERSATIONS = 16
"""Conversation c has 1 + c % 4 turns: 16 + 4 x (0 + 1 + 2 + 3) = 40 requests."""
REQUESTS = 40


def write_log(path: Path, *, sessions: bool) -> dict[int, int]:
    """Interleaved conversations of a support agent whose system prompt carries a per-request
    timestamp (a buster: the check runs its fix pass). With ``sessions``, every line names its
    conversation (``session_id`` at the top level, or in ``metadata`` for odd ones) and every
    conversation opens with the same user message; without, each opens with its own. Returns
    line number -> conversation."""
    turns = {c: 1 + c % 4 for c in range(CONVERSATIONS)}
    history: dict[int, list[dict]] = {c: [] for c in turns}
    lines: list[str] = []
    conv_of: dict[int, int] = {}
    step = 0
    while any(turns.values()):
        for c in range(CONVERSATIONS):
            if not turns[c]:
                continue
            first = "Hello, I need help." if sessions else f"Conversation {c}: about topic {c % 7}? {CANARY}"
            user = first if not history[c] else f"Follow-up {len(history[c]) // 2} of {c}."
            history[c].append({"role": "user", "content": user})
            body: dict = {"model": "m", "max_tokens": 4, "messages": [
                {"role": "system", "content": f"You are a support agent.\nNow: 2026-12-05T10:00:{step:02d}Z\n{DOC}"},
                *history[c]]}
            if sessions:
                if c % 2:
                    body["metadata"] = {"conversation_id": f"conv-{c}"}
                else:
                    body["session_id"] = f"sess-{c}"
            lines.append(json.dumps(body))
            conv_of[len(lines)] = c
            history[c].append({"role": "assistant", "content": f"Answer {len(history[c]) // 2} for {c}."})
            turns[c] -= 1
            step += 1
    path.write_text("".join(x + "\n" for x in lines))
    return conv_of


def run(log: Path, *args: str, per: Path | None = None) -> dict:
    r = runner.invoke(app, ["prompts", "check", str(log), "--tokenizer", str(TOKENIZER), "--json", *args,
                            *(["--per-request", str(per)] if per is not None else [])])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def kept_lines(per: Path) -> list[int]:
    return [json.loads(x)["line"] for x in per.read_text().splitlines()]


def test_the_fixture_log_has_the_conversations_counted_by_hand(tmp_path):
    conv_of = write_log(tmp_path / "l.jsonl", sessions=False)
    sizes = defaultdict(int)
    for c in conv_of.values():
        sizes[c] += 1
    assert len(conv_of) == REQUESTS and len(sizes) == CONVERSATIONS
    assert sorted(sizes.values()) == [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4


def test_whole_conversations_by_first_user_message_and_the_sample_is_the_check_of_its_requests(tmp_path):
    log = tmp_path / "agent.jsonl"
    conv_of = write_log(log, sessions=False)
    per = tmp_path / "per.jsonl"
    d = run(log, "--sample-sessions", "0.5", per=per)
    kept = kept_lines(per)
    convs = {conv_of[n] for n in kept}
    # whole conversations: every line of a kept conversation is kept, no line of another
    assert sorted(kept) == sorted(n for n, c in conv_of.items() if c in convs)
    assert 0 < len(convs) < CONVERSATIONS, convs  # a real sample, neither all nor none
    s = d["sample"]
    assert (s["fraction"], s["conversations"], s["requests"]) == (0.5, CONVERSATIONS, REQUESTS)
    assert (s["conversations_kept"], s["requests_kept"]) == (len(convs), len(kept))
    assert s["conversations_by_key"] == {"session_field": 0, "first_user_message": CONVERSATIONS}
    assert "first user message" in s["key"]
    assert d["requests"] == len(kept) and d["notes"][0].startswith("a sample (--sample-sessions 0.5)")
    # everything downstream is the check of the kept requests: the same as checking a log of them alone
    # (today's rate, the findings and the fix pass, the geometry table)
    lines = log.read_text().splitlines()
    alone = tmp_path / "alone.jsonl"
    alone.write_text("".join(lines[n - 1] + "\n" for n in sorted(kept)))
    full = run(alone)
    assert d["findings"], "the timestamp buster is found: the fix pass ran on the sample"
    for k in ("requests", "prompt_tokens", "cached_tokens_predicted", "hit_rate_predicted", "hit_rate_unlimited",
              "hit_rate_if_fixed", "missed_by_cause", "miss_reasons", "block_geometry"):
        assert d[k] == full[k], k
    assert [(f["kind"], f["requests_affected"], f["tokens_lost"]) for f in d["findings"]] == \
        [(f["kind"], f["requests_affected"], f["tokens_lost"]) for f in full["findings"]]


def test_a_session_field_keys_the_conversations_and_the_digest_decides(tmp_path):
    log = tmp_path / "sessions.jsonl"
    conv_of = write_log(log, sessions=True)  # every conversation opens with the same user message
    per = tmp_path / "per.jsonl"
    d = run(log, "--sample-sessions", "0.5", per=per)
    s = d["sample"]
    # by the first user message they would be one conversation; by their session fields, 16
    assert s["conversations"] == CONVERSATIONS and s["conversations_by_key"]["session_field"] == CONVERSATIONS
    assert s["key"].startswith("a session field")

    # the documented rule, computed here: BLAKE2b-64 of the key below fraction x 2^64
    def below(session: str) -> bool:
        h = hashlib.blake2b(b"session\0" + session.encode(), digest_size=8, person=b"kvplan-sample").digest()
        return int.from_bytes(h, "big") < 0.5 * 2**64

    names = {c: f"conv-{c}" if c % 2 else f"sess-{c}" for c in range(CONVERSATIONS)}
    expected = sorted(n for n, c in conv_of.items() if below(names[c]))
    assert kept_lines(per) == expected and 0 < len(expected) < REQUESTS
    assert s["requests_kept"] == len(expected)


def test_the_same_fraction_keeps_the_same_requests_in_another_process(tmp_path):
    log = tmp_path / "agent.jsonl"
    write_log(log, sessions=False)
    per = tmp_path / "per.jsonl"
    d = run(log, "--sample-sessions", "0.25", per=per)
    first = kept_lines(per)
    per2 = tmp_path / "per2.jsonl"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # another process, another salt for hash()
    p = subprocess.run([sys.executable, "-m", "kvplan.app.cli", "prompts", "check", str(log), "--tokenizer",
                        str(TOKENIZER), "--sample-sessions", "0.25", "--per-request", str(per2), "--json"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    again = json.loads(p.stdout)
    assert kept_lines(per2) == first and first
    assert again["sample"] == d["sample"] and again["cached_tokens_predicted"] == d["cached_tokens_predicted"]
    # a larger fraction holds the smaller one's conversations
    per3 = tmp_path / "per3.jsonl"
    run(log, "--sample-sessions", "0.6", per=per3)
    assert set(first) <= set(kept_lines(per3))


def test_one_is_the_full_check_and_no_prompt_text_is_printed(tmp_path):
    log = tmp_path / "agent.jsonl"
    write_log(log, sessions=False)
    full = run(log)
    one = run(log, "--sample-sessions", "1")
    assert full["sample"] is None
    assert one["sample"]["requests_kept"] == one["sample"]["requests"] == REQUESTS
    assert one["sample"]["conversations_kept"] == CONVERSATIONS
    assert one["notes"][0].startswith("a sample (--sample-sessions 1)")
    assert {k: v for k, v in one.items() if k not in ("sample", "notes")} == \
        {k: v for k, v in full.items() if k not in ("sample", "notes")}
    assert one["notes"][1:] == full["notes"]
    text = runner.invoke(app, ["prompts", "check", str(log), "--tokenizer", str(TOKENIZER),
                               "--sample-sessions", "0.5"])
    assert text.exit_code == 0, text.output
    assert text.stdout.startswith("SAMPLE, 0.5 of the conversations: ") and "every figure below" in text.stdout
    assert CANARY not in text.output and CANARY not in json.dumps(one["sample"])


def test_a_bailian_trace_is_sampled_by_its_parent_chat_id_chains(tmp_path):
    # conversations: 1 -> 2 -> 4, 3 -> 5, 6 (chat ids; parent -1 opens one)
    chain = [(1, -1), (2, 1), (3, -1), (4, 2), (5, 3), (6, -1)]
    root = {1: 1, 2: 1, 3: 3, 4: 1, 5: 3, 6: 6}
    trace = tmp_path / "bailian.jsonl"
    trace.write_text("".join(json.dumps({"chat_id": c, "parent_chat_id": p, "timestamp": i, "input_length": 48,
                                         "output_length": 2, "type": "text", "turn": 1,
                                         "hash_ids": [root[c], 100 + c, 200 + c]}) + "\n"
                             for i, (c, p) in enumerate(chain)))
    seen: set[tuple[int, ...]] = set()
    for f in ("0.2", "0.4", "0.6", "0.8", "1"):
        per = tmp_path / f"per{f}.jsonl"
        r = runner.invoke(app, ["prompts", "check", str(trace), "--sample-sessions", f, "--per-request", str(per),
                                "--json"])
        if r.exit_code == 2:  # kept no conversation: said so, not a silent zero
            assert "--sample-sessions" in r.output and "kept none" in r.output
            continue
        assert r.exit_code == 0, r.output
        d = json.loads(r.stdout)
        kept = kept_lines(per)
        roots = {root[chain[n - 1][0]] for n in kept}
        assert kept == [n for n in range(1, 7) if root[chain[n - 1][0]] in roots]
        assert (d["sample"]["conversations"], d["sample"]["conversations_kept"]) == (3, len(roots))
        seen.add(tuple(kept))
    assert len(seen) >= 2  # the fractions kept different conversations


def test_bad_fractions_and_unsampleable_lines_exit_2_naming_the_option(tmp_path):
    log = tmp_path / "agent.jsonl"
    write_log(log, sessions=False)
    for bad in ("0", "-0.5", "1.5", "abc", "nan", "inf"):
        r = runner.invoke(app, ["prompts", "check", str(log), "--tokenizer", str(TOKENIZER), "--sample-sessions",
                                bad])
        assert r.exit_code == 2, (bad, r.output)
        assert "--sample-sessions" in r.output and "Traceback" not in r.output, (bad, r.output)
    tiny = runner.invoke(app, ["prompts", "check", str(log), "--tokenizer", str(TOKENIZER), "--sample-sessions",
                               "1e-9"])
    assert tiny.exit_code == 2 and "kept none of the log's 16 conversations" in tiny.output, tiny.output
    completions = tmp_path / "completions.jsonl"
    completions.write_text('{"prompt": "one"}\n{"prompt": "two"}\n')
    r = runner.invoke(app, ["prompts", "check", str(completions), "--tokenizer", str(TOKENIZER),
                            "--sample-sessions", "0.5"])
    assert r.exit_code == 2 and f"{completions}:1" in r.output and "no session field" in r.output, r.output
    completions.write_text('{"prompt": "one", "session_id": "a"}\n{"prompt": "two", "session_id": "b"}\n')
    r = runner.invoke(app, ["prompts", "check", str(completions), "--tokenizer", str(TOKENIZER),
                            "--sample-sessions", "1", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["sample"]["conversations"] == 2, r.output


def test_batch_lines_name_their_session_in_the_body_and_a_mixed_log_says_both_keys(tmp_path):
    def batch(i: int, body: dict) -> dict:
        return {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}

    msgs = [{"role": "user", "content": "Same opening."}]
    lines = [batch(1, {"messages": msgs, "metadata": {"session_id": "a"}}),   # session a
             batch(2, {"messages": msgs, "conversation_id": "b"}),            # session b
             batch(3, {"messages": msgs}),                                    # no session: by its first user message
             {"messages": [*msgs, {"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]}]  # same
    log = tmp_path / "mixed.jsonl"
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    d = run(log, "--sample-sessions", "1")
    s = d["sample"]
    # 2 conversations by session field, 1 by the first user message (lines 3 and 4 open the same way)
    assert s["conversations_by_key"] == {"session_field": 2, "first_user_message": 1} and s["conversations"] == 3
    assert "where a request has one (2 conversations), else a hash of the first user message (1)" in s["key"]
