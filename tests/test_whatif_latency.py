"""The TTFT what-if's parts on hand-made inputs: the engine's discrete-event pass, the overheads
measured from histogram sums, today's topology and its alternatives. Every expected value is
worked out by hand in the comment next to it."""

from __future__ import annotations

import numpy as np
import pytest

from kvplan.models.cache import alternatives as alt
from kvplan.models.cache import latency as lat
from kvplan.models.cache.sim import make_trace

M = lat.LatencyModel(fixed=0.0, per_token=0.001, output_tokens=1, max_batch_tokens=None)
"""1 ms per computed token, nothing else."""


def stream(arrival, prompt, hit=None, engine=None, engines=1, out=None):
    n = len(arrival)
    return lat.Stream(np.asarray(arrival, float), np.asarray(prompt, float),
                      np.asarray(hit if hit is not None else [0] * n, float), np.asarray(prompt, float),
                      np.asarray(engine if engine is not None else [0] * n), engines,
                      None if out is None else np.asarray(out))


def test_two_requests_arriving_together_share_one_step_or_queue_by_the_token_budget():
    # unbounded budget: both prefills in one step of 100 + 100 tokens = 0.2 s -> TTFT 0.2 each
    assert lat.simulate(stream([0, 0], [100, 100]), M).tolist() == pytest.approx([0.2, 0.2])
    # a budget of 100 tokens: the first alone (0.1 s); the second next step, 0.1 s more, plus one
    # decode step of 0.01 s for the first (it decodes 2 - 1 = 1 more token) -> 0.21
    m = lat.LatencyModel(fixed=0.0, per_token=0.001, decode_step_s=0.01, output_tokens=2, max_batch_tokens=100)
    assert lat.simulate(stream([0, 0], [100, 100]), m).tolist() == pytest.approx([0.1, 0.21])


def test_lookup_load_and_frontend_add_to_the_prefill_of_the_tokens_not_hit():
    # 10 ms lookup + 50 hit tokens x 0.1 ms load + 50 computed x 1 ms + 2 ms frontend = 0.067 s
    m = lat.LatencyModel(fixed=0.0, per_token=0.001, lookup_s=0.01, load_s_per_hit_token=1e-4, frontend_s=0.002,
                         output_tokens=1)
    assert lat.simulate(stream([5.0], [100], hit=[50]), m).tolist() == pytest.approx([0.067])
    # the prefill cost itself: fixed + LMCache request + per-token + load of hits + store of misses
    c = lat.LatencyModel(fixed=0.02, per_token=0.001, load=1e-5, store=2e-5, lmcache_request=0.003)
    # 0.02 + 0.003 + 50 x 0.001 + 50 x 1e-5 + (100 - 50) x 2e-5 = 0.0745
    assert float(c.prefill_s(np.array([100]), np.array([50]), np.array([100]))[0]) == pytest.approx(0.0745)


def test_a_request_arriving_during_a_step_is_seen_at_its_end():
    # A at 0: its 100 tokens run [0, 0.1]; B arrives at 0.05, is seen at 0.1, prefills to 0.2:
    # TTFT B = 0.2 - 0.05 = 0.15
    assert lat.simulate(stream([0, 0.05], [100, 100]), M).tolist() == pytest.approx([0.1, 0.15])
    # on two engines B does not wait: 0.1 each
    assert lat.simulate(stream([0, 0.05], [100, 100], engine=[0, 1], engines=2), M).tolist() == \
        pytest.approx([0.1, 0.1])


def test_decode_steps_keep_the_engine_busy():
    # A at 0: 10 tokens (0.01 s), then 4 decode steps of 0.02 s (5 output tokens). B arrives at
    # 0.015, inside the first decode step [0.01, 0.03], is seen at 0.03 and prefills in a step
    # that also decodes A: 0.01 + 0.02 -> ends 0.06; TTFT B = 0.06 - 0.015 = 0.045
    m = lat.LatencyModel(fixed=0.0, per_token=0.001, decode_step_s=0.02, output_tokens=5, max_batch_tokens=None)
    assert lat.simulate(stream([0, 0.015], [10, 10]), m).tolist() == pytest.approx([0.01, 0.045])
    # per-request output lengths override the model's: A decodes no more -> B is not held up
    assert lat.simulate(stream([0, 0.015], [10, 10], out=[1, 1]), m).tolist() == pytest.approx([0.01, 0.01])


