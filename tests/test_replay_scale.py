"""The replay's fast paths give exactly what it gave before they were vectorised.

The oracles are independent of the code under test: ``tests/replay_reference.py`` keeps the
replay's code as it was at commit 5910da9 (the TTFT event loop, the in-flight cut, the
prefix-affinity router, the unweighted stack-distance pass, ``make_trace``), and
``kvplan.models.cache.lru_reference`` is LMCache's own one-capacity LRU loop. Compared on random
traces and streams (ties, repeats inside a request, empty requests, engines outside the range) and
on the Mooncake conversation trace's first 400 requests (tests/fixtures/mooncake), repeated with
fresh block ids one hour apart as ``bench/mooncake_topology.py --requests`` does. Equality is
exact (``np.array_equal``): the same floats, not close ones.

Memory: tracemalloc counts numpy's buffers, so the replay's peak per chunk reference is measured
here; the dict of the old in-flight cut (a tuple per cache and chunk) needed several times the
bound."""

from __future__ import annotations

import json
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kvplan.models.cache import alternatives as alt
from kvplan.models.cache import latency as lat
from kvplan.models.cache import lru_reference, pools, sim
from tests import replay_reference as ref

MOONCAKE = Path(__file__).parent / "fixtures" / "mooncake" / "conversation_trace_head400.jsonl"
BLOCK = 512


def mooncake(copies: int = 1) -> tuple[sim.Trace, np.ndarray]:
    """The fixture's requests (full 512-token blocks), ``copies`` times with fresh block ids,
    each copy an hour later; and each request's output length."""
    reqs = [json.loads(x) for x in MOONCAKE.read_text().splitlines() if x.strip()]
    off = max(max(r["hash_ids"]) for r in reqs) + 1
    rows, ts, out = [], [], []
    for c in range(copies):
        for r in reqs:
            full = r["input_length"] // BLOCK
            rows.append(([h + c * off for h in r["hash_ids"][:full]], r["input_length"], BLOCK))
            ts.append(c * 3600.0 + r["timestamp"] / 1000.0)
            out.append(r["output_length"])
    tr = sim.make_trace(rows)
    return replace(tr, ts=np.asarray(ts), instance=np.zeros(tr.requests, np.int64)), np.asarray(out, np.int64)


