"""The prompts check end to end on the fixture tokenizer: the timestamp-at-the-top buster is found
and its hit rate if fixed equals an independent computation (transformers called directly, the
longest common prefix in full blocks); the miss causes add up; the classifier's kinds."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest

from kvplan.collectors.requests.check import CheckOptions, check
from kvplan.collectors.requests.prepare import Prepared
from kvplan.collectors.requests.read import LogRequest
from kvplan.collectors.requests.render import Renderer
from kvplan.models.prompts.busters import Finding, apply_fix, classify, line_map, shape
from tests.prompts_reference import hit_tokens

FIX = Path(__file__).resolve().parent / "fixtures" / "prompts"
TOKENIZER = FIX / "tokenizer"
DOC = "\n".join(f"Rule {i}: answer questions about topic {i} with care and precision." for i in range(30))
BS = 16


def timestamp_log(n: int = 24, seed: int = 5) -> list[dict]:
    """A support agent whose system prompt's second line is a millisecond timestamp."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ts = f"2026-11-30T12:{i // 60:02d}:{i % 60:02d}.{rng.randrange(1000):03d}Z"
        out.append({"model": "m", "max_tokens": 4, "messages": [
            {"role": "system", "content": f"You are a support agent.\nCurrent time: {ts}\n{DOC}"},
            {"role": "user", "content": f"Question {i}: what about topic {i % 7}?"}]})
    return out


def moved_to_the_end(body: dict) -> dict:
    """The fix, done by hand at the message level: the timestamp line appended to the user message."""
    sys_lines = body["messages"][0]["content"].split("\n")
    ts_line = sys_lines.pop(1)
    return {**body, "messages": [{"role": "system", "content": "\n".join(sys_lines)},
                                 {"role": "user", "content": body["messages"][1]["content"] + "\n" + ts_line}]}


