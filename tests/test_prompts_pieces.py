"""The piece cache (collectors/requests/pieces.py, issue 35 item 1): a prompt tokenized piece by
piece, each distinct piece once, gives the ids transformers gives the whole prompt, on the
recorded demo logs (their tokenizer and template) and on chat and completion logs with the
fixture tokenizer; a tokenizer whose pieces do not add up is tokenized whole, and the check says
so; the cache stays within its bound; the check's results are the same with and without it."""

from __future__ import annotations

import json
import random
from concurrent.futures import Future
from pathlib import Path

import pytest

from kvplan.collectors.requests.check import CheckOptions, check
from kvplan.collectors.requests.pieces import (
    MAX_BYTES,
    NEWLINE_CUT,
    PIECE_OVERHEAD,
    PROBE_PROMPTS,
    SAMPLE_FIRST,
    WHOLE_PROMPTS,
    PieceCache,
    Plan,
    cuts,
    newline_pieces,
    newline_pieces_fast,
    now,
)
from kvplan.collectors.requests.read import Skipped, read_requests
from kvplan.collectors.requests.render import Renderer

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "prompts"
DEMO = ROOT / "deploy" / "demo" / "prompts"
TEMPLATE = ROOT / "deploy" / "local" / "templates" / "tiny-llama-tools.jinja"


def transformers_ids(r: Renderer, texts: list[str], special: bool) -> list[list[int]]:
    """The reference: transformers' own call on each whole prompt, one at a time."""
    return [list(r.tok(t, add_special_tokens=special)["input_ids"]) for t in texts]


def texts_of(r: Renderer, logs: list[Path]) -> dict[bool, list[str]]:
    """Each log's text prompts as the check renders them, by kind (completions: True)."""
    out: dict[bool, list[str]] = {False: [], True: []}
    for q in read_requests(logs, Skipped()):
        if q.kind == "completion" and q.prompt_ids is not None:
            continue
        out[q.kind == "completion"].append(r.text(q))
    return out


