"""The verdict, its flips, and the sensitivity rows."""

import dataclasses
import re

import pytest

from kvplan.models.core.errors import KvplanError
from kvplan.models.decision.sensitivity import sensitivity
from kvplan.models.decision.verdict import PlanInputs, break_even, evaluate
from kvplan.models.inputs.planning import PlanningInputs
from kvplan.models.inputs.pricebook import PriceBook
from kvplan.models.prefill.measurement import PrefillMeasurement, with_hit_rate

# One day, 10 requests/s of 10,000-token prompts on 8 GPUs. Only estimator C (2 x 1e9 params
# at 50 % of 1e14 FLOP/s = 4e-5 GPU-s/token, i.e. 25,000 tokens/s per GPU) so the money is
# linear in the hit rate and easy to check by hand:
#   hit rate 0.8 -> cached 6.912e9 tokens -> 276,480 GPU-s/day = 3.2 GPU-s per second of window
#   -> 3.2 * 730.56 = 2,337.792 GPU-hours/month -> $5,844.48 at $2.50.
DAY = 86400.0


def window(hit_rate=0.8, requests=DAY * 10, prompt=10_000, window_seconds=DAY, **change):
    total = requests * prompt
    return PrefillMeasurement(**{**dict(
        window_seconds=window_seconds, requests=requests, prompt_tokens=total,
        cached_prompt_tokens=total * hit_rate, num_gpus=8, model_params=1e9,
        gpu_peak_flops=1e14, assumed_prefill_mfu=0.5), **change})


# $2.50/GPU-hour; only overhead: 4 ops hours * $100 = $400/month.
# Fleet cost 8 * 2.5 * 730.56 = $14,611.20/month; 1 % of it = $146.112 ("meaningful").
PB = PriceBook(pricing_mode="cloud", usd_per_gpu_hour=2.5, ops_hours_per_month=4,
               usd_per_ops_hour=100)
MEANINGFUL = 0.01 * 8 * 2.5 * 730.56
GAINS = 5844.48


def run(m=None, **planning):
    p = PlanningInputs(**{**dict(ttft_p99_slo_seconds=2.0), **planning})
    return evaluate(PlanInputs(m or window(), PB, p))


def test_reuse_when_positive_and_meaningful():
    ev = run()
    assert ev.benefit.saved_prefill_usd == pytest.approx(GAINS)
    assert ev.benefit.monthly_benefit_usd == pytest.approx(GAINS - 400)
    assert ev.decision.kind == "REUSE"
    assert "$5,444/month" in ev.decision.reason
    assert any(f.startswith("hit rate falls to ~7.5 %") for f in ev.decision.flips)


def test_break_even_values_by_hand():
    ev = run()
    be = break_even(ev.savings, ev.benefit, MEANINGFUL)
    assert be.hit_rate == pytest.approx(0.8 * (400 + MEANINGFUL) / GAINS)  # 0.07475
    assert be.usd_per_gpu_hour == pytest.approx(2.5 * 400 / (GAINS - MEANINGFUL))  # 0.1755
    assert be.fixed_overhead_usd == pytest.approx(GAINS - MEANINGFUL)


def test_break_even_hit_rate_really_flips_the_money():
    be = break_even(run().savings, run().benefit, MEANINGFUL)
    at = run(with_hit_rate(window(), be.hit_rate))
    assert at.benefit.monthly_benefit_usd == pytest.approx(MEANINGFUL, rel=1e-9)
    below = run(with_hit_rate(window(), be.hit_rate * 0.99))
    # the money view crosses the threshold there (the verdict itself is the horizon's: at a
    # 2 s target the queue needs 6 replicas without reuse and 5 with, so it prices a whole GPU)
    assert below.benefit.monthly_benefit_usd < MEANINGFUL


OPS_2000 = dataclasses.replace(PB, ops_hours_per_month=20.0)  # $2,000/month of cache overhead
GPU_MONTH = 2.5 * 730.56  # $1,826.40


