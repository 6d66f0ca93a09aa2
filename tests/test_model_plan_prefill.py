"""The plan's prefill figures from a fitted cost model: the JSON keys of `kvplan plan --json`,
GPUs per engine, the covered span, tier attribution and $ per 1M tokens. Every expected value is
worked out by hand in the comments, never read back from the code."""

import json

import pytest

from kvplan.models.core.errors import KvplanError
from kvplan.models.decision.plan import plan
from kvplan.models.decision.verdict import PlanInputs
from kvplan.models.inputs.deployment import DEPLOYMENT_FIELDS, DeploymentFacts
from kvplan.models.inputs.planning import PlanningInputs
from kvplan.models.inputs.pricebook import PriceBook
from kvplan.models.prefill.fit import CostPart, PrefillCostModel
from kvplan.models.prefill.interval import Interval
from kvplan.models.prefill.measurement import measurement_from_window, with_hit_rate
from kvplan.models.prefill.savings import estimate_savings
from kvplan.models.prefill.window import MeasuredAB, PricedWindow

HOUR = 3600.0
# cost model: 20 ms per request + 100 us per computed token (engine-seconds)
MODEL = PrefillCostModel.given(per_token=1e-4, fixed=0.02, source="fitted", history="test history")


def two_hours(*, external=0.0, stored=None):
    """Two one-hour intervals inside a one-day range. Hour 1: 1,000 requests of 2,000 tokens,
    1,500 of them cached (1.5e6 cached, 5e5 computed). Hour 2: 1,000 requests, nothing cached
    (2e6 computed). Running-phase timers 1,000 s per hour; 100 output tokens per request."""
    h1 = Interval(0.0, HOUR, requests=1000, prefill_seconds=50.0, computed_tokens=5e5,
                  prompt_tokens=2e6, cached_tokens=1.5e6, external_tokens=external, stored_tokens=stored,
                  engines=1, inference_seconds=1000.0, generation_tokens=1e5, targets=("v",))
    h2 = Interval(HOUR, 2 * HOUR, requests=1000, prefill_seconds=250.0, computed_tokens=2e6,
                  prompt_tokens=2e6, cached_tokens=0.0, external_tokens=0.0, engines=1,
                  inference_seconds=1000.0, generation_tokens=1e5, targets=("v",))
    return PricedWindow.from_intervals([h1, h2], t_from=0.0, t_to=24 * HOUR)


def test_plan_json_carries_the_prefill_figures_priced_by_hand():
    facts = DeploymentFacts(tensor_parallel=2)  # an engine spans 2 GPUs
    m = measurement_from_window(two_hours(), MODEL, facts=facts, lmcache=False)
    assert m.num_gpus == 2 and m.window_seconds == 2 * HOUR
    r = plan(PlanInputs(measurement=m, pricebook=PriceBook(usd_per_gpu_hour=2.5)))
    d = json.loads(json.dumps(r.to_dict()))
    # the covered span (2 h), not the day asked for
    assert d["window_seconds"] == 2 * HOUR and d["asked_seconds"] == 24 * HOUR
    assert d["coverage"] == pytest.approx(2 / 24)
    # saved: 1.5e6 cached tokens x 100 us = 150 engine-s = 300 GPU-s (2 GPUs per engine)
    assert d["saved_prefill_gpu_seconds"] == pytest.approx(300.0)
    assert d["saved_by_tier"]["device"]["value"] == pytest.approx(300.0)
    assert d["saved_by_tier"]["lmcache"]["value"] == pytest.approx(0.0)
    assert d["prefill_cost_model"]["parts"]["per_token"]["value"] == pytest.approx(1e-4)
    assert d["prefill_cost_model"]["history"] == "test history"
    # prefill with reuse: 2,000 x 20 ms + 2.5e6 x 100 us = 290 engine-s = 580 GPU-s
    # without: 2,000 x 20 ms + 4e6 x 100 us = 440 engine-s = 880 GPU-s
    # $/GPU-s = 2.5 / 3600; 4e6 prompt tokens
    assert d["usd_per_1m_prompt_tokens_with_reuse"] == pytest.approx(580 * 2.5 / 3600 / 4)     # $0.1007
    assert d["usd_per_1m_prompt_tokens_without_reuse"] == pytest.approx(880 * 2.5 / 3600 / 4)  # $0.1528
    # decode: engine busy 2,000 engine-s = 4,000 GPU-s minus 580 prefill = 3,420 GPU-s over 2e5
    # output tokens
    assert d["usd_per_1m_output_tokens_with_reuse"] == pytest.approx(3420 * 2.5 / 3600 / 0.2)  # $11.875
    assert d["usd_per_1m_output_tokens_without_reuse"] == d["usd_per_1m_output_tokens_with_reuse"]
    assert d["saving_source"] == "fitted" and d["priced_tier"] == "all"
    # monthly: 300 GPU-s in 2 h -> x 2,630,016 / 7,200 / 3,600 GPU-hours
    assert d["saved_prefill_gpu_hours"] == pytest.approx(300 * 2_630_016 / 7200 / 3600)