def agent_log(path: Path, n_agents: int = 3, turns: int = 6, seed: int = 3, rules: int = 12) -> Path:
    """Multi-turn agent conversations with tools (each request repeats the conversation so far)
    and raw completions, with the whitespace a log holds: blank lines, trailing spaces, tabs,
    CRLF, non-ASCII."""
    rng = random.Random(seed)
    words = ["cache", "block", "prefix", "é", "日本", "🙂", "it's", "x.", "  ", "\t", "42", "(a)", "\r\n", "\n\n"]
    lines = []
    for a in range(n_agents):
        system = "\n".join(f"Rule {i}: " + " ".join(rng.choice(words) for _ in range(8)) + rng.choice(["", " ", "\n"])
                           for i in range(rules))
        tools = [{"type": "function", "function": {"name": f"tool_{a}_{k}", "description": f"does {k}\nwell",
                                                   "parameters": {"type": "object"}}} for k in range(2)]
        msgs = [{"role": "system", "content": system}]
        for t in range(turns):
            msgs.append({"role": "user", "content": f"turn {t}\n" + " ".join(rng.choice(words) for _ in range(20))})
            lines.append(json.dumps({"messages": list(msgs), "tools": tools, "max_tokens": 8}))
            msgs.append({"role": "assistant", "content": "ok\n" + " ".join(rng.choice(words) for _ in range(10))})
        lines.append(json.dumps({"prompt": system + "\nQ: " + rng.choice(words), "max_tokens": 4}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_pieces_equal_whole_prompts_on_the_recorded_demo_logs():
    r = Renderer(DEMO / "tokenizer", TEMPLATE)
    texts = texts_of(r, sorted((DEMO / "logs").iterdir()))
    assert texts[False] and texts[True]  # chat and completion logs both
    cache = r.pieces
    assert cache is not None and cache.active, cache and cache.plan
    for special, ts in texts.items():
        assert [a.tolist() for a in r.encode_ids(ts, add_special_tokens=special)] == transformers_ids(r, ts, special)
    assert cache.failed is None and cache.sampled >= SAMPLE_FIRST
    # the logs repeat their system prompts: less text tokenized than asked for (short logs of
    # short prompts: pieces of about 8 lines often span two messages)
    assert cache.chars_tokenized < 0.8 * cache.chars_asked, (cache.chars_tokenized, cache.chars_asked)


@pytest.mark.parametrize("batch", [1, 7, 1000])
def test_pieces_equal_whole_prompts_with_the_fixture_tokenizer(tmp_path, batch):
    r = Renderer(FIX / "tokenizer", FIX / "chat_template.jinja")
    texts = texts_of(r, [agent_log(tmp_path / "agents.jsonl")])
    assert len(texts[False]) == 18 and len(texts[True]) == 3
    for special, ts in texts.items():
        got = []
        for i in range(0, len(ts), batch):
            got += [a.tolist() for a in r.encode_ids(ts[i:i + batch], add_special_tokens=special)]
        assert got == transformers_ids(r, ts, special)
    assert r.pieces is not None and r.pieces.failed is None
    assert r.pieces.chars_tokenized < r.pieces.chars_asked / 2, (r.pieces.chars_tokenized, r.pieces.chars_asked)


ALPHABET = ["a", "Bc", "1", "22", " ", "  ", "\n", "\n\n", "\t", "\r", "\r\n", ".", "'s", "'", "é", "🙂", "<s>",
            "</s>", "\u00a0", "\u2028", "\x0b", "-", "_x", ":\n", " \n", "\n "]
"""Spaces, tabs, CR, newlines, punctuation, contractions, non-ASCII and the added tokens."""


def byte_level_tokenizer(d: Path) -> Path:
    """A real GPT-2-style tokenizer (byte-level BPE, its regex, no normalizer; ``<s>`` and
    ``</s>`` special) trained on ``ALPHABET``'s strings, so that its merges join runs of spaces
    and newlines (the fixture tokenizer has few such merges): a cut in the wrong place changes
    its ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(5)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["".join(rng.choice(ALPHABET) for _ in range(60)) for _ in range(3000)],
                            trainers.BpeTrainer(vocab_size=600, special_tokens=["<s>", "</s>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>").save_pretrained(d)
    return d


@pytest.mark.parametrize("which", ["fixture", "trained"])
def test_the_newline_cut_on_random_text_with_tricky_whitespace(tmp_path, which):
    """GPT-2's byte-level regex ends a pre-token after ``x\\nY``: random strings of spaces, tabs,
    CR, newlines, punctuation, contractions and non-ASCII, cut there, give transformers' ids."""
    r = Renderer(FIX / "tokenizer" if which == "fixture" else byte_level_tokenizer(tmp_path / "tok"))
    rng = random.Random(11)
    texts = ["".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 40))) for _ in range(600)]
    assert r.pieces is not None and r.pieces.plan.newlines
    r._pieces = PieceCache(r._backend(), lines_per_piece=1)  # every cut, not one in eight lines
    assert sum(len(r.pieces._cut(t)) > 1 for t in texts) > 400  # most are cut
    for t in texts:  # the fast cut (str.split) cuts where the regex does
        got: list[str | int] = []
        newline_pieces(t, 1, got)
        assert [x for x in got if x] == [x for x in NEWLINE_CUT.split(t) if x], repr(t)
        got = []
        newline_pieces(t, 3, got)
        assert "".join(map(str, got)) == t
    bt = r._backend()
    for t, want in zip(texts, transformers_ids(r, texts, False), strict=True):  # each cut alone, no sample check
        pieces = [[p] if isinstance(p, int) else bt.encode(p, add_special_tokens=False).ids for p in r.pieces._cut(t)]
        assert [i for p in pieces for i in p] == want, repr(t)
    for k in (1, 3):
        r._pieces = PieceCache(bt, lines_per_piece=k)  # every cut, then about one in three lines
        for special in (False, True):
            got = [a.tolist() for a in r.encode_ids(texts, add_special_tokens=special)]
            assert got == transformers_ids(r, texts, special)
        assert r.pieces.failed is None