def test_not_worth_it_when_overlap_is_low():
    ev = evaluate(PlanInputs(window(hit_rate=0.01), OPS_2000, PlanningInputs(ttft_p99_slo_seconds=2)))
    # gains 5,844.48 * 0.01/0.8 = $73.06 < $2,000 overhead
    assert ev.benefit.monthly_benefit_usd == pytest.approx(GAINS * 0.01 / 0.8 - 2000)
    # the queue needs 6 replicas without reuse, 5 with: one GPU-month ($1,826.40) a month saved,
    # less $2,000 of overhead: the reuse path costs 24 x 173.60 = $4,166.40 more
    assert ev.horizon.reuse.cost_usd - ev.horizon.baseline.cost_usd == pytest.approx(24 * (2000 - GPU_MONTH))
    assert ev.decision.kind == "NOT_WORTH_IT"
    assert "overhead exceeds" in ev.decision.reason
    # break-even hit rate = 0.8 x (2,000 + 146.112) / 5,844.48 = 29.4 %
    assert any(f.startswith("hit rate rises to ~29.4 %") for f in ev.decision.flips)


def test_not_worth_it_at_zero_hit_rate():
    ev = run(window(hit_rate=0.0))
    assert ev.benefit.monthly_benefit_usd == pytest.approx(-400.0)
    assert ev.decision.kind == "NOT_WORTH_IT"
    assert any("hit rate above the baseline" in f for f in ev.decision.flips)


def test_not_worth_it_when_positive_but_small():
    # gains = 5,844.48 * 0.08/0.8 = $584.448; overhead 5 ops hours * $100 = $500. No growth,
    # the fleet kept (absorb_growth) and every freed hour used by extra traffic (fill 1): no
    # purchase on either path
    pb = dataclasses.replace(PB, ops_hours_per_month=5.0)
    ev = evaluate(PlanInputs(window(hit_rate=0.08), pb, PlanningInputs(
        ttft_p99_slo_seconds=2, realisation="absorb_growth", headroom_fill_fraction=1.0)))
    # the filled headroom ($584.448/month) is credited to the reuse path (issue 20: the horizon
    # and the monthly benefit are one computation): 24 x (500 - 584.448) = $2,026.75 cheaper
    assert ev.horizon.reuse.cost_usd - ev.horizon.baseline.cost_usd == pytest.approx(24 * (500 - 584.448))
    # net = 584.448 - 500 = 84.45 > 0 but < 146.11
    assert ev.benefit.monthly_benefit_usd == pytest.approx(84.448)
    assert ev.decision.kind == "NOT_WORTH_IT"
    assert "only $84/month" in ev.decision.reason


def test_need_data_with_zero_requests():
    m = PrefillMeasurement(window_seconds=DAY, requests=0, prompt_tokens=0,
                           cached_prompt_tokens=0, num_gpus=8, prefill_seconds_sum=0.0)
    ev = run(m)
    assert ev.decision.kind == "NEED_DATA"
    assert "no requests" in ev.decision.reason
    assert ev.benefit is None and ev.capacity is None


def test_need_data_with_a_short_window_even_if_the_numbers_look_good():
    ev = run(window(window_seconds=1800, requests=18_000))
    assert ev.benefit.monthly_benefit_usd > MEANINGFUL  # priced anyway...
    assert ev.decision.kind == "NEED_DATA"  # ...but not decided on
    assert "30 min" in ev.decision.reason


def test_need_data_with_few_requests():
    ev = run(window(requests=50, prompt=10_000))
    assert ev.decision.kind == "NEED_DATA" and "only 50 requests" in ev.decision.reason


def test_need_data_without_any_cost_metric():
    ev = run(window(model_params=None))  # no timer, no vLLM FLOPs, no params
    assert ev.decision.kind == "NEED_DATA"
    assert "no estimate of prefill cost" in ev.decision.reason


