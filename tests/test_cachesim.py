"""The one-pass LRU curve: hand-derived cases, a brute-force cross-check, topology, tiers.

The equality with LMCache's own simulator on a trace the real stack recorded is in
``test_cachesim_lmcache.py``."""

from __future__ import annotations

import numpy as np
import pytest

from kvplan.models.cache import lru_reference, pools, sim

A, B, C, X = 1, 2, 3, 9


def curve_of(requests):
    return sim.lru_curve(sim.make_trace(requests))


def test_prefix_rule_stops_at_the_first_miss():
    # r1 stores A B C. r2 asks A X C: A hits, X misses, C is present but after the miss.
    curve = curve_of([([A, B, C], 30, 10), ([A, X, C], 35, 10)])
    assert curve.hit_tokens(100) == 10
    assert curve.total_tokens == 65  # seq_len, tail tokens included
    assert curve.hit_rate(100) == pytest.approx(10 / 65)
    assert curve.infinite_hit_tokens == 10


def test_lru_eviction_order():
    # r3 refreshes A, so C (r4) evicts B, not A, from a 2-chunk cache.
    reqs = [([A], 10, 10), ([B], 10, 10), ([A], 10, 10), ([C], 10, 10), ([A], 10, 10),
            ([B], 10, 10)]
    curve = curve_of(reqs)
    assert curve.hit_tokens(1) == 0      # every request evicts the one before
    assert curve.hit_tokens(2) == 20     # r3 and r5 hit A; B was evicted by C
    assert curve.hit_tokens(3) == 30     # nothing is evicted
    assert curve.unique_chunks == 3
    assert curve.saturation_chunks == 3


def test_a_request_longer_than_the_cache_evicts_its_own_head():
    # 3 chunks through a 2-chunk cache: A is evicted by C inside r1, so r2 misses at once.
    curve = curve_of([([A, B, C], 30, 10), ([A, B, C], 30, 10)])
    assert curve.hit_tokens(2) == 0
    assert curve.hit_tokens(3) == 30


def test_hits_then_refresh_order_inside_a_request():
    # After r1 [A B], the recency order is B (newest), A. r2 [B] makes B newest again;
    # r3 [C] into a 2-chunk cache evicts A; r4 [A B]: A misses, so r4 hits nothing even
    # though B is still cached. Only r2 hits.
    curve = curve_of([([A, B], 20, 10), ([B], 10, 10), ([C], 10, 10), ([A, B], 20, 10)])
    assert curve.hit_tokens(2) == 10
    assert curve.hit_tokens(3) == 10 + 20


def test_repeated_chunk_inside_a_request():
    curve = curve_of([([A, A, B], 30, 10), ([A, A, B], 30, 10)])
    for cap in range(1, 5):
        assert curve.hit_tokens(cap) == lru_reference.reference_hit_tokens(
            sim.make_trace([([A, A, B], 30, 10), ([A, A, B], 30, 10)]), cap)


def test_capacity_conversion_is_lmcaches():
    assert sim.capacity_chunks(2**30, 2**20) == 1024
    assert sim.capacity_chunks(10, 2**20) == 1  # never below one chunk
    with pytest.raises(ValueError):
        sim.capacity_chunks(1, 0)


def test_empty_trace():
    curve = sim.lru_curve(sim.make_trace([]))
    assert curve.hit_rate(10) == 0.0 and curve.infinite_hit_rate == 0.0


def _random_trace(rng, requests, keys):
    reqs = []
    for _ in range(requests):
        n = int(rng.integers(0, 10))
        if reqs and rng.random() < 0.6:  # re-send an earlier prefix, then something new
            base = reqs[int(rng.integers(0, len(reqs)))][0]
            ids = base[:int(rng.integers(0, len(base) + 1))] + rng.integers(0, keys, n).tolist()
        else:
            ids = rng.integers(0, keys, n).tolist()
        size = int(rng.integers(1, 4))
        reqs.append((ids, len(ids) * size + int(rng.integers(0, size)), size))
    return sim.make_trace(reqs)


@pytest.mark.parametrize("seed", range(40))
def test_curve_equals_brute_force_lru_at_every_capacity(seed):
    rng = np.random.default_rng(seed)
    trace = _random_trace(rng, int(rng.integers(1, 60)), int(rng.integers(1, 40)))
    curve = sim.lru_curve(trace)
    for cap in range(1, curve.unique_chunks + 3):
        assert curve.hit_tokens(cap) == lru_reference.reference_hit_tokens(trace, cap), cap
    assert curve.hit_tokens(10**9) == curve.infinite_hit_tokens


