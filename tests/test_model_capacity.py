"""Fleet sizing against a p99 TTFT target: Erlang C, run-out months, deferral."""

import math

import pytest

from kvplan.models.capacity.fleet import CapacityInputs, growth_that_lasts, hit_rate_that_lasts, plan_capacity
from kvplan.models.capacity.queueing import (
    erlang_c,
    max_arrival_rate,
    replicas_needed,
    runout_month,
    ttft_quantile,
    wait_quantile,
)
from kvplan.models.inputs.pricebook import PriceBook


def erlang_c_by_factorials(c: int, a: float) -> float:
    """Textbook Erlang C, written independently of the implementation's recursion."""
    top = a ** c / math.factorial(c) * c / (c - a)
    return top / (sum(a ** k / math.factorial(k) for k in range(c)) + top)


@pytest.mark.parametrize("c, a, expected", [
    (1, 0.5, 0.5),        # M/M/1: probability of waiting = utilisation
    (2, 1.0, 1 / 3),      # (1/2 * 2/1) / (1 + 1 + 1)
    (3, 2.0, 4 / 9),      # (8/6 * 3/1) / (1 + 2 + 2 + 4)
    (4, 1.5, 0.3375 / 4.525),
])
def test_erlang_c_hand_values(c, a, expected):
    assert erlang_c(c, a) == pytest.approx(expected)


@pytest.mark.parametrize("c, a", [(10, 7.0), (25, 20.0), (60, 45.5)])
def test_erlang_c_matches_the_factorial_formula(c, a):
    assert erlang_c(c, a) == pytest.approx(erlang_c_by_factorials(c, a), rel=1e-9)


def test_erlang_c_limits():
    assert erlang_c(3, 0.0) == 0.0
    assert erlang_c(3, 3.0) == 1.0
    with pytest.raises(ValueError):
        erlang_c(0, 1.0)


def test_p99_wait_and_ttft_mm1():
    # M/M/1, lambda 0.5/s, service 1 s: C = 0.5, drain 0.5/s, W99 = ln(0.5/0.01)/0.5 = 2 ln 50
    assert wait_quantile(1, 0.5, 1.0, 0.99) == pytest.approx(2 * math.log(50))
    assert ttft_quantile(1, 0.5, 1.0, 0.99) == pytest.approx(1 + 2 * math.log(50))
    # C <= 1 %: the p99 wait is zero
    assert wait_quantile(1, 0.005, 1.0, 0.99) == 0.0
    assert wait_quantile(1, 1.0, 1.0, 0.99) == math.inf


def test_replicas_needed_by_hand():
    # lambda 1.5/s, S = 1 s, target 2 s at p99:
    #   c=2: C = 4.5/7 = 0.6429, W = ln(64.29)/0.5 = 8.33 -> 9.33 s  (miss)
    #   c=3: C = 1.125/4.75 = 0.2368, W = ln(23.68)/1.5 = 2.11 -> 3.11 s  (miss)
    #   c=4: C = 0.3375/4.525 = 0.0746, W = ln(7.459)/2.5 = 0.80 -> 1.80 s  (meets)
    assert ttft_quantile(3, 1.5, 1.0, 0.99) == pytest.approx(1 + math.log(0.2368421 / 0.01) / 1.5,
                                                             rel=1e-6)
    assert ttft_quantile(4, 1.5, 1.0, 0.99) == pytest.approx(1 + math.log(0.0745856 / 0.01) / 2.5,
                                                             rel=1e-6)
    assert replicas_needed(1.5, 1.0, 2.0, 0.99) == 4


def test_replicas_needed_edge_cases():
    assert replicas_needed(1.0, 3.0, 2.0, 0.99) is None  # one prefill alone misses the target
    assert replicas_needed(0.0, 1.0, 2.0, 0.99) == 1
    assert replicas_needed(5.0, 0.0, 2.0, 0.99) == 1  # everything cached: no prefill work


def test_max_arrival_rate_inverts_ttft():
    # M/M/1, S = 1: TTFT99(0.5/s) = 1 + 2 ln 50, so that target allows exactly 0.5/s
    assert max_arrival_rate(1, 1.0, 1 + 2 * math.log(50), 0.99) == pytest.approx(0.5, abs=1e-9)
    assert max_arrival_rate(1, 3.0, 2.0, 0.99) == 0.0
    assert max_arrival_rate(0, 1.0, 2.0, 0.99) == 0.0
    assert max_arrival_rate(2, 0.0, 2.0, 0.99) == math.inf


def test_runout_month():
    assert runout_month(0.25, 0.5, 0.10, 24) == pytest.approx(math.log(2) / math.log(1.1))  # 7.27
    assert runout_month(0.25, 0.5, 0.10, 6) is None
    assert runout_month(0.6, 0.5, 0.10, 24) == 0.0
    assert runout_month(0.25, 0.5, 0.0, 24) is None