def test_a_wide_band_is_reported_as_a_flip_probability():
    # 2-hour window, 1 req/s, hit rate 0.95: cached 6.84e7 tokens * 4e-5 = 2,736 GPU-s
    # -> 2736/7200 * 730.56 = 277.61 GPU-h/month -> $694.03; net $294.03 > $146.11
    # band: u = sqrt(1/7200 + (0.5 * 22/24)^2 + 0.3^2) = 0.5479 -> low = 694.03*0.4521 - 400 < 0
    ev = run(window(hit_rate=0.95, requests=7200, window_seconds=7200))
    assert ev.benefit.monthly_benefit_usd == pytest.approx(2736 / 7200 * 730.56 * 2.5 - 400)
    assert ev.benefit.monthly_benefit_low_usd < 0
    # the queue needs 2 GPUs without reuse (0.4 s prefills at 1 req/s), 1 with: each path keeps
    # what it needs, the reuse path is 24 x (1,826.40 - 400) = $34,233.60 cheaper. Some draws of
    # the per-token cost band (x0.45..x1.55) need 1 GPU without reuse too: they flip
    assert ev.horizon.saving_usd == pytest.approx(24 * (GPU_MONTH - 400))
    assert ev.decision.kind == "REUSE"
    assert 0 < ev.flip_probability < 0.5


def test_a_whole_gpu_hanging_on_one_percent_of_the_prompt_is_not_reuse():
    # 1 % hits at a 2 s target: the queue needs 6 replicas of 0.4 s prefills at 10 req/s
    # (offered load exactly 4) and 5 of 0.396 s: the horizon is 24 x (1,826.40 - 400) cheaper
    # with reuse, but the prefill the cache frees is 5,844.48 x 0.01 / 0.8 = $73.06/month
    # against $400 of overhead: the monthly benefit is -$326.94 (issue 20: REUSE needs a
    # positive monthly benefit too; before, this was a REUSE-in-the-centre NEED_DATA)
    ev = run(window(hit_rate=0.01))
    assert ev.horizon.saving_usd == pytest.approx(24 * (GPU_MONTH - 400))
    assert ev.benefit.monthly_benefit_usd == pytest.approx(GAINS * 0.01 / 0.8 - 400)
    assert ev.decision.kind == "NOT_WORTH_IT"
    assert "overhead exceeds the saved prefill" in ev.decision.reason


def test_need_data_when_the_verdict_flips_in_most_scenarios():
    # rule 4 on the REUSE window of test_reuse_when_positive_and_meaningful, at a flip
    # probability of 60 % (given): NEED_DATA, saying so
    from kvplan.models.decision.verdict import decide
    ev = run()
    d = decide(ev.savings, ev.capacity, ev.benefit, PB, PlanningInputs(ttft_p99_slo_seconds=2.0),
               horizon=ev.horizon, flip_probability=0.6)
    assert d.kind == "NEED_DATA"
    assert "flips in 60% of resampled scenarios" in d.reason


def test_reuse_now_buy_later_when_reuse_only_defers_the_purchase():
    # 30 %/month for 24 months: both fleets run out, reuse years later; the reuse path is cheaper
    ev = run(growth_rate_per_month=0.30, horizon_months=24)
    assert ev.capacity.runout_month_with_reuse is not None
    first_r, first_b = ev.horizon.reuse.first_purchase, ev.horizon.baseline.first_purchase
    assert first_r.month > first_b.month
    assert ev.horizon.reuse_cheaper
    assert ev.decision.kind == "REUSE"
    assert f"BUY {first_r.gpus} GPU" in ev.decision.reason and f"in month {first_b.month}" in ev.decision.reason


def test_buy_when_even_the_reuse_fleet_misses_today():
    # 100 req/s: with reuse a = 100 x 0.08 s = 8 replicas of pure prefill work: 8 GPUs cannot
    # hold any queue; both paths buy now
    ev = run(window(requests=DAY * 100))
    assert ev.horizon.reuse.first_purchase.month == 0
    assert ev.decision.kind == "BUY"
    assert "today" in ev.decision.reason


def test_buy_when_no_gpu_count_meets_the_target():
    # with reuse a prefill takes 2,000 tokens / 25,000 tok/s = 0.08 s > 0.05 s target
    ev = run(ttft_p99_slo_seconds=0.05)
    assert ev.capacity.gpus_needed_with_reuse is None
    assert ev.decision.kind == "BUY"
    assert "0.08 s" in ev.decision.reason


