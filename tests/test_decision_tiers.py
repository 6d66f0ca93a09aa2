"""Issue 20, part 1: a verdict whose sentence, terms and horizon agree, per tier.

Windows: the one-day window of test_model_decision (10 req/s of 10,000-token prompts, 4e-5
GPU-s per token from estimator C, $2.50/GPU-hour -> a GPU-month is 2.5 x 730.56 = $1,826.40,
$400/month of ops for the cache) and the two-hour fitted window of test_model_plan_prefill.
Every expected value is worked out by hand in the comments."""

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from kvplan.models.core.timeutil import duration
from kvplan.models.decision.plan import plan
from kvplan.models.decision.reasons import data_gate
from kvplan.models.decision.verdict import PlanInputs, evaluate, verdict_kind
from kvplan.models.inputs.planning import PlanningInputs
from kvplan.models.inputs.pricebook import PriceBook
from kvplan.models.prefill.fit import CostPart, PrefillCostModel
from kvplan.models.prefill.interval import Interval
from kvplan.models.prefill.measurement import measurement_from_window
from kvplan.models.prefill.savings import estimate_savings
from kvplan.models.prefill.window import PricedWindow
from tests import test_horizon as th
from tests import test_model_decision as tmd
from tests.test_model_plan_prefill import MODEL, two_hours

GPU_MONTH = 2.5 * 730.56  # $1,826.40
MONTH_HOURS_PER_2H = 2_630_016 / 7200 / 3600  # GPU-hours/month per GPU-second of a 2-hour window
NO_CACHE_COST = dict(cache_service_node_usd_per_month=0.0, usd_per_gb_month_cpu_memory=0.0, usd_per_gb_month_ssd=0.0)
PB = PriceBook(pricing_mode="cloud", usd_per_gpu_hour=2.5, ops_hours_per_month=4, usd_per_ops_hour=100,
               **NO_CACHE_COST)


# ---- 1. one decision per tier, and a headline that names them ----------------------------------
def test_lmcache_is_judged_on_its_margin_and_vllm_cache_is_free():
    # hour 1 of two_hours: 1.5e6 cached tokens, 0.5e6 of them from LMCache, which stored 2.5e6
    # at 20 us each. Device: 1e6 x 100 us = 100 GPU-s in 2 h = 100 x 2,630,016 / 7,200 / 3,600
    # = 10.147 GPU-h/month, free. LMCache: gross 0.5e6 x 100 us = 50 GPU-s, overhead 2.5e6 x
    # 20 us = 50 GPU-s: net 0. One GPU serves 0.28 req/s of 0.125-0.15 s prefills: 1 GPU with
    # or without either cache, so nothing is given back (shrink) and nothing bought.
    cost_model = PrefillCostModel("fitted", MODEL.parts + (CostPart("store", 2e-5, 2e-5, 2e-5, "s/stored token"),),
                                  "h")
    m = measurement_from_window(two_hours(external=5e5, stored=2.5e6), cost_model, lmcache=True)
    r = plan(PlanInputs(measurement=m, pricebook=PB))
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    dev, lm = d["decision_by_tier"]["device"], d["decision_by_tier"]["lmcache"]
    assert dev["kind"] == "REUSE"
    assert dev["gpu_hours_per_month"] == pytest.approx(100 * MONTH_HOURS_PER_2H)
    assert dev["gpus_saved"] == 0
    assert dev["monthly_benefit_usd"] == 0.0  # frees no whole GPU of the one: $0 realised, never negative
    assert dev["reason"].startswith("REUSE (vLLM prefix cache, free): keep prefix caching on; it saves 10.15 "
                                    "GPU-h/month ($25 of GPU time) and 0 GPUs")  # 10.147 x 2.5 = $25.37
    # LMCache: saves 50 GPU-s gross = 5.07 GPU-h/month, none of it a GPU (shrink), and costs
    # $400 of ops + its 50 GPU-s of stores = 5.0736 x 2.5 = $12.68: -$412.68/month
    assert lm["kind"] == "NOT_WORTH_IT"
    assert lm["monthly_benefit_usd"] == pytest.approx(-(400 + 50 * MONTH_HOURS_PER_2H * 2.5))
    assert lm["gpu_hours_per_month"] == pytest.approx(0.0, abs=1e-9)
    assert lm["reason"].startswith("LMCache: NOT_WORTH_IT (-$413/month beyond vLLM's own cache")
    # the top-level decision stays, and names its tier
    assert d["decision"] == "NOT_WORTH_IT"
    assert d["reason"].startswith("LMCache: Nothing to gain: ")
    assert d["headline"] == ("vLLM prefix cache: REUSE (free; 10.15 GPU-h/month, 0 GPUs). "
                             "LMCache: NOT_WORTH_IT (-$413/month).")