# One GPU; 1,000-token prompts at 1,000 tokens/s: 1 s without reuse, 0.5 s at a 50 % hit rate.
# Target = 1 + 2 ln 50 = 8.824 s, so without reuse the GPU carries exactly 0.5 req/s.
SLO = 1 + 2 * math.log(50)
CASE = CapacityInputs(ttft_p99_slo_seconds=SLO, requests_per_second=0.25,
                      mean_prompt_tokens=1000, hit_rate=0.5, prefill_tokens_per_gpu_second=1000,
                      current_gpus=1, growth_rate_per_month=0.10, horizon_months=12)
CLOUD = PriceBook(pricing_mode="cloud", usd_per_gpu_hour=2.5)


def test_plan_capacity_by_hand():
    r = plan_capacity(CASE, CLOUD)
    assert r.service_seconds_without_reuse == pytest.approx(1.0)
    assert r.service_seconds_with_reuse == pytest.approx(0.5)
    assert r.gpus_needed_without_reuse == 1 and r.gpus_needed_with_reuse == 1
    # today, without: C = 0.25, W = ln 25 / 0.75; with: C = 0.125, W = ln 12.5 / 1.75
    assert r.ttft_p99_without_reuse_s == pytest.approx(1 + math.log(25) / 0.75)
    assert r.ttft_p99_with_reuse_s == pytest.approx(0.5 + math.log(12.5) / 1.75)
    assert r.max_requests_per_second_without_reuse == pytest.approx(0.5, abs=1e-9)
    # without reuse the load doubles in ln 2 / ln 1.1 = 7.27 months
    assert r.runout_month_without_reuse == pytest.approx(math.log(2) / math.log(1.1))
    # with reuse the month-12 load 0.25 * 1.1^12 = 0.785/s still gives
    # 0.5 + ln(0.392/0.01)/(2 - 0.785) = 3.52 s < 8.82 s: not within the horizon
    assert r.runout_month_with_reuse is None
    assert r.deferral_months == pytest.approx(12 - math.log(2) / math.log(1.1))
    assert r.deferral_is_lower_bound
    # months 8..11 (load 0.536 .. 0.713/s) need a second GPU without reuse, none with it
    assert [row.gpus_needed_without_reuse for row in r.schedule] == [1] * 8 + [2] * 4
    assert [row.gpus_needed_with_reuse for row in r.schedule] == [1] * 12
    assert r.deferred_gpu_months == 4
    assert r.deferral_usd == pytest.approx(4 * 2.5 * 730.56)


def test_deferral_priced_with_capex_and_cost_of_capital_when_owned():
    owned = PriceBook(pricing_mode="owned", capex_usd_per_gpu=12000, amortisation_months=12,
                      power_hosting_usd_per_gpu_month=0, cost_of_capital_annual=0.12)
    r = plan_capacity(CASE, owned)
    assert r.deferral_usd == pytest.approx(4 * 1066.19, abs=0.05)  # 4 GPU-months of annuity


def test_no_growth_no_runout_no_deferral():
    r = plan_capacity(CapacityInputs(**{**CASE.__dict__, "growth_rate_per_month": 0.0}), CLOUD)
    assert r.runout_month_with_reuse is None and r.runout_month_without_reuse is None
    assert r.deferral_months == 0 and r.deferred_gpu_months == 0


def test_fleet_already_short_runs_out_today():
    r = plan_capacity(CapacityInputs(**{**CASE.__dict__, "requests_per_second": 0.6}), CLOUD)
    assert r.runout_month_without_reuse == 0.0
    assert r.gpus_needed_without_reuse == 2


def test_unreachable_target_without_reuse():
    # target 0.8 s: a 1 s prefill can never meet it; a 0.5 s one can
    r = plan_capacity(CapacityInputs(**{**CASE.__dict__, "ttft_p99_slo_seconds": 0.8}), CLOUD)
    assert r.gpus_needed_without_reuse is None
    assert r.runout_month_without_reuse == 0.0
    assert r.deferred_gpu_months is None and r.deferral_usd is None
    assert r.gpus_needed_with_reuse is not None


def test_tensor_parallel_replicas_count_gpus():
    tp = CapacityInputs(**{**CASE.__dict__, "gpus_per_replica": 2, "current_gpus": 2,
                           "requests_per_second": 1.5, "mean_prompt_tokens": 2000,
                           "hit_rate": 0.0, "ttft_p99_slo_seconds": 2.0})
    # 2,000 tokens at 2 x 1,000 tok/s = 1 s per request: 4 replicas (see above) = 8 GPUs
    assert plan_capacity(tp, CLOUD).gpus_needed_without_reuse == 8


