"""The prefill cost model fitted from per-interval increases (kvplan.models.prefill.fit): exact
recovery, identifiability, engine time under load, marginal pricing, tiers, coverage. Every
expected number is worked out by hand in the comments."""

import math

import numpy as np
import pytest

from kvplan.models.prefill.fit import CostPart, PrefillCostModel, fit_prefill_cost
from kvplan.models.prefill.interval import Interval, engine_prefill_seconds
from kvplan.models.prefill.table import rounds
from kvplan.models.prefill.window import MeasuredAB, PricedWindow, tier_savings

A, B = 0.010, 4e-5  # 10 ms per request, 40 us per computed token


def iv(t, n, computed_per_req, cached_per_req=0.0, *, a=A, b=B, c=0.0, s=0.0, stored=0.0,
       length=10.0, target="vllm-0", **kw):
    """An interval of n alike requests whose prefill seconds follow the model exactly."""
    p = computed_per_req + cached_per_req
    y = n * (a + b * computed_per_req + c * (p * p - cached_per_req ** 2) / 2) + s * stored
    return Interval(t_start=t, t_end=t + length, requests=n, prefill_seconds=y,
                    computed_tokens=n * computed_per_req, prompt_tokens=n * p,
                    cached_tokens=n * cached_per_req, stored_tokens=stored or None, engines=1,
                    targets=(target,), **kw)


def history(**kw):
    lengths = [200, 800, 1500, 3000, 500, 2500, 1200, 100]
    return [iv(10.0 * i, 1 + i % 3, t, **kw) for i, t in enumerate(lengths)]


def test_exact_data_gives_back_the_parts_and_a_zero_width_band():
    m = fit_prefill_cost(history(), history="synthetic")
    assert m.status == "fitted"
    assert m.coef()["fixed"] == pytest.approx(A, rel=1e-6)
    assert m.coef()["per_token"] == pytest.approx(B, rel=1e-6)
    per_token = m.part("per_token")
    assert per_token.low == pytest.approx(B, rel=1e-6) and per_token.high == pytest.approx(B, rel=1e-6)
    assert m.rel_rms == pytest.approx(0.0, abs=1e-9)
    assert m.history == "synthetic"


def test_attention_term_enters_when_the_data_has_it():
    c = 1e-8  # 10 ns per key read
    m = fit_prefill_cost(history(c=c), history="h")
    assert m.part("attention") is not None
    assert m.coef()["attention"] == pytest.approx(c, rel=1e-5)
    assert m.coef()["per_token"] == pytest.approx(B, rel=1e-5)
    # and stays out when there is none
    assert fit_prefill_cost(history(), history="h").part("attention") is None


def test_noisy_data_band_covers_the_truth():
    rng = np.random.default_rng(3)
    rows = [iv(10.0 * i, 3, t) for i, t in enumerate(rng.uniform(100, 3000, 40))]
    rows = [Interval(**{**r.__dict__, "prefill_seconds": r.prefill_seconds * rng.lognormal(0, 0.1)})
            for r in rows]
    m = fit_prefill_cost(rows, history="h")
    p = m.part("per_token")
    assert p.low < B < p.high
    assert p.high / p.low < 1.5


def test_one_interval_is_not_identifiable_and_says_how_to_fix_it():
    m = fit_prefill_cost([iv(0, 10, 500)], history="h")
    assert m.status == "unidentified" and not m.identified
    assert "only 1 interval" in m.reason
    assert "kvplan pilot" in m.fix and "unique" in m.fix and "shared_prefix" in m.fix


def test_alike_requests_are_not_identifiable():
    # 5 intervals, every request computes 500 tokens: fixed vs per-token cannot be told apart
    m = fit_prefill_cost([iv(10.0 * i, 2, 500) for i in range(5)], history="h")
    assert m.status == "unidentified"
    assert "hardly vary" in m.reason
    assert tier_savings(m, PricedWindow.from_intervals([iv(0, 2, 500, 1000)], t_from=0, t_to=10)) is None


def test_no_prefill_data():
    m = fit_prefill_cost([Interval(0, 10)], history="h")
    assert m.status == "no_data" and "kvplan pilot" in m.fix