def test_reuse_when_it_covers_the_capacity_gap():
    # 5 %/month for 24 months: load 10 -> 32.3 req/s. Without reuse (0.4 s per prefill) that
    # is 12.9 GPUs of pure prefill work on 8 GPUs; with reuse (0.08 s) 2.6
    ev = run(growth_rate_per_month=0.05, horizon_months=24)
    assert ev.capacity.runout_month_without_reuse is not None
    assert ev.capacity.runout_month_with_reuse is None
    assert ev.decision.kind == "REUSE"
    assert "without reuse the fleet misses" in ev.decision.reason
    assert ev.horizon.reuse.purchases == () and ev.horizon.baseline.purchases


def test_switching_realisation_is_offered_as_a_flip():
    # absorb_growth with no growth: freed time is idle headroom worth $0 -> NOT_WORTH_IT,
    # while shrinking the fleet would net $5,444/month
    ev = run(realisation="absorb_growth")
    assert ev.decision.kind == "NOT_WORTH_IT"
    assert any("realising the savings as shrink" in f for f in ev.decision.flips)


def test_sensitivity_rows_by_hand():
    rows = sensitivity(PlanInputs(window(), PB, PlanningInputs(ttft_p99_slo_seconds=2.0)))
    by = {r.name: r for r in rows}
    base = GAINS - 400
    price = by["GPU price"]
    assert (price.low_input, price.base_input, price.high_input) == pytest.approx(
        (1.875, 2.5, 3.125))
    assert price.low_benefit == pytest.approx(0.75 * GAINS - 400)
    assert price.high_benefit == pytest.approx(1.25 * GAINS - 400)
    hit = by["hit rate"]
    assert (hit.low_input, hit.high_input) == pytest.approx((0.6, 0.99))  # 0.8*1.25 capped
    assert hit.low_benefit == pytest.approx(GAINS * 0.6 / 0.8 - 400)
    assert hit.high_benefit == pytest.approx(GAINS * 0.99 / 0.8 - 400)
    growth = by["growth"]
    # -5 %/month: no purchase on either path, the bar's low end is the base. +5 %/month
    # (issue 20: the deferral is read off the horizon, in shrink too): the baseline keeps its 8
    # GPUs and buys 1 in months 12, 15, 17, 19, 21 and 23 (the queue's schedule), i.e.
    # 8 x 24 + 12 + 9 + 7 + 5 + 3 + 1 = 229 GPU-months; the reuse path gives back 5 and holds
    # 3 for 24 months = 72. Deferral = (229 - 72) / 24 - 5 = 1.5417 GPU-months a month
    # x $1,826.40 = $2,815.70; the shrink term stays 5,844.48 (under 5 x 730.56 GPU-hours)
    assert growth.low_benefit == pytest.approx(base)
    assert growth.high_benefit == pytest.approx(GAINS + (157 / 24 - 5) * GPU_MONTH - 400)
    over = by["cache overhead"]
    assert (over.low_input, over.high_input) == pytest.approx((200.0, 600.0))
    assert (over.low_benefit, over.high_benefit) == pytest.approx((base + 200, base - 200))
    assert all(r.base_benefit == pytest.approx(base) for r in rows)
    # swings: price 0.5 x 5,844.48 = 2,922; hit rate 0.39 / 0.8 x 5,844.48 = 2,849; growth 2,816; overhead 400
    assert [r.name for r in rows] == ["GPU price", "hit rate", "growth", "cache overhead"]


def test_sensitivity_is_empty_without_an_estimate():
    assert sensitivity(PlanInputs(window(model_params=None), PB, PlanningInputs())) == []


@pytest.mark.parametrize("change, field", [
    ({"realisation": "both"}, "realisation"),
    ({"ttft_p99_slo_seconds": 0}, "ttft_p99_slo_seconds"),
    ({"horizon_months": 0}, "horizon_months"),
    ({"growth_rate_per_month": -1}, "growth_rate_per_month"),
])
def test_planning_inputs_validate(change, field):
    with pytest.raises(KvplanError, match=field):
        PlanningInputs(**change)