def reference_hit_rate(bodies: list[dict], texts: list[str] | None = None) -> float:
    """Unlimited cache, one request at a time: each request hits the longest prefix it shares
    with any earlier one, in full blocks within prompt_tokens - 1."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    if texts is None:
        texts = [tok.apply_chat_template(b["messages"], tokenize=False, add_generation_prompt=True,
                                         **b.get("chat_template_kwargs", {})) for b in bodies]
    seqs = [tok(text, add_special_tokens=False)["input_ids"] for text in texts]
    return sum(hit_tokens(seqs, i, BS) for i in range(len(seqs))) / sum(len(s) for s in seqs)


def write(path: Path, bodies: list[dict]) -> Path:
    path.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    return path


@pytest.fixture(scope="module")
def renderer():
    return Renderer(TOKENIZER)


def test_timestamp_at_the_top_is_found_and_its_fix_is_worth_what_it_measures(tmp_path, renderer):
    bodies = timestamp_log()
    r = check([write(tmp_path / "ts.jsonl", bodies)], renderer, CheckOptions(block_size=BS))
    d = r.as_json()
    assert d["hit_rate_predicted"] == pytest.approx(reference_hit_rate(bodies), abs=1e-12)
    assert d["hit_rate_predicted"] < 0.1
    (f,) = d["findings"]
    assert (f["kind"], f["message_index"], f["role"], f["line"]) == ("iso_timestamp", 0, "system", 2)
    assert f["requests_affected"] == len(bodies) - 1
    assert f["example"] == "9999-99-99A99:99:99.999A"
    want = reference_hit_rate([moved_to_the_end(b) for b in bodies])
    assert want > 0.8
    assert f["hit_rate_if_fixed"] == pytest.approx(want, abs=1e-12)
    assert d["hit_rate_if_fixed"] == pytest.approx(want, abs=1e-12)
    m = d["missed_by_cause"]
    assert sum(m.values()) == d["prompt_tokens"] - d["cached_tokens_predicted"]
    assert m["busted"] > 0.8 * d["prompt_tokens"] and m["evicted"] == 0
    assert f["tokens_lost"] > 0


def test_a_small_pool_evicts_and_the_causes_still_add_up(tmp_path, renderer):
    bodies = [moved_to_the_end(b) for b in timestamp_log(12)]
    p = write(tmp_path / "fixed.jsonl", bodies)
    unlimited = check([p], renderer, CheckOptions(block_size=BS)).as_json()
    assert unlimited["findings"] == []  # nothing breaks the cache any more
    assert unlimited["hit_rate_if_fixed"] == unlimited["hit_rate_predicted"]
    small = check([p], renderer, CheckOptions(block_size=BS, gpu_blocks=60)).as_json()
    assert small["hit_rate_unlimited"] == unlimited["hit_rate_predicted"]
    assert small["hit_rate_predicted"] < small["hit_rate_unlimited"]
    m = small["missed_by_cause"]
    assert m["evicted"] == small["prompt_tokens"] * (small["hit_rate_unlimited"] - small["hit_rate_predicted"]) \
        == pytest.approx(m["evicted"])
    assert m["evicted"] > 0
    assert sum(m.values()) == small["prompt_tokens"] - small["cached_tokens_predicted"]


def test_a_uuid_line_and_a_timestamp_line_are_two_findings_fixed_together(tmp_path, renderer):
    rng = random.Random(2)
    bodies = []
    for b in timestamp_log(16):
        sys_c = b["messages"][0]["content"].split("\n")
        sys_c.insert(2, f"Session: {uuid.UUID(int=rng.getrandbits(128))}")
        bodies.append({**b, "messages": [{"role": "system", "content": "\n".join(sys_c)}, b["messages"][1]]})
    d = check([write(tmp_path / "two.jsonl", bodies)], renderer, CheckOptions(block_size=BS)).as_json()
    kinds = {(f["kind"], f["line"]) for f in d["findings"]}
    assert ("iso_timestamp", 2) in kinds
    # each alone fixes little (the other still breaks the chain); both together fix most
    assert all(f["hit_rate_if_fixed"] < 0.2 for f in d["findings"])
    assert d["hit_rate_if_fixed"] > 0.8
    one = check([tmp_path / "two.jsonl"], renderer, CheckOptions(block_size=BS, max_fixes=1)).as_json()
    assert [f["hit_rate_if_fixed"] is None for f in one["findings"]] == [False, True]  # not recomputed: null
    assert one["hit_rate_if_fixed"] == d["hit_rate_if_fixed"]


@pytest.mark.parametrize("a, b, kind", [
    ("Now: 2026-11-30T12:00:01.123Z", "Now: 2026-11-30T12:00:02.456Z", "iso_timestamp"),
    ("t=1764547201", "t=1764547299", "epoch_timestamp"),
    ("Today is 30 November 2026.", "Today is 01 December 2026.", "date"),
    ("req 123e4567-e89b-42d3-a456-426614174000", "req 9b2e4567-e89b-42d3-a456-4266141740ff", "uuid"),
    ("trace 9f8e7d6c5b4a", "trace 0a1b2c3d4e5f", "hex_id"),
    ("turn 41 of the chat", "turn 42 of the chat", "counter"),
    ('{"b": 1, "a": 2}', '{"a": 2, "b": 1}', "json_keys"),
    ("be  brief ", "be brief", "whitespace"),
    ("hello Alice", "hello Bob", "other"),
])
def test_the_kinds(a, b, kind):
    assert classify(a, b)[0] == kind


def test_shape_shows_no_text():
    assert shape("Bob 12-ab") == "Aaa 99-aa"
    assert len(shape("x" * 100)) == 40


def test_line_map_and_apply_fix_on_rendered_text():
    text = "<s><|system|>\nA\nT: 1\nB\n<|user|>\nQ<|end|>\n<|assistant|>\n"
    lines = line_map(text, [("system", "A\nT: 1\nB"), ("user", "Q")])
    places = [(li.message_index, li.role, li.line) for li in lines]
    assert places == [(0, "template", 1), (0, "system", 1), (0, "system", 2), (0, "system", 3), (1, "template", 5),
                      (1, "user", 1), (None, "template", 7), (None, "template", 8)]
    f = Finding("counter", 0, "system", 2, "A: 9", 0)
    assert apply_fix(text, lines, [f]) == "<s><|system|>\nA\nB\n<|user|>\nQ\nT: 1<|end|>\n<|assistant|>\n"


def test_a_date_the_template_writes_flushes_the_cache_once_a_day(tmp_path, renderer):
    """The fixture template writes "Today: <strftime_now('%d %B %Y')>" (chat_template_kwargs
    add_date): vLLM renders the day each request arrives. 4 requests a day over 3 days."""
    from datetime import UTC, datetime

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    day0 = 1796083200  # 2026-12-01T00:00:00Z
    bodies = []
    for i in range(12):
        bodies.append({"created": day0 + (i // 4) * 86400 + (i % 4) * 60, "chat_template_kwargs": {"add_date": True},
                       "messages": [{"role": "system", "content": "You are a support agent.\n" + DOC},
                                    {"role": "user", "content": f"Question {i}?"}]})
    d = check([write(tmp_path / "dated.jsonl", bodies)], renderer, CheckOptions(block_size=BS)).as_json()
    served, fixed = [], []
    for b in bodies:
        day = datetime.fromtimestamp(b["created"], tz=UTC).strftime("%d %B %Y")
        today = datetime.now().strftime("%d %B %Y")
        served.append(tok.apply_chat_template(b["messages"], tokenize=False, add_generation_prompt=True,
                                              add_date=True).replace(f"Today: {today}", f"Today: {day}"))
        moved = [b["messages"][0], {"role": "user", "content": b["messages"][1]["content"] + f"\nToday: {day}"}]
        fixed.append(tok.apply_chat_template(moved, tokenize=False, add_generation_prompt=True))
    assert d["hit_rate_predicted"] == pytest.approx(reference_hit_rate(bodies, served), abs=1e-12)
    (f,) = d["findings"]
    assert (f["kind"], f["role"], f["template"], f["requests_affected"]) == ("date", "template", True, 2)
    assert f["hit_rate_if_fixed"] == pytest.approx(reference_hit_rate(bodies, fixed), abs=1e-12)
    assert f["hit_rate_if_fixed"] > d["hit_rate_predicted"]
    assert any("the server's date" in n for n in d["notes"])


def test_a_tool_list_in_a_different_order_per_request(tmp_path, renderer):
    """Four tools, shuffled per request, rendered one per line by the fixture template: a `tools`
    finding whose fix (the tool lines sorted) gives what sorted tool lists measure."""
    rng = random.Random(4)
    tools = [{"type": "function", "function": {"name": f"tool_{k}", "description": f"does thing {k} " * 8,
                                                "parameters": {"type": "object"}}} for k in range(4)]
    bodies, fixed = [], []
    for i in range(12):
        order = tools[:]
        rng.shuffle(order)
        msgs = [{"role": "system", "content": "You are an agent.\n" + DOC}, {"role": "user", "content": f"Task {i}"}]
        bodies.append({"messages": msgs, "tools": order})
        fixed.append({"messages": msgs, "tools": sorted(order, key=json.dumps)})
    d = check([write(tmp_path / "tools.jsonl", bodies)], renderer, CheckOptions(block_size=BS)).as_json()
    kinds = {f["kind"] for f in d["findings"]}
    assert kinds == {"tools"} and all(f["role"] == "tools" for f in d["findings"])

    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    texts = [tok.apply_chat_template(b["messages"], tools=b["tools"], tokenize=False, add_generation_prompt=True)
             for b in fixed]
    assert d["hit_rate_if_fixed"] == pytest.approx(reference_hit_rate(fixed, texts), abs=1e-12)
    assert d["hit_rate_if_fixed"] > d["hit_rate_predicted"] + 0.3


class CountingRenderer(Renderer):
    """The fixture's renderer, counting the chat template's renders."""

    def __init__(self) -> None:
        super().__init__(TOKENIZER)
        self.rendered = 0

    def chat_text(self, r, messages=None):  # type: ignore[no-untyped-def]
        self.rendered += 1
        return super().chat_text(r, messages)


def test_the_fix_pass_reuses_the_first_pass_renders_with_the_same_results(tmp_path, monkeypatch):
    """The fix pass takes the renders the first pass kept (once it had a finding, within
    ``KEEP_BYTES``) instead of rendering them again: the same per-request results, totals if fixed
    and findings with all of them kept, some, or none (budget 0: every request rendered twice)."""
    import kvplan.collectors.requests.kept as kept_mod

    bodies = timestamp_log(30)
    for i in range(1, 30, 2):  # every other request continues the one before it: a conversation
        prev = bodies[i - 1]["messages"]
        bodies[i] = {**bodies[i], "messages": [prev[0], prev[1], {"role": "assistant", "content": f"answer {i}"},
                                               bodies[i]["messages"][1]]}
    log = write(tmp_path / "conv.jsonl", bodies)
    runs = {}
    for budget in (None, 1_500, 0):
        if budget is not None:
            monkeypatch.setattr(kept_mod, "KEEP_BYTES", budget)
        r = CountingRenderer()
        per: list[tuple[str, int, int, int, str]] = []
        res = check([log], r, CheckOptions(block_size=BS, gpu_blocks=200, render_ahead=False),  # renders counted here
                    on_request=lambda q, o, m, per=per: per.append((q.where, o.prompt_tokens, o.cached,
                                                                    o.cached_unlimited, m.reason)))
        runs[budget] = (per, res.totals, res.fixed, json.dumps(res.as_json(), sort_keys=True), r.rendered)
    (per0, t0, f0, j0, n0), (per1, t1, f1, j1, n1), (per2, t2, f2, j2, n2) = runs[None], runs[1_500], runs[0]
    assert f0 is not None and f0.cached > t0.cached  # a fix pass ran and the fix pays
    assert per0 == per1 == per2 and len(per0) == 30
    assert (t0, f0, j0) == (t1, f1, j1) == (t2, f2, j2)
    assert n2 == 60  # nothing kept: 30 renders a pass
    assert n0 < n1 < n2, (n0, n1, n2)  # all kept after the first finding, then a few, then none


def _turns(n: int, conv: str, stamp: bool = False) -> list[tuple[LogRequest, str]]:
    """A conversation's requests and their rendered texts, each repeating the one before (a
    system prompt with a timestamp per request when ``stamp``), as plain strings made here."""
    system = "You are careful.\n" + "\n".join(f"rule {i}: answer briefly, é ü" for i in range(40))
    out, history = [], ""
    for i in range(n):
        history += f"<user>{conv} question {i}</user>\n<assistant>answer {i} " + "x" * 50 + "</assistant>\n"
        now = f"\nnow: 2026-12-06T01:{i:02d}:00Z" if stamp else ""
        head = f"<system>{system}{now}</system>\n"
        r = LogRequest(source=f"log-{conv}", line=i + 1, kind="chat",
                       messages=[{"role": "user", "content": f"{conv} question 0"}])
        out.append((r, head + history + "<assistant>"))
    return out


def test_kept_renders_come_back_as_they_were_in_far_less_than_their_text():
    """Two interleaved conversations (one with a timestamp in its system prompt): each text is
    kept as what it adds to its previous turn, and taken back equal, in arrival order."""
    from kvplan.collectors.requests.kept import Kept

    a, b = _turns(30, "alpha"), _turns(30, "beta", stamp=True)
    seq = [x for pair in zip(a, b, strict=True) for x in pair]
    kept = Kept(10 << 20)
    for r, text in seq:
        kept.put(Prepared(r, None, None, text))
    total = sum(len(t.encode()) for _, t in seq)
    assert kept.used < total / 10, (kept.used, total)
    assert [kept.take(r) for r, _ in seq] == [t for _, t in seq]
    assert not kept.by  # each freed as it is taken


def test_a_kept_text_comes_back_whatever_it_changes_of_its_previous_turn():
    """Turns that rewrite a line in the middle (a timestamp of another length), add lines, add
    more than ``RAW_BYTES`` (then compressed), change the last line (no newline after it) or
    share nothing: each comes back as it was from its previous turn's bytes, and what is kept
    is a small part of the texts."""
    import random

    from kvplan.collectors.requests.kept import RAW_BYTES, Kept

    rng = random.Random(5)
    texts = []
    lines = ["<system>You are careful."] + [f"rule {i}: é ü" for i in range(30)]
    for i in range(80):
        op = i % 5
        if op == 0:
            lines[rng.randrange(len(lines))] = f"now: 2026-12-0{rng.randrange(1, 9)}T{rng.randrange(24)}:00Z"
        elif op == 1:
            lines += [f"turn {i} " + "y" * rng.randrange(0, 40) for _ in range(rng.randrange(1, 5))]
        elif op == 2:
            lines.append(f"{i} " + "z" * (RAW_BYTES + 4000))
        elif op == 3:
            lines[-1] += "!"
        elif i % 20 == 9:
            lines = [f"fresh {i}", *lines[1:]]  # the first line: nothing shared from the start
        texts.append("\n".join(lines))
    reqs = [LogRequest(source="log", line=i + 1, kind="chat", messages=[{"role": "user", "content": "q"}])
            for i in range(len(texts))]
    kept = Kept(64 << 20)
    for r, text in zip(reqs, texts, strict=True):
        kept.put(Prepared(r, None, None, text))
    assert len(kept.by) == len(texts)
    assert kept.used < 48_000, kept.used  # 16 lines of RAW_BYTES + 4000 among them: compressed
    assert [kept.take(r) for r in reqs] == texts


def test_a_kept_text_whose_previous_turn_is_gone_or_wrong_is_rendered_again():
    """None (render again), never a wrong text: the previous turn forgotten by the fix pass, or
    two requests at one place (what the text was kept against is not what comes back)."""
    from kvplan.collectors.requests.kept import Kept

    turns = _turns(3, "alpha")
    kept = Kept(10 << 20)
    for r, text in turns:
        kept.put(Prepared(r, None, None, text))
    kept.take_texts.budget = 0  # the fix pass holds no recent text
    assert kept.take(turns[0][0]) == turns[0][1]  # kept whole: no previous turn needed
    assert kept.take(turns[1][0]) is None

    kept = Kept(10 << 20)
    for r, text in turns:
        kept.put(Prepared(r, None, None, text))
    assert kept.take(turns[0][0]) == turns[0][1]
    kept.seen(turns[0][0], turns[0][1].replace("rule 3", "rule 4"))  # another request at the first one's place
    assert kept.take(turns[1][0]) is None