def test_cached_tokens_are_priced_at_the_marginal_cost_not_the_average():
    m = fit_prefill_cost(history(), history="h")
    # a cache-heavy window: 10 requests, 100 computed + 3000 cached tokens each
    w = PricedWindow.from_intervals([iv(0, 10, 100, 3000)], t_from=0, t_to=10)
    t = tier_savings(m, w)
    # marginal: 30,000 cached tokens x 40 us = 1.2 s
    assert t.device.value == pytest.approx(1.2)
    # the window average would be (10 ms + 100 x 40 us) / 100 tokens = 140 us/token -> 4.2 s
    average = (A + 100 * B) / 100
    assert 30_000 * average == pytest.approx(4.2)
    # prefill with reuse: 10 x (10 ms + 4 ms) = 0.14 s; without: 10 x (10 ms + 3100 x 40 us) = 1.34 s
    assert t.with_reuse.value == pytest.approx(0.14)
    assert t.without_reuse.value == pytest.approx(1.34)
    assert t.without_reuse.value - t.with_reuse.value == pytest.approx(t.total.value)


def test_attention_makes_a_cached_prefix_worth_more_than_its_tokens():
    m = PrefillCostModel.given(per_token=4e-5, attention=1e-8)
    # 2 requests, each 1,000 device-cached tokens: 2,000 x 40 us + 1e-8 x 2 x 1000^2 / 2
    w = PricedWindow.from_intervals([iv(0, 2, 50, 1000)], t_from=0, t_to=10)
    assert tier_savings(m, w).device.value == pytest.approx(0.08 + 0.01)


def test_tiers_device_is_free_lmcache_carries_its_overhead():
    cost_model = PrefillCostModel.given(per_token=4e-5)
    cost_model = PrefillCostModel("fitted", cost_model.parts + (CostPart("store", 1e-5, 1e-5, 1e-5, "s/stored token"),),
                             "h")
    # 4 requests; 2,000 cached tokens of which a quarter came from LMCache; LMCache stored 8,000
    row = Interval(0, 10, requests=4, prefill_seconds=1.0, computed_tokens=8000, prompt_tokens=10000,
                   cached_tokens=2000, external_tokens=500, stored_tokens=8000, engines=1,
                   targets=("v",))
    t = tier_savings(cost_model, PricedWindow.from_intervals([row], t_from=0, t_to=10))
    assert t.device.value == pytest.approx(1500 * 4e-5)          # 0.06 s, free
    assert t.lmcache_gross.value == pytest.approx(500 * 4e-5)    # 0.02 s
    assert t.lmcache_overhead.value == pytest.approx(8000 * 1e-5)  # 0.08 s
    assert t.lmcache.value == pytest.approx(0.02 - 0.08)         # negative: costs more than it saves
    assert t.total.value == pytest.approx(0.06 - 0.06)


def test_unique_sessions_with_lmcache_predict_a_negative_saving():
    # history: LMCache stores what unique requests compute (store 20 us/token), shared-prefix
    # requests compute short tails it does not store
    rows = []
    for i, (t, cached, stored) in enumerate([(3000, 0, 3000), (800, 0, 768), (150, 3000, 0),
                                              (2000, 0, 2048), (300, 2500, 0), (1200, 0, 1024),
                                              (100, 1500, 0), (2500, 0, 2560)]):
        rows.append(iv(10.0 * i, 2, t, cached, s=2e-5, stored=2 * stored))
    m = fit_prefill_cost(rows, history="h")
    assert m.coef()["store"] == pytest.approx(2e-5, rel=1e-4)
    unique = PricedWindow.from_intervals([iv(0, 5, 2000, 0, stored=5 * 2048)], t_from=0, t_to=10)
    t = tier_savings(m, unique)
    assert t.device.value == pytest.approx(0.0)
    assert t.lmcache.value == pytest.approx(-5 * 2048 * 2e-5, rel=1e-4)  # -0.2048 s


def test_requests_sharing_engine_steps_are_counted_once():
    # 8 requests prefilled in 4 engine steps (histogram: 36 decode steps <= 8 tokens, 4 steps
    # of 1024-2048 tokens): each step's time was counted by two timers
    buckets = ((1.0, 20.0), (8.0, 36.0), (16.0, 36.0), (1024.0, 36.0), (2048.0, 40.0), (float("inf"), 40.0))
    row = Interval(0, 10, requests=8, prefill_seconds=4.0, computed_tokens=8000, engines=1,
                   step_buckets=buckets)
    assert row.prefill_steps() == 4
    y, factor, capped = engine_prefill_seconds(row)
    assert factor == 0.5 and y == pytest.approx(2.0) and not capped


def test_no_interval_claims_more_prefill_than_the_engines_had():
    # 50 s of summed timers in a 10 s interval on 2 engines: at most 20 engine-seconds
    row = Interval(0, 10, requests=100, prefill_seconds=50.0, computed_tokens=1e5, engines=2)
    y, _, capped = engine_prefill_seconds(row)
    assert capped and y == pytest.approx(20.0)