def test_summary_and_goodput_at_the_slo():
    s = lat.summarize(np.array([0.1, 0.2, 0.3, 0.4]), slo_s=0.25, seconds=2.0)
    # mean 0.25; p50 0.25 (between 0.2 and 0.3); p99 = 0.3 + 0.97 x 0.1 = 0.397; 2 of 4 within
    # the SLO -> 50 %, 2 requests / 2 s = 1 req/s
    assert (s.ttft_mean_s, s.ttft_p50_s, s.ttft_p99_s, s.within_slo, s.goodput_rps) == \
        pytest.approx((0.25, 0.25, 0.397, 0.5, 1.0))
    # as a histogram with bounds 0.25 and 0.5: counts 2 and 4 (+Inf 4)
    assert lat.as_histogram(np.array([0.1, 0.2, 0.3, 0.4]), [0.25, 0.5]) == [(0.25, 2.0), (0.5, 4.0),
                                                                           (float("inf"), 4.0)]


def test_overheads_from_quiet_intervals():
    """TTFT - prefill per request = 20 ms + 1e-5 s x cached tokens in three intervals (0, 1,000,
    2,000 cached per request: 20, 30, 40 ms); a fourth interval's requests waited (500 ms each)
    and is left out by the lower-half refit. Lookups 5 ms -> frontend 15 ms."""
    rows = [lat.LatencyInterval(requests=2, ttft_s=2 * (0.1 + y), queue_s=0.0, prefill_s=2 * 0.1,
                                cached_tokens=2 * c, decode_s=2 * 0.07, decode_tokens=2 * 7, generation_tokens=16,
                                lookup_s=2 * 0.005, lookups=2)
            for c, y in ((0, 0.02), (1000, 0.03), (2000, 0.04))]
    rows.append(lat.LatencyInterval(requests=2, ttft_s=2 * 0.6, queue_s=0.0, prefill_s=2 * 0.1, cached_tokens=2000,
                                    generation_tokens=16))
    o = lat.calibrate(rows)
    assert o.load_s_per_hit_token == pytest.approx(1e-5, rel=1e-6)
    assert o.lookup_s == pytest.approx(0.005) and o.frontend_s == pytest.approx(0.015, abs=1e-9)
    assert o.decode_step_s == pytest.approx(0.01) and o.output_tokens == 8
    assert o.intervals == 3


def test_todays_topology_and_its_alternatives():
    """Two cache instances; a conversation whose turns alternate between them: request r2
    re-sends r0's chunks (on instance 0: hits 2 chunks), r1 (instance 1) re-sends them too but
    instance 1 never saw them; a shared pool hits r1 and r2."""
    tr = make_trace([([1, 2], 9, 4), ([1, 2], 9, 4), ([1, 2, 3], 13, 4)])
    tr = type(tr)(tr.chunk_ids, tr.offsets, tr.seq_len, tr.chunk_size, ts=np.array([0.0, 1.0, 2.0]),
                  instance=np.array([0, 1, 0]))
    t = alt.today(tr, instances=2, engines=2, capacity_chunks=100)
    assert t.hits.tolist() == [0, 0, 8] and t.engine_of.tolist() == [0, 1, 0]
    s = alt.shared(tr, t, 200)
    assert s.hits.tolist() == [0, 8, 8] and s.engine.tolist() == [0, 1, 0]
    p = alt.private(tr, 2, "round_robin", 200)
    assert p.engine.tolist() == [0, 1, 0] and p.hits.tolist() == [0, 0, 8]
    # hit rate LMCache's way: hit tokens / full-chunk tokens = 16 / (8 + 8 + 12) for the pool
    m = lat.LatencyModel(fixed=0.0, per_token=0.001)
    assert alt.predict(tr, s, m, slo_s=1.0, seconds=2.0).hit_rate == pytest.approx(16 / 28)
    # four engines behind one instance: its requests spread round-robin over them
    assert alt.today(tr, instances=1, engines=4, capacity_chunks=100).engine_of.tolist() == [0, 1, 2]


def test_engines_needed_finds_the_fewest_that_hold_the_slo():
    """Eight requests of 100 tokens (0.1 s each) arriving together: on k engines the last
    finishes after ceil(8 / k) x 0.1 s (one per step: budget 100 tokens). p99 <= 0.25 s needs
    ceil(8 / k) <= 2 -> k = 4."""
    tr = make_trace([([i], 100, 100) for i in range(8)])
    tr = type(tr)(tr.chunk_ids, tr.offsets, tr.seq_len, tr.chunk_size, ts=np.zeros(8), instance=np.zeros(8, int))
    m = lat.LatencyModel(fixed=0.0, per_token=0.001, max_batch_tokens=100)
    pool = alt.shared(tr, alt.today(tr, instances=1, engines=1, capacity_chunks=10), 10)
    assert alt.engines_needed(tr, lambda k: alt.on_engines(pool, tr, k), m, slo_s=0.25, most=8) == 4
    assert alt.engines_needed(tr, lambda k: alt.on_engines(pool, tr, k), m, slo_s=0.05, most=8) is None
    # calibrated on today (p99 x 2): 0.25 s needs a raw p99 <= 0.125. On 7 engines one runs two
    # requests (seven TTFTs of 0.1 s, one of 0.2: p99 = 0.1 + 0.93 x 0.1 = 0.193 raw, 0.386 x 2): 8
    assert alt.engines_needed(tr, lambda k: alt.on_engines(pool, tr, k), m, slo_s=0.25, most=8, p99_ratio=2.0) == 8


