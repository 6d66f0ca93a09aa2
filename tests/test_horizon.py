"""Issue 11: the cheapest path over the horizon decides. Edge cases, dollars by hand.

The window of test_model_decision: one day, 10 requests/s of 10,000-token prompts on 8 GPUs,
4e-5 GPU-s per token (estimator C: 2 x 1e9 params at 50 % of 1e14 FLOP/s), so a prefill takes
0.4 s x (1 - hit rate). At $2.50/GPU-hour a GPU-month costs 2.5 x 730.56 = $1,826.40; the
cache costs 4 ops hours x $100 = $400/month. 2 s p99 TTFT target, 24 months, shrink.
Queue sizes used below (M/M/c, p99 wait + prefill <= 2 s): 10 req/s needs 6 replicas at
0.4 s, 1 at 0.02 s; 2 req/s needs 2 at 0.4 s and 2 at 0.32 s.
"""

import dataclasses
import json

import pytest

from kvplan.models.capacity.fleet import MAX_FLEET_GPUS, CapacityInputs, Goodput, plan_capacity
from kvplan.models.capacity.horizon import plan_horizon
from kvplan.models.decision.plan import plan
from kvplan.models.decision.verdict import PlanInputs, evaluate
from kvplan.models.inputs.deployment import DeploymentFacts
from kvplan.models.inputs.planning import PlanningInputs
from kvplan.models.inputs.pricebook import PriceBook
from kvplan.models.prefill.measurement import PrefillMeasurement

DAY = 86400.0
GPU_MONTH = 2.5 * 730.56  # $1,826.40
PB = PriceBook(pricing_mode="cloud", usd_per_gpu_hour=2.5, ops_hours_per_month=4, usd_per_ops_hour=100)


def window(hit_rate=0.8, rps=10.0, num_gpus=8, **change):
    total = rps * DAY * 10_000
    return PrefillMeasurement(**{**dict(
        window_seconds=DAY, requests=rps * DAY, prompt_tokens=total, cached_prompt_tokens=total * hit_rate,
        num_gpus=num_gpus, model_params=1e9, gpu_peak_flops=1e14, assumed_prefill_mfu=0.5), **change})


def run(m=None, pb=PB, facts=None, goodput=None, **planning):
    p = PlanningInputs(**{**dict(ttft_p99_slo_seconds=2.0), **planning})
    return evaluate(PlanInputs(m or window(), pb, p, facts=facts, goodput=goodput))


# (name, measurement, price book, planning, expected verdict, reuse - baseline horizon cost $)
CASES = [
    # no overlap: both paths hold 6 GPUs (2 released by both); reuse adds 24 x $400
    ("zero overlap", window(hit_rate=0.0), PB, {}, "NOT_WORTH_IT", 24 * 400.0),
    # 95 % hits: 6 GPUs without, 1 with: 24 x (5 x 1,826.40 - 400) = $209,568 cheaper
    ("95 % hits", window(hit_rate=0.95), PB, {}, "REUSE", -24 * (5 * GPU_MONTH - 400)),
    # 1 % hits, $50,000/month of cache: needs 6 vs 5 (the knife edge of the queue), saves one
    # GPU-month a month and pays 50,000: 24 x (50,000 - 1,826.40) = $1,156,166.40 more
    ("huge overhead", window(hit_rate=0.01), dataclasses.replace(PB, ops_hours_per_month=500.0), {},
     "NOT_WORTH_IT", 24 * (50_000 - GPU_MONTH)),
    # GPUs free: nothing to save, the cache still costs 24 x $400
    ("zero GPU price", window(hit_rate=0.8), dataclasses.replace(PB, usd_per_gpu_hour=0.0), {},
     "NOT_WORTH_IT", 24 * 400.0),
    # 8 GPUs, 2 req/s at 20 % hits: 2 GPUs needed with or without reuse. The old model credited
    # the 6 spare GPUs to the cache ($192/month REUSE at $100/month overhead); both paths give
    # them back now, and the cache costs 24 x $100
    ("over-provisioned", window(hit_rate=0.2, rps=2.0), dataclasses.replace(PB, ops_hours_per_month=1.0), {},
     "NOT_WORTH_IT", 24 * 100.0),
]


