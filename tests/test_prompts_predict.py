"""models/prompts: vLLM's block keys, the last-token rule, the unlimited cache and vLLM V1's block
pool eviction order, LMCache's chunk rule; expected values worked out by hand."""

from __future__ import annotations

import pytest

from kvplan.models.prompts.hashing import (
    ExtraKeys,
    block_hashes,
    chain_keys64,
    chunk_hashes,
    hittable_tokens,
    token_digests,
)
from kvplan.models.prompts.predict import BlockPool, Hashed, LmcacheUnlimited, Predictor, Totals, hashed


def test_keys_are_chained_on_the_parent_and_only_full_blocks_get_one():
    a = block_hashes(list(range(40)), 16)
    assert len(a) == 2  # 40 tokens: two full blocks, the 8-token tail has no key
    b = block_hashes([99] + list(range(1, 40)), 16)
    assert a[0] != b[0] and a[1] != b[1]  # block 1's tokens are the same: its parent differs
    assert block_hashes(list(range(32)), 16) == a


def test_extra_keys_lora_on_every_block_salt_on_the_first_only():
    t = list(range(48))
    plain = block_hashes(t, 16)
    salted = block_hashes(t, 16, ExtraKeys(cache_salt="tenant-a"))
    lora = block_hashes(t, 16, ExtraKeys(lora="adapter"))
    assert all(p != s for p, s in zip(plain, salted, strict=True))  # the salt changes block 0, so the chain
    assert all(p != q for p, q in zip(plain, lora, strict=True))
    # the salt enters block 0's own key only: continue the plain chain from the salted block 0 and
    # blocks 1.. are the salted ones
    assert block_hashes(t, 16, start=1, parent=salted[0]) == salted[1:]
    assert block_hashes(t, 16, ExtraKeys(lora="adapter"), start=1, parent=lora[0]) == lora[1:]


def test_the_last_token_is_always_computed():
    assert hittable_tokens(64, 16) == 48
    assert hittable_tokens(65, 16) == 64
    assert hittable_tokens(16, 16) == 0
    p = Predictor(16)
    ids = list(range(64))
    assert p.serve(hashed(ids, 16)).cached == 0
    assert p.serve(hashed(ids, 16)).cached == 48  # fully cached, 64 tokens: 48 hit
    assert p.serve(hashed(ids + [7], 16)).cached == 64


def test_a_shorter_or_divergent_prompt_hits_its_common_full_blocks():
    p = Predictor(4)
    p.serve(hashed(list(range(20)), 4))
    assert p.serve(hashed(list(range(10)) + [500] * 10, 4)).cached == 8  # common prefix 10 -> 2 full blocks
    assert p.serve(hashed([1] + list(range(1, 20)), 4)).cached == 0  # first token differs: nothing


def test_eviction_frees_a_requests_tail_before_its_head():
    """block_size 4, num_gpu_blocks 5 (block 0 is the null block: 4 usable, free queue [1,2,3,4]).
    A (9 tokens, 1 output token: 9 computed, 3 blocks) takes 1,2,3, keys a0->1, a1->2, block 3
    partial; freed tail first: keyed 2, 1 appended (queue [4,2,1]), partial 3 prepended: queue
    [3,4,2,1]. B (9 other tokens) pops 3,4,2: block 2 loses a1, block 1 keeps a0. A again hits a0
    only: 4 tokens, where an unlimited cache hits 8. Had the blocks been freed head first (queue
    [3,4,1,2]), B would have taken 1 and A would hit nothing."""
    p = Predictor(4, gpu_blocks=5)
    a = list(range(9))
    b = list(range(100, 109))
    assert p.serve(hashed(a, 4, output_tokens=1)).cached == 0
    assert list(p.pool.free) == [3, 4, 2, 1] if p.pool else False
    assert p.serve(hashed(b, 4, output_tokens=1)).cached == 0
    o = p.serve(hashed(a, 4, output_tokens=1))
    assert (o.cached, o.cached_unlimited) == (4, 8)