def random_trace(seed: int, requests: int = 300, keys: int = 60) -> sim.Trace:
    """Requests of 0-12 chunks over a small key space: prefixes re-sent (a conversation goes on),
    repeats inside a request, empty requests, two chunk sizes."""
    rng = np.random.default_rng(seed)
    rows, last = [], [[] for _ in range(8)]
    for _ in range(requests):
        conv = int(rng.integers(0, 8))
        n = int(rng.integers(0, 13))
        if rng.random() < 0.5 and last[conv]:
            ids = last[conv][:int(rng.integers(1, len(last[conv]) + 1))] + rng.integers(0, keys, n // 2).tolist()
        else:
            ids = rng.integers(0, keys, n).tolist()
        last[conv] = ids
        size = int(rng.choice([4, 16]))
        rows.append((ids, len(ids) * size + int(rng.integers(0, size)), size))
    tr = sim.make_trace(rows)
    ts = np.round(np.sort(rng.uniform(0, 30, tr.requests)), 1)  # ties on purpose
    return replace(tr, ts=ts, instance=rng.integers(0, 2, tr.requests))


TRACES = [pytest.param(lambda s=s: random_trace(s), id=f"random-{s}") for s in range(6)] + [
    pytest.param(lambda: mooncake(3)[0], id="mooncake-x3")]


@pytest.mark.parametrize("make", TRACES)
def test_stack_distances_equal_the_unweighted_pass_and_lmcaches_loop(make):
    tr = make()
    new, old = sim.stack_distances(tr), ref.stack_distances(tr)
    assert np.array_equal(new.d, old.d) and np.array_equal(new.m, old.m)
    assert (new.inf, new.unique_chunks) == (old.inf, old.unique_chunks)
    curve = sim.lru_curve(tr, new)
    for cap in (1, 3, 10, 40, 200, curve.saturation_chunks):
        assert curve.hit_tokens(cap) == lru_reference.reference_hit_tokens(tr, cap), cap


def test_stack_distances_on_an_empty_and_a_one_request_trace():
    empty = sim.stack_distances(sim.make_trace([]))
    assert len(empty.d) == 0 and empty.unique_chunks == 0
    one = sim.stack_distances(sim.make_trace([([5, 6, 5], 12, 4)]))
    # all new: never referenced before, and the repeat of 5 inside the request counts as new too
    assert one.d.tolist() == [4, 4, 4] and one.unique_chunks == 2


@pytest.mark.parametrize("make", TRACES)
@pytest.mark.parametrize("ranks", [1, 3, 10])
def test_prefix_affinity_routes_as_the_loop_did(make, ranks):
    tr = make()
    assert np.array_equal(pools.route(tr, ranks, "prefix_affinity"), ref.route(tr, ranks, "prefix_affinity"))


def test_make_trace_builds_the_same_arrays():
    rng = np.random.default_rng(3)
    rows = [(rng.integers(0, 2**40, int(rng.integers(0, 9))).tolist(), 100, 16) for _ in range(500)]
    rows += [(np.array([1, 2, 3], np.int32), 5, 2), ((np.int64(7), 8), 3, 1), ([2.0, 3.0], 1, 1), ([], 0, 4)]
    new, old = sim.make_trace(rows), ref.make_trace(rows)
    for f in ("chunk_ids", "offsets", "seq_len", "chunk_size"):
        assert np.array_equal(getattr(new, f), getattr(old, f)) and getattr(new, f).dtype == np.int64, f
    assert sim.make_trace([]).offsets.tolist() == [0]


MODELS = [
    lat.LatencyModel(fixed=0.02, per_token=4e-5, load_s_per_hit_token=3e-6, decode_step_s=0.025, max_batch_tokens=512),
    lat.LatencyModel(fixed=0.0, per_token=1e-3, attention=1e-7, store=2e-5, load=1e-5, lmcache_request=0.003,
                     lookup_s=0.01, load_s_per_hit_token=1e-4, frontend_s=0.002, decode_step_s=0.0, output_tokens=3,
                     max_batch_tokens=None),
    lat.LatencyModel(fixed=0.01, per_token=2e-4, lookup_s=0.004, decode_step_s=0.01, output_tokens=1,
                     max_batch_tokens=64),
]


def random_stream(seed: int, n: int = 400, engines: int = 3) -> lat.Stream:
    rng = np.random.default_rng(seed)
    prompt = rng.integers(1, 600, n).astype(float)
    full = np.floor(prompt / 16) * 16
    hit = np.floor(rng.uniform(0, 1, n) * full / 16) * 16
    arrival = np.round(rng.uniform(0, n * 0.05, n), 2)  # ties, not in request order
    engine = rng.integers(0, engines + 1, n)  # engine == engines: on no engine (NaN)
    out = rng.integers(1, 40, n) if seed % 2 else None
    return lat.Stream(arrival, prompt, hit, full, engine, engines, out)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("model", range(len(MODELS)))
def test_simulate_equals_the_event_loop(seed, model):
    s, m = random_stream(seed), MODELS[model]
    got, want = lat.simulate(s, m), ref.simulate(s, m)
    assert np.isnan(got).sum() == (s.engine == s.engines).sum()  # the requests on no engine
    assert np.array_equal(got, want, equal_nan=True)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("model", range(len(MODELS)))
def test_with_hits_equals_a_fresh_run(seed, model):
    s, m = random_stream(seed), MODELS[model]
    first = lat.run(s, m)
    rng = np.random.default_rng(100 + seed)
    for share in (0.0, 0.01, 0.2, 1.0):
        hit = np.where(rng.random(len(s.hit)) < share, np.floor(s.hit / 32) * 16, s.hit)
        want = ref.simulate(replace(s, hit=hit), m)
        assert np.array_equal(first.with_hits(hit), want, equal_nan=True), share


def _old_predict(tr: sim.Trace, a: alt.Alternative, m: lat.LatencyModel,
                 out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``alternatives.predict``'s hits and TTFTs as 5910da9 computed them."""
    ttft = ref.simulate(alt.stream(tr, a, out), m)
    stored = tr.ts + np.nan_to_num(ttft, nan=0.0) - m.frontend_s
    cut = ref.in_flight(tr, a, stored)
    if (cut != a.hits).any():
        ttft = ref.simulate(alt.stream(tr, replace(a, hits=cut), out), m)
        return cut, ttft
    return a.hits, ttft


PRESET = lat.LatencyModel(fixed=0.0205, per_token=4.32e-5, load_s_per_hit_token=3.3e-6, decode_step_s=0.025,
                          max_batch_tokens=8192)
"""bench/mooncake_topology.py's planning preset, rounded."""


@pytest.mark.parametrize("gb_per_rank", [2_000, 200_000])
def test_predict_on_the_mooncake_trace_equals_the_old_replay(gb_per_rank):
    tr, out = mooncake(3)
    total = gb_per_rank // 160 * 4  # 160 MB blocks, 4 ranks
    today = alt.today(tr, instances=1, engines=4, capacity_chunks=total)
    set_ups = [alt.shared(tr, today, total), alt.on_engines(alt.shared(tr, today, total), tr, 2)]
    set_ups += [alt.private(tr, 4, r, total) for r in ("round_robin", "random", "prefix_affinity")]
    cut_any = False
    for a in set_ups:
        got = alt.predict(tr, a, PRESET, slo_s=2.0, seconds=3 * 3600.0, output_tokens=out)
        hits, ttft = _old_predict(tr, a, PRESET, out)
        assert np.array_equal(got.alternative.hits, hits) and np.array_equal(got.ttft, ttft, equal_nan=True)
        cut_any |= bool((hits != a.hits).any())
    assert cut_any  # the in-flight pass and its replay ran at least once


@pytest.mark.parametrize("make", TRACES)
def test_in_flight_equals_the_loop(make):
    tr = make()
    rng = np.random.default_rng(7)
    caches = rng.integers(0, 3, tr.requests)
    cases = [
        alt.shared(tr, alt.today(tr, instances=1, engines=3, capacity_chunks=50), 50),  # one pool, 3 engines
        alt.private(tr, 3, "random", 60),  # each cache on its engine
        alt.Alternative(alt.Topology.TODAY, None, 4, 90, alt.hits(tr, caches, 3, 30), rng.integers(0, 4, tr.requests),
                        4, caches),  # caches and engines apart
    ]
    for a in cases:
        for stored in (tr.ts + rng.uniform(0, 3, tr.requests), tr.ts - 1.0):
            assert np.array_equal(alt.in_flight(tr, a, stored), ref.in_flight(tr, a, stored))


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_replay_of_one_set_up_stays_within_60_bytes_per_chunk_reference():
    """Peak traced memory over the trace itself while one set-up is replayed (its hits, the TTFT
    pass, the in-flight cut and its replay), on 4,800 requests (131,388 references). Measured on
    2026-12-05: 23 bytes per reference (shared) and 33 (private, prefix affinity); the 5910da9 code
    needed 202 for each (its in-flight dict held a tuple per chunk and cache)."""
    tr, out = mooncake(12)
    per_ref = {}
    for name in ("shared", "private"):
        def one(name: str = name) -> None:
            today = alt.today(tr, instances=1, engines=10, capacity_chunks=60_000)
            a = alt.shared(tr, today, 60_000) if name == "shared" else alt.private(tr, 10, "prefix_affinity", 60_000)
            alt.predict(tr, a, PRESET, slo_s=2.0, seconds=12 * 3600.0, output_tokens=out)
        per_ref[name] = _peak_bytes(one) / tr.references
    assert max(per_ref.values()) <= 60, per_ref