def metaspace_tokenizer(d: Path) -> Path:
    """A real SentencePiece-style tokenizer (Metaspace, ``prepend_scheme="first"``, as Llama 2 and
    Mistral's) with ChatML special tokens: its text between two of them is not tokenized as it
    is alone (the first segment gets the "▁" prefix, the others do not)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.train_from_iterator(["user hello world assistant system you are a careful helper"] * 50,
                            trainers.BpeTrainer(vocab_size=200, special_tokens=["<|im_start|>", "<|im_end|>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>")
    fast.chat_template = ("{% for m in messages %}<|im_start|>{{ m.role }} {{ m.content }}<|im_end|>{% endfor %}"
                          "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}")
    fast.save_pretrained(d)
    return d


def test_a_tokenizer_whose_pieces_do_not_add_up_is_tokenized_whole(tmp_path):
    r = Renderer(metaspace_tokenizer(tmp_path / "tok"))
    bt = r._backend()
    # the pieces really do not add up on this tokenizer (so cutting it would be wrong)
    assert bt.encode("<|im_start|>user hello", add_special_tokens=False).ids[1:] \
        != bt.encode("user hello", add_special_tokens=False).ids
    assert cuts(bt).why_not is not None and "Metaspace" in cuts(bt).why_not
    assert r.pieces is not None and not r.pieces.active
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"messages": [{"role": "system", "content": "you are a careful helper"},
                                                    {"role": "user", "content": f"hello {w}"}]}) + "\n"
                           for w in ["world", "user", "world"]))
    res = check([log], r, CheckOptions(block_size=2))
    assert any("tokenized whole" in n and "Metaspace" in n for n in res.notes), res.notes


def test_the_sample_check_falls_back_when_forced_cuts_do_not_add_up(tmp_path):
    """Cut at the special tokens anyway (a plan the tokenizer does not allow): the first sampled
    prompt differs, the cache turns itself off, every id is still transformers', and the check's
    notes say so."""
    r = Renderer(metaspace_tokenizer(tmp_path / "tok"))
    bt = r._backend()
    wrong = Plan(added=plan_of_specials(), split_ids={"<|im_start|>": bt.token_to_id("<|im_start|>"),
                                                      "<|im_end|>": bt.token_to_id("<|im_end|>")})
    r._pieces = PieceCache(bt, plan=wrong)
    assert r._pieces.active
    texts = [f"<|im_start|>user hello {w}<|im_end|><|im_start|>assistant " for w in ["world", "you", "a"]]
    got = [a.tolist() for a in r.encode_ids(texts, add_special_tokens=False)]
    assert got == transformers_ids(r, texts, False)
    assert not r._pieces.active and r._pieces.failed is not None and r._pieces.by_pieces == 0
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"hello {w}"}]}) + "\n"
                           for w in ["world", "you", "world"]))
    r2 = Renderer(tmp_path / "tok")
    r2._pieces = PieceCache(r2._backend(), plan=wrong)
    res = check([log], r2, CheckOptions(block_size=2))
    plain = check([log], Renderer(tmp_path / "tok", piece_bytes=None), CheckOptions(block_size=2))
    assert any("did not add up" in n for n in res.notes), res.notes
    assert (res.totals.prompt_tokens, res.totals.cached) == (plain.totals.prompt_tokens, plain.totals.cached)


def plan_of_specials():
    import re

    return re.compile(r"<\|im_start\|>|<\|im_end\|>")


def test_the_cache_stays_within_its_bound_and_evicts_the_oldest():
    r = Renderer(FIX / "tokenizer")
    bt = r._backend()
    texts = [f"line {i} of a text that is long enough to be a few tokens\nand a second line {i}" for i in range(50)]
    first = [len(bt.encode(t.split("\n")[0], add_special_tokens=False).ids) for t in texts]
    bound = 10 * (4 * max(first) + PIECE_OVERHEAD)  # at most about ten lines' pieces
    cache = PieceCache(bt, bound, lines_per_piece=1)
    r._pieces = cache
    got = [a.tolist() for a in r.encode_ids(texts, add_special_tokens=False)]
    assert got == transformers_ids(r, texts, False)
    assert cache.bytes <= bound and cache.evicted >= 100 - 20 and len(cache.cache) <= 20
    assert cache.bytes == sum(4 * len(a) + PIECE_OVERHEAD for a in cache.cache.values())
    before = cache.pieces_tokenized
    r.encode_ids(texts[-1:], add_special_tokens=False)  # the newest: still held
    assert cache.pieces_tokenized == before
    r.encode_ids(texts[:1], add_special_tokens=False)  # the oldest: evicted, tokenized again
    assert cache.pieces_tokenized == before + 2


def test_the_check_gives_the_same_results_with_and_without_pieces(tmp_path):
    """Per request prompt and cached tokens, the findings and the fixed totals, with and without
    the piece cache, on a multi-turn log whose system prompts carry a buster (so the fix pass
    runs and reuses the first pass's pieces)."""
    log = agent_log(tmp_path / "agents.jsonl", n_agents=4, turns=5, rules=60)
    stamped = tmp_path / "stamped.jsonl"
    out = []
    for i, line in enumerate(log.read_text().splitlines()):
        d = json.loads(line)
        if "messages" in d:
            d["messages"][0]["content"] = d["messages"][0]["content"].replace(
                "Rule 1:", f"Now: 2026-12-01T10:00:{i:02d}.{i * 7 % 1000:03d}Z\nRule 1:", 1)
        out.append(json.dumps(d))
    stamped.write_text("\n".join(out) + "\n")
    runs = []
    first: list[tuple[int, int]] = []  # the cache's (chars asked, chars tokenized) when the first pass ends

    def progress(stage: str, n: int, r: Renderer) -> None:
        if stage == "predicted" and r._pieces is not None:
            first.append((r._pieces.chars_asked, r._pieces.chars_tokenized))

    for pb in (None, 1 << 20):
        r = Renderer(FIX / "tokenizer", FIX / "chat_template.jinja", piece_bytes=pb)
        per: list[tuple[str, int, int]] = []
        res = check([stamped], r, CheckOptions(block_size=4, gpu_blocks=2000),
                    progress=lambda stage, n, r=r: progress(stage, n, r),
                    on_request=lambda q, o, m, per=per: per.append((q.where, o.prompt_tokens, o.cached)))
        runs.append((per, res.totals, res.fixed, [f.totals for f in res.findings], res.notes, r._pieces))
    (per0, t0, f0, v0, n0, _), (per1, t1, f1, v1, n1, cache) = runs
    assert per1 == per0 and len(per0) == 24
    assert (t1, f1, v1, n1) == (t0, f0, v0, n0)
    assert f0 is not None and f0.cached > t0.cached  # the fix pass ran and found something
    assert cache is not None and cache.failed is None
    assert cache.chars_tokenized < 0.8 * cache.chars_asked, (cache.chars_tokenized, cache.chars_asked)
    # the fix pass (the timestamp moved in every request) reuses the first pass's pieces: it
    # tokenizes a small part of the text it asks for
    (asked, tokenized), = first
    assert cache.chars_asked > asked, "the fix pass asked for text"
    assert cache.chars_tokenized - tokenized < 0.3 * (cache.chars_asked - asked), \
        (cache.chars_tokenized - tokenized, cache.chars_asked - asked)


def test_the_numpy_cut_gives_the_same_pieces_as_the_line_loop():
    """``newline_pieces_fast`` (places found by numpy over the UTF-8 bytes, a non-ASCII neighbour
    decided on its whole character) against ``newline_pieces`` (a Python loop over the lines) and
    the regex: the same pieces at every ``k``, on random text of spaces, tabs, CR, non-ASCII
    spaces (U+00A0, U+2028, U+3000, U+0085), the file separators str.isspace counts (U+001C), a
    lone surrogate and emoji next to newlines."""
    rng = random.Random(5)
    alphabet = [*ALPHABET, "\n", "\n", "\u3000", "\u0085", "\x1c", "\ud800", "abc", "xyz\n", "é\n", "\n🙂"]
    for _ in range(20_000):
        t = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60)))
        for k in (1, 2, 3, 8):
            want: list[str | int] = []
            newline_pieces(t, k, want)
            got: list[str | int] = []
            newline_pieces_fast(t, k, got)
            assert got == want, (repr(t), k)
        got = []
        newline_pieces_fast(t, 1, got)
        assert [x for x in got if x] == [x for x in NEWLINE_CUT.split(t) if x], repr(t)