def test_saving_never_claims_more_than_the_engines_had():
    # a model that says each request costs 1 s, 100 requests in 10 s on 1 engine: 100 s > 10 s
    cost_model = PrefillCostModel.given(per_token=1e-3, fixed=0.5)
    w = PricedWindow.from_intervals([iv(0, 100, 500, 500)], t_from=0, t_to=10)
    t = tier_savings(cost_model, w)
    assert t.cap_factor == pytest.approx(10 / 100)   # with reuse: 100 x (0.5 + 0.5) = 100 s
    assert t.with_reuse.value == pytest.approx(10.0)


def test_window_prices_the_covered_span_not_the_range_asked():
    rows = [iv(100.0, 1, 500), iv(110.0, 1, 800), iv(500.0, 1, 300)]  # 30 s of data
    w = PricedWindow.from_intervals(rows, t_from=0.0, t_to=3600.0)
    assert w.asked_seconds == 3600 and w.covered_seconds == pytest.approx(30.0)
    assert w.coverage == pytest.approx(30 / 3600)
    assert w.requests == 3


def test_rounds_sum_targets_scraped_together_and_never_one_target_twice():
    a = iv(0, 1, 500, target="vllm-0")
    b = iv(0.2, 2, 500, target="vllm-1")          # ends 0.2 s after a: same round
    lm = Interval(0.1, 10.1, stored_tokens=256, targets=("lmcache",))
    again = iv(0.3, 1, 500, target="vllm-0")       # vllm-0 again: a new round
    out = rounds([a, b, lm, again], tolerance_s=1.0)
    assert len(out) == 2
    assert out[0].requests == 3 and out[0].stored_tokens == 256 and out[0].engines == 2
    assert out[1].requests == 1


def test_at_hit_rate_scales_tiers_and_attention():
    w = PricedWindow.from_intervals([iv(0, 2, 1000, 1000)], t_from=0, t_to=10)
    half = w.at_hit_rate(0.25)  # 4,000 prompt tokens, 1,000 cached instead of 2,000
    assert half.cached_tokens == pytest.approx(1000) and half.computed_tokens == pytest.approx(3000)
    assert half.cached_attention == pytest.approx(w.cached_attention / 4)


def test_measured_ab():
    ab = MeasuredAB("pair", off_engine_seconds=10.0, on_engine_seconds=7.0, on_cached_tokens=1500,
                    engine_seconds_source="worker CPU seconds")
    assert ab.saved_engine_seconds == 3.0 and ab.saved_per_cached_token == pytest.approx(0.002)
    with pytest.raises(ValueError, match="off_engine_seconds"):
        MeasuredAB("x", math.nan, 1.0, 1.0, "y")


def test_vllm_only_history_fixes_compute_and_lmcache_gets_the_excess():
    # vLLM-only intervals follow 10 ms + 40 us/token; LMCache intervals add 3 ms per request
    # (per-request LMCache work) + 20 us per stored token
    rows = []
    for i, t in enumerate([200, 800, 1500, 3000, 500, 2500, 1200, 100]):
        rows.append(iv(20.0 * i, 2, t, target="plain"))
        lm = iv(20.0 * i + 10, 2, t, target="vllm-0", s=2e-5, stored=2 * t)
        lm = Interval(**{**lm.__dict__, "lookups": 2.0, "prefill_seconds": lm.prefill_seconds + 2 * 0.003})
        rows.append(lm)
    m = fit_prefill_cost(rows, history="h")
    c = m.coef()
    assert any("did not go through LMCache" in n for n in m.notes)
    assert c["fixed"] == pytest.approx(A, rel=1e-4) and c["per_token"] == pytest.approx(B, rel=1e-4)
    assert c["store"] == pytest.approx(2e-5, rel=1e-3)
    assert c["lmcache_request"] == pytest.approx(0.003, rel=1e-3)


def test_an_outlier_interval_weighs_less():
    rows = history() + [Interval(**{**r.__dict__, "t_start": r.t_start + 100, "t_end": r.t_end + 100})
                        for r in history()]
    spike = rows[6]  # 1,200 tokens, at a moment the machine was busy: twice as slow
    rows[6] = Interval(**{**spike.__dict__, "prefill_seconds": spike.prefill_seconds * 2})
    m = fit_prefill_cost(rows, history="h")
    assert m.coef()["per_token"] == pytest.approx(B, rel=0.02)
    assert any("Huber" in n for n in m.notes)
    # plain least squares would have moved it by more
    X = np.array([[1.0, r.computed_tokens / r.requests] for r in rows])
    y = np.array([r.prefill_seconds / r.requests for r in rows])
    w = np.array([r.requests for r in rows])
    ols = np.linalg.lstsq(X * np.sqrt(w)[:, None], y * np.sqrt(w), rcond=None)[0]
    assert abs(ols[1] - B) > abs(m.coef()["per_token"] - B)


