"""Queueing primitives of the capacity model (``kvplan.models.capacity.fleet``): the M/M/c
wait (Erlang C), TTFT quantiles (service + wait), the fewest replicas that meet a TTFT
quantile, the largest rate a fleet serves within it, and the month growing load reaches it."""

from __future__ import annotations

import math

from kvplan.models.core.errors import KvplanError

MAX_REPLICAS = 1_000_000
"""Search limit for the replica count of ``replicas_needed`` called alone."""


class FleetBeyondLimit(KvplanError):
    """No fleet below the search limit meets the SLO. A plan turns it into an answer ("beyond
    10,000 GPUs"); called alone, it is an error a user can act on."""


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability that an arrival waits in an M/M/c queue (Erlang C), ``a = lambda / mu``.

    Computed through the Erlang B recursion (stable for large c):
    ``B(0) = 1, B(k) = a B(k-1) / (k + a B(k-1))``, then ``C = c B / (c - a (1 - B))``.
    Returns 1 when ``a >= c`` (the queue grows without bound)."""
    if servers < 1:
        raise ValueError(f"servers: must be >= 1; got {servers!r}")
    if offered_load <= 0:
        return 0.0
    if offered_load >= servers:
        return 1.0
    b = 1.0
    for k in range(1, servers + 1):
        b = offered_load * b / (k + offered_load * b)
    return servers * b / (servers - offered_load * (1.0 - b))


def wait_quantile(servers: int, arrival_rate: float, service_seconds: float, q: float) -> float:
    """q-quantile of the M/M/c waiting time, seconds (``inf`` when overloaded)."""
    if arrival_rate <= 0 or service_seconds <= 0:
        return 0.0
    drain = servers / service_seconds - arrival_rate
    if drain <= 0:
        return math.inf
    c = erlang_c(servers, arrival_rate * service_seconds)
    if c <= 1.0 - q:
        return 0.0
    return math.log(c / (1.0 - q)) / drain


def ttft_quantile(servers: int, arrival_rate: float, service_seconds: float, q: float) -> float:
    """q-quantile of TTFT = service time + M/M/c wait, seconds."""
    return service_seconds + wait_quantile(servers, arrival_rate, service_seconds, q)


def replicas_needed(arrival_rate: float, service_seconds: float, slo_seconds: float,
                    q: float, limit: int = MAX_REPLICAS) -> int | None:
    """Fewest replicas whose TTFT q-quantile meets the SLO (at least 1). ``None`` when no
    number of replicas can: a single prefill already takes longer than the SLO.
    ``FleetBeyondLimit`` when more than ``limit`` replicas would be needed.

    One pass of the Erlang B recursion, testing each size from the first stable one (the same
    figures as ``ttft_quantile``, in O(c) instead of O(c^2))."""
    if service_seconds > slo_seconds:
        return None
    if arrival_rate <= 0 or service_seconds <= 0:
        return 1
    a = arrival_rate * service_seconds
    first = max(1, math.floor(a) + 1)  # first stable size
    if first > limit:
        raise FleetBeyondLimit(f"replicas_needed: more than {limit} replicas")
    b = 1.0
    for k in range(1, limit + 1):
        b = a * b / (k + a * b)
        if k < first:
            continue
        c = k * b / (k - a * (1.0 - b))
        wait = 0.0 if c <= 1.0 - q else math.log(c / (1.0 - q)) / (k / service_seconds - arrival_rate)
        if service_seconds + wait <= slo_seconds:
            return k
    raise FleetBeyondLimit(f"replicas_needed: no fleet of up to {limit} replicas meets the SLO")


def max_arrival_rate(servers: int, service_seconds: float, slo_seconds: float, q: float) -> float:
    """Largest request rate ``servers`` replicas serve within the SLO (bisection; TTFT grows
    with load). ``inf`` when a request needs no prefill time; 0 with no replicas or when
    one prefill exceeds the SLO."""
    if servers < 1 or service_seconds > slo_seconds:
        return 0.0
    if service_seconds <= 0:
        return math.inf
    lo, hi = 0.0, servers / service_seconds
    for _ in range(80):  # 2**-80: far below any meaningful precision
        mid = (lo + hi) / 2.0
        if ttft_quantile(servers, mid, service_seconds, q) <= slo_seconds:
            lo = mid
        else:
            hi = mid
    return lo


def runout_month(load_now: float, max_load: float, growth_rate: float,
                 horizon_months: int) -> float | None:
    """Month at which load growing from ``load_now`` reaches ``max_load``: 0 when already
    above it, ``None`` when not within the horizon (or never)."""
    if load_now > max_load:
        return 0.0
    if load_now <= 0 or growth_rate <= 0 or math.isinf(max_load):
        return None
    month = math.log(max_load / load_now) / math.log(1.0 + growth_rate)
    return month if month <= horizon_months else None