def test_output_tokens_take_blocks_and_evict():
    """4 usable blocks of 4 tokens. A: 9 prompt tokens (keys a0, a1). B: 5 prompt tokens and 8
    output tokens: 12 computed tokens, 3 blocks, popped from [3,4,2,1]: 3, 4, 2 (a1 evicted).
    With 1 output token B needs 2 blocks (3, 4) and a1 survives."""
    a = list(range(9))
    b = list(range(200, 205))
    for out, want in ((8, 4), (1, 8)):
        p = Predictor(4, gpu_blocks=5)
        p.serve(hashed(a, 4))
        p.serve(hashed(b, 4, output_tokens=out))
        assert p.serve(hashed(a, 4)).cached == want


def test_a_freed_partial_block_is_reused_before_a_cached_block_is_evicted():
    """vLLM's BlockPool.free_blocks puts a finished request's unhashed blocks (its partial last
    block) at the free queue's head and its hashed ones at the tail. block_size 4, 4 usable
    blocks, queue [1,2,3,4]; each request 1 output token (computed = prompt tokens).
    A (6 tokens): pops 1, 2: 1 = a0, 2 partial; freed: 1 appended, 2 prepended: [2,3,4,1].
    B (6 other tokens): pops 2, 3: 2 = b0, 3 partial; freed: [3,4,1,2].
    C (5 other tokens): pops 3, 4: 3 = c0, 4 partial; freed: [4,1,2,3]. Nothing evicted: three
    keyed blocks and one scratch block fit in 4.
    A again: hit a0 (block 1 touched, leaves the queue), pops 4; freed: [4,2,3,1]: hits 4 tokens.
    B again: hit b0 (block 2), pops 4; freed: [4,3,1,2]: hits 4 tokens.
    Had every freed block gone to the tail (queue after A [3,4,2,1], after B [2,1,4,3]), C would
    have popped 2, 1 and evicted a0; A again would miss and pop 4, 3, evicting b0: 0 and 0."""
    p = Predictor(4, gpu_blocks=5)
    a, b, c = [1, 2, 3, 4, 5, 6], [11, 12, 13, 14, 15, 16], [21, 22, 23, 24, 25]
    assert [p.serve(hashed(x, 4)).cached for x in (a, b, c)] == [0, 0, 0]
    assert p.pool is not None and list(p.pool.free) == [4, 1, 2, 3]
    assert p.pool.evictions == 0
    assert [p.serve(hashed(x, 4)).cached for x in (a, b)] == [4, 4]
    assert list(p.pool.free) == [4, 3, 1, 2]


def test_full_blocks_of_unknown_generated_tokens_are_freed_to_the_tail():
    """Generated tokens whose ids are unknown fill a full block that vLLM hashes (so it goes to
    the queue's tail) though nothing here can hit it. block_size 4, 4 usable blocks.
    A: 5 prompt tokens, 4 output tokens: 8 computed, blocks 1 (a0) and 2 (full, generated),
    no partial block; freed reversed, both to the tail: [3,4,2,1]."""
    p = Predictor(4, gpu_blocks=5)
    p.serve(hashed([1, 2, 3, 4, 5], 4, output_tokens=4))
    assert p.pool is not None and list(p.pool.free) == [3, 4, 2, 1]


def test_a_hit_block_in_the_free_queue_is_touched_before_allocation():
    """3 usable blocks. A (9 tokens) takes 1,2,3; queue [3,2,1]. A' = A's 8 first tokens + 5 new
    (13 tokens, 4 blocks: 2 hit + 2 new) needs 2 new blocks while 3 sit in the queue, 2 of them
    its own hits: it does not fit (vLLM would wait or refuse); counted as a miss."""
    p = Predictor(4, gpu_blocks=4)
    p.serve(hashed(list(range(9)), 4))
    o = p.serve(hashed(list(range(8)) + [300, 301, 302, 303, 304], 4))
    assert (o.cached, o.fits) == (0, False)
    # with one more block it fits: the two hits leave the queue, 2 new blocks come from the rest
    p = Predictor(4, gpu_blocks=5)
    p.serve(hashed(list(range(9)), 4))
    o = p.serve(hashed(list(range(8)) + [300, 301, 302, 303, 304], 4))
    assert (o.cached, o.fits) == (8, True)