# ---- the flip sentences: a value to act on, or plainly none ----------------------------------------
def test_an_unreachable_hit_rate_says_what_100_percent_would_give_not_a_percentage_above_100():
    # 1 % hit rate: gains $73 against $400 of ops; at 100 % gains would be 5,844.48 / 0.8 = $7,305.60
    pb = dataclasses.replace(PB, ops_hours_per_month=80.0)  # $8,000/month fixed overhead
    ev = evaluate(PlanInputs(window(hit_rate=0.01), pb, PlanningInputs(ttft_p99_slo_seconds=2)))
    assert ev.decision.kind == "NOT_WORTH_IT"
    flips = ev.decision.flips
    assert not any(re.search(r"\d{3,}\.\d %", f) for f in flips), flips  # no "~1324.6 %"
    hit = next(f for f in flips if "hit rate" in f)
    assert hit.startswith("no hit rate would do it: even every prompt token from the cache (100 %, now 1.0 %) "
                          "would net ~-$694/month")  # 5,844.48 / 0.8 - 8,000 = -694.4
    assert "under the $146/month that makes reuse worth it (1.0 % of the fleet's $14,611/month)" in hit
    # $73 of saved GPU time is under the $146 threshold: no price, no overhead would do it either
    assert any(f.startswith("no GPU price would do it") and "the $146/month threshold" in f for f in flips)
    assert any(f.startswith("no fixed cache overhead would do it: even at $0/month (now $8,000)") for f in flips)


def test_when_no_value_of_an_input_would_do_it_the_sentence_says_so_plainly():
    # gains $73 < the $146 threshold: neither the GPU price nor dropping the overhead helps
    ev = evaluate(PlanInputs(window(hit_rate=0.01), OPS_2000, PlanningInputs(ttft_p99_slo_seconds=2)))
    flips = ev.decision.flips
    assert any(f.startswith("no GPU price would do it: the saved GPU time ($73/month at $2.50/GPU-hour) "
                            "stays under the $146/month that makes reuse worth it (1.0 % of the fleet's "
                            "$14,611/month) at any price") for f in flips), flips
    assert any(f.startswith("no fixed cache overhead would do it: even at $0/month (now $2,000) the saved GPU "
                            "time ($73/month) stays under the $146/month threshold") for f in flips), flips
    assert not any("falls to ~$0/month" in f for f in flips)


def test_nothing_saved_and_nothing_spent_is_not_called_overhead_exceeding_the_savings():
    free = dataclasses.replace(PB, ops_hours_per_month=0.0)
    ev = evaluate(PlanInputs(window(hit_rate=0.0), free, PlanningInputs(ttft_p99_slo_seconds=2)))
    assert ev.decision.kind == "NOT_WORTH_IT"
    assert "overhead exceeds" not in ev.decision.reason
    assert ev.decision.reason == ("Nothing to gain: the cache saved no prefill in this window (hit rate 0.0 %, "
                                  "baseline without it 0.0 %); no overhead is priced either (shrink).")
    assert any(f.startswith("a hit rate above the baseline's 0.0 % (now 0.0 %)") for f in ev.decision.flips)


# ---- the plan's own scenarios are not inputs ----------------------------------------------
@pytest.mark.parametrize("price", [850.0, 1000.0])
def test_a_saved_price_at_or_near_its_bound_still_plans(price):
    # the form accepts up to $1,000/GPU-hour; the plan's flip draws (+-20 %) and tornado (+-25 %)
    # reached $1,011 and $1,250 and were refused as inputs: plan and report exited 2
    from kvplan.models.decision.plan import plan

    r = plan(PlanInputs(window(), PriceBook(pricing_mode="cloud", usd_per_gpu_hour=price),
                        PlanningInputs(ttft_p99_slo_seconds=2.0, growth_rate_per_month=2.0)))
    by = {row.name: row for row in r.sensitivity}
    assert by["GPU price"].high_input == pytest.approx(price * 1.25)
    assert by["growth"].high_input == pytest.approx(2.05)  # the growth bound is 2.0/month
    assert r.flip_probability is not None


def test_owned_prices_at_their_bounds_still_plan():
    from kvplan.models.decision.plan import plan

    pb = PriceBook(pricing_mode="owned", capex_usd_per_gpu=10_000_000.0, power_hosting_usd_per_gpu_month=100_000.0,
                   usd_per_ops_hour=10_000.0, ops_hours_per_month=744.0)
    r = plan(PlanInputs(window(), pb, PlanningInputs(ttft_p99_slo_seconds=2.0)))
    assert {row.name for row in r.sensitivity} >= {"GPU price", "cache overhead"}