def test_without_lmcache_the_device_tier_is_the_decision_and_lmcache_is_absent():
    # test_model_decision's window: 2,337.792 GPU-h/month saved; the queue needs 6 GPUs without
    # a cache and 1 with: the free tier saves 5 GPUs; shrink gives back 5 of 8 against the
    # baseline's 2, capped at the freed hours: 2,337.792 x $2.50 = $5,844.48, no overhead
    d = plan(PlanInputs(tmd.window(), PB, PlanningInputs(ttft_p99_slo_seconds=2.0))).to_dict()
    dev, lm = d["decision_by_tier"]["device"], d["decision_by_tier"]["lmcache"]
    assert dev["kind"] == "REUSE" and dev["gpus_saved"] == 5
    assert dev["gpu_hours_per_month"] == pytest.approx(2337.792)
    assert dev["monthly_benefit_usd"] == pytest.approx(tmd.GAINS)
    assert lm["kind"] is None and lm["monthly_benefit_usd"] is None
    assert d["reason"].startswith("KV cache, every tier: REUSE now;")  # no window: tiers unknown
    assert d["headline"] == ("vLLM prefix cache: REUSE (free; 2,337.79 GPU-h/month, 5 GPUs). "
                             "LMCache: not in this window.")


def test_a_window_only_vllm_cached_is_named_as_the_vllm_prefix_cache():
    r = plan(PlanInputs(measurement_from_window(two_hours(), MODEL, lmcache=False), PB))
    assert r.decision.reason.startswith("vLLM prefix cache: ")


def test_buy_when_the_slo_breaks_even_with_both_tiers_names_both():
    # a 0.05 s target: even with reuse one prefill takes 2,000 / 25,000 = 0.08 s
    r = plan(PlanInputs(tmd.window(), PB, PlanningInputs(ttft_p99_slo_seconds=0.05)))
    assert r.decision.kind == "BUY"
    assert r.decision.reason.startswith("Even with vLLM prefix cache: Even with reuse one prefill takes 0.08 s")


# ---- 2. the four terms and the horizon are one computation ----------------------------------------
def test_a_purchase_reuse_avoids_is_in_the_deferral_term():
    # The contradiction: 1 GPU today, the queue needs 6 without reuse (buy 5 now) and 1
    # with. Before: REUSE next to saved_prefill $0, deferral $0, benefit -$400. Now the deferral
    # carries the 5 GPUs the reuse path never buys: baseline 6 x 24 = 144 GPU-months, reuse
    # 1 x 24 = 24, nothing given back: (144 - 24) / 24 = 5 GPU-months a month x $1,826.40 =
    # $9,132; benefit 9,132 - 400 = $8,732 = the horizon's saving / 24
    ev = evaluate(PlanInputs(tmd.window(num_gpus=1), PB, PlanningInputs(ttft_p99_slo_seconds=2.0)))
    assert ev.horizon.baseline.schedule() == [{"month": 0, "gpus": 5}] and ev.horizon.reuse.schedule() == []
    b = ev.benefit
    assert b.saved_prefill_usd == 0.0
    assert b.deferral_usd == pytest.approx(5 * GPU_MONTH)
    assert b.overhead_usd == pytest.approx(400.0)
    assert b.monthly_benefit_usd == pytest.approx(5 * GPU_MONTH - 400)
    assert b.monthly_benefit_usd * 24 == pytest.approx(ev.horizon.saving_usd)
    assert ev.decision.kind == "REUSE" and "$8,732/month" in ev.decision.reason


def test_owned_gpus_defer_at_the_annuity_of_the_cost_of_capital():
    # owned: $30,000 over 36 months at 8 %/year: i = 0.08/12, annuity = 30,000 i / (1 - (1+i)^-36)
    # = $940.09 + $200 power/hosting = $1,140.09 per GPU-month; 5 GPUs never bought
    pb = PriceBook(pricing_mode="owned", capex_usd_per_gpu=30_000, amortisation_months=36,
                   cost_of_capital_annual=0.08, power_hosting_usd_per_gpu_month=200, ops_hours_per_month=4,
                   usd_per_ops_hour=100, **NO_CACHE_COST)
    i = 0.08 / 12
    gpu_month = 30_000 * i / (1 - (1 + i) ** -36) + 200
    ev = evaluate(PlanInputs(tmd.window(num_gpus=1), pb, PlanningInputs(ttft_p99_slo_seconds=2.0)))
    assert ev.benefit.deferral_usd == pytest.approx(5 * gpu_month)
    assert ev.benefit.monthly_benefit_usd * 24 == pytest.approx(ev.horizon.saving_usd)