def test_lmcache_decision_weighs_only_lmcache():
    cost_model = PrefillCostModel("fitted", MODEL.parts + (CostPart("store", 2e-5, 2e-5, 2e-5, "s/stored token"),),
                             "h")
    # hour 1: of the 1.5e6 cached tokens 0.5e6 came from LMCache; LMCache stored 2.5e6 tokens
    w = two_hours(external=5e5, stored=2.5e6)
    m = measurement_from_window(w, cost_model, lmcache=True)
    assert m.priced_tier == "lmcache" and m.baseline_cached_prompt_tokens == pytest.approx(1e6)
    s = estimate_savings(m)
    # gross LMCache part: 0.5e6 x 100 us = 50 GPU-s; overhead: 2.5e6 x 20 us = 50 GPU-s
    assert s.saved_gpu_seconds == pytest.approx(50.0)
    assert s.hit_cost_gpu_seconds == pytest.approx(50.0)
    d = plan(PlanInputs(measurement=m)).to_dict()
    assert d["saved_by_tier"]["device"]["value"] == pytest.approx(100.0)    # 1e6 x 100 us, free
    assert d["saved_by_tier"]["lmcache"]["value"] == pytest.approx(0.0)     # 50 - 50
    assert d["saved_by_tier"]["lmcache"]["overhead"] == pytest.approx(50.0)
    assert d["saved_prefill_gpu_seconds"] == pytest.approx(100.0)


def test_wider_range_neither_dilutes_nor_escapes_need_data():
    # 30 min of data asked as 30 days: priced over 30 min, and too short to decide
    row = Interval(0.0, 1800.0, requests=500, prefill_seconds=20.0, computed_tokens=5e5,
                   prompt_tokens=1e6, engines=1, targets=("v",))
    w = PricedWindow.from_intervals([row], t_from=0.0, t_to=30 * 86400.0)
    m = measurement_from_window(w, MODEL, lmcache=False)
    r = plan(PlanInputs(measurement=m))
    assert r.window_seconds == 1800.0
    # 5e5 cached x 100 us = 50 GPU-s in 30 min -> the month scales the 30 min, not 30 days
    assert r.saved_prefill_gpu_hours == pytest.approx(50 * 2_630_016 / 1800 / 3600)
    assert r.decision.kind == "NEED_DATA" and "30 min" in r.decision.reason


def test_unidentified_model_gives_need_data_with_the_fix():
    m = measurement_from_window(two_hours(), PrefillCostModel("unidentified", (), "h", reason="all alike",
                                                              fix="run kvplan pilot"), lmcache=False)
    r = plan(PlanInputs(measurement=m))
    assert r.decision.kind == "NEED_DATA"
    assert "not identified" in r.decision.reason and "run kvplan pilot" in r.decision.flips
    assert r.saved_prefill_gpu_seconds is None


def test_flop_estimators_run_when_facts_are_given_and_spread_is_shown():
    facts = DeploymentFacts(gpu_peak_flops=1e15, model_params=8e9, assumed_prefill_mfu=0.5)
    m = measurement_from_window(two_hours(), MODEL, facts=facts, lmcache=False)
    s = estimate_savings(m)
    by = {e.name: e for e in s.estimators}
    # C: 2 x 8e9 FLOPs per token at 0.5 x 1e15 FLOP/s = 3.2e-5 s/token; 1.5e6 cached -> 48 GPU-s
    assert by["compute_params"].available
    assert by["compute_params"].saved_gpu_seconds == pytest.approx(48.0)
    assert s.source == "fitted" and s.saved_gpu_seconds == pytest.approx(150.0)
    assert s.estimator_spread == pytest.approx((48.0, 150.0))


def test_measured_ab_overrides_the_model():
    ab = MeasuredAB("pilot pair", off_engine_seconds=100.0, on_engine_seconds=70.0,
                    on_cached_tokens=5e5, engine_seconds_source="wall time")
    m = measurement_from_window(two_hours(), MODEL, lmcache=False, measured_ab=ab)
    r = plan(PlanInputs(measurement=m))
    # 30 engine-s saved over 5e5 cached tokens = 6e-5 s/token x 1.5e6 cached = 90 GPU-s
    assert r.saving_source == "measured"
    assert r.saved_prefill_gpu_seconds == pytest.approx(90.0)
    assert r.evaluation.savings.hit_cost_gpu_seconds == 0.0


def test_what_if_hit_rate_rescales_the_priced_window():
    m = measurement_from_window(two_hours(), MODEL, lmcache=False)
    half = with_hit_rate(m, 0.1875)  # half of today's 0.375
    # 7.5e5 cached x 100 us = 75 engine-s
    assert estimate_savings(half).saved_gpu_seconds == pytest.approx(75.0)


def test_deployment_facts_fields_and_validation():
    names = [f.name for f in DEPLOYMENT_FIELDS]
    assert names[:2] == ["tensor_parallel", "pipeline_parallel"]
    assert {"gpu_type", "gpu_peak_flops", "model_params", "model_layers", "hidden_size"} <= set(names)
    assert DeploymentFacts(tensor_parallel=4, pipeline_parallel=2).gpus_per_engine == 8
    with pytest.raises(KvplanError, match="tensor_parallel"):
        DeploymentFacts(tensor_parallel=0)
    with pytest.raises(KvplanError, match=r"DeploymentFacts\.tp: unknown field"):
        DeploymentFacts.from_dict({"tp": 2})
    assert DeploymentFacts.from_dict({"gpu_peak_flops": 989e12, "model_params": None}).gpu_peak_flops == 989e12
    assert DeploymentFacts().missing_for_flops() == ["gpu_peak_flops", "model_params"]


def test_planning_inputs_default_min_window():
    assert PlanningInputs().min_window_seconds == 3600.0
