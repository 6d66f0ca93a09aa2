"""The cheapest path over the horizon: buy GPUs when the SLO breaks, or pay for the cache and
buy later.

Two paths are walked month by month (0 .. horizon-1) over the capacity schedule
(``CapacityResult.schedule``: GPUs needed each month under growth, whole replicas):

* ``baseline`` -- no reuse. It holds today's fleet and buys the missing replicas in the
  month the SLO would break (the GPUs needed without reuse exceed the usable GPUs held).
* ``reuse`` -- the cache on. It pays the cache overhead every month and buys against the
  GPUs needed with reuse: later, fewer, or never.

``shrink`` realisation: both paths may give back GPUs in month 0, each down to the most *it*
needs within the horizon (no path gives back a GPU it must buy again). Today's
over-provisioning is given back by the baseline too, so it is no credit to the cache: the
shrink credited is ``needed without reuse - needed with reuse``.
``absorb_growth``: both keep today's fleet.

Cost of a path = GPUs held each month x ``PriceBook.usd_per_gpu_month()`` (cloud rent, or the
owned annuity + power/hosting, counted from the purchase month) summed over the horizon,
plus, for the reuse path, the cache overhead each month: the price book's fixed cost for the
GPUs held (service per node, cache memory and disk, ops time) and the GPU time spent loading
cached KV (grows with traffic; left out when a measured goodput already includes it).
Deferral is thus priced from the two purchase schedules, not from freed GPU-hours. With
``absorb_growth`` and a ``headroom_fill_fraction``, the freed headroom that extra traffic
fills is credited to the reuse path (``credit_usd_per_month``), so the horizon and the
monthly benefit (``kvplan.models.decision.benefit``) are one computation.

A path that needs more than ``MAX_FLEET_GPUS`` (runaway growth), or that no number of GPUs
can serve (one prefill longer than the SLO), costs infinity from that month: the answer is a
BUY with a "beyond N GPUs" note, never an exception.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..inputs.pricebook import PriceBook
from .fleet import MAX_FLEET_GPUS, CapacityResult


@dataclass(frozen=True)
class Purchase:
    """GPUs bought (or first rented) in one month."""

    month: int
    """Months from now (0 = now)."""
    gpus: int
    """GPUs added that month (whole replicas)."""

    def to_dict(self) -> dict[str, int]:
        return {"month": self.month, "gpus": self.gpus}


@dataclass(frozen=True)
class PathCost:
    """One path over the horizon."""

    name: str
    """``baseline`` or ``reuse``."""
    released_gpus: int
    """GPUs given back in month 0 (shrink: above this path's own need)."""
    purchases: tuple[Purchase, ...]
    """Purchases by month."""
    gpu_months: float
    """GPUs held summed over the months priced."""
    gpu_cost_usd: float
    """gpu_months x $/GPU-month."""
    overhead_usd: float
    """Cache overhead over the horizon (0 for the baseline)."""
    cost_usd: float
    """gpu_cost + overhead; ``inf`` when the path breaks (beyond the limit or unreachable)."""
    breaks_month: int | None = None
    """First month no fleet below the search limit (or at all) meets the SLO; None if none."""
    beyond_limit: bool = False
    """True when it breaks because it would need more than ``MAX_FLEET_GPUS`` GPUs."""
    credit_usd: float = 0.0
    """Value of freed headroom that extra traffic fills (``absorb_growth`` with a
    ``headroom_fill_fraction``), over the horizon: subtracted from ``cost_usd`` (0 for the
    baseline)."""
    hit_cost_usd: float = 0.0
    """Part of ``overhead_usd`` that is GPU time loading cached KV (the rest is the price
    book's fixed cache cost)."""

    @property
    def holds(self) -> bool:
        """True when the path meets the SLO through the horizon (maybe buying)."""
        return self.breaks_month is None

    @property
    def first_purchase(self) -> Purchase | None:
        return self.purchases[0] if self.purchases else None

    @property
    def gpus_bought(self) -> int:
        return sum(p.gpus for p in self.purchases)

    def schedule(self) -> list[dict[str, int]]:
        """Purchases as ``[{month, gpus}]``."""
        return [p.to_dict() for p in self.purchases]


@dataclass(frozen=True)
class HorizonPlan:
    """Both paths and what they mean."""

    baseline: PathCost
    """Without reuse."""
    reuse: PathCost
    """With reuse."""
    horizon_months: int
    """Months priced."""
    usd_per_gpu_month: float
    """Price of one GPU for a month."""

    @property
    def saving_usd(self) -> float:
        """baseline - reuse over the horizon (inf when only the baseline breaks; nan when both)."""
        return self.baseline.cost_usd - self.reuse.cost_usd

    @property
    def reuse_cheaper(self) -> bool:
        """True when the reuse path costs strictly less (a broken path costs infinity)."""
        return self.reuse.cost_usd < self.baseline.cost_usd

    def to_dict(self) -> dict[str, float | None]:
        def fin(x: float) -> float | None:
            return x if math.isfinite(x) else None
        return {"baseline": fin(self.baseline.cost_usd), "reuse": fin(self.reuse.cost_usd)}


def _walk(name: str, needed: list[int | None], beyond: list[bool], current: int, gpr: int, shrink: bool,
          usd_per_gpu_month: float, overhead: list[float] | None, credit: float = 0.0,
          hit: list[float] | None = None) -> PathCost:
    held, released = current, 0
    known = [n for n in needed if n is not None]
    peak = max(known) if known else None
    if shrink and peak is not None and peak < current:
        # give back only what this path will not need again within the horizon
        released, held = current - peak, peak
    purchases: list[Purchase] = []
    gpu_months = over = hit_usd = 0.0
    for m, need in enumerate(needed):
        if need is None:
            return PathCost(name, released, tuple(purchases), gpu_months, gpu_months * usd_per_gpu_month, over,
                            math.inf, m, beyond[m], credit * m, hit_usd)
        usable = (held // gpr) * gpr
        if need > usable:
            buy = need - usable
            held += buy
            purchases.append(Purchase(m, buy))
        gpu_months += held
        if overhead is not None:
            over += overhead[m] if len(overhead) > m else 0.0
        if hit is not None:
            hit_usd += hit[m] if len(hit) > m else 0.0
    total_credit = credit * len(needed)
    return PathCost(name, released, tuple(purchases), gpu_months, gpu_months * usd_per_gpu_month, over,
                    gpu_months * usd_per_gpu_month + over - total_credit, credit_usd=total_credit, hit_cost_usd=hit_usd)


def plan_horizon(capacity: CapacityResult, pricebook: PriceBook, *, realisation: str = "absorb_growth",
                 hit_cost_usd_per_month: float = 0.0, credit_usd_per_month: float = 0.0) -> HorizonPlan:
    """Both paths over the capacity schedule (module docstring). ``hit_cost_usd_per_month``:
    GPU time spent loading cached KV at today's traffic, $ (grows with traffic);
    ``credit_usd_per_month``: the freed headroom extra traffic fills, $ (horizon average,
    ``kvplan.models.decision.benefit``), credited to the reuse path."""
    cap = capacity.inputs
    gpr, current = cap.gpus_per_replica, cap.current_gpus
    rows = capacity.schedule
    price = pricebook.usd_per_gpu_month()
    shrink = realisation == "shrink"
    base = _walk("baseline", [r.gpus_needed_without_reuse for r in rows], [r.beyond_without_reuse for r in rows],
                 current, gpr, shrink, price, None)
    # the reuse path's overhead depends on the GPUs it holds (one cache service per node):
    # walk once for the fleet, then price the overhead month by month on it
    needed_w = [r.gpus_needed_with_reuse for r in rows]
    beyond_w = [r.beyond_with_reuse for r in rows]
    first = _walk("reuse", needed_w, beyond_w, current, gpr, shrink, price, None)
    held = _held(first, current, len(rows))
    hit = [hit_cost_usd_per_month * (1.0 + cap.growth_rate_per_month) ** m for m in range(len(held))]
    overhead = [pricebook.cache_overhead_usd_per_month(h) + hit[m] for m, h in enumerate(held)]
    reuse = _walk("reuse", needed_w, beyond_w, current, gpr, shrink, price, overhead, credit_usd_per_month, hit)
    return HorizonPlan(base, reuse, cap.horizon_months, price)


def _held(path: PathCost, current: int, months: int) -> list[int]:
    """GPUs a path holds each month (until it breaks)."""
    held = current - path.released_gpus
    buys = {p.month: p.gpus for p in path.purchases}
    out = []
    end = months if path.breaks_month is None else path.breaks_month
    for m in range(end):
        held += buys.get(m, 0)
        out.append(held)
    return out


def beyond_note(path: PathCost) -> str:
    """"beyond 10,000 GPUs in month 23" or "no number of these GPUs meets the SLO from month 3"."""
    if path.breaks_month is None:
        return ""
    when = "now" if path.breaks_month == 0 else f"in month {path.breaks_month}"
    if path.beyond_limit:
        return f"beyond {MAX_FLEET_GPUS:,} GPUs {when} (the search limit)"
    return f"no number of these GPUs meets the SLO {when}"


def purchase_text(path: PathCost, limit: int = 3) -> str:
    """"2 GPUs in month 5, 4 in month 9" (the first ``limit`` purchases)."""
    parts = []
    for i, p in enumerate(path.purchases[:limit]):
        when = "now" if p.month == 0 else f"in month {p.month}"
        parts.append(f"{p.gpus} GPU{'s' if p.gpus != 1 else ''} {when}" if i == 0 else f"{p.gpus} {when}")
    more = len(path.purchases) - limit
    return ", ".join(parts) + (f" and {more} more purchase{'s' if more > 1 else ''}" if more > 0 else "")
