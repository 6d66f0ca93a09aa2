"""What each cache capacity is worth per month: saved prefill GPU time minus cache memory.

For a capacity ``C`` (chunks; ``C x bytes_per_chunk`` bytes, shown in decimal GB):

    saved GPU-seconds / month = hit_rate(C) x requested tokens / month x seconds_per_cached_token
    saved $ / month           = saved GPU-seconds / 3600 x $ per GPU-hour
    memory $ / month          = C x bytes_per_chunk / 1e9 x $ per GB-month of the cache tier
    net $ / month             = saved $ - memory $

``seconds_per_cached_token`` is the GPU time one more cached prompt token saves (the marginal
prefill cost per token; today ``kvplan.models.prefill.savings``'s per-token estimate). The hit rate comes from
``kvplan.models.cache.sim``'s exact curve, which is a step function of ``C``; with a cost linear in
``C`` the best capacity is one of the curve's steps (or no cache), so the search below is
exact over every capacity, not over a grid.

* ``best``: the capacity with the largest net $/month. Every GB beyond it costs more than the
  hit tokens it adds: this is where extra GB stop paying.
* ``break_even``: the largest capacity whose net is still >= 0 (past it the cache as a whole
  costs more than it saves).

What this cannot know: whether the trace's traffic and its rate (``requested tokens / month``)
are typical of the month, the GPU time spent loading cached KV (not subtracted here: the plan's
``benefit`` does that), and prices (the price book's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..core.calendar import SECONDS_PER_MONTH
from .sim import GB, Curve


@dataclass(frozen=True)
class CapacityValue:
    capacity_chunks: int
    """Cache capacity, chunks."""
    capacity_gb: float
    """The same capacity in GB (10^9 bytes): chunks x bytes per chunk."""
    hit_rate: float
    """Token hit rate of the trace at this capacity (LRU, LMCache's hit rule)."""
    saved_gpu_hours_per_month: float
    """Prefill GPU-hours the hits save per month: hit rate x requested tokens per month x seconds
    per cached token."""
    saved_usd_per_month: float
    """Those GPU-hours at the GPU-hour price."""
    memory_usd_per_month: float
    """What this much cache memory costs per month (GB x $/GB-month)."""
    net_usd_per_month: float
    """Saved minus memory cost, $/month."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ValueInputs:
    bytes_per_chunk: int
    """KV bytes of one chunk (> 0)."""
    requested_tokens_per_month: float
    """Prompt tokens requested per month (the trace's rate, or given)."""
    seconds_per_cached_token: float
    """GPU-seconds of prefill one cached prompt token saves."""
    usd_per_gpu_hour: float
    """Price of a GPU-hour."""
    usd_per_gb_month: float
    """Price of one GB of cache memory for a month."""

    def __post_init__(self) -> None:
        if self.bytes_per_chunk <= 0:
            raise ValueError("bytes_per_chunk must be > 0")
        for name in ("requested_tokens_per_month", "seconds_per_cached_token",
                     "usd_per_gpu_hour", "usd_per_gb_month"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")


def tokens_per_month(total_tokens: float, seconds: float) -> float:
    """A trace's requested-token rate scaled to a month (30.44 days)."""
    if seconds <= 0:
        raise ValueError("the trace spans no time: give the monthly token volume instead")
    return total_tokens / seconds * SECONDS_PER_MONTH


def value_at(curve: Curve, v: ValueInputs, capacities_chunks: Sequence[int] | np.ndarray) -> list[CapacityValue]:
    """Monthly value at each capacity (chunks)."""
    caps = np.asarray(capacities_chunks, dtype=np.int64)
    rates = np.asarray(curve.hit_rate(caps), dtype=np.float64) if len(caps) else np.zeros(0)
    out = []
    for c, h in zip(caps.tolist(), rates.tolist(), strict=True):
        out.append(_row(c, h, v))
    return out


def _row(chunks: int, hit_rate: float, v: ValueInputs) -> CapacityValue:
    gpu_s = hit_rate * v.requested_tokens_per_month * v.seconds_per_cached_token
    saved = gpu_s / 3600.0 * v.usd_per_gpu_hour
    gb = chunks * v.bytes_per_chunk / GB
    memory = gb * v.usd_per_gb_month
    return CapacityValue(int(chunks), gb, float(hit_rate), gpu_s / 3600.0, saved, memory,
                         saved - memory)


def optimum(curve: Curve, v: ValueInputs) -> dict[str, Any]:
    """Best capacity and break-even capacity, exact over every capacity (module doc)."""
    # Candidates: no cache, and the smallest capacity of each step of the curve.
    steps = np.concatenate(([0], curve.depths + 1)).astype(np.int64)
    hits = np.concatenate(([0], curve.cum_hit_tokens[1:])).astype(np.float64)
    total = max(curve.total_tokens, 1)
    rate = hits / total
    k_saved = v.requested_tokens_per_month * v.seconds_per_cached_token / 3600.0 * v.usd_per_gpu_hour
    k_mem = v.bytes_per_chunk / GB * v.usd_per_gb_month
    net = rate * k_saved - steps * k_mem
    i_best = int(np.argmax(net))  # first maximum: the smallest capacity that reaches it
    best = _row(int(steps[i_best]), float(rate[i_best]), v)
    # Break-even: net stays >= 0 up to the last step before it turns negative for good; past
    # the last step net only falls (flat hits, growing memory), so solve the line there too.
    nonneg = np.flatnonzero(net >= 0)
    if k_mem > 0:
        last = int(nonneg[-1]) if len(nonneg) else 0
        # from steps[last] on, hits stay at rate[last] until the next step
        limit = int(steps[last + 1] - 1) if last + 1 < len(steps) else None
        chunks_even = int(rate[last] * k_saved / k_mem)
        if limit is not None:
            chunks_even = min(chunks_even, limit)
        break_even = _row(max(chunks_even, int(steps[last])), float(rate[last]), v)
    else:
        break_even = None  # free memory never stops paying
    return {"best": best, "break_even": break_even,
            "usd_per_month_per_gb": v.usd_per_gb_month,
            "saved_usd_per_month_at_infinite": float(curve.infinite_hit_rate * k_saved)}