def distinct_log(path: Path, n: int, seed: int = 4) -> Path:
    """``n`` chat requests, each its own system prompt and question: no piece repeats."""
    rng = random.Random(seed)
    words = "cache block prefix token engine request policy answer".split()
    lines = [json.dumps({"messages": [
        {"role": "system", "content": "\n".join(f"{i} {j} " + " ".join(rng.choice(words) for _ in range(6))
                                                 for j in range(8))},
        {"role": "user", "content": f"{i}: " + " ".join(rng.choice(words) for _ in range(10))}]})
        for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_prompts_whose_pieces_do_not_repeat_are_tokenized_whole_for_a_while(tmp_path):
    """On all-distinct prompts the cache saves nothing: after ``PROBE_PROMPTS`` prompts by pieces,
    the next ``WHOLE_PROMPTS`` are tokenized whole, then pieces are tried again, then twice as
    many whole; the ids are transformers' own throughout. An agent log (prompts repeating their
    history) stays by pieces."""
    n = PROBE_PROMPTS + WHOLE_PROMPTS + PROBE_PROMPTS + 2 * WHOLE_PROMPTS + PROBE_PROMPTS
    r = Renderer(FIX / "tokenizer", FIX / "chat_template.jinja")
    ts = texts_of(r, [distinct_log(tmp_path / "distinct.jsonl", n)])[False]
    assert len(ts) == n
    got = []
    for i in range(0, n, 16):
        got += [a.tolist() for a in r.encode_ids(ts[i:i + 16], add_special_tokens=False)]
    assert got == transformers_ids(r, ts, False)
    cache = r.pieces
    assert cache is not None and cache.failed is None
    assert cache.whole == 3 * WHOLE_PROMPTS and cache.by_pieces == 3 * PROBE_PROMPTS  # pieces, whole, pieces, ...
    r = Renderer(FIX / "tokenizer", FIX / "chat_template.jinja")
    ts = texts_of(r, [agent_log(tmp_path / "agents.jsonl", n_agents=8, turns=12, rules=30)])[False]
    assert len(ts) > PROBE_PROMPTS
    got = []
    for i in range(0, len(ts), 16):
        got += [a.tolist() for a in r.encode_ids(ts[i:i + 16], add_special_tokens=False)]
    assert got == transformers_ids(r, ts, False)
    assert r.pieces is not None and r.pieces.whole == 0 and r.pieces.by_pieces == len(ts)


@pytest.mark.parametrize("bound", [None, 4_000])
def test_batches_begun_before_the_earlier_ones_finish_give_the_same_ids(tmp_path, bound):
    """Every batch begun before any is finished (the tokenizer calls made afterwards, in order):
    a piece several batches lack is tokenized once, by the first (as many pieces tokenized as one
    batch at a time), and each prompt's ids are transformers'; with a small bound too, where
    pieces are evicted between a batch's beginning and its end."""
    r = Renderer(FIX / "tokenizer", FIX / "chat_template.jinja")
    texts = texts_of(r, [agent_log(tmp_path / "agents.jsonl")])[False]
    batches = [texts[i:i + 3] for i in range(0, len(texts), 3)]
    one = PieceCache(r._backend(), bound if bound is not None else MAX_BYTES)
    for b in batches:
        one.encode(b, add_special_tokens=False)
    calls: list[tuple[Future[object], object]] = []

    def later(work):
        f: Future[object] = Future()
        calls.append((f, work))
        return f
    cache = PieceCache(r._backend(), bound if bound is not None else MAX_BYTES)
    begun = [cache.begin(b, add_special_tokens=False, run=later) for b in batches]
    lent = any(b.borrowed for b in begun)
    for f, work in calls:
        f.set_result(work())
    got = [a.tolist() for b in begun for a in cache.finish(b)]
    assert got == transformers_ids(r, texts, False)
    assert cache.failed is None and cache.sampled >= SAMPLE_FIRST // 2
    if bound is None:
        assert cache.pieces_tokenized == one.pieces_tokenized and cache.evicted == 0
        assert lent
    else:
        assert cache.evicted > 0 and cache.bytes <= bound


def test_a_batch_dropped_unfinished_lends_no_piece_to_a_later_one():
    """A check that stops early leaves batches begun and not finished: once dropped, a batch
    begun later tokenizes their pieces itself (it neither waits on them nor takes from them)."""
    r = Renderer(FIX / "tokenizer", FIX / "chat_template.jinja")
    bt = r._backend()
    cache = PieceCache(bt)
    texts = [f"rule {i}: keep it short\nrule {i + 1}: cite the source\nask {i}" for i in range(6)]
    never: list[Future[object]] = []

    def stuck(work):
        f: Future[object] = Future()
        never.append(f)  # never run: the check stopped before these were tokenized
        return f
    gone = cache.begin(texts, add_special_tokens=False, run=stuck)
    assert gone.missing and all(cache.pending.get(k) is gone for k in gone.missing)
    cache.drop(gone)
    assert cache.pending == {}
    again = cache.begin(texts, add_special_tokens=False)
    assert again.borrowed == {}
    got = [a.tolist() for a in cache.finish(again)]
    assert got == [e.ids for e in bt.encode_batch(texts, add_special_tokens=False)]


def test_a_finished_batch_holds_no_earlier_batch(tmp_path):
    """A batch takes pieces from earlier batches still being tokenized; once finished it lets
    them go, so a long run does not hold a chain of every batch (and its text) back to the first."""
    import weakref

    r = Renderer(FIX / "tokenizer", FIX / "chat_template.jinja")
    texts = texts_of(r, [agent_log(tmp_path / "agents.jsonl", n_agents=1, turns=12)])[False]
    cache = PieceCache(r._backend())
    calls: list[tuple[Future[object], object]] = []

    def later(work):
        f: Future[object] = Future()
        calls.append((f, work))
        return f
    begun = [cache.begin(texts[i:i + 2], add_special_tokens=False, run=later) for i in range(0, len(texts), 2)]
    assert sum(1 for b in begun if b.borrowed) >= 4  # a turn is new in one batch, repeated in the next
    for f, work in calls:
        f.set_result(work())
    got = [a.tolist() for b in begun for a in cache.finish(b)]
    assert got == transformers_ids(r, texts, False)
    refs = [weakref.ref(b) for b in begun]
    last = begun[-1]
    del begun
    assert [ref() is None for ref in refs] == [True] * (len(refs) - 1) + [False], last


@pytest.mark.parametrize("which", ["fixture", "trained"])
@pytest.mark.parametrize("ahead", [False, True])
def test_a_turn_cut_after_its_conversations_last_turn_gives_transformers_ids(tmp_path, which, ahead):
    """Each text continues its stream's last one from a random place (its end included, so a turn
    goes on inside the last one's final piece; added tokens and halves of them around the place,
    so a token may be cut across it), in streams that interleave and batches of 3, begun before
    the earlier ones finish (``ahead``) or not, cut at every place: every prompt's ids are
    transformers' whole ones, and the later turns took most of their text from the earlier ones."""
    r = Renderer(FIX / "tokenizer" if which == "fixture" else byte_level_tokenizer(tmp_path / "tok"))
    rng = random.Random(13)
    alphabet = [*ALPHABET, "<", "</", "s>", "<s", "/s>", "x\ny", "a\nb\nc"]
    texts: list[str] = []
    streams: list[str] = []
    last: dict[str, str] = {}
    for _ in range(240):
        s = rng.choice("abc")
        prev = last.get(s, "")
        keep = rng.choice([len(prev), len(prev), rng.randrange(len(prev) + 1)])
        last[s] = prev[:keep] + "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 30)))
        texts.append(last[s])
        streams.append(s)
    cache = r._pieces = PieceCache(r._backend(), lines_per_piece=1)
    calls: list[tuple[Future[object], object]] = []

    def later(work):
        f: Future[object] = Future()
        calls.append((f, work))
        return f
    got: list[list[int]] = []
    begun = []
    newest: dict[str, object] = {}  # each stream's ids as last finished
    claimed = [0]

    def finish(b):
        out = cache.finish(b)
        for i, ids in enumerate(out):  # ``same``: the stream's last ids it was copied from, and how many
            s = streams[len(got) + i]
            if b.same[i] is not None:
                prev, n = b.same[i]
                assert prev is newest[s] and 0 < n <= min(len(ids), len(prev))
                assert ids[:n].tolist() == prev[:n].tolist()
                claimed[0] += 1
            newest[s] = ids
        got.extend(a.tolist() for a in out)
    for i in range(0, len(texts), 3):
        begun.append(cache.begin(texts[i:i + 3], add_special_tokens=False, run=later if ahead else now,
                                 streams=streams[i:i + 3]))
        if not ahead or len(begun) > 2:  # at most three batches out at once, as the check has
            for f, work in calls:
                f.set_result(work())
            calls.clear()
            finish(begun.pop(0))
    for f, work in calls:
        f.set_result(work())
    for b in begun:
        finish(b)
    assert got == transformers_ids(r, texts, False)
    assert cache.failed is None
    assert cache.chars_kept > cache.chars_asked / 2, (cache.chars_kept, cache.chars_asked)
    assert claimed[0] > len(texts) / 2


def _rewritten_turns(rng: random.Random, n: int, streams_from: str = "abc") -> tuple[list[str], list[str]]:
    """Texts of streams that interleave, each a line-by-line rewrite of its stream's last one:
    one line replaced (a timestamp's length or another, added tokens and halves of them, spaces
    and newlines around it), then new lines added; sometimes only lines added."""
    alphabet = [*ALPHABET, "<", "</", "s>", "<s", "/s>", "x\ny", "a\nb\nc"]
    texts: list[str] = []
    streams: list[str] = []
    last: dict[str, list[str]] = {}
    for _ in range(n):
        s = rng.choice(streams_from)
        lines = list(last.get(s, []))
        if lines and rng.random() < 0.8:
            i = rng.randrange(len(lines))
            lines[i] = rng.choice([f"Now: 2026-12-07T{rng.randrange(24):02d}:{rng.randrange(60):02d}Z",
                                   "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))])
        lines += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 12)))
                  for _ in range(rng.randrange(1, 8))]
        last[s] = lines
        texts.append("\n".join(lines))
        streams.append(s)
    return texts, streams