def test_the_plan_says_when_an_alternative_holds_the_slo_where_today_misses():
    """The finding's sentence, with numbers, in the plan's notes and result (the article's
    shape: 10 engines today miss a 2 s p99; one shared pool holds it at 0.3 s on 8)."""
    from dataclasses import replace

    from kvplan.models.decision.plan import plan
    from kvplan.models.decision.presets import h100_lmcache_mp

    f = alt.TopologyFinding("one shared pool of 400 GB", 2.0, 4.1, 0.3, 10, 10, 8)
    assert f.holds_where_today_misses and f.gpus_saved == 2
    assert f.sentence().startswith("one shared pool of 400 GB: TTFT p99 0.3 s against a 2 s SLO (holds it; today "
                                   "4.1 s); 8 GPUs needed instead of 10")
    assert not alt.TopologyFinding("x", 2.0, 1.0, 0.3, 10, 6, 5).holds_where_today_misses  # today holds it too
    assert alt.TopologyFinding.from_dict(f.to_dict()) == f
    p = h100_lmcache_mp()
    r = plan(replace(p.inputs, topology=f), label=p.title, source="planning_preset")
    assert r.topology_finding["gpus_saved"] == 2 and r.to_dict()["topology_finding"]["holds_where_today_misses"]
    assert f"topology: {f.sentence()}" in r.assumptions
    # no finding: nothing said, nothing else changed
    base = plan(p.inputs, label=p.title, source="planning_preset")
    assert base.topology_finding is None and base.decision == r.decision


def test_a_lookup_misses_what_another_engine_has_not_stored_yet():
    """r0 (engine 0) and r1 (engine 1) send the same two chunks 0.05 s apart into one pool;
    r0's prefill ends at 0.1 s. The LRU replay gives r1 both chunks; stored only at 0.1, they
    are not there at r1's lookup (0.05): r1 hits nothing. r2 (engine 0, at 0.2) hits both."""
    tr = make_trace([([1, 2], 9, 4), ([1, 2], 9, 4), ([1, 2], 9, 4)])
    tr = type(tr)(tr.chunk_ids, tr.offsets, tr.seq_len, tr.chunk_size, ts=np.array([0.0, 0.05, 0.2]),
                  instance=np.zeros(3, int))
    pool = alt.shared(tr, alt.today(tr, instances=1, engines=2, capacity_chunks=10), 10)
    assert pool.hits.tolist() == [0, 8, 8] and pool.engine.tolist() == [0, 1, 0]
    assert alt.in_flight(tr, pool, stored_at=np.array([0.1, 0.15, 0.3])).tolist() == [0, 0, 8]
    # on one engine the scheduler sends r1's lookup after r0's step: it hits
    one = alt.on_engines(pool, tr, 1)
    assert alt.in_flight(tr, one, stored_at=np.array([0.1, 0.15, 0.3])).tolist() == [0, 8, 8]
    # private caches: a chunk stored in the other rank's cache does not count
    p = alt.private(tr, 2, "round_robin", 20)  # r0 -> 0, r1 -> 1, r2 -> 0
    assert alt.in_flight(tr, p, stored_at=np.array([0.0, 0.0, 0.0])).tolist() == [0, 0, 8]
    # predict() applies it: r1 computes its whole prompt (9 tokens) instead of the 1-token tail
    m = lat.LatencyModel(fixed=0.0, per_token=0.01, output_tokens=1, max_batch_tokens=None)
    # first pass: r0 9 tokens -> 0.09 s, ends at 0.09 > r1's lookup 0.05 -> r1 hits 0 and computes
    # 9 tokens on its own engine: TTFT 0.09; r2 at 0.2 hits 8, computes 1: 0.01
    got = alt.predict(tr, pool, m, slo_s=1.0, seconds=1.0)
    assert got.alternative.hits.tolist() == [0, 0, 8] and got.hit_rate == pytest.approx(8 / 24)
    assert got.ttft.tolist() == pytest.approx([0.09, 0.09, 0.01])