def _cases():
    """Every table-driven decision case of the tests: test_horizon.CASES, and the scenarios of
    test_model_decision and test_horizon as (name, PlanInputs)."""
    out = [(c[0], PlanInputs(c[1], c[2], PlanningInputs(**{"ttft_p99_slo_seconds": 2.0, **c[3]}))) for c in th.CASES]
    p2 = PlanningInputs(ttft_p99_slo_seconds=2.0)
    scen = [
        ("reuse", tmd.window(), tmd.PB, {}), ("low overlap", tmd.window(hit_rate=0.01), tmd.OPS_2000, {}),
        ("zero hits", tmd.window(hit_rate=0.0), tmd.PB, {}),
        ("small", tmd.window(hit_rate=0.08), dataclasses.replace(tmd.PB, ops_hours_per_month=5.0),
         {"realisation": "absorb_growth", "headroom_fill_fraction": 1.0}),
        ("wide band", tmd.window(hit_rate=0.95, requests=7200, window_seconds=7200), tmd.PB, {}),
        ("knife edge", tmd.window(hit_rate=0.01), tmd.PB, {}),
        ("defers", tmd.window(), tmd.PB, {"growth_rate_per_month": 0.30}),
        ("buy today", tmd.window(requests=86400 * 100), tmd.PB, {}),
        ("unreachable", tmd.window(), tmd.PB, {"ttft_p99_slo_seconds": 0.05}),
        ("capacity gap", tmd.window(), tmd.PB, {"growth_rate_per_month": 0.05}),
        ("absorb", tmd.window(), tmd.PB, {"realisation": "absorb_growth"}),
        ("absorb growth", tmd.window(), tmd.PB, {"realisation": "absorb_growth", "growth_rate_per_month": 0.1}),
        ("huge overhead growth", tmd.window(hit_rate=0.01), dataclasses.replace(tmd.PB, ops_hours_per_month=500.0),
         {"growth_rate_per_month": 0.10, "horizon_months": 12, "realisation": "absorb_growth"}),
        ("runaway", th.window(), th.PB, {"growth_rate_per_month": 0.5, "horizon_months": 36}),
        ("buys now without", tmd.window(num_gpus=1), PB, {}),
    ]
    out += [(n, PlanInputs(m, pb, dataclasses.replace(p2, **ch))) for n, m, pb, ch in scen]
    return out


CASES = _cases()


@pytest.mark.parametrize("name,inputs", CASES, ids=[c[0] for c in CASES])
def test_reuse_means_a_positive_benefit_and_a_positive_benefit_a_cheaper_horizon(name, inputs):
    ev = evaluate(inputs)
    b, hz = ev.benefit, ev.horizon
    if ev.decision.kind == "REUSE":
        assert b.monthly_benefit_usd > 0, (name, ev.decision.reason)
    # both paths breaking (no fleet meets the SLO, or growth outruns the search limit): the
    # horizon has no cost to compare (JSON null, a BUY) and the benefit is the freed hours' value
    if b.monthly_benefit_usd > 0 and (hz.baseline.holds or hz.reuse.holds):
        assert hz.reuse_cheaper, (name, b.monthly_benefit_usd, hz.to_dict())
    if hz.baseline.holds and hz.reuse.holds:  # one computation: never more than the horizon's saving
        assert b.monthly_benefit_usd * hz.horizon_months <= hz.saving_usd + 1e-6 * abs(hz.saving_usd) + 1e-6


# ---- 3. decide() and flip_probability use one rule order ----------------------------------------
@pytest.mark.parametrize("name,inputs", CASES, ids=[c[0] for c in CASES])
def test_decide_follows_verdict_kind(name, inputs):
    ev = evaluate(inputs)
    from kvplan.models.decision.verdict import meaningful_usd
    kind = verdict_kind(ev.capacity, ev.horizon, meaningful_usd(ev.capacity, inputs.pricebook, inputs.planning),
                        ev.benefit.monthly_benefit_usd)
    # the data gate and rule 4 (a REUSE that flips in half the scenarios) aside, the same verdict
    assert ev.decision.kind == kind or (ev.decision.kind == "NEED_DATA" and (
        kind == "REUSE" or inputs.measurement.window_seconds < inputs.planning.min_window_seconds))