@pytest.mark.parametrize("which", ["fixture", "trained"])
@pytest.mark.parametrize("per_piece", [1, 2])
def test_a_turn_that_rewrites_one_line_of_its_last_turn_takes_the_rest_from_it(tmp_path, which, per_piece):
    """A turn that differs from its stream's last one in one line in the middle and is the same
    after it (a timestamp rewritten in the system prompt) takes the pieces after that line from
    it too (``Span``): every prompt's ids are transformers' whole ones, in batches of 3 begun
    before the earlier ones finish, and more text is taken from earlier turns than without the
    spans."""
    r = Renderer(FIX / "tokenizer" if which == "fixture" else byte_level_tokenizer(tmp_path / "tok"))
    texts, streams = _rewritten_turns(random.Random(17), 240)
    kept = {}
    for spans in (True, False):
        cache = PieceCache(r._backend(), lines_per_piece=per_piece)
        if not spans:
            cache._span = lambda *a: None  # type: ignore[method-assign]
        calls: list[tuple[Future[object], object]] = []

        def later(work, calls=calls):  # type: ignore[no-untyped-def]
            f: Future[object] = Future()
            calls.append((f, work))
            return f
        got: list[list[int]] = []
        begun = []
        told = [0]  # runs of ids a prompt has at the same places as its last turn (``Batch.spans``)

        def finish(b, cache=cache, got=got, told=told) -> None:  # type: ignore[no-untyped-def]
            out = cache.finish(b)
            got.extend(a.tolist() for a in out)
            for a, sp in zip(out, b.spans, strict=True):
                if sp is not None:  # true of the ids: the digests of the run are taken from the last turn's
                    base, at, n = sp
                    assert n > 0 and a[at:at + n].tolist() == base[at:at + n].tolist()
                    told[0] += 1
        for i in range(0, len(texts), 3):
            begun.append(cache.begin(texts[i:i + 3], add_special_tokens=False, run=later, streams=streams[i:i + 3]))
            if len(begun) > 2:
                for f, work in calls:
                    f.set_result(work())
                calls.clear()
                finish(begun.pop(0))
        for f, work in calls:
            f.set_result(work())
        for b in begun:
            finish(b)
        assert got == transformers_ids(r, texts, False)
        assert cache.failed is None
        kept[spans] = cache.chars_kept
        assert (told[0] > 0) == spans, told
    assert kept[True] > kept[False] * 1.05, kept


