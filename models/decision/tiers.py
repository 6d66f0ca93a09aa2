"""One decision per cache tier, and a headline that names them (issue 20).

* ``device`` -- vLLM's own prefix cache: a free flag (``enable_prefix_caching``), on or off.
  It saves the window's device-tier prefill (``PrefillSavings.tiers.device``, the split the
  plan already prices, not computed again) and the GPUs the p99 TTFT target needs without any
  cache minus with the device cache alone. Its monthly benefit is the same one computation as
  the plan's (``verdict.benefit_and_horizon``) at a price book with no cache cost: never
  negative. ``REUSE`` when it saves anything (keep it on), ``NOT_WORTH_IT`` when it saved
  nothing in this window (it costs nothing either), ``NEED_DATA`` when the saving cannot be
  priced or the window fails the data gate.
* ``lmcache`` -- the LMCache service: worth its cost or not, on its *marginal* saving beyond
  what vLLM's own cache gives, minus its overhead. With LMCache in the window the plan's own
  evaluation already is that margin (``PrefillMeasurement.priced_tier == "lmcache"``: the
  baseline keeps vLLM's hits), so its benefit and rule are read from the evaluation:
  ``REUSE`` (rule ``reuse``), ``NOT_WORTH_IT`` (``not_worth_it``, and ``buy_later``: buy the
  GPUs instead), ``BUY`` when even with both tiers the SLO breaks. A window with no LMCache
  hits saves nothing there, whatever the cost model: the tier shows LMCache's cost (the price
  book's fixed cost and the lookup time vLLM measured), a negative benefit. No LMCache in the
  window: ``kind`` None.

The plan's top-level decision stays the evaluation's; ``named_reason`` prefixes its sentence
with the tier it is about (the badge or the CLI shows the kind before it): "LMCache: ...",
"vLLM prefix cache: ..." (no LMCache in the window), "KV cache, every tier: ..." (tiers not
known), "Even with vLLM prefix cache and LMCache: ..." (BUY: the SLO breaks with both).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from ..capacity.fleet import plan_capacity
from ..core.calendar import SECONDS_PER_MONTH
from ..core.fields import scenario
from ..core.vocabulary import PricedTier, Tier
from ..inputs.pricebook import PriceBook
from .reasons import Decision, Verdict, usd
from .verdict import (
    Evaluation,
    PlanInputs,
    benefit_and_horizon,
    meaningful_usd,
    verdict_rule,
)

DEVICE_LABEL = "vLLM prefix cache"
LMCACHE_LABEL = "LMCache"
BREAKS = ("buy_unreachable", "buy_today", "buy_both_break")
"""Rules of ``verdict_rule`` where even with every tier the SLO breaks: BUY."""


@dataclass(frozen=True)
class TierDecision:
    """The decision on one cache tier."""

    tier: Tier
    """``device`` (vLLM's prefix cache) or ``lmcache``."""
    label: str
    """"vLLM prefix cache" or "LMCache"."""
    kind: Verdict | None
    """``REUSE``, ``NOT_WORTH_IT``, ``BUY`` or ``NEED_DATA``; None: the tier is not in the window."""
    monthly_benefit_usd: float | None
    """What the tier is worth per month, $ (device: free, >= 0; LMCache: net of its overhead)."""
    gpu_hours_per_month: float | None
    """Prefill GPU-hours/month the tier saves (LMCache: net of its overhead)."""
    gpus_saved: int | None
    """GPUs the p99 TTFT target needs less today thanks to the tier (None: not sized)."""
    reason: str
    """One sentence, naming the tier."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def free(pb: PriceBook) -> PriceBook:
    """The price book with no cache cost: vLLM's prefix cache comes with vLLM."""
    return scenario(pb, cache_service_node_usd_per_month=0.0, usd_per_gb_month_cpu_memory=0.0,
                    usd_per_gb_month_ssd=0.0, ops_hours_per_month=0.0)


def _gated(inputs: PlanInputs, ev: Evaluation) -> bool:
    """True when the window is too short or too small to decide on (rule 1, metrics aside)."""
    s, p = ev.savings, inputs.planning
    return s.requests <= 0 or s.window_seconds < p.min_window_seconds or s.requests < p.min_requests


def _device_hours(inputs: PlanInputs, ev: Evaluation) -> tuple[float, float, float] | None:
    """(central, low, high) GPU-hours/month the device tier saved, or None when unpriced."""
    m, s = inputs.measurement, ev.savings
    k = SECONDS_PER_MONTH / m.window_seconds / 3600.0
    hits = m.window.device_cached if m.window is not None else (
        m.baseline_cached_prompt_tokens if m.priced_tier == PricedTier.LMCACHE else m.cached_prompt_tokens)
    if s.tiers is not None:
        d = s.tiers.device
        return d.value * k, d.low * k, d.high * k
    if hits <= 0:
        return 0.0, 0.0, 0.0  # no hits, no saving: whatever the cost model
    if m.priced_tier == PricedTier.ALL and s.gpu_hours_per_month is not None:
        return s.gpu_hours_per_month, s.gpu_hours_per_month_low or 0.0, s.gpu_hours_per_month_high or 0.0
    return None


def device_decision(inputs: PlanInputs, ev: Evaluation) -> TierDecision:
    """vLLM's prefix cache: free; on when it saves anything (module docstring)."""
    m, pb, p = inputs.measurement, inputs.pricebook, inputs.planning
    hours = _device_hours(inputs, ev)
    if hours is None:
        return TierDecision(Tier.DEVICE, DEVICE_LABEL, Verdict.NEED_DATA, None, None, None,
                            f"NEED_DATA ({DEVICE_LABEL}, free): its saving cannot be priced from this window "
                            "(no identified prefill cost model or estimator).")
    rate = pb.effective_usd_per_gpu_hour()
    value, gpus, note = hours[0] * rate, None, ""
    if ev.capacity is not None:
        h_dev = (m.baseline_hit_rate if m.priced_tier == PricedTier.LMCACHE else m.hit_rate) or 0.0
        cap = plan_capacity(replace(ev.capacity.inputs, hit_rate=h_dev, baseline_hit_rate=0.0,
                                    reuse_overhead_gpu_seconds_per_request=0.0), pb)  # free: no LMCache cost
        if cap.gpus_needed_with_reuse is not None and cap.gpus_needed_without_reuse is not None:
            gpus = cap.gpus_needed_without_reuse - cap.gpus_needed_with_reuse
        sv = replace(ev.savings, gpu_hours_per_month=hours[0], gpu_hours_per_month_low=hours[1],
                     gpu_hours_per_month_high=hours[2], hit_cost_gpu_hours_per_month=0.0)
        b = benefit_and_horizon(sv, cap, free(pb), p.realisation, p.headroom_fill_fraction)[0]
        value = max(0.0, b.monthly_benefit_usd)
        note = f"; realised as {p.realisation.replace('_', ' ')} that is {usd(value)}/month"
    said_gpus = "" if gpus is None else f" and {gpus} GPU{'s' if gpus != 1 else ''} at the " \
        f"{p.ttft_p99_slo_seconds:g} s p99 TTFT target"
    if _gated(inputs, ev):
        kind, what = Verdict.NEED_DATA, ("the window is too short or too small to decide on (it costs nothing: "
                                         "keep it on)")
    elif hours[0] > 0:
        kind, what = Verdict.REUSE, "keep prefix caching on"
    else:
        kind, what = Verdict.NOT_WORTH_IT, ("no prefix-cache hits in this window, so it saved nothing (it costs "
                                      "nothing either)")
    reason = (f"{kind} ({DEVICE_LABEL}, free): {what}; it saves {hours[0]:,.2f} GPU-h/month "
              f"({usd(hours[0] * rate)} of GPU time){said_gpus}{note}.")
    return TierDecision(Tier.DEVICE, DEVICE_LABEL, kind, value, hours[0], gpus, reason)


def _lmcache_cost_only(inputs: PlanInputs, ev: Evaluation) -> TierDecision:
    """A window with no LMCache hits: LMCache saved nothing; its cost is what it shows."""
    m, pb = inputs.measurement, inputs.pricebook
    w = m.window
    k = SECONDS_PER_MONTH / m.window_seconds / 3600.0
    lookup_h = (w.lookup_seconds if w is not None else 0.0) * m.tensor_parallel_size * k
    rate = pb.effective_usd_per_gpu_hour()
    fixed = pb.cache_overhead_usd_per_month(m.num_gpus)
    cost = fixed + lookup_h * rate
    kind = Verdict.NEED_DATA if _gated(inputs, ev) else Verdict.NOT_WORTH_IT
    return TierDecision(Tier.LMCACHE, LMCACHE_LABEL, kind, -cost, -lookup_h, 0,
                        f"{LMCACHE_LABEL}: {kind}: no LMCache hits in this window, so it saved nothing and costs "
                        f"{usd(cost)}/month ({usd(fixed)} of service, memory and ops, {lookup_h:,.2f} GPU-h/month "
                        "of lookups vLLM timed).")


def lmcache_decision(inputs: PlanInputs, ev: Evaluation) -> TierDecision:
    """The LMCache service on its margin beyond vLLM's own cache (module docstring)."""
    m = inputs.measurement
    if m.priced_tier != PricedTier.LMCACHE:
        return TierDecision(Tier.LMCACHE, LMCACHE_LABEL, None, None, None, None,
                            f"{LMCACHE_LABEL}: not in this window (no LMCache hits or stores): nothing to decide.")
    w = m.window
    if w is not None and w.external_cached <= 0 and (ev.benefit is None or ev.savings.tiers is None):
        return _lmcache_cost_only(inputs, ev)
    b, cap, hz = ev.benefit, ev.capacity, ev.horizon
    t = ev.savings.tiers
    k = SECONDS_PER_MONTH / m.window_seconds / 3600.0
    hours = t.lmcache.value * k if t is not None else None
    if b is None or cap is None or hz is None or ev.decision.kind == Verdict.NEED_DATA:
        return TierDecision(Tier.LMCACHE, LMCACHE_LABEL, Verdict.NEED_DATA, b.monthly_benefit_usd if b else None, hours,
                            None, f"{LMCACHE_LABEL}: {ev.decision.kind}: {ev.decision.reason}")
    rule = verdict_rule(cap, hz, meaningful_usd(cap, inputs.pricebook, inputs.planning), b.monthly_benefit_usd)
    kind = Verdict.BUY if rule in BREAKS else Verdict.REUSE if rule == "reuse" else Verdict.NOT_WORTH_IT
    gpus = None
    if cap.gpus_needed_with_reuse is not None and cap.gpus_needed_without_reuse is not None:
        gpus = cap.gpus_needed_without_reuse - cap.gpus_needed_with_reuse
    return TierDecision(Tier.LMCACHE, LMCACHE_LABEL, kind, b.monthly_benefit_usd, hours, gpus,
                        f"{LMCACHE_LABEL}: {kind} ({usd(b.monthly_benefit_usd)}/month beyond vLLM's own cache, "
                        f"net of its overhead): {ev.decision.reason}")


def decide_tiers(inputs: PlanInputs, ev: Evaluation) -> dict[Tier, TierDecision]:
    """``{"device": ..., "lmcache": ...}`` for one evaluated plan."""
    return {Tier.DEVICE: device_decision(inputs, ev), Tier.LMCACHE: lmcache_decision(inputs, ev)}


def headline(tiers: dict[Tier, TierDecision]) -> str:
    """One line naming both decisions, e.g. "vLLM prefix cache: REUSE (free; 3.01 GPU-h/month,
    0 GPUs). LMCache: NOT_WORTH_IT (-$401/month)."."""
    d, lm = tiers[Tier.DEVICE], tiers[Tier.LMCACHE]
    hours = "" if d.gpu_hours_per_month is None else f"; {d.gpu_hours_per_month:,.2f} GPU-h/month"
    gpus = "" if d.gpus_saved is None else f", {d.gpus_saved} GPU{'s' if d.gpus_saved != 1 else ''}"
    out = f"{d.label}: {d.kind} (free{hours}{gpus})."
    if lm.kind is None:
        return out + f" {lm.label}: not in this window."
    money = "" if lm.monthly_benefit_usd is None else f" ({usd(lm.monthly_benefit_usd)}/month)"
    return out + f" {lm.label}: {lm.kind}{money}."


def named_reason(inputs: PlanInputs, ev: Evaluation) -> Decision:
    """The evaluation's decision with its sentence naming the tier it is about."""
    dec, m = ev.decision, inputs.measurement
    lm = m.priced_tier == PricedTier.LMCACHE
    cap, hz, b = ev.capacity, ev.horizon, ev.benefit
    breaks = dec.kind == Verdict.BUY and cap is not None and hz is not None and b is not None and verdict_rule(
        cap, hz, meaningful_usd(cap, inputs.pricebook, inputs.planning), b.monthly_benefit_usd) in BREAKS
    if breaks:
        prefix = f"Even with {DEVICE_LABEL} and {LMCACHE_LABEL}: " if lm else f"Even with {DEVICE_LABEL}: "
    elif lm:
        prefix = f"{LMCACHE_LABEL}: "
    else:
        only_device = m.window is not None and m.window.external_cached <= 0
        prefix = f"{DEVICE_LABEL if only_device else 'KV cache, every tier'}: "
    return replace(dec, reason=prefix + dec.reason)
