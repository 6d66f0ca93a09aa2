"""SLO attainment read off a latency histogram: TTFT (``ttft_p99_slo_seconds``) and TPOT
(``tpot_p99_slo_seconds``), both one observation per request.

A histogram only answers "how many requests were at most X" exactly at a bucket bound, so
the target is snapped to the nearest finite bound and the answer says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from .catalog import LATENCIES, TPOT, TTFT
from .window import Increase, histogram_buckets


@dataclass(frozen=True)
class Slo:
    """Share of requests whose latency was at most the SLO (snapped to a bucket bound)."""

    target_s: float
    """The target of the planning inputs."""
    bound_s: float | None
    """The bucket bound used (None: no histogram in the window)."""
    share: float | None
    """Requests with latency <= bound_s / all requests (None: no requests)."""
    requests: float
    """Observations the histogram counted in the window (its ``+Inf`` bucket); 0 without a
    histogram."""
    metric: str = "TTFT"
    """The short name (``catalog.LATENCIES``) of the histogram read."""

    @property
    def snapped(self) -> bool:
        return self.bound_s is not None and not math.isclose(self.bound_s, self.target_s)

    @property
    def note(self) -> str:
        if self.bound_s is None:
            return f"no {self.metric} histogram in this window"
        if not self.snapped:
            return f"the {self.target_s:g} s SLO is a bucket bound: exact"
        return (f"SLO {self.target_s:g} s is not a bucket bound of vLLM's {self.metric} histogram; "
                f"snapped to the nearest bound, {self.bound_s:g} s")


def slo_attainment(rows: Iterable[Increase], target_s: float, family: str = TTFT) -> Slo:
    """The share of ``family``'s observations at or below the bucket bound nearest ``target_s``."""
    merged: dict[float, float] = {}
    for le, n in histogram_buckets(rows, family):
        merged[le] = merged.get(le, 0.0) + n
    metric = next((short for short, fam in LATENCIES.items() if fam == family), family)
    finite = sorted(le for le in merged if not math.isinf(le))
    if not finite or math.inf not in merged:
        return Slo(target_s, None, None, 0.0, metric)
    bound = min(finite, key=lambda le: (abs(le - target_s), le))
    total = merged[math.inf]
    return Slo(target_s, bound, merged[bound] / total if total > 0 else None, total, metric)


def tpot_slo_attainment(rows: Iterable[Increase], target_s: float) -> Slo:
    """The share of requests whose time per output token was at most ``target_s`` (snapped to
    a bound of vLLM's TPOT buckets: 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, ... s)."""
    return slo_attainment(rows, target_s, TPOT)