def test_the_last_turns_digests_are_a_turns_digests_where_their_ids_agree():
    """``LastTurns.digests`` (the digests of the ids a turn shares with its stream's last turn
    taken from it) gives ``token_digests_many``'s digests: turns that go on from their last one,
    part from it early, are shorter than it, rewrite a few ids in the middle, two of one stream
    in a batch (the later one's last turn is the one before it in the batch); with a bound that
    drops turns too. The digests taken from a last turn: its leading ids in common, and the run
    of ids a turn is told it has at the same places (the piece cache's ``Batch.spans``), counted
    here from the ids themselves."""
    import numpy as np

    from kvplan.collectors.requests.prepare import LastTurns
    from kvplan.models.prompts.hashing import token_digests

    def first_difference(a: list[int], b: list[int]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))

    rng = random.Random(17)
    for bound in (1 << 30, 3_000):
        turns = LastTurns(bound)
        last: dict[int, list[int]] = {}
        expected = 0  # digests taken from a last turn
        for _ in range(60):
            batch, streams = [], []
            for _ in range(rng.randrange(1, 5)):
                s = rng.randrange(3)
                prev = last.get(s, [])
                ids = prev[:rng.choice([len(prev), rng.randrange(len(prev) + 1)])] + [
                    rng.randrange(50_000) for _ in range(rng.randrange(0, 40))]
                if prev and rng.random() < 0.3:  # a few ids rewritten in the middle, as many (a timestamp)
                    ids = list(prev) + ids[len(prev):]
                    for _ in range(rng.randrange(1, 4)):
                        ids[rng.randrange(len(prev))] = rng.randrange(50_000)
                last[s] = ids
                batch.append(np.array(ids, dtype=np.int64))
                streams.append(s)
            bounds = np.zeros(len(batch) + 1, dtype=np.int64)
            np.cumsum([len(a) for a in batch], out=bounds[1:])
            # ids a turn is known to start with (the piece cache's ``Batch.same``) and a run it has at
            # the same places (``Batch.spans``): its last turn's, or other ids (not its last turn's: ignored)
            same: list = []
            spans: list = []
            newest: dict[int, np.ndarray] = {}
            for a, s in zip(batch, streams, strict=True):
                kept = turns.last.get(s)
                prev_ids = newest.get(s, kept[0] if kept is not None else None)
                newest[s] = a
                if prev_ids is None:
                    same.append(None)
                    spans.append(None)
                    continue
                mine, theirs = a.tolist(), prev_ids.tolist()
                n = first_difference(mine, theirs)
                m = min(len(mine), len(theirs))
                same.append(None if not n else (prev_ids, rng.randrange(1, n + 1))
                            if rng.random() < 0.7 else (a + 1, len(a)))
                x = max((i + 1 for i in range(n, m) if mine[i] != theirs[i]), default=m)  # the run to m
                told = x < m and rng.random() < 0.7
                spans.append((prev_ids, x, m - x) if told else (a + 1, 0, len(a)) if rng.random() < 0.2 else None)
                expected += n + (m - max(n, x) if told and m > n else 0)
            dg = turns.digests(batch, bounds, streams, same if rng.random() < 0.8 else None, spans)
            for j, a in enumerate(batch):
                assert dg[bounds[j]:bounds[j + 1]].tolist() == token_digests(a).tolist()
            assert turns.bytes <= bound
        assert turns.reused == expected > 0