def test_hit_tokens_by_request_add_up_to_the_curve():
    trace = _random_trace(np.random.default_rng(3), 80, 25)
    dist = sim.stack_distances(trace)
    curve = sim.lru_curve(trace, dist)
    for cap in (1, 4, 12, 40, 10**6):  # far above the references: new chunks still miss
        per = sim.hit_tokens_by_request(trace, dist, cap)
        assert len(per) == trace.requests and per.sum() == curve.hit_tokens(cap)


def test_curve_is_monotone_and_vectorised():
    trace = _random_trace(np.random.default_rng(7), 200, 50)
    curve = sim.lru_curve(trace)
    caps = np.arange(1, 80)
    hits = curve.hit_tokens(caps)
    assert list(hits) == [curve.hit_tokens(int(c)) for c in caps]
    assert np.all(np.diff(hits) >= 0)


# --- topology -------------------------------------------------------------------------------

def test_shared_pool_beats_private_caches_under_round_robin():
    # One user sends the same 2-chunk prompt 4 times. Round-robin over 2 ranks puts r0, r2
    # on rank 0 and r1, r3 on rank 1: each rank misses once. The shared pool misses once.
    trace = sim.make_trace([([A, B], 20, 10)] * 4)
    topo = pools.topology(trace, ranks=2, policy="round_robin")
    assert topo.shared.hit_tokens(4) == 60
    assert topo.private_hit_tokens(4) == 40  # 2 chunks per rank
    assert topo.private_hit_rate(4) == pytest.approx(40 / 80)
    # Prefix affinity sends r1..r3 where r0 went: as good as the shared pool.
    aff = pools.topology(trace, ranks=2, policy="prefix_affinity")
    assert list(pools.route(trace, 2, "prefix_affinity")) == [0, 0, 0, 0]
    assert aff.private_hit_tokens(4) == 60


def test_prefix_affinity_falls_back_to_round_robin_below_half_a_match():
    # r1 shares only A (1 of 3 chunks) with r0: below 50 %, so round-robin moves on.
    trace = sim.make_trace([([A, B, C], 30, 10), ([A, 5, 6], 30, 10), ([A, 5, 6, 7], 40, 10)])
    assert list(pools.route(trace, 2, "prefix_affinity")) == [0, 1, 1]


def test_random_routing_is_reproducible_and_balanced():
    trace = sim.make_trace([([i], 10, 10) for i in range(1000)])
    r1 = pools.route(trace, 4, "random", seed=3)
    assert list(r1) == list(pools.route(trace, 4, "random", seed=3))
    assert set(np.bincount(r1)) and min(np.bincount(r1)) > 200
    with pytest.raises(ValueError):
        pools.route(trace, 4, "nearest")


def test_private_caches_equal_brute_force_per_rank():
    trace = _random_trace(np.random.default_rng(11), 120, 30)
    for policy in pools.ROUTINGS:
        topo = pools.topology(trace, ranks=3, policy=policy, seed=5)
        ranks = pools.route(trace, 3, policy, seed=5)
        for cap in (3, 9, 30, 90):
            expect = sum(lru_reference.reference_hit_tokens(trace.subset(ranks == k), cap // 3)
                         for k in range(3))
            assert topo.private_hit_tokens(cap) == expect


def test_tier_split_adds_up_to_the_combined_capacity():
    trace = _random_trace(np.random.default_rng(5), 150, 40)
    dist = sim.stack_distances(trace)
    curve = sim.lru_curve(trace, dist)
    split = sim.tier_split(trace, dist, l1_chunks=5, l2_chunks=15)
    assert split["l1_hit_tokens"] + split["l2_hit_tokens"] == curve.hit_tokens(20)
    huge = sim.tier_split(trace, dist, l1_chunks=10**6, l2_chunks=10**6)
    assert huge["l1_hit_tokens"] == curve.infinite_hit_tokens and huge["l2_hit_tokens"] == 0
    assert split["l1_hit_tokens"] <= curve.hit_tokens(20)
    # an L1 alone of 5 chunks hits no more than the L1 share of the cascade... and the
    # cascade's L1 share is at least what the 5-chunk cache's prefix hits are.
    assert split["l1_hit_tokens"] >= curve.hit_tokens(5)


def test_log_capacities():
    caps = sim.log_capacities(1, 1000, 4)
    assert list(caps) == [1, 10, 100, 1000]