def test_decision_modules_are_short():
    root = Path(__file__).resolve().parents[1] / "models" / "decision"
    for path in root.glob("*.py"):
        text = path.read_text()
        assert len(text.splitlines()) <= 400, path.name
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno - node.lineno + 1 <= 80, f"{path.name}: {node.name}"


# ---- 4. no hits, no saving -------------------------------------------------------------------------
def test_a_window_without_hits_saves_zero_and_shows_lmcache_cost():
    # two hours, 1,000 requests each, nothing cached; LMCache stored 2e6 tokens and vLLM timed
    # 36 s of lookups (no decode batch known: exposure 1). The cost model is unidentified.
    # Device: 0 (not null). LMCache: -36 GPU-s in 2 h = -36 x 2,630,016 / 7,200 / 3,600 =
    # -3.6528 GPU-h/month, and costs $400 + 3.6528 x $2.50 = $409.13/month
    rows = [Interval(h * 3600.0, (h + 1) * 3600.0, requests=1000, prefill_seconds=50.0, computed_tokens=2e6,
                     prompt_tokens=2e6, cached_tokens=0.0, external_tokens=0.0, stored_tokens=1e6,
                     lookup_seconds=18.0, lookups=1000, engines=1, targets=("v",)) for h in range(2)]
    w = PricedWindow.from_intervals(rows, t_from=0.0, t_to=7200.0)
    bad = PrefillCostModel("unidentified", (), "h", reason="all requests alike", fix="run kvplan pilot")
    m = measurement_from_window(w, bad, lmcache=True)
    assert m.priced_tier == "lmcache"
    d = json.loads(json.dumps(plan(PlanInputs(m, PB)).to_dict(), allow_nan=False))
    assert d["saved_by_tier"]["device"] == {"value": 0.0, "low": 0.0, "high": 0.0}
    assert d["saved_by_tier"]["lmcache"]["value"] == pytest.approx(-36.0)
    assert d["saved_prefill_gpu_seconds"] == pytest.approx(-36.0)  # was null
    dev, lm = d["decision_by_tier"]["device"], d["decision_by_tier"]["lmcache"]
    assert dev["gpu_hours_per_month"] == 0.0 and dev["kind"] == "NOT_WORTH_IT"
    assert lm["kind"] == "NOT_WORTH_IT"
    assert lm["monthly_benefit_usd"] == pytest.approx(-(400 + 36 * MONTH_HOURS_PER_2H * 2.5))
    assert "no LMCache hits in this window" in lm["reason"] and "$409/month" in lm["reason"]


def test_an_unidentified_model_with_hits_still_prices_nothing():
    # hits there are: the saving cannot be read without the model (unchanged behaviour)
    bad = PrefillCostModel("unidentified", (), "h", reason="all alike", fix="run kvplan pilot")
    d = plan(PlanInputs(measurement_from_window(two_hours(), bad, lmcache=False), PB)).to_dict()
    assert d["saved_prefill_gpu_seconds"] is None
    assert d["decision_by_tier"]["device"]["kind"] == "NEED_DATA"
    assert estimate_savings(measurement_from_window(two_hours(), bad, lmcache=False)).saved_gpu_seconds is None


# ---- 5. round numbers honestly ---------------------------------------------------------------------
def test_a_51_second_window_never_reads_as_meeting_a_one_minute_bound():
    s = estimate_savings(tmd.window(window_seconds=51.0, requests=5100))
    gate = data_gate(s, None, None, PlanningInputs(min_window_seconds=60.0))
    # before: "window is 1 min (need >= 1 min)"
    assert "window is 51 s (need >= 60 s)" in gate.reason
    assert any(n.startswith("window is 51 s, shorter than an hour") for n in s.notes)  # was "1 min"


def test_too_few_requests_never_round_up_to_the_bound():
    # 99.6 requests (a counter increase over a window edge) against 100: before "only 100
    # requests (need >= 100)"
    s = estimate_savings(tmd.window(requests=99.6))
    assert "only 99 requests (need >= 100)" in data_gate(s, None, None, PlanningInputs()).reason


