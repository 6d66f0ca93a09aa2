"""The article's formula, priced per month:

    monthly benefit = saved prefill GPU-hours + extra throughput per existing GPU
                      + deferred hardware purchase - cache-service overhead and ops time

Freed GPU time is spent exactly once. ``realisation`` says how:

* ``shrink`` -- the freed hours become fewer GPUs / fewer rented hours. Only
  ``saved_prefill_usd`` is non-zero. It is capped at the GPUs reuse makes unnecessary under
  the TTFT SLO (``gpus_needed_without_reuse - gpus_needed_with_reuse``), never at today's
  over-provisioning (GPUs the fleet could give up without reuse too are not the cache's
  credit): freed time you cannot turn into a removed GPU removes nothing from the bill.
  Prices today's traffic (month 0).
* ``absorb_growth`` -- the fleet stays as it is and the freed hours carry more traffic. Over
  the capacity horizon, month by month, freed hours grow with traffic (``H * (1+g)^m``) and
  are allocated in this order:

  1. ``deferral``: GPU-hours of the GPUs the baseline would have had to add that month to meet
     the SLO and the reuse fleet does not (``capacity.schedule``): priced from the purchase
     schedules, not capped by the freed hours (whole replicas are bought, and the capacity
     model, not the average freed time, says when the SLO breaks);
  2. ``throughput``: freed hours beyond that are headroom on the existing GPUs. It is worth money only if
     traffic beyond the growth forecast will use it: ``headroom_fill_fraction`` of it is
     counted (default 0: idle headroom pays nothing -- "faster is not cheaper by itself").

  Monthly figures are averages over the horizon. ``saved_prefill_usd`` is 0.

Every term is GPU-hours x ``PriceBook.effective_usd_per_gpu_hour()`` (cloud: rent; owned:
capital annuity at the cost of capital + power and hosting, so a deferred purchase is valued
with its capex and cost of capital). ``attributed_gpu_hours`` records the hours each term
counted; a freed hour counted as deferral is never counted as throughput too (the deferral
may exceed the freed hours: it is GPUs not bought).

Overhead (a positive number, subtracted): the price book's fixed cache cost (service per node,
cache RAM and disk, operations time) plus the GPU time spent loading cached KV
(``PrefillSavings.hit_cost_gpu_hours_per_month``): a cache hit is not free.

With the horizon (``kvplan.models.capacity.horizon.plan_horizon``, as the plan always passes
it) and both of its paths holding, the terms are read off the two paths, so the benefit and
the horizon are one computation: the shrink cap is the GPUs the reuse path gives back beyond
the baseline; the deferral is the baseline's extra GPU-months per month -- purchases the reuse
path makes later, fewer or never -- at ``usd_per_gpu_month`` (owned: the capex annuity at the
cost of capital); the overhead is the reuse path's average; the filled headroom is the credit
the horizon gives the reuse path. Hence benefit x months <= the horizon's saving (equal when
the freed hours cover the GPUs given back), and the two agree in sign.

Bands: ``low``/``high`` re-run the allocation with the low/high saved hours of
``PrefillSavings`` (estimator spread and window length); prices and overhead are taken as
exact. What this cannot know: whether removed GPUs can really be sold or returned, or whether
extra traffic will come.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

from ..capacity.fleet import CapacityResult
from ..capacity.horizon import HorizonPlan
from ..core.calendar import HOURS_PER_MONTH
from ..inputs.planning import REALISATIONS
from ..inputs.pricebook import PriceBook
from ..prefill.savings import PrefillSavings

LABELS = {
    "saved_prefill": "Saved prefill GPU-hours",
    "throughput": "Extra throughput on existing GPUs",
    "deferral": "Deferred GPU purchase",
    "overhead": "Cache service, memory, ops and hit cost",
}


@dataclass(frozen=True)
class BenefitTerm:
    """One term of the formula, $/month."""

    name: str
    """``saved_prefill``, ``throughput``, ``deferral`` or ``overhead``."""
    label: str
    """Human label (waterfall axis)."""
    usd: float
    """Central value, $/month (overhead: the positive cost)."""
    low_usd: float
    """Value at the low end of the saved-hours band."""
    high_usd: float
    """Value at the high end."""
    gpu_hours: float
    """Freed GPU-hours/month this term counts (0 for overhead)."""


class WaterfallRow(NamedTuple):
    """One bar of a waterfall chart: signed $/month and its band."""

    label: str
    """Term name."""
    usd: float
    """Signed $/month (overhead negative)."""
    low: float
    """Value at the low end of the band."""
    high: float
    """Value at the high end of the band."""


@dataclass(frozen=True)
class _Hours:
    saved_prefill: float
    throughput: float
    deferral: float
    freed: float
    traffic_factor: float  # mean traffic over the priced period / traffic now
    headroom: float = 0.0  # freed hours not counted as deferral (absorb_growth)


@dataclass(frozen=True)
class Benefit:
    """Monthly benefit of reuse and its four terms (see module docstring)."""

    realisation: str
    """``shrink`` or ``absorb_growth``."""
    saved_prefill_usd: float
    """Freed GPU-hours turned into fewer GPU-hours paid for, $/month."""
    throughput_usd: float
    """Headroom filled by extra traffic, $/month."""
    deferral_usd: float
    """GPUs not yet bought/rented thanks to reuse, $/month (horizon average)."""
    overhead_usd: float
    """Cost of the cache layer, $/month (positive; subtracted)."""
    monthly_benefit_usd: float
    """saved_prefill + throughput + deferral - overhead."""
    monthly_benefit_low_usd: float
    """Total at the low end of the saved-hours band."""
    monthly_benefit_high_usd: float
    """Total at the high end."""
    usd_per_gpu_hour: float
    """Effective price of a GPU-hour used for every term."""
    freed_gpu_hours_per_month: float
    """GPU-hours/month reuse frees (central; absorb_growth: horizon average)."""
    attributed_gpu_hours: dict[str, float]
    """GPU-hours/month counted by each term; sums to at most ``freed_gpu_hours_per_month``."""
    fixed_overhead_usd: float
    """Part of the overhead from the price book (service, memory, disk, ops)."""
    hit_cost_usd: float
    """Part of the overhead from GPU time spent loading cached KV."""
    terms: tuple[BenefitTerm, ...]
    """The four terms with bands, in formula order."""
    notes: tuple[str, ...] = field(default=())
    """Caveats produced while pricing."""

    def waterfall(self) -> list[WaterfallRow]:
        """(label, signed usd, low, high) per term, then the total."""
        rows = []
        for t in self.terms:
            sign = -1.0 if t.name == "overhead" else 1.0
            rows.append(WaterfallRow(t.label, sign * t.usd, sign * t.low_usd, sign * t.high_usd))
        rows.append(WaterfallRow("Monthly benefit", self.monthly_benefit_usd,
                                 self.monthly_benefit_low_usd, self.monthly_benefit_high_usd))
        return rows


def _shrink(hours: float, capacity: CapacityResult | None) -> _Hours:
    saved = hours
    if capacity is not None and capacity.gpus_needed_with_reuse is not None:
        with_reuse = capacity.gpus_needed_with_reuse
        # credit = GPUs reuse makes unnecessary, within today's fleet; when the baseline cannot
        # meet the SLO at all, every GPU of the fleet above the reuse need
        without = capacity.gpus_needed_without_reuse
        ceiling = capacity.inputs.current_gpus if without is None else min(without, capacity.inputs.current_gpus)
        removable = max(0, ceiling - with_reuse)
        saved = min(hours, removable * HOURS_PER_MONTH)
    return _Hours(saved_prefill=saved, throughput=0.0, deferral=0.0, freed=hours,
                  traffic_factor=1.0)


def _absorb(hours: float, capacity: CapacityResult, fill: float) -> _Hours:
    growth = capacity.inputs.growth_rate_per_month
    added_without = capacity.gpus_added_without_reuse
    added_with = capacity.gpus_added_with_reuse
    freed, deferral, headroom, factors = [], [], [], []
    for row in capacity.schedule:
        factor = (1.0 + growth) ** row.month
        f = hours * factor
        a_wo, a_w = added_without[row.month], added_with[row.month]
        # baseline unable to meet the SLO at all: every freed hour replaces capacity; reuse
        # fleet unable (beyond the search limit) while the baseline is: nothing deferred
        if a_wo is None:
            avoided = f
        elif a_w is None:
            avoided = 0.0
        else:
            avoided = max(0, a_wo - a_w) * HOURS_PER_MONTH
        factors.append(factor)
        freed.append(f)
        deferral.append(avoided)
        headroom.append(max(0.0, f - avoided))
    n = len(capacity.schedule)
    return _Hours(saved_prefill=0.0, throughput=fill * sum(headroom) / n,
                  deferral=sum(deferral) / n, freed=sum(freed) / n, traffic_factor=sum(factors) / n,
                  headroom=sum(headroom) / n)


def throughput_gpu_hours(savings: PrefillSavings, capacity: CapacityResult | None, realisation: str,
                         headroom_fill_fraction: float) -> float:
    """Freed headroom extra traffic fills, GPU-hours/month (horizon average; 0 unless
    ``absorb_growth``): the credit ``plan_horizon`` gives the reuse path."""
    if realisation != "absorb_growth" or capacity is None:
        return 0.0
    return _absorb(savings.gpu_hours_per_month or 0.0, capacity, headroom_fill_fraction).throughput


def _horizon_gpus(horizon: HorizonPlan | None) -> tuple[float, float] | None:
    """(GPUs reuse gives back beyond the baseline, deferred GPU-months per month) of a horizon
    whose two paths hold; None otherwise (a broken path costs infinity)."""
    if horizon is None or not (horizon.baseline.holds and horizon.reuse.holds):
        return None
    b, r, n = horizon.baseline, horizon.reuse, horizon.horizon_months
    released = float(max(0, r.released_gpus - b.released_gpus))
    return released, (b.gpu_months - r.gpu_months) / n - released


def _check(realisation: str, headroom_fill_fraction: float, capacity: CapacityResult | None) -> None:
    if realisation not in REALISATIONS:
        raise ValueError(f"realisation: must be one of {', '.join(REALISATIONS)}; "
                         f"got {realisation!r}")
    if not 0.0 <= headroom_fill_fraction <= 1.0:
        raise ValueError("headroom_fill_fraction: must be in [0, 1]; "
                         f"got {headroom_fill_fraction!r}")
    if realisation == "absorb_growth" and capacity is None:
        raise ValueError("realisation: 'absorb_growth' needs a capacity plan (growth schedule)")


def monthly_benefit(savings: PrefillSavings, pricebook: PriceBook,
                    capacity: CapacityResult | None, realisation: str = "shrink",
                    headroom_fill_fraction: float = 0.0,
                    num_gpus: int | None = None, horizon: HorizonPlan | None = None) -> Benefit:
    """Price the saved prefill time per month (see module docstring): the four terms and
    their bands in one place, so a reader can check that no GPU-hour is counted twice.

    ``capacity`` supplies the fleet (current GPUs, GPUs needed with reuse, growth schedule);
    it is required for ``absorb_growth``. ``num_gpus`` (fleet size for the per-node overhead)
    defaults to ``capacity.inputs.current_gpus``. ``horizon`` (both paths, from
    ``plan_horizon`` with this benefit's headroom credit): when both paths hold, the shrink
    cap, the deferral and the overhead are read from it, so the total is at most the
    horizon's saving per month and the two agree in sign."""
    _check(realisation, headroom_fill_fraction, capacity)
    if num_gpus is None:
        if capacity is None:
            raise ValueError("num_gpus: needed when no capacity plan is given")
        num_gpus = capacity.inputs.current_gpus
    notes: list[str] = []
    if not savings.available:
        notes.append("no saved-prefill estimate: freed GPU-hours counted as 0")
    hz = _horizon_gpus(horizon)

    def allocate(hours: float) -> _Hours:
        if realisation == "shrink" or capacity is None:  # absorb_growth has a capacity (checked above)
            got = _shrink(hours, capacity)
            if hz is not None:  # the GPUs the horizon's reuse path gives back beyond the baseline
                got = replace(got, saved_prefill=min(hours, hz[0] * HOURS_PER_MONTH))
        else:
            got = _absorb(hours, capacity, headroom_fill_fraction)
        if hz is not None:  # purchases the reuse path makes later, fewer or never
            got = replace(got, deferral=hz[1] * HOURS_PER_MONTH)
        return got

    mid, lo, hi = (allocate(h or 0.0) for h in (savings.gpu_hours_per_month, savings.gpu_hours_per_month_low,
                                                savings.gpu_hours_per_month_high))
    rate = pricebook.effective_usd_per_gpu_hour()
    notes += _notes(realisation, capacity, mid, headroom_fill_fraction)
    if horizon is not None and hz is not None:
        n = horizon.horizon_months
        hit_cost = horizon.reuse.hit_cost_usd / n
        fixed = horizon.reuse.overhead_usd / n - hit_cost
    else:
        fixed = pricebook.cache_overhead_usd_per_month(num_gpus)
        hit_cost = savings.hit_cost_gpu_hours_per_month * mid.traffic_factor * rate
    overhead = fixed + hit_cost
    terms = tuple(BenefitTerm(name, LABELS[name], getattr(mid, name) * rate, getattr(lo, name) * rate,
                              getattr(hi, name) * rate, getattr(mid, name))
                  for name in ("saved_prefill", "throughput", "deferral"))
    terms += (BenefitTerm("overhead", LABELS["overhead"], overhead, overhead, overhead, 0.0),)
    gains = terms[:3]
    return Benefit(
        realisation=realisation,
        saved_prefill_usd=terms[0].usd, throughput_usd=terms[1].usd, deferral_usd=terms[2].usd,
        overhead_usd=overhead,
        monthly_benefit_usd=sum(t.usd for t in gains) - overhead,
        monthly_benefit_low_usd=sum(t.low_usd for t in gains) - overhead,
        monthly_benefit_high_usd=sum(t.high_usd for t in gains) - overhead,
        usd_per_gpu_hour=rate, freed_gpu_hours_per_month=mid.freed,
        attributed_gpu_hours={t.name: t.gpu_hours for t in gains},
        fixed_overhead_usd=fixed, hit_cost_usd=hit_cost, terms=terms, notes=tuple(notes))


def _notes(realisation: str, capacity: CapacityResult | None, mid: _Hours, fill: float) -> list[str]:
    notes: list[str] = []
    if realisation == "shrink":
        if capacity is None:
            notes.append("no capacity plan: shrink not capped by the SLO")
        elif capacity.gpus_needed_with_reuse is None:
            notes.append("SLO unreachable on this GPU even with reuse: shrink not capped")
        elif mid.saved_prefill < mid.freed:
            notes.append(f"shrink capped at {mid.saved_prefill:.0f} of {mid.freed:.0f} freed "
                         "GPU-hours: reuse makes no more GPUs unnecessary under the SLO (GPUs the "
                         "fleet could give up without reuse too are not credited to the cache)")
    elif capacity is not None:  # absorb_growth (checked by the caller)
        if capacity.deferred_gpu_months is None:
            notes.append("baseline cannot meet the SLO on this GPU at all: every freed hour "
                         "counted as replacing capacity")
        if fill == 0.0 and mid.headroom > 0:
            notes.append(f"{mid.headroom:.0f} freed GPU-hours/month are idle "
                         "headroom, counted as worth $0 (headroom_fill_fraction = 0)")
    return notes