def test_lookups_count_only_when_the_engine_had_nothing_else_to_run():
    # sequential: decode steps carry one token (B = 1) -> every lookup second counts
    seq = Interval(0, 10, requests=4, prefill_seconds=0.4, computed_tokens=4000, engines=1,
                   generation_tokens=32, lookup_seconds=0.02, lookups=4,
                   step_buckets=((1.0, 28.0), (8.0, 28.0), (1024.0, 32.0), (float("inf"), 32.0)))
    assert seq.decode_batch() == pytest.approx(1.0) and seq.exposure() == pytest.approx(1.0)
    # loaded: 28 decode tokens in 4 decode-only steps (B = 7) -> exp(-6) of them
    # (running-phase timers 35 s in 10 s: up to 2 x 3.5 = 7 requests decoding together)
    busy = Interval(0, 10, requests=4, prefill_seconds=0.4, computed_tokens=4000, engines=1,
                    generation_tokens=32, lookup_seconds=0.02, lookups=4, inference_seconds=35.0,
                    step_buckets=((1.0, 0.0), (8.0, 4.0), (1024.0, 8.0), (float("inf"), 8.0)))
    assert busy.decode_batch() == pytest.approx(7.0)
    w = PricedWindow.from_intervals([busy], t_from=0, t_to=10)
    assert w.lookup_seconds == pytest.approx(0.02 * math.exp(-6))


def test_peak_hour_rate_is_the_busiest_covered_hour():
    from kvplan.models.prefill.window import peak_hour_rate

    def iv(a, b, n):
        return Interval(t_start=a, t_end=b, requests=n, prefill_seconds=0.0, computed_tokens=0.0, engines=1)

    rows = [iv(0, 3600, 100),                    # hour 0: 100 / 3600 s
            iv(3600, 5400, 720),                 # hour 1: 720 requests over the 1800 s it is covered -> 0.4/s
            iv(7200, 7500, 200)]                 # hour 2: 300 s only (0.67/s): too short to compete
    spans = [(r.t_start, r.t_end) for r in rows]
    assert peak_hour_rate(rows, spans) == pytest.approx(0.4)
    assert peak_hour_rate(rows[2:], spans[2:]) == pytest.approx(200 / 300)  # nothing longer: it counts
    assert peak_hour_rate([iv(0, 60, 0)], [(0, 60)]) is None


def test_peak_hour_spreads_an_interval_over_the_hours_it_spans():
    from kvplan.models.prefill.window import peak_hour_rate

    # a missed scrape: one interval over hours 0 and 1 with 720 requests is 360 in each
    rows = [Interval(t_start=0, t_end=7200, requests=720, prefill_seconds=0.0, computed_tokens=0.0, engines=1)]
    assert peak_hour_rate(rows, [(0, 7200)]) == pytest.approx(0.1)


def test_resamples_of_the_window_move_hit_rate_and_load_within_what_was_measured():
    from kvplan.models.prefill.window import resample_hit_and_load

    def iv(n, prompt, computed):
        return Interval(t_start=0, t_end=60, requests=n, prefill_seconds=1.0, computed_tokens=computed,
                        prompt_tokens=prompt, engines=1)

    same = resample_hit_and_load([iv(10, 1000, 400)] * 5)
    assert len(same) == 200 and set(same) == {(0.6, 1.0)}  # nothing varies: every draw is the window
    # hit rates 0.2 and 0.8 with 10 and 30 requests: draws stay inside, pooled 0.5 on average
    mixed = resample_hit_and_load([iv(10, 1000, 800), iv(30, 1000, 200)] * 3)
    hits = [h for h, _ in mixed]
    loads = [k for _, k in mixed]
    assert 0.2 <= min(hits) and max(hits) <= 0.8 and min(hits) < 0.5 < max(hits)
    assert 0.5 <= min(loads) and max(loads) <= 1.5 and abs(sum(loads) / len(loads) - 1) < 0.1
    assert resample_hit_and_load([iv(10, 1000, 400)]) == ()  # one interval: no spread to tell