def test_a_dropped_batchs_turns_start_no_later_turn():
    """A check that stops early drops the batches it began: a later check with the same
    renderer continues none of their turns (it would wait on ids that never come) and gets
    transformers' ids; a finished turn is still continued."""
    r = Renderer(FIX / "tokenizer", FIX / "chat_template.jinja")
    cache = r._pieces = PieceCache(r._backend(), lines_per_piece=1)
    first = [f"rule {i}: keep it short\nrule {i + 1}: cite the source\nask {i}" for i in range(2)]
    done = cache.begin(first[:1], add_special_tokens=False, streams=["a"])
    cache.finish(done)

    def stuck(work):
        return Future()  # never run: the check stopped before this batch was tokenized
    gone = cache.begin([first[1], first[0] + "\nmore"], add_special_tokens=False, run=stuck, streams=["b", "a"])
    assert gone.turns[1] is not None and gone.turns[1].base is not None  # it continued "a"'s finished turn
    cache.drop(gone)
    assert set(cache.turns) == set() and cache.turn_bytes == 0
    later = [first[1] + "\nand more", first[0] + "\nmore\nstill"]
    again = cache.begin(later, add_special_tokens=False, streams=["b", "a"])
    assert all(t is not None and t.base is None for t in again.turns)
    assert [a.tolist() for a in cache.finish(again)] == transformers_ids(r, later, False)
    onward = [later[1] + "\nlast"]
    b = cache.begin(onward, add_special_tokens=False, streams=["a"])
    assert b.turns[0] is not None and b.turns[0].base is not None
    assert [a.tolist() for a in cache.finish(b)] == transformers_ids(r, onward, False)
