"""The tornado: the monthly benefit with one input moved down and up (``sensitivity``).

Defaults: GPU price +-25 %, hit rate +-25 % relative (capped at ``MAX_WHAT_IF_HIT_RATE``),
growth +-5 points/month, cache overhead +-50 %, its fixed part and the per-hit transfer cost;
rows sorted by swing, for a tornado chart. Each row recomputes the whole plan
(``kvplan.models.decision.verdict.price_plan``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.fields import scenario
from ..prefill.measurement import with_hit_rate
from .verdict import MAX_WHAT_IF_HIT_RATE, PlanInputs, price_plan, scale_gpu_price


@dataclass(frozen=True)
class SensitivityRow:
    """One bar of the tornado: the monthly benefit at a low and a high value of one input."""

    name: str
    """Which input moved."""
    unit: str
    """Unit of the input values."""
    base_input: float
    """Input value in the base plan."""
    low_input: float
    """Input moved down."""
    high_input: float
    """Input moved up."""
    low_benefit: float
    """Monthly benefit ($) with the input at ``low_input``."""
    high_benefit: float
    """Monthly benefit ($) with the input at ``high_input``."""
    base_benefit: float
    """Monthly benefit ($) of the base plan."""


def _scale_overhead(inputs: PlanInputs, k: float) -> PlanInputs:
    pb = inputs.pricebook
    pb = scenario(pb, cache_service_node_usd_per_month=pb.cache_service_node_usd_per_month * k,
                 usd_per_gb_month_cpu_memory=pb.usd_per_gb_month_cpu_memory * k,
                 usd_per_gb_month_ssd=pb.usd_per_gb_month_ssd * k,
                 usd_per_ops_hour=pb.usd_per_ops_hour * k)
    m = replace(inputs.measurement, transfer_gpu_seconds_per_token=(
        inputs.measurement.transfer_gpu_seconds_per_token * k))
    return replace(inputs, pricebook=pb, measurement=m)


def _benefit_of(inputs: PlanInputs) -> float | None:
    b = price_plan(inputs)[2]
    return None if b is None else b.monthly_benefit_usd


def sensitivity(base: PlanInputs, price_pct: float = 0.25, hit_rate_pct: float = 0.25,
                growth_points: float = 0.05, overhead_pct: float = 0.5) -> list[SensitivityRow]:
    """Monthly benefit with each input moved down and up, sorted by swing (largest first).
    Empty when the base plan has no benefit (NEED_DATA for lack of metrics)."""
    b = price_plan(base)[2]
    if b is None:
        return []
    base_benefit = b.monthly_benefit_usd
    m, pb, p = base.measurement, base.pricebook, base.planning
    rows: list[SensitivityRow] = []

    def row(name: str, unit: str, base_in: float, lo_in: float, hi_in: float,
            lo: PlanInputs, hi: PlanInputs) -> None:
        lo_b, hi_b = _benefit_of(lo), _benefit_of(hi)
        if lo_b is not None and hi_b is not None:
            rows.append(SensitivityRow(name, unit, base_in, lo_in, hi_in, lo_b, hi_b,
                                       base_benefit))

    rate = pb.effective_usd_per_gpu_hour()
    pb_lo, pb_hi = scale_gpu_price(pb, 1 - price_pct), scale_gpu_price(pb, 1 + price_pct)
    row("GPU price", "$/GPU-hour", rate, pb_lo.effective_usd_per_gpu_hour(),
        pb_hi.effective_usd_per_gpu_hour(), replace(base, pricebook=pb_lo),
        replace(base, pricebook=pb_hi))

    h, h0 = m.hit_rate or 0.0, m.baseline_hit_rate or 0.0
    h_lo = max(h0, h * (1 - hit_rate_pct))
    h_hi = max(h, min(MAX_WHAT_IF_HIT_RATE, h * (1 + hit_rate_pct)))
    row("hit rate", "share of prompt tokens", h, h_lo, h_hi,
        replace(base, measurement=with_hit_rate(m, h_lo)),
        replace(base, measurement=with_hit_rate(m, h_hi)))

    g = p.growth_rate_per_month
    g_lo, g_hi = max(-0.5, g - growth_points), g + growth_points
    row("growth", "per month", g, g_lo, g_hi,
        replace(base, planning=scenario(p, growth_rate_per_month=g_lo)),
        replace(base, planning=scenario(p, growth_rate_per_month=g_hi)))

    row("cache overhead", "$/month", b.overhead_usd, b.overhead_usd * (1 - overhead_pct),
        b.overhead_usd * (1 + overhead_pct), _scale_overhead(base, 1 - overhead_pct),
        _scale_overhead(base, 1 + overhead_pct))
    return sorted(rows, key=lambda r: -abs(r.high_benefit - r.low_benefit))