@pytest.mark.parametrize("seconds,text", [
    (51.0, "51 s"), (59.99, "59 s"), (60.0, "60 s"), (119.5, "119 s"),
    (1800.0, "30 min"), (3599.0, "59.9 min"),  # 3,599 / 60 = 59.98, rounded down to tenths
    (3600.0, "60 min"), (7199.0, "119.9 min"), (7200.0, "2 h"), (86399.0, "23.9 h"),
])
def test_durations_round_down(seconds, text):
    assert duration(seconds) == text


# ---- 6. one number per question: a window with no hits (issue 27) ------------------------------
def _unique_sessions(lmcache: bool):
    """Two hours of unique sessions: 1,000 requests of 2,000 tokens an hour, nothing cached; the
    cost model cannot be identified (every request alike). With LMCache: it stored 1e6 tokens an
    hour and vLLM timed 18 s of lookups an hour."""
    extra = dict(stored_tokens=1e6, lookup_seconds=18.0, lookups=1000) if lmcache else {}
    rows = [Interval(h * 3600.0, (h + 1) * 3600.0, requests=1000, prefill_seconds=50.0, computed_tokens=2e6,
                     prompt_tokens=2e6, cached_tokens=0.0, external_tokens=0.0, engines=1, targets=("v",),
                     **extra) for h in range(2)]
    bad = PrefillCostModel("unidentified", (), "h", reason="all requests alike", fix="run kvplan pilot")
    return measurement_from_window(PricedWindow.from_intervals(rows, t_from=0.0, t_to=7200.0), bad,
                                   lmcache=lmcache)


def test_a_window_without_hits_is_not_worth_it_with_zero_saved_on_every_field():
    # before: decision NEED_DATA ("no estimate of prefill cost per token") with
    # saved_prefill_gpu_hours null, next to a headline "vLLM prefix cache: NOT_WORTH_IT (0.00 GPU-h/month)"
    d = json.loads(json.dumps(plan(PlanInputs(_unique_sessions(False), PB)).to_dict(), allow_nan=False))
    assert d["hit_rate"] == 0.0
    for key in ("saved_prefill_gpu_hours", "saved_prefill_gpu_hours_low", "saved_prefill_gpu_hours_high",
                "saved_prefill_gpu_seconds"):
        assert d[key] == 0.0 and str(d[key]) == "0.0", key  # 0, not null, not -0.0
    assert d["saved_by_tier"]["device"] == {"value": 0.0, "low": 0.0, "high": 0.0}
    assert d["decision"] == "NOT_WORTH_IT"
    assert d["decision_by_tier"]["device"]["kind"] == "NOT_WORTH_IT"
    assert d["decision_by_tier"]["device"]["gpu_hours_per_month"] == 0.0
    assert d["decision_by_tier"]["lmcache"]["kind"] is None
    assert d["headline"].startswith("vLLM prefix cache: NOT_WORTH_IT (free; 0.00 GPU-h/month)")
    assert d["reason"].startswith("vLLM prefix cache: No cache hits in this window (2,000 requests): reuse "
                                  "saved 0 GPU-h/month")
    assert d["saving_source"] == "no_hits"


def test_a_window_without_hits_with_lmcache_is_not_worth_it_and_costs_its_lookups():
    # 36 s of lookups in 2 h = -36 x 2,630,016 / 7,200 / 3,600 = -3.6528 GPU-h/month on every field
    d = json.loads(json.dumps(plan(PlanInputs(_unique_sessions(True), PB)).to_dict(), allow_nan=False))
    assert d["saved_prefill_gpu_seconds"] == pytest.approx(-36.0)
    assert d["saved_prefill_gpu_hours"] == pytest.approx(-36 * MONTH_HOURS_PER_2H)
    assert d["decision_by_tier"]["lmcache"]["gpu_hours_per_month"] == pytest.approx(-36 * MONTH_HOURS_PER_2H)
    assert d["decision"] == "NOT_WORTH_IT"
    assert {t["kind"] for t in d["decision_by_tier"].values()} == {"NOT_WORTH_IT"}
    assert d["reason"].startswith("LMCache: No cache hits in this window") and "3.65 GPU-h/month" in d["reason"]


def test_a_short_window_without_hits_still_needs_data():
    # the data gate stands: 2 h is under a 3 h minimum
    r = plan(PlanInputs(_unique_sessions(False), PB, PlanningInputs(min_window_seconds=3 * 3600.0)))
    assert r.decision.kind == "NEED_DATA" and r.decision_by_tier["device"].kind == "NEED_DATA"
    assert r.saved_prefill_gpu_hours == 0.0