def test_duplicate_keys_survive_one_copys_eviction():
    pool = BlockPool(10)
    h = hashed(list(range(8)), 4)  # 8 tokens: 1 hittable block (within 7)
    assert pool.serve(h, 4) == (0, True)
    assert pool.serve(h, 4) == (1, True)  # block 2's key is computed again in a new block: two copies
    assert len(pool.blocks_of[h.hashes[1]]) == 2


def test_unlimited_is_an_upper_bound_of_the_pool_per_request():
    import random
    rng = random.Random(3)
    prefixes = [[rng.randrange(1000) for _ in range(rng.randrange(10, 60))] for _ in range(6)]
    p = Predictor(8, gpu_blocks=12)
    t = Totals()
    for _ in range(200):
        ids = rng.choice(prefixes) + [rng.randrange(1000) for _ in range(rng.randrange(1, 30))]
        o = p.serve(hashed(ids, 8, output_tokens=rng.randrange(1, 20)))
        assert o.cached <= o.cached_unlimited <= o.hittable
        t.add(o)
    assert 0 < t.cached < t.cached_unlimited


def test_lmcache_hits_leading_full_chunks_and_stores_the_partial_one():
    lm = LmcacheUnlimited(4)
    ids = list(range(10))
    keys = chunk_hashes(ids, 4, partial=True)
    assert len(keys) == 3
    assert lm.serve(keys[:2], keys[2]) == 0
    assert lm.serve(keys[:2], keys[2]) == 8  # the partial chunk is never looked up


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        Predictor(0)
    with pytest.raises(ValueError):
        BlockPool(1)
    assert Hashed(3, ()).output_tokens == 1


def test_block_hashes_equal_hash_block_chained_by_hand():
    from kvplan.models.prompts.hashing import ROOT, hash_block

    t = list(range(100))
    e = ExtraKeys(lora="l", cache_salt="s")
    want, prev = [], ROOT
    for i in range(100 // 16):
        prev = hash_block(prev, t[i * 16:(i + 1) * 16], e.for_block(i))
        want.append(prev)
    assert block_hashes(t, 16, e) == want


def test_numpy_chain_keys_are_equal_exactly_where_the_sha256_chain_is():
    """``chain_keys64`` (the check's keys, numpy at once) against sha256's chain (``block_hashes``,
    ``chunk_hashes`` with the partial chunk): over 1,000 prompts that share prefixes of one random
    sequence then part in a small alphabet, with and without a LoRA name and a cache salt, at
    block sizes 1, 4 and 16, two blocks get the same 64-bit key exactly when their digests are
    equal (the same partition of blocks), and one key a block."""
    import random

    rng = random.Random(2)
    base = [rng.randrange(50) for _ in range(300)]
    extras = [ExtraKeys(), ExtraKeys(cache_salt="a"), ExtraKeys(lora="l"), ExtraKeys(lora="l", cache_salt="a")]
    fast_to_sha: dict[tuple[int, bool, int], bytes] = {}
    sha_to_fast: dict[tuple[int, bool, bytes], int] = {}
    for _ in range(1000):
        ids = base[:rng.randrange(0, 300)] + [rng.randrange(3) for _ in range(rng.randrange(0, 40))]
        extra = rng.choice(extras)
        for bs in (1, 4, 16):
            for partial in (False, True):
                fast = chain_keys64(ids, bs, extra, partial=partial).tolist()
                assert chain_keys64(ids, bs, extra, partial=partial, digests=token_digests(ids)).tolist() == fast
                sha = chunk_hashes(ids, bs, extra, partial=True) if partial else block_hashes(ids, bs, extra)
                assert len(fast) == len(sha)
                for f, h in zip(fast, sha, strict=True):
                    assert fast_to_sha.setdefault((bs, partial, f), h) == h
                    assert sha_to_fast.setdefault((bs, partial, h), f) == f
    assert len(sha_to_fast) > 25_000  # many distinct blocks, many shared ones
    assert chain_keys64(list(range(40)), 16).tolist() == chain_keys64(list(range(32)), 16).tolist()  # full blocks only
