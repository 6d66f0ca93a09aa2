"""The prompts check at scale keeps its results: the batched tokenizer call gives transformers'
own ids, the compact 64-bit key store answers as a Python set does (through its merges), the
buster finder's line index stays bounded by its window, and the check's per-request hits (with
batches, the temporary file and the second pass reusing the first pass's keys) equal an
independent computation from transformers' ids and sha256 block keys held in a plain set."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

import kvplan.collectors.requests.check as check_mod
from kvplan.collectors.requests.check import CheckOptions, check
from kvplan.collectors.requests.render import Renderer
from kvplan.models.prompts.busters import Finder, line_map
from kvplan.models.prompts.hashing import (
    NO_EXTRA,
    ExtraKeys,
    block_hashes,
    chain_keys64,
    chain_keys64_many,
    token_digests,
    token_digests_many,
)
from kvplan.models.prompts.predict import KeySet

FIX = Path(__file__).resolve().parent / "fixtures" / "prompts"
TOKENIZER = FIX / "tokenizer"


@pytest.fixture(scope="module")
def renderer() -> Renderer:
    return Renderer(str(TOKENIZER))


def test_the_batch_call_gives_transformers_ids(renderer):
    texts = ["<s><|system|>\nYou are a helper.\n<|user|>\nHi  there\t!<|end|>\n", "", "é ü 日本 🙂 \n\n  x",
             "</s> and <pad> as text", "a" * 3000]
    for special in (False, True):
        want = [list(renderer.tok(t, add_special_tokens=special)["input_ids"]) for t in texts]
        assert renderer.encode_many(texts, add_special_tokens=special) == want
        assert [renderer.encode(t, add_special_tokens=special) for t in texts] == want


def test_the_key_store_answers_as_a_set_does_through_its_merges():
    rng = random.Random(3)
    pool = [rng.getrandbits(64) for _ in range(400)] + [0, 2**63, 2**64 - 1]
    ks, ref = KeySet(buffer=7), set()
    for _ in range(300):
        keys = [rng.choice(pool) for _ in range(rng.randrange(0, 12))]
        limit = rng.randrange(0, 14)
        want = 0
        for k in keys[:limit]:
            if k not in ref:
                break
            want += 1
        assert ks.leading_then_add(keys, limit) == want
        ref.update(keys)
        assert len(ks) == len(ref)
    assert len(ks.main) > 0 and all(k in ks for k in ref)
    assert not any(k in ks for k in set(pool) - ref)
    assert list(ks.main) == sorted(ks.main)


def test_the_finder_index_is_bounded_by_its_window():
    f = Finder(window=8, max_lines=5, slack=20)
    for i in range(200):
        text = "\n".join(f"request {i} line {j}" for j in range(5))
        f.observe(text, line_map(text, [("system", text)]), 0, True)
    assert len(f.recent) == 8
    assert len(f.index) <= 2 * 8 * 5 + f.slack and len(f.prefix) <= 2 * 8 * 5 + f.slack
    assert len({h for h, s in f.index.items() if s in f.recent}) == 8 * 5
    # 5 new lines a request: past 100 entries (2 x 40 held + 20) at the 21st, then every 13th (40 kept + 13 x 5)
    assert f.rebuilt == 1 + (200 - 21) // 13


def _log(tmp_path: Path, n: int = 60, seed: int = 11) -> Path:
    """Agents whose system prompts a third of the time carry a timestamp on line 2, and a few
    completions with special tokens added: a buster, so the second pass runs."""
    rng = random.Random(seed)
    words = "cache block prefix token engine request policy answer".split()
    agents = ["\n".join([f"You are agent {a}."] + [" ".join(rng.choice(words) for _ in range(9)) for _ in range(14)])
              for a in range(4)]
    lines = []
    for i in range(n):
        a = rng.randrange(4)
        sys_lines = agents[a].split("\n")
        if a % 2 == 0:
            sys_lines.insert(1, f"Now: 2026-12-01T10:{i // 60:02d}:{i % 60:02d}.{rng.randrange(1000):03d}Z")
        if i % 9 == 4:
            lines.append({"prompt": "\n".join(sys_lines) + f"\nQ{i}", "max_tokens": 3})
        else:
            lines.append({"messages": [{"role": "system", "content": "\n".join(sys_lines)},
                                       {"role": "user", "content": f"{i}: " + " ".join(rng.choice(words)
                                                                                     for _ in range(6))}]})
    p = tmp_path / "log.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return p


def _reference(renderer: Renderer, path: Path, bs: int) -> list[int]:
    """Per request, unlimited-cache hit tokens: transformers' template and ids, sha256 keys in a set."""
    tok = renderer.tok
    seen: set[bytes] = set()
    out = []
    for line in path.read_text().splitlines():
        body = json.loads(line)
        if "prompt" in body:
            ids = tok(body["prompt"], add_special_tokens=True)["input_ids"]
        else:
            ids = tok(tok.apply_chat_template(body["messages"], tokenize=False, add_generation_prompt=True),
                      add_special_tokens=False)["input_ids"]
        keys = block_hashes(ids, bs)
        hit = 0
        for k in keys[:(len(ids) - 1) // bs]:
            if k not in seen:
                break
            hit += 1
        seen.update(keys)
        out.append(hit * bs)
    return out


@pytest.mark.parametrize("batch", [1, 5, 64])
def test_per_request_hits_equal_an_independent_computation(tmp_path, renderer, monkeypatch, batch):
    log = _log(tmp_path)
    monkeypatch.setattr(check_mod, "BATCH_REQUESTS", batch)
    got: list[int] = []
    r = check([log], renderer, CheckOptions(block_size=16), on_request=lambda _r, o, _m: got.append(o.cached))
    assert got == _reference(renderer, log, 16)
    assert r.findings and r.fixed is not None and r.fixed.cached > r.totals.cached
    m = r.missed_by_cause
    assert sum(m.values()) == r.totals.prompt_tokens - r.totals.cached and m["busted"] > 0
    assert r.keys_held > 0


def test_a_batch_of_requests_looked_up_at_once_answers_as_a_plain_set_one_at_a_time():
    """``leading_then_add_many`` (and ``leading_then_add``, a batch of one) against a Python set
    served request by request (each request's leading held keys counted before any of its own
    are added): keys repeated within a request, across requests of one batch and across
    batches, the key 0, empty requests and limits past a request's end; through merges of a
    small buffer."""
    rng = random.Random(5)
    for trial in range(60):
        pool = [rng.getrandbits(64) for _ in range(40)] + [0, 2**64 - 1]
        buffer = rng.choice([1, 3, 7, 1000])
        ks, held = KeySet(buffer=buffer), set()
        for _ in range(25):
            reqs = [[rng.choice(pool) for _ in range(rng.randrange(0, 9))] for _ in range(rng.randrange(1, 6))]
            limits = [rng.randrange(0, 11) for _ in reqs]
            want = []
            for r, n in zip(reqs, limits, strict=True):
                want.append(next((i for i, k in enumerate(r[:n]) if k not in held), len(r[:n])))
                held.update(r)
            if trial % 2:
                got = [ks.leading_then_add(r, n) for r, n in zip(reqs, limits, strict=True)]
            else:
                bounds = np.cumsum([0] + [len(r) for r in reqs])
                flat = np.array([k for r in reqs for k in r], dtype=np.uint64)
                got = ks.leading_then_add_many(flat, bounds, np.array(limits)).tolist()
            assert got == want
            assert len(ks) == len(held)
            assert all(k in ks for k in held) and all((k in ks) == (k in held) for k in pool)
        assert sorted([*ks.main.tolist(), *ks.new.tolist()]) == sorted(held)


def test_chained_keys_looked_up_by_bisection_answer_as_a_plain_set_one_at_a_time():
    """``chained_then_add_many`` on requests whose keys are chains (key i a hash of the first
    i + 1 symbols, so a key fixes every key before it): conversations that grow turn by turn,
    branch, repeat and restart, several to a batch, limits short of and past a request's end;
    against a Python set served request by request, through merges of a small buffer."""
    import hashlib

    def chain(symbols: list[int]) -> list[int]:
        return [int.from_bytes(hashlib.blake2b(bytes(symbols[:i + 1]), digest_size=8).digest(), "little")
                for i in range(len(symbols))]
    rng = random.Random(7)
    for _ in range(40):
        ks, held = KeySet(buffer=rng.choice([1, 5, 1000])), set()
        convs: list[list[int]] = []
        for _ in range(30):
            reqs = []
            for _ in range(rng.randrange(1, 7)):
                if convs and rng.random() < 0.7:  # a conversation's next turn, or a branch of it
                    base = rng.choice(convs)
                    c = base[:rng.randrange(0, len(base) + 1)] if rng.random() < 0.3 else list(base)
                else:
                    c = []
                c += [rng.randrange(3) for _ in range(rng.randrange(0, 6))]
                convs.append(c)
                reqs.append(chain(c))
            limits = [rng.randrange(0, len(r) + 3) for r in reqs]
            want = []
            for r, n in zip(reqs, limits, strict=True):
                want.append(next((i for i, k in enumerate(r[:n]) if k not in held), len(r[:n])))
                held.update(r)
            bounds = np.cumsum([0] + [len(r) for r in reqs])
            flat = np.array([k for r in reqs for k in r], dtype=np.uint64)
            assert ks.chained_then_add_many(flat, bounds, np.array(limits)).tolist() == want
            assert len(ks) == len(held)
        assert sorted([*ks.main.tolist(), *ks.new.tolist()]) == sorted(held)


def test_the_keys_of_a_batch_at_once_are_each_requests_own():
    """``token_digests_many`` and ``chain_keys64_many`` give, request by request, what
    ``token_digests`` and ``chain_keys64`` give on each request alone: lengths 0 to 80 against
    block sizes 1 to 32 (partial blocks left out or keyed), with and without extra keys."""
    rng = np.random.default_rng(0)
    extras = [NO_EXTRA, ExtraKeys(lora="a"), ExtraKeys(cache_salt="s"), ExtraKeys("b", "t")]
    for trial in range(120):
        prompts = [rng.integers(0, 200_000, n) for n in rng.integers(0, 80, int(rng.integers(1, 8)))]
        mine = [extras[int(rng.integers(0, 4))] for _ in prompts] if trial % 2 else None
        bounds = np.cumsum([0] + [len(p) for p in prompts])
        digests = token_digests_many(np.concatenate(prompts).astype(np.int64), bounds)
        for bs in (1, 3, 16, 32):
            for partial in (False, True):
                keys, kb = chain_keys64_many(digests, bounds, bs, mine, partial=partial)
                assert kb[-1] == len(keys)
                for i, p in enumerate(prompts):
                    assert digests[bounds[i]:bounds[i + 1]].tolist() == token_digests(p).tolist()
                    want = chain_keys64(p, bs, mine[i] if mine else NO_EXTRA, partial=partial)
                    assert keys[kb[i]:kb[i + 1]].tolist() == want.tolist()


def test_batches_and_the_reused_keys_change_nothing(tmp_path, renderer, monkeypatch):
    """The whole answer (second pass included) is the same one request at a time as in batches,
    and with a key store merging every few keys as with one that never merges."""
    log = _log(tmp_path)
    monkeypatch.setattr(check_mod, "BATCH_REQUESTS", 1)
    one = check([log], renderer, CheckOptions(block_size=16)).as_json()
    monkeypatch.setattr(check_mod, "BATCH_REQUESTS", 64)
    monkeypatch.setattr(KeySet.__init__, "__defaults__", (3,))
    many = check([log], renderer, CheckOptions(block_size=16)).as_json()
    assert one == many and one["hit_rate_if_fixed"] > one["hit_rate_predicted"]


@pytest.mark.parametrize("n", [5, 9, 1_000, 200_000])
def test_the_key_stores_bucketed_look_up_answers_as_isin_does(n):
    """Random 64-bit keys (hashes): the buckets are used; every key held is found, none other."""
    rng = np.random.default_rng(n)
    held = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    ks = KeySet(buffer=n + 1)
    ks.update(held)
    ks.merge()
    assert (ks.width > 0) == (n >= 8)
    asked = np.concatenate([held[rng.integers(0, n, 3 * n)], rng.integers(0, 2**64 - 1, n, dtype=np.uint64),
                            np.array([0, 2**64 - 1], dtype=np.uint64), np.sort(held)[:3] + np.uint64(1)])
    assert ks._in_main(asked).tolist() == np.isin(asked, held).tolist()


def test_the_key_store_falls_back_to_a_binary_search_when_keys_crowd_a_bucket():
    """Small integers (not hashes) all share the first bucket: the look-up is still exact."""
    ks = KeySet(buffer=10_000)
    ks.update(list(range(0, 4_000, 2)))
    ks.merge()
    assert ks.width == 0
    asked = np.arange(0, 4_100, dtype=np.uint64)
    assert ks._in_main(asked).tolist() == [k % 2 == 0 and k < 4_000 for k in range(4_100)]


def test_the_buckets_counted_merge_by_merge_are_the_buckets_of_the_keys_held():
    """A merge counts only the keys it adds into the buckets (while their number of bits stays):
    through merges that keep the bits and ones that change them, each bucket's start is where
    ``np.searchsorted`` puts the bucket's first key, and every key held is found, none other."""
    rng = np.random.default_rng(11)
    ks, held = KeySet(buffer=3_000), []
    kept_bits = 0
    for _ in range(40):
        keys = rng.integers(0, 2**64 - 1, int(rng.integers(1, 2_500)), dtype=np.uint64, endpoint=True)
        before = ks.shift
        ks.update(keys)
        held.append(keys)
        kept_bits += bool(len(ks.main)) and ks.shift == before
        if not ks.width:
            continue
        edges = np.arange(len(ks.starts), dtype=np.uint64) << ks.shift if int(ks.shift) < 64 else None
        assert edges is not None
        want = np.searchsorted(ks.main, edges[:-1]).tolist() + [len(ks.main)]
        assert ks.starts.tolist() == want
    every = np.unique(np.concatenate(held))
    assert kept_bits >= 10  # the counts kept from one merge to the next were used
    assert len(ks) == len(every)
    asked = np.concatenate([every, rng.integers(0, 2**64 - 1, 5_000, dtype=np.uint64)])
    assert ks._held(asked).tolist() == np.isin(asked, every).tolist()
