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
from kvplan.models.prompts.hashing import block_hashes
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
    f = Finder(window=8, max_lines=5)
    for i in range(200):
        text = "\n".join(f"request {i} line {j}" for j in range(5))
        f.observe(text, line_map(text, [("system", text)]), 0, True)
    assert len(f.recent) == 8
    assert len(f.index) == 8 * 5


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
