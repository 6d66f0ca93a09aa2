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
   ``min_benefit_share_of_fleet_cost`` of the fleet's monthly cost per month, and so does the
   monthly benefit (``benefit``, read off the same two paths: it is at most the horizon's
   saving per month, less when the freed prefill hours are fewer than the whole GPUs the queue
   gives back) ("REUSE now; BUY 2 GPUs in month 14 instead of month 5" when it only defers the
   purchase). Never when the reuse path costs more or the monthly benefit is not positive;
   when only the baseline breaks (no fleet meets the SLO without reuse) the horizon alone
   decides.
4. ``NEED_DATA`` -- rule 3 holds in the centre but flips in at least half of the resampled
   scenarios (``flip_probability`` >= 0.5): measure a longer window before committing.
5. ``BUY`` -- reuse does not pay (rule 3 fails) and the baseline must add GPUs within the
   horizon: buy them when its schedule says.
6. ``NOT_WORTH_IT`` -- reuse does not pay and no purchase is due: overhead >= savings (the
   article's honest answer when requests barely overlap), or a saving below the threshold.

``verdict_rule`` is that order, in one place; ``decide`` writes the sentence of the rule it
returns (``kvplan.models.decision.reasons``) and ``flip_probability`` compares its kinds.

``flip_probability``: share of 200 seeded draws whose verdict by rules 2, 3, 5, 6 differs from
the central one (each draw recomputes capacity, horizon and benefit). Each draw takes the hit
rate and the load from one bootstrap resample of the window's measured intervals
(``PricedWindow.resamples``; without them the hit-rate gain moves +-``hit_rate_range``
relative and the load stays), the per-token cost across the saved-prefill
band low/high, GPU price +-``price_range`` and growth +-``growth_range`` (uniform).

Flips are the input values at which the verdict would change. Money flips use the benefit's
linear dependence on hit rate, GPU price and overhead (approximate when the shrink cap or the
deferral cap binds; the sensitivity rows recompute exactly). Capacity flips (growth, hit rate
needed to last the horizon) are exact for the queueing model.

The tornado (one input moved down and up) is ``kvplan.models.decision.sensitivity``; the
decision per cache tier (vLLM prefix cache, LMCache) is ``kvplan.models.decision.tiers``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from ..cache.alternatives import TopologyFinding
from ..capacity.fleet import CapacityInputs, CapacityResult, capacity_inputs_from, plan_capacity
from ..capacity.goodput import Goodput
from ..capacity.horizon import HorizonPlan, plan_horizon
from ..capacity.replica import ReplicaFit, replica_fit
from ..core.fields import scenario
from ..inputs.deployment import DeploymentFacts
from ..inputs.planning import REALISATIONS, PlanningInputs
from ..inputs.pricebook import PriceBook
from ..prefill.measurement import PrefillMeasurement
from ..prefill.savings import PrefillSavings, estimate_savings
from .benefit import Benefit, monthly_benefit, throughput_gpu_hours
from .reasons import SENTENCES, BreakEven, Case, Decision, Verdict, break_even, data_gate, no_hits

__all__ = ["KINDS", "BreakEven", "Decision", "Verdict", "Evaluation", "PlanInputs", "break_even", "decide", "evaluate",
           "flip_probability", "price_plan", "verdict_kind", "verdict_rule"]

KINDS = tuple(Verdict)
MAX_WHAT_IF_HIT_RATE = 0.99
"""Sensitivity never moves the hit rate above this: vLLM always computes at least the last
prompt token, and at 100 % estimator A would have no computed tokens to measure."""
RULE_KIND = {"buy_unreachable": Verdict.BUY, "buy_today": Verdict.BUY, "buy_both_break": Verdict.BUY,
             "reuse": Verdict.REUSE, "buy_later": Verdict.BUY, "not_worth_it": Verdict.NOT_WORTH_IT}
"""The verdict of each rule of ``verdict_rule``."""


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
class Evaluation:
    """One pass of the pipeline: savings -> capacity -> horizon -> benefit -> decision."""

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
    savings, capacity, benefit, horizon = _priced(inputs)
    pb, p = inputs.pricebook, inputs.planning
    alternative = flip = None
    if capacity is not None:
        other = next(r for r in REALISATIONS if r != p.realisation)
        alternative = benefit_and_horizon(savings, capacity, pb, other, p.headroom_fill_fraction)[0]
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


def benefit_and_horizon(savings: PrefillSavings, capacity: CapacityResult, pb: PriceBook, realisation: str,
                        fill: float) -> tuple[Benefit, HorizonPlan]:
    """The two paths and the monthly benefit read off them: one computation (``benefit``)."""
    credit = throughput_gpu_hours(savings, capacity, realisation, fill) * pb.effective_usd_per_gpu_hour()
    hz = plan_horizon(capacity, pb, realisation=realisation,
                      hit_cost_usd_per_month=_hit_cost_usd(capacity, savings, pb), credit_usd_per_month=credit)
    return monthly_benefit(savings, pb, capacity, realisation, fill, horizon=hz), hz


def _priced(inputs: PlanInputs) -> tuple[PrefillSavings, CapacityResult | None, Benefit | None, HorizonPlan | None]:
    m, pb, p = inputs.measurement, inputs.pricebook, inputs.planning
    savings = estimate_savings(m)
    cap_in = capacity_inputs_from(
        m, savings, ttft_p99_slo_seconds=p.ttft_p99_slo_seconds,
        growth_rate_per_month=p.growth_rate_per_month, horizon_months=p.horizon_months,
        prefill_capacity_share=p.prefill_capacity_share, gpus_per_replica=replica_of(inputs).gpus_per_replica,
        goodput=inputs.goodput, peak_requests_per_second=inputs.peak_hour_requests_per_s,
        headroom=p.headroom)
    if cap_in is None:
        return savings, None, None, None
    capacity = plan_capacity(cap_in, pb)
    benefit, horizon = benefit_and_horizon(savings, capacity, pb, p.realisation, p.headroom_fill_fraction)
    return savings, capacity, benefit, horizon


def price_plan(inputs: PlanInputs) -> tuple[PrefillSavings, CapacityResult | None, Benefit | None]:
    """savings -> capacity -> benefit, without the verdict."""
    return _priced(inputs)[:3]


# ---- the verdict: one rule order ---------------------------------------------------------
def verdict_rule(capacity: CapacityResult, horizon: HorizonPlan, meaningful_usd_per_month: float,
                 monthly_benefit_usd: float | None = None) -> str:
    """Which of rules 2, 3, 5, 6 of the module docstring holds (the data rule and the flip rule
    aside): ``buy_unreachable``, ``buy_today``, ``buy_both_break``, ``reuse``, ``buy_later`` or
    ``not_worth_it`` (``RULE_KIND`` maps them to verdicts). ``monthly_benefit_usd``: the benefit
    read off ``horizon`` (None: the horizon alone)."""
    if capacity.gpus_needed_with_reuse is None:
        return "buy_unreachable"
    b, r = horizon.baseline, horizon.reuse
    first = r.first_purchase
    if first is not None and first.month == 0:
        return "buy_today"
    if not b.holds and not r.holds:
        return "buy_both_break"
    pays = horizon.reuse_cheaper and horizon.saving_usd >= meaningful_usd_per_month * horizon.horizon_months
    if pays and b.holds and monthly_benefit_usd is not None:
        pays = monthly_benefit_usd > 0 and monthly_benefit_usd >= meaningful_usd_per_month
    if pays:
        return "reuse"
    if b.purchases or not b.holds:
        return "buy_later"
    return "not_worth_it"


def verdict_kind(capacity: CapacityResult, horizon: HorizonPlan, meaningful_usd_per_month: float,
                 monthly_benefit_usd: float | None = None) -> str:
    """``BUY``, ``REUSE`` or ``NOT_WORTH_IT``: the verdict of ``verdict_rule``."""
    return RULE_KIND[verdict_rule(capacity, horizon, meaningful_usd_per_month, monthly_benefit_usd)]


def meaningful_usd(capacity: CapacityResult, pricebook: PriceBook, planning: PlanningInputs) -> float:
    """The money threshold: ``min_benefit_share_of_fleet_cost`` of today's fleet, $/month."""
    return planning.min_benefit_share_of_fleet_cost * capacity.inputs.current_gpus * pricebook.usd_per_gpu_month()


def decide(savings: PrefillSavings, capacity: CapacityResult | None, benefit: Benefit | None,
           pricebook: PriceBook, planning: PlanningInputs,
           alternative: Benefit | None = None, *, horizon: HorizonPlan | None = None,
           flip_probability: float | None = None) -> Decision:
    """The verdict for one evaluated window: the data gate (rule 1), then the rule
    ``verdict_rule`` picks and its sentence (``reasons.SENTENCES``); rule 4 turns a REUSE
    that flips in half the scenarios into NEED_DATA.

    ``alternative`` is the benefit under the other realisation; when it would land on the
    other side of the money threshold, switching realisation is listed as a flip.
    ``horizon``: both paths (computed here when not given); ``flip_probability``: rule 4."""
    p = planning
    gate = data_gate(savings, capacity, benefit, p)
    if gate is None and savings.source == "no_hits" and (capacity is None or benefit is None):
        return no_hits(savings, p)
    if gate is not None or capacity is None or benefit is None:
        return gate or Decision(Verdict.NEED_DATA, "Not enough data to price reuse.", [])
    if horizon is None:
        benefit, horizon = benefit_and_horizon(savings, capacity, pricebook, p.realisation,
                                               p.headroom_fill_fraction)
    meaningful = meaningful_usd(capacity, pricebook, p)
    total = benefit.monthly_benefit_usd
    switch = []
    if alternative is not None and (alternative.monthly_benefit_usd >= meaningful) != (total >= meaningful):
        switch.append(f"realising the savings as {alternative.realisation.replace('_', ' ')} "
                      f"instead (${alternative.monthly_benefit_usd:,.0f}/month)")
    case = Case(savings, capacity, benefit, horizon, p, capacity.inputs.current_gpus * pricebook.usd_per_gpu_month(),
                meaningful, switch, flip_probability)
    return SENTENCES[verdict_rule(capacity, horizon, meaningful, total)](case)


def _scaled(savings: PrefillSavings, saved_k: float, cost_k: float) -> PrefillSavings:
    """The savings with the saved hours x ``saved_k`` and the hit cost x ``cost_k`` (one draw)."""
    def k(x: float | None) -> float | None:
        return None if x is None else x * saved_k
    return replace(savings, gpu_hours_per_month=k(savings.gpu_hours_per_month),
                   gpu_hours_per_month_low=k(savings.gpu_hours_per_month_low),
                   gpu_hours_per_month_high=k(savings.gpu_hours_per_month_high),
                   hit_cost_gpu_hours_per_month=savings.hit_cost_gpu_hours_per_month * cost_k)


def flip_probability(capacity: CapacityResult, savings: PrefillSavings, pricebook: PriceBook,
                     planning: PlanningInputs, draws: int = FLIP_DRAWS, seed: int = FLIP_SEED,
                     resamples: tuple[tuple[float, float], ...] = ()) -> float:
    """Share of ``draws`` seeded scenarios whose ``verdict_kind`` differs from the central one
    (ranges in the module docstring). Deterministic: a fixed seed. ``resamples`` (bootstrap
    resamples of the measured intervals: hit rate, load factor) replace the planning input's
    hit-rate range and add the load's sampling spread when the window has them."""
    cap, p = capacity.inputs, planning

    def kind(c: CapacityResult, pb: PriceBook, sv: PrefillSavings) -> str:
        b, hz = benefit_and_horizon(sv, c, pb, p.realisation, p.headroom_fill_fraction)
        return verdict_kind(c, hz, meaningful_usd(capacity, pb, p), b.monthly_benefit_usd)

    central = kind(capacity, pricebook, savings)
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
        gained = (h_draw - h0) / (h - h0) if h > h0 else 1.0
        if kind(plan_capacity(ci, pb), pb, _scaled(savings, k * load_k * gained, k)) != central:
            flips += 1
    return flips / draws


def scale_gpu_price(pb: PriceBook, k: float) -> PriceBook:
    """The price book with the GPU's price x ``k``: a scenario, not checked against the input
    bounds (``fields.scenario``)."""
    if pb.pricing_mode == "cloud":
        return scenario(pb, usd_per_gpu_hour=pb.usd_per_gpu_hour * k)
    return scenario(pb, capex_usd_per_gpu=pb.capex_usd_per_gpu * k,
                    power_hosting_usd_per_gpu_month=pb.power_hosting_usd_per_gpu_month * k)