@pytest.mark.parametrize("name,m,pb,planning,kind,extra_usd", CASES, ids=[c[0] for c in CASES])
def test_edge_cases_by_hand(name, m, pb, planning, kind, extra_usd):
    ev = run(m, pb, **planning)
    h = ev.horizon
    assert h.reuse.cost_usd - h.baseline.cost_usd == pytest.approx(extra_usd)
    assert ev.decision.kind == kind
    if h.reuse.cost_usd > h.baseline.cost_usd:
        assert ev.decision.kind != "REUSE"  # never REUSE when the reuse path costs more


def test_over_provisioned_fleet_gets_no_shrink_credit():
    ev = run(window(hit_rate=0.2, rps=2.0), dataclasses.replace(PB, ops_hours_per_month=1.0))
    assert ev.capacity.gpus_needed_without_reuse == ev.capacity.gpus_needed_with_reuse == 2
    assert ev.benefit.saved_prefill_usd == 0.0
    assert ev.horizon.baseline.released_gpus == ev.horizon.reuse.released_gpus == 6


def test_huge_overhead_with_a_purchase_due_is_buy_not_reuse():
    # 1 % hits, $50,000/month of cache, the baseline running out within the horizon:
    # buying the GPU ($1,826.40/month) is the answer, never REUSE at -$50,000/month
    pb = dataclasses.replace(PB, ops_hours_per_month=500.0)
    ev = run(window(hit_rate=0.01), pb, growth_rate_per_month=0.10, horizon_months=12, realisation="absorb_growth")
    assert ev.horizon.baseline.purchases
    assert ev.horizon.reuse.cost_usd > ev.horizon.baseline.cost_usd
    assert ev.decision.kind == "BUY"


def test_runaway_growth_is_a_buy_beyond_the_search_limit_not_an_exception():
    # 50 %/month for 36 months: 10 req/s becomes 10 x 1.5^35 = 1.47e7 req/s; even at 0.08 s a
    # prefill that is over a million GPUs, beyond the 10,000-GPU search limit on both paths
    ev = run(growth_rate_per_month=0.5, horizon_months=36)
    assert not ev.horizon.baseline.holds and not ev.horizon.reuse.holds
    assert ev.horizon.reuse.beyond_limit
    assert ev.decision.kind == "BUY"
    assert f"beyond {MAX_FLEET_GPUS:,} GPUs" in ev.decision.reason
    d = plan(PlanInputs(window(), PB, PlanningInputs(ttft_p99_slo_seconds=2.0, growth_rate_per_month=0.5,
                                                     horizon_months=36))).to_dict()
    assert d["horizon_cost_usd"] == {"baseline": None, "reuse": None}
    json.dumps(d, allow_nan=False)


def test_a_model_that_fits_on_no_single_gpu_buys_whole_replicas():
    # 235e9 params in FP8 = 235 GB on 80 GB H100s (72 GB usable): ceil(235 / 72) = 4 GPUs per
    # replica; the 1-GPU fleet holds no replica, so both paths buy one replica now
    facts = DeploymentFacts(total_model_params=235e9, weight_bytes_per_param=1.0)
    pb = dataclasses.replace(PB, gpu_type="H100")
    ev = run(window(hit_rate=0.8, rps=0.5, num_gpus=1), pb, facts=facts)
    assert ev.replica.gpus_per_replica == 4
    assert "one replica needs >= 4 H100" in ev.replica.message
    assert ev.horizon.reuse.purchases[0].month == 0 and ev.horizon.reuse.purchases[0].gpus == 4
    assert ev.decision.kind == "BUY"
    assert "4 per replica" in ev.decision.reason