def test_growth_and_hit_rate_that_last():
    # with reuse the GPU carries lambda_max(S=0.5); growth lasting 12 months is the 12th root
    g = growth_that_lasts(CASE, 0.5)
    r = plan_capacity(CASE, CLOUD)
    lam_max = r.max_requests_per_second_with_reuse
    assert (1 + g) ** 12 * 0.25 == pytest.approx(lam_max)
    # without reuse: 0.5/0.25 = 2 -> 2^(1/12) - 1
    assert growth_that_lasts(CASE, 0.0) == pytest.approx(2 ** (1 / 12) - 1)
    h = hit_rate_that_lasts(CASE)
    # at that hit rate the GPU serves exactly the month-12 load 0.25 * 1.1^12
    s = 1000 * (1 - h) / 1000
    assert ttft_quantile(1, 0.25 * 1.1 ** 12, s, 0.99) == pytest.approx(SLO, rel=1e-6)


@pytest.mark.parametrize("change, field", [
    ({"hit_rate": 1.2}, "hit_rate"),
    ({"baseline_hit_rate": 0.9}, "baseline_hit_rate"),
    ({"ttft_p99_slo_seconds": 0}, "ttft_p99_slo_seconds"),
    ({"prefill_tokens_per_gpu_second": 0}, "prefill_tokens_per_gpu_second"),
    ({"horizon_months": 0}, "horizon_months"),
])
def test_invalid_inputs_name_the_field(change, field):
    with pytest.raises(ValueError, match=field):
        CapacityInputs(**{**CASE.__dict__, **change})


# ---- fleets of 100,000 GPUs plan in seconds ---------------------------------------------
def erlang_c_exact(c: int, a: int) -> float:
    """Erlang C by factorials in exact rational arithmetic (integer load), for any c."""
    from fractions import Fraction

    term, total = Fraction(1), Fraction(0)
    for k in range(c):
        total += term
        term = term * a / (k + 1)
    top = term * c / (c - a)  # a^c / c! * c / (c - a)
    return float(top / (total + top))


@pytest.mark.parametrize("c, a", [(401, 380), (500, 450), (1200, 1150), (3000, 2950), (3000, 2000)])
def test_erlang_c_of_large_fleets_matches_the_exact_formula(c, a):
    # above 400 servers Erlang B is summed over the Poisson terms near the load (vectorised):
    # the same value as the factorial formula, to 1e-9
    assert erlang_c(c, float(a)) == pytest.approx(erlang_c_exact(c, a), rel=1e-9)


def replicas_by_recursion(lam: float, s: float, slo: float, q: float) -> int:
    """The one-pass recursion replicas_needed used for every size before the vectorised form."""
    a, b = lam * s, 1.0
    first = math.floor(a) + 1
    for k in range(1, 10**7):
        b = a * b / (k + a * b)
        if k >= first:
            c = k * b / (k - a * (1.0 - b))
            wait = 0.0 if c <= 1.0 - q else math.log(c / (1.0 - q)) / (k / s - lam)
            if s + wait <= slo:
                return k
    raise AssertionError("no size")


@pytest.mark.parametrize("lam, s, slo", [(1000, 0.5, 0.6), (10_000, 0.2, 0.21), (2000, 1.0, 1.05),
                                          (5000, 0.1, 2.0), (250_000, 0.4, 0.41)])
def test_replicas_needed_of_large_loads_matches_the_recursion(lam, s, slo):
    assert replicas_needed(lam, s, slo, 0.99) == replicas_by_recursion(lam, s, slo, 0.99)


@pytest.mark.timeout(600)  # a hang guard, not a speed goal (that is bench/plan_bench.py's)
@pytest.mark.parametrize("planning", [dict(growth_rate_per_month=0.05),
                                      dict(growth_rate_per_month=2.0, horizon_months=120, headroom=10.0)])
def test_a_plan_at_the_largest_fleet_allowed_takes_seconds(planning):
    # `plan --gpus 100000` (the CLI's and the config's bound) took 219 s before: Erlang B ran its
    # recursion over all 100,000 servers at every step of every bisection. Measured now: ~6 s on a
    # loaded 2-core machine (bench/plan_bench.py prints the ratio side by side).
    from kvplan.models.decision.plan import plan
    from kvplan.models.decision.verdict import PlanInputs
    from kvplan.models.inputs.planning import PlanningInputs
    from tests.test_model_decision import window

    r = plan(PlanInputs(window(num_gpus=100_000), PriceBook(pricing_mode="cloud", usd_per_gpu_hour=2.5),
                        PlanningInputs(**planning)))
    assert r.decision.kind in ("BUY", "REUSE", "NOT_WORTH_IT")
