"""Buy GPUs, reuse the cache, or neither: the verdict, what would flip it, and a tornado.

``decide`` applies these rules, in order (thresholds in ``PlanningInputs``). Money is the
cost of two paths over the horizon (``kvplan.models.capacity.horizon``): the baseline buys whole replicas in
the month the SLO would break; the reuse path pays the cache overhead every month and buys
against the smaller need.

1. ``NEED_DATA`` -- the window is too short (< ``min_window_seconds``), has too few requests
   (< ``min_requests``), or a metric the estimate needs is missing (no prefill timer and no
   FLOPs route, no prompt tokens).
2. ``BUY`` -- nothing else holds the SLO: even with reuse no number of these GPUs meets it
   (one prefill is longer than the target), the fleet needed is beyond the search limit, or
   the reuse path too must add GPUs now (month 0).
3. ``REUSE`` -- the reuse path costs less over the horizon, by at least
   ``min_benefit_share_of_fleet_cost`` of the fleet's monthly cost per month ("REUSE now; BUY
   2 GPUs in month 14 instead of month 5" when it only defers the purchase). Never when the
   reuse path costs more.
4. ``NEED_DATA`` -- rule 3 holds in the centre but flips in at least half of the resampled
   scenarios (``flip_probability`` >= 0.5): measure a longer window before committing.
5. ``BUY`` -- reuse does not pay (rule 3 fails) and the baseline must add GPUs within the
   horizon: buy them when its schedule says.
6. ``NOT_WORTH_IT`` -- reuse does not pay and no purchase is due: overhead >= savings (the
   article's honest answer when requests barely overlap), or a saving below the threshold.

``flip_probability``: share of 200 seeded draws whose verdict by rules 2, 3, 5, 6 differs from
the central one. Each draw takes the hit rate and the load from one bootstrap resample of the
window's measured intervals (``PricedWindow.resamples``; without them the hit-rate gain moves
+-``hit_rate_range`` relative and the load stays), the per-token cost across the saved-prefill
band low/high, GPU price +-``price_range`` and growth +-``growth_range`` (uniform).

Flips are the input values at which the verdict would change. Money flips use the benefit's
linear dependence on hit rate, GPU price and overhead (approximate when the shrink cap or the
deferral cap binds; the sensitivity rows recompute exactly). Capacity flips (growth, hit rate
needed to last the horizon) are exact for the queueing model.

The tornado (one input moved down and up) is ``kvplan.models.decision.sensitivity``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

from kvplan.models.cache.alternatives import TopologyFinding
from kvplan.models.capacity.fleet import (
    CapacityInputs,
    CapacityResult,
    capacity_inputs_from,
    growth_that_lasts,
    hit_rate_that_lasts,
    plan_capacity,
)
from kvplan.models.capacity.goodput import Goodput
from kvplan.models.capacity.horizon import HorizonPlan, beyond_note, plan_horizon, purchase_text
from kvplan.models.capacity.replica import ReplicaFit, replica_fit
from kvplan.models.core.fields import scenario
from kvplan.models.decision.benefit import Benefit, monthly_benefit
from kvplan.models.inputs.deployment import DeploymentFacts
from kvplan.models.inputs.planning import REALISATIONS, PlanningInputs
from kvplan.models.inputs.pricebook import PriceBook
from kvplan.models.prefill.measurement import PrefillMeasurement
from kvplan.models.prefill.savings import PrefillSavings, estimate_savings

KINDS = ("BUY", "REUSE", "NOT_WORTH_IT", "NEED_DATA")
MAX_WHAT_IF_HIT_RATE = 0.99
"""Sensitivity never moves the hit rate above this: vLLM always computes at least the last
prompt token, and at 100 % estimator A would have no computed tokens to measure."""


@dataclass(frozen=True)
class PlanInputs:
    """Everything one plan is computed from."""

    measurement: PrefillMeasurement
    """The measured window (or a planning preset's synthetic one)."""
    pricebook: PriceBook = field(default_factory=PriceBook)
    """Prices."""
    planning: PlanningInputs = field(default_factory=PlanningInputs)
    """User decisions and thresholds."""
    facts: DeploymentFacts | None = None
    """Deployment facts (parallelism, model size, KV per token) for the replica memory check;
    None = TP from the measurement, memory not checked."""
    goodput: Goodput | None = None
    """Measured goodput per replica (load sweep); None = queueing fallback."""
    peak_hour_requests_per_s: float | None = None
    """Request rate of the busiest hour; None = the window's mean rate."""
    concurrency_per_replica: float | None = None
    """Measured running requests per replica (vllm:num_requests_running) for the KV part of the
    memory check; None = 1 sequence."""
    topology: TopologyFinding | None = None
    """The TTFT what-if's finding (an alternative cache set-up at the TTFT SLO, engines each
    needs); None = no trace. Reported with the plan (``PlanResult.topology_finding``)."""


@dataclass(frozen=True)
class Decision:
    """The verdict."""

    kind: str
    """``BUY``, ``REUSE``, ``NOT_WORTH_IT`` or ``NEED_DATA``."""
    reason: str
    """One sentence."""
    flips: list[str]
    """Input changes that would change the verdict."""


@dataclass(frozen=True)
class Evaluation:
    """One pass of the pipeline: savings -> capacity -> benefit -> decision."""

    savings: PrefillSavings
    """Saved prefill GPU time in the window."""
    capacity: CapacityResult | None
    """None when the window cannot give a per-token cost or a load."""
    benefit: Benefit | None
    """None when ``capacity`` is None."""
    decision: Decision
    """The verdict."""
    horizon: HorizonPlan | None = None
    """Both paths over the horizon (None with ``capacity``)."""
    replica: ReplicaFit | None = None
    """GPUs per replica and the memory check."""
    flip_probability: float | None = None
    """Share of resampled scenarios whose verdict differs (None: NEED_DATA for lack of data)."""


FLIP_DRAWS = 200
"""Scenarios drawn for ``flip_probability``."""
FLIP_SEED = 20240611
"""Fixed seed: the same inputs always give the same probability."""


def evaluate(inputs: PlanInputs) -> Evaluation:
    """Run the whole model once on ``inputs``."""
    savings, capacity, benefit = price_plan(inputs)
    pb, p = inputs.pricebook, inputs.planning
    alternative = horizon = flip = None
    if capacity is not None:
        other = next(r for r in REALISATIONS if r != p.realisation)
        alternative = monthly_benefit(savings, pb, capacity, other, p.headroom_fill_fraction)
        horizon = _horizon(capacity, savings, pb, p.realisation)
        w = inputs.measurement.window
        flip = flip_probability(capacity, savings, pb, p, resamples=w.resamples if w is not None else ())
    return Evaluation(savings, capacity, benefit,
                      decide(savings, capacity, benefit, pb, p, alternative, horizon=horizon,
                             flip_probability=flip),
                      horizon, replica_of(inputs), flip if benefit is not None else None)


def replica_of(inputs: PlanInputs) -> ReplicaFit:
    """GPUs per replica of a plan: from the facts when given, else the measurement's TP."""
    m, pb = inputs.measurement, inputs.pricebook
    facts = inputs.facts or DeploymentFacts(tensor_parallel=m.tensor_parallel_size,
                                            model_params=None)
    return replica_fit(facts, gpu_memory_gb=pb.gpu_memory_gb, gpu_type=pb.gpu_type or "GPU",
                       concurrency=inputs.concurrency_per_replica, mean_prompt_tokens=m.mean_prompt,
                       model_label=facts.gpu_type and "the model" or "the model")


def _hit_cost_usd(capacity: CapacityResult, savings: PrefillSavings, pb: PriceBook) -> float:
    """$/month of GPU time loading cached KV; 0 with a measured goodput (already in it)."""
    if capacity.method == "goodput":
        return 0.0
    return savings.hit_cost_gpu_hours_per_month * pb.effective_usd_per_gpu_hour()


def _horizon(capacity: CapacityResult, savings: PrefillSavings, pb: PriceBook, realisation: str) -> HorizonPlan:
    return plan_horizon(capacity, pb, realisation=realisation,
                        hit_cost_usd_per_month=_hit_cost_usd(capacity, savings, pb))


def price_plan(inputs: PlanInputs) -> tuple[PrefillSavings, CapacityResult | None, Benefit | None]:
    """savings -> capacity -> benefit, without the verdict."""
    m, pb, p = inputs.measurement, inputs.pricebook, inputs.planning
    savings = estimate_savings(m)
    fit = replica_of(inputs)
    gpr = fit.gpus_per_replica
    cap_in = capacity_inputs_from(
        m, savings, ttft_p99_slo_seconds=p.ttft_p99_slo_seconds,
        growth_rate_per_month=p.growth_rate_per_month, horizon_months=p.horizon_months,
        prefill_capacity_share=p.prefill_capacity_share, gpus_per_replica=gpr,
        goodput=inputs.goodput, peak_requests_per_second=inputs.peak_hour_requests_per_s,
        headroom=p.headroom)
    capacity = plan_capacity(cap_in, pb) if cap_in is not None else None
    benefit = None
    if capacity is not None:
        benefit = monthly_benefit(savings, pb, capacity, p.realisation, p.headroom_fill_fraction)
    return savings, capacity, benefit


# ---- the verdict -------------------------------------------------------------------------
def _pct(x: float) -> str:
    return f"{x * 100:.1f} %"


def _usd(x: float) -> str:
    return f"-${-x:,.0f}" if x < 0 else f"${x:,.0f}"


def _months(x: float, horizon: int) -> str:
    return "today" if x <= 0 else f"in month {x:.1f} of the {horizon}-month horizon"


@dataclass(frozen=True)
class BreakEven:
    """Input values at which the monthly benefit would equal a target (linear approximation:
    benefit ~= s * k * net - fixed, with ``net`` = gains - hit cost today, ``s`` the
    incremental hit rate relative to today's and ``k`` the GPU price relative to today's;
    gains and hit cost are GPU-hours x price, the fixed overhead depends on neither, and the
    target -- a share of the fleet's cost -- scales with ``k``). Exact while no cap binds."""

    hit_rate: float | None
    """Hit rate giving the target (may exceed 1: unreachable); None if hits save nothing."""
    usd_per_gpu_hour: float | None
    """GPU price giving the target; None if no price does (net <= target)."""
    fixed_overhead_usd: float | None
    """Fixed cache overhead giving the target; None if hits save nothing."""


def break_even(savings: PrefillSavings, benefit: Benefit, target_usd: float) -> BreakEven:
    """Where the benefit crosses ``target_usd`` (see ``BreakEven``)."""
    gains = benefit.saved_prefill_usd + benefit.throughput_usd + benefit.deferral_usd
    net = gains - benefit.hit_cost_usd
    fixed = benefit.fixed_overhead_usd
    h, h0 = savings.hit_rate or 0.0, savings.baseline_hit_rate or 0.0
    hit = h0 + (h - h0) * (fixed + target_usd) / net if net > 0 and h > h0 else None
    price = benefit.usd_per_gpu_hour * fixed / (net - target_usd) if net > target_usd else None
    overhead = max(0.0, net - target_usd) if net > 0 else None
    return BreakEven(hit, price, overhead)


def _money_flips(savings: PrefillSavings, benefit: Benefit, target_usd: float,
                 above: bool, threshold: str = "") -> list[str]:
    """Break-even values as sentences, one per input (hit rate, GPU price, fixed overhead):
    the value that would change the verdict, or plainly that no value of that input would
    (and why). ``above``: the benefit must rise to the target; ``threshold``: how the target
    reads (e.g. "$146/month, 1.0 % of the fleet's $14,611/month")."""
    be = break_even(savings, benefit, target_usd)
    verb = "rises to" if above else "falls to"
    said: list[str] = []

    def goal() -> str:  # the target in full the first time, short after
        if not above:
            return f"${target_usd:,.0f}/month"
        if said:
            return f"the ${target_usd:,.0f}/month threshold"
        said.append("x")
        return f"the ${target_usd:,.0f}/month that makes reuse worth it" + (f" ({threshold})" if threshold else "")

    h, h0 = savings.hit_rate or 0.0, savings.baseline_hit_rate or 0.0
    gains = benefit.saved_prefill_usd + benefit.throughput_usd + benefit.deferral_usd
    net = gains - benefit.hit_cost_usd
    out: list[str] = []
    if be.hit_rate is not None and be.hit_rate <= 1:
        out.append(f"hit rate {verb} ~{_pct(be.hit_rate)} (now {_pct(h)})")
    elif be.hit_rate is not None:  # above 100 %: report what 100 % would give instead
        at_full = net * (1.0 - h0) / (h - h0) - benefit.fixed_overhead_usd
        out.append(f"no hit rate would do it: even every prompt token from the cache (100 %, now {_pct(h)}) "
                   f"would net ~{_usd(at_full)}/month, under {goal()}")
    elif above and gains <= 0 < (savings.gpu_hours_per_month or 0.0) and benefit.realisation == "shrink":
        out.append("no hit rate would do it at today's load: the prefill the cache saves frees no GPU to give back "
                   "(shrink); traffic growth that needs more GPUs, or realisation absorb_growth, would")
    elif above:
        out.append(f"a hit rate above the baseline's {_pct(h0)} (now {_pct(h)}): the cache saved nothing in this "
                   "window, so the hit rate that would pay cannot be read from it; measure a window with cache hits"
                   if h <= h0 else "no hit rate would do it: each hit's lookup/transfer costs as much GPU time "
                   "as the prefill it saves")
    if be.usd_per_gpu_hour is not None:
        out.append(f"GPU price {verb} ~${be.usd_per_gpu_hour:,.2f}/GPU-hour "
                   f"(now ${benefit.usd_per_gpu_hour:,.2f})")
    elif above and net > 0:
        out.append(f"no GPU price would do it: the saved GPU time (${net:,.0f}/month at "
                   f"${benefit.usd_per_gpu_hour:,.2f}/GPU-hour) stays under {goal()} at any price, as both "
                   "scale with the price")
    if be.fixed_overhead_usd is not None and (be.fixed_overhead_usd > 0 or not above):
        out.append(f"fixed cache overhead {'falls' if above else 'rises'} to "
                   f"~${be.fixed_overhead_usd:,.0f}/month (now ${benefit.fixed_overhead_usd:,.0f})")
    elif above and benefit.fixed_overhead_usd > 0:
        out.append(f"no fixed cache overhead would do it: even at $0/month (now "
                   f"${benefit.fixed_overhead_usd:,.0f}) the saved GPU time (${max(net, 0):,.0f}/month) stays "
                   f"under {goal()}")
    return out


def decide(savings: PrefillSavings, capacity: CapacityResult | None, benefit: Benefit | None,
           pricebook: PriceBook, planning: PlanningInputs,
           alternative: Benefit | None = None, *, horizon: HorizonPlan | None = None,
           flip_probability: float | None = None) -> Decision:
    """The verdict for one evaluated window (rules in the module docstring). Long on purpose:
    the rules are tried in the documented order, top to bottom, in one place.

    ``alternative`` is the benefit under the other realisation; when it would land on the
    other side of the money threshold, switching realisation is listed as a flip.
    ``horizon``: both paths (computed here when not given); ``flip_probability``: rule 4."""
    p = planning
    # 1. enough data?
    missing: list[str] = []
    if savings.requests <= 0:
        missing.append("no requests in the window")
    if savings.window_seconds < p.min_window_seconds:
        missing.append(f"window is {savings.window_seconds / 60:.0f} min "
                       f"(need >= {p.min_window_seconds / 60:.0f} min)")
    if 0 < savings.requests < p.min_requests:
        missing.append(f"only {savings.requests:.0f} requests (need >= {p.min_requests:.0f})")
    model = savings.cost_model
    if not savings.available:
        if model is not None and not model.identified:
            missing.append(f"the prefill cost model is not identified ({model.reason})")
        else:
            missing.append("no estimate of prefill cost per token (need the prefill timer, or "
                           "vLLM FLOPs / model params with gpu_peak_flops)")
    if missing or capacity is None or benefit is None:
        if not missing:
            missing.append("load or hit rate unavailable")
        flips = [f"measure at least {p.min_window_seconds / 3600:g} h and "
                 f"{p.min_requests:.0f} requests with prefill timing or FLOPs metrics"]
        if model is not None and not model.identified and model.fix:
            flips.append(model.fix)
        return Decision("NEED_DATA", "Not enough data to price reuse: " + "; ".join(missing)
                        + ".", flips)

    cap = capacity.inputs
    fleet_cost = cap.current_gpus * pricebook.usd_per_gpu_month()
    meaningful = p.min_benefit_share_of_fleet_cost * fleet_cost
    total = benefit.monthly_benefit_usd
    switch: list[str] = []
    if alternative is not None and (alternative.monthly_benefit_usd >= meaningful) != \
            (total >= meaningful):
        switch.append(f"realising the savings as {alternative.realisation.replace('_', ' ')} "
                      f"instead (${alternative.monthly_benefit_usd:,.0f}/month)")
    growth_ok = growth_that_lasts(cap, cap.hit_rate)
    growth_flip = (f"growth above ~{_pct(growth_ok)}/month (now "
                   f"{_pct(cap.growth_rate_per_month)}) would make even the reuse fleet run out"
                   if growth_ok is not None and growth_ok >= 0 else None)
    if horizon is None:
        horizon = plan_horizon(capacity, pricebook, realisation=p.realisation,
                               hit_cost_usd_per_month=_hit_cost_usd(capacity, savings, pricebook))
    kind = verdict_kind(capacity, horizon, meaningful)
    b_path, r_path = horizon.baseline, horizon.reuse
    months = cap.horizon_months
    slo = f"{cap.ttft_p99_slo_seconds:g} s p99 TTFT target"

    def money() -> str:
        if not b_path.holds and r_path.holds:
            return f"the reuse path costs ${r_path.cost_usd:,.0f} over the {months}-month horizon"
        return (f"${b_path.cost_usd:,.0f} over the {months}-month horizon without reuse vs "
                f"${r_path.cost_usd:,.0f} with it, cache overhead included")

    # 2. BUY: nothing else holds the SLO
    if capacity.gpus_needed_with_reuse is None:
        if capacity.beyond_limit_with_reuse:
            return Decision(
                "BUY", f"Even with reuse today's load needs {beyond_note(r_path)}: buy, and size a "
                "fleet that large by hand.", [f for f in [growth_flip] if f])
        if cap.goodput is not None:
            return Decision("BUY", f"The measured goodput with reuse is 0 requests/s per replica "
                            f"({cap.goodput.source}): no number of these replicas meets the SLO.",
                            ["a sweep with a goodput above 0"])
        return Decision(
            "BUY", "Even with reuse one prefill takes "
            f"{capacity.service_seconds_with_reuse:.2f} s, "
            f"above the {slo}: no number of these GPUs "
            "meets it; buy faster GPUs (or more per replica).",
            [f"a TTFT target of at least {capacity.service_seconds_with_reuse:.2f} s",
             "a higher hit rate or shorter prompts"])
    buy_flips: list[str] = []
    if growth_ok is not None and growth_ok >= 0:
        buy_flips.append(f"growth at or below ~{_pct(growth_ok)}/month "
                         f"(now {_pct(cap.growth_rate_per_month)})")
    h_need = hit_rate_that_lasts(cap)
    if h_need is not None and h_need > cap.hit_rate:
        buy_flips.append(f"hit rate of ~{_pct(h_need)} (now {_pct(cap.hit_rate)})")
    if kind == "BUY" and r_path.first_purchase is not None and r_path.first_purchase.month == 0:
        cheaper = "with reuse" if horizon.reuse_cheaper else "without reuse"
        without = purchase_text(b_path) if b_path.purchases else "none"
        return Decision(
            "BUY", f"Even with reuse the {cap.current_gpus} GPUs miss the {slo} today "
            f"(today's load needs {capacity.gpus_needed_with_reuse}, "
            f"{cap.gpus_per_replica} per replica): buy {purchase_text(r_path)} with reuse ({without} "
            f"without; {b_path.gpus_bought if b_path.holds else 'beyond the search'} GPUs over the horizon). "
            f"Cheaper {cheaper}: {money()}.", buy_flips)
    if kind == "BUY" and not r_path.holds and not b_path.holds:
        return Decision(
            "BUY", f"Growth outruns both paths: without reuse {beyond_note(b_path)}, with reuse "
            f"{beyond_note(r_path)}. Buy {purchase_text(r_path) or 'as growth demands'} and re-plan "
            "before then.", buy_flips)

    # 3. REUSE: the reuse path costs less (rule 4: unless it flips in half the scenarios)
    if kind == "REUSE":
        saving = horizon.saving_usd
        if not b_path.holds:
            how = (f"without reuse {beyond_note(b_path)}; with reuse the fleet "
                   + (f"holds by buying {purchase_text(r_path)}" if r_path.purchases else
                      f"holds the {slo} for the {months}-month horizon"))
        elif b_path.purchases and r_path.purchases:
            rb, bb = r_path.first_purchase, b_path.first_purchase
            how = (f"BUY {rb.gpus} GPU{'s' if rb.gpus != 1 else ''} in month {rb.month} instead of "
                   f"{bb.gpus} in month {bb.month}" if rb.gpus != bb.gpus else
                   f"BUY {rb.gpus} GPU{'s' if rb.gpus != 1 else ''} in month {rb.month} instead of month {bb.month}")
        elif b_path.purchases:
            how = (f"without reuse the fleet misses the {slo} "
                   f"{_months(capacity.runout_month_without_reuse or b_path.first_purchase.month, months)} "
                   f"(buy {purchase_text(b_path)}); with reuse it holds for the {months}-month horizon")
        else:
            wo, w = capacity.gpus_needed_without_reuse, capacity.gpus_needed_with_reuse
            how = (f"the {slo} needs {w} GPU{'s' if w != 1 else ''} with reuse instead of {wo} without"
                   + (f" (release {r_path.released_gpus - b_path.released_gpus} more)"
                      if r_path.released_gpus > b_path.released_gpus else ""))
        saved = "" if math.isinf(saving) else f"${saving:,.0f} cheaper ({money()}); "
        flips = _money_flips(savings, benefit, meaningful, above=False) + switch
        if growth_flip:
            flips.append(growth_flip)
        if flip_probability is not None and flip_probability >= 0.5:
            return Decision(
                "NEED_DATA", f"Reuse is cheaper in the centre ({saved.rstrip('; ') or money()}), but the "
                f"verdict flips in {flip_probability:.0%} of resampled scenarios: measure a longer window "
                "to be sure.", ["a window of a day or more (narrows the band)"] + flips)
        return Decision("REUSE", f"REUSE now; {how}: {saved}saved prefill worth ${total:,.0f}/month "
                        f"(net, freed GPU-hours).", flips)

    # 5. BUY: reuse does not pay and the baseline must add GPUs
    if b_path.purchases or not b_path.holds:
        later = ""
        if r_path.holds and b_path.first_purchase is not None and (
                r_path.first_purchase is None or r_path.first_purchase.month > b_path.first_purchase.month):
            later = (" Reuse would defer it" + (f" to month {r_path.first_purchase.month}"
                                                if r_path.first_purchase else " past the horizon")
                     + ", but its overhead costs more than the GPUs it defers.")
        return Decision(
            "BUY", f"Buy {purchase_text(b_path) or beyond_note(b_path)} without reuse: reuse does not pay for "
            f"itself ({money()}).{later}", buy_flips + [f for f in switch])

    # 6. NOT_WORTH_IT
    threshold = f"{_pct(p.min_benefit_share_of_fleet_cost)} of the fleet's ${fleet_cost:,.0f}/month"
    h, h0 = savings.hit_rate or 0.0, savings.baseline_hit_rate or 0.0
    if total <= 0:
        saved = total + benefit.overhead_usd
        if saved <= 0:
            hours = savings.gpu_hours_per_month or 0.0
            if h <= h0:
                why = (f"the cache saved no prefill in this window (hit rate {_pct(h)}, baseline without it "
                       f"{_pct(h0)})")
            elif hours > 0 and benefit.realisation == "shrink":
                n = capacity.gpus_needed_with_reuse if capacity is not None else None
                needed = f"{n} GPU{'s' if n != 1 else ''}" if n is not None else "the same GPUs"
                why = (f"the {hours:,.2f} GPU-hours/month of prefill it saves (before its own cost) free no GPU "
                       f"({needed} needed with or without reuse)")
            else:
                why = f"the cache saved no prefill GPU time at a {_pct(h)} hit rate"
            cost = (f" and costs ${benefit.overhead_usd:,.0f}/month" if benefit.overhead_usd > 0
                    else "; no overhead is priced either")
            reason = f"Nothing to gain: {why}{cost} ({benefit.realisation})."
        else:
            reason = (f"The cache costs ${benefit.overhead_usd:,.0f}/month and saves ${saved:,.0f}/month at a "
                      f"{_pct(h)} hit rate ({benefit.realisation}): overhead exceeds the saved prefill.")
    elif total < meaningful:
        reason = (f"Reuse nets only ${total:,.0f}/month, under {threshold}: effort is better spent "
                  "elsewhere.")
    else:
        reason = (f"Reuse frees GPU time worth ${total:,.0f}/month net, but no whole GPU: no purchase is due "
                  f"without it and it frees no replica the baseline would keep ({money()}).")
    return Decision("NOT_WORTH_IT", reason,
                    _money_flips(savings, benefit, meaningful, above=True, threshold=threshold) + switch)


def verdict_kind(capacity: CapacityResult, horizon: HorizonPlan, meaningful_usd_per_month: float) -> str:
    """``BUY``, ``REUSE`` or ``NOT_WORTH_IT`` by rules 2, 3, 5, 6 of the module docstring (the
    data rules and the flip rule aside): what ``flip_probability`` compares."""
    if capacity.gpus_needed_with_reuse is None:
        return "BUY"
    b, r = horizon.baseline, horizon.reuse
    first = r.first_purchase
    if first is not None and first.month == 0:
        return "BUY"
    if not b.holds and not r.holds:
        return "BUY"
    saving = horizon.saving_usd
    if horizon.reuse_cheaper and saving >= meaningful_usd_per_month * horizon.horizon_months:
        return "REUSE"
    if b.purchases or not b.holds:
        return "BUY"
    return "NOT_WORTH_IT"


def flip_probability(capacity: CapacityResult, savings: PrefillSavings, pricebook: PriceBook,
                     planning: PlanningInputs, draws: int = FLIP_DRAWS, seed: int = FLIP_SEED,
                     resamples: tuple[tuple[float, float], ...] = ()) -> float:
    """Share of ``draws`` seeded scenarios whose ``verdict_kind`` differs from the central one
    (ranges in the module docstring). Deterministic: a fixed seed. ``resamples`` (bootstrap
    resamples of the measured intervals: hit rate, load factor) replace the planning input's
    hit-rate range and add the load's sampling spread when the window has them."""
    cap, p = capacity.inputs, planning
    rate = pricebook.effective_usd_per_gpu_hour()
    hit_cost_hours = savings.hit_cost_gpu_hours_per_month if capacity.method != "goodput" else 0.0

    def kind(c: CapacityResult, pb: PriceBook, hit_usd: float) -> str:
        hz = plan_horizon(c, pb, realisation=p.realisation, hit_cost_usd_per_month=hit_usd)
        return verdict_kind(c, hz, p.min_benefit_share_of_fleet_cost * cap.current_gpus * pb.usd_per_gpu_month())

    central = kind(capacity, pricebook, hit_cost_hours * rate)
    mid = savings.gpu_hours_per_month or 0.0
    lo_k = (savings.gpu_hours_per_month_low or 0.0) / mid if mid > 0 else 1.0
    hi_k = (savings.gpu_hours_per_month_high or 0.0) / mid if mid > 0 else 1.0
    lo_k, hi_k = max(lo_k, 0.05), max(hi_k, 0.05)
    h, h0 = cap.hit_rate, cap.baseline_hit_rate
    rng = random.Random(seed)
    flips = 0
    h_mid = sum(x for x, _ in resamples) / len(resamples) if resamples else 0.0
    for i in range(draws):
        load_k = 1.0
        if resamples and h_mid > 0:
            h_s, load_k = resamples[i % len(resamples)]
            gain_k = h_s / h_mid
        else:
            gain_k = rng.uniform(1 - p.hit_rate_range, 1 + p.hit_rate_range)
        h_draw = min(1.0, max(h0, h0 + (h - h0) * gain_k))
        k = rng.uniform(lo_k, hi_k)  # per-token cost relative to the centre
        price_k = rng.uniform(1 - p.price_range, 1 + p.price_range)
        g = max(-0.99, cap.growth_rate_per_month + rng.uniform(-p.growth_range, p.growth_range))
        peak = None if cap.peak_requests_per_second is None else cap.peak_requests_per_second * load_k
        ci: CapacityInputs = replace(cap, hit_rate=h_draw, growth_rate_per_month=g,
                                     requests_per_second=cap.requests_per_second * load_k,
                                     peak_requests_per_second=peak,
                                     prefill_tokens_per_gpu_second=cap.prefill_tokens_per_gpu_second / k)
        pb = scale_gpu_price(pricebook, price_k)
        c = plan_capacity(ci, pb)
        if kind(c, pb, hit_cost_hours * k * pb.effective_usd_per_gpu_hour()) != central:
            flips += 1
    return flips / draws


def scale_gpu_price(pb: PriceBook, k: float) -> PriceBook:
    """The price book with the GPU's price x ``k``: a scenario, not checked against the input
    bounds (``fields.scenario``)."""
    if pb.pricing_mode == "cloud":
        return scenario(pb, usd_per_gpu_hour=pb.usd_per_gpu_hour * k)
    return scenario(pb, capex_usd_per_gpu=pb.capex_usd_per_gpu * k,
                    power_hosting_usd_per_gpu_month=pb.power_hosting_usd_per_gpu_month * k)