def test_reuse_now_buy_later_sentence():
    # 30 %/month: the reuse path buys years after the baseline and costs less
    ev = run(growth_rate_per_month=0.30, horizon_months=24)
    r, b = ev.horizon.reuse.first_purchase, ev.horizon.baseline.first_purchase
    assert ev.decision.kind == "REUSE"
    assert ev.decision.reason.startswith(f"REUSE now; BUY {r.gpus} GPU")
    assert f"in month {r.month} instead of" in ev.decision.reason and f"month {b.month}" in ev.decision.reason


def test_horizon_costs_by_hand_with_growth():
    # 1 GPU, 0.25 req/s growing 10 %/month, 12 months (test_model_capacity): the baseline needs a
    # second GPU in months 8..11, reuse never. absorb_growth: baseline 8 x 1 + 4 x 2 = 16
    # GPU-months, reuse 12 GPU-months + 12 x $400 of cache
    import math
    cap = plan_capacity(CapacityInputs(ttft_p99_slo_seconds=1 + 2 * math.log(50), requests_per_second=0.25,
                                       mean_prompt_tokens=1000, hit_rate=0.5, prefill_tokens_per_gpu_second=1000,
                                       current_gpus=1, growth_rate_per_month=0.10, horizon_months=12), PB)
    h = plan_horizon(cap, PB, realisation="absorb_growth")
    assert h.baseline.schedule() == [{"month": 8, "gpus": 1}]
    assert h.reuse.schedule() == []
    assert h.baseline.cost_usd == pytest.approx(16 * GPU_MONTH)
    assert h.reuse.cost_usd == pytest.approx(12 * GPU_MONTH + 12 * 400)
    assert h.saving_usd == pytest.approx(4 * GPU_MONTH - 12 * 400)  # 7,305.60 - 4,800 = $2,505.60


def test_goodput_sizes_on_the_peak_hour_with_headroom():
    # peak 12 req/s x 1.2 headroom = 14.4 req/s; goodput 3 req/s per replica without reuse ->
    # ceil(4.8) = 5 replicas; 8 with reuse -> ceil(1.8) = 2
    g = Goodput(without_reuse_rps=3.0, with_reuse_rps=8.0, source="sweep test")
    r = plan(PlanInputs(window(), PB, PlanningInputs(ttft_p99_slo_seconds=2.0, headroom=0.2), goodput=g,
                        peak_hour_requests_per_s=12.0))
    d = r.to_dict()
    assert d["capacity_method"] == "goodput"
    assert d["peak_hour_requests_per_s"] == 12.0
    assert (d["gpus_needed_without_reuse"], d["gpus_needed_with_reuse"]) == (5, 2)
    # shrink: 5 vs 2 GPUs for 24 months, cache $400/month (the hit cost is inside the goodput)
    assert d["horizon_cost_usd"]["baseline"] == pytest.approx(24 * 5 * GPU_MONTH)
    assert d["horizon_cost_usd"]["reuse"] == pytest.approx(24 * (2 * GPU_MONTH + 400))
    assert d["decision"] == "REUSE"


def test_plan_json_carries_the_new_keys():
    d = plan(PlanInputs(window(), PB, PlanningInputs(ttft_p99_slo_seconds=2.0))).to_dict()
    for key in ("capacity_method", "gpus_per_replica", "peak_hour_requests_per_s", "purchase_schedule_without_reuse",
                "purchase_schedule_with_reuse", "horizon_cost_usd", "flip_probability"):
        assert key in d
    assert d["capacity_method"] == "queueing_fallback"
    assert d["peak_hour_requests_per_s"] == pytest.approx(10.0)  # no peak given: the mean
    assert set(d["horizon_cost_usd"]) == {"baseline", "reuse"}
    assert 0.0 <= d["flip_probability"] <= 1.0


def test_flip_probability_is_deterministic():
    a = run(window(hit_rate=0.95, requests=7200, window_seconds=7200)).flip_probability
    b = run(window(hit_rate=0.95, requests=7200, window_seconds=7200)).flip_probability
    assert a == b
