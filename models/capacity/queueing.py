"""Queueing primitives of the capacity model (``kvplan.models.capacity.fleet``): the M/M/c
wait (Erlang C), TTFT quantiles (service + wait), the fewest replicas that meet a TTFT
quantile, the largest rate a fleet serves within it, and the month growing load reaches it."""

from __future__ import annotations

import math

import numpy as np

from ..core.errors import KvplanError

MAX_REPLICAS = 1_000_000
"""Search limit for the replica count of ``replicas_needed`` called alone."""


class FleetBeyondLimit(KvplanError):
    """No fleet below the search limit meets the SLO. A plan turns it into an answer ("beyond
    10,000 GPUs"); called alone, it is an error a user can act on."""


EXACT_SERVERS = 400
"""Up to this many servers Erlang B runs its recursion from 0 (exact, and cheap)."""
WINDOW_SIGMAS = 10.0
"""Above it, only the Poisson terms within this many standard deviations (sqrt(a)) below the
offered load are summed: the left tail beyond is below 1e-22 of the sum."""
NEGLIGIBLE_SIGMAS = 40.0
"""Servers beyond the load by more than this many sqrt(a) (plus 60): Erlang B is below
exp(-800), i.e. 0 in a double."""


def _erlang_b_tail(servers_lo: int, servers_hi: int, a: float) -> np.ndarray:
    """Erlang B for every server count k in [servers_lo, servers_hi] (``servers_lo`` > a), from
    the Poisson form ``B(k) = P(k; a) / sum_{j <= k} P(j; a)`` in log space: ``ln P(j) - ln P(j0)
    = sum ln(a / i)`` over a window starting ``WINDOW_SIGMAS`` sqrt(a) below a. Vectorised: the
    work is the window's length, not the server count."""
    j0 = max(0, math.floor(a - WINDOW_SIGMAS * math.sqrt(a) - 10.0))
    steps = np.log(a) - np.log(np.arange(j0 + 1, servers_hi + 1, dtype=np.float64))
    ln_p = np.concatenate(([0.0], np.cumsum(steps)))  # ln P(j) - ln P(j0), j = j0..servers_hi
    top = float(ln_p.max())
    cdf = np.cumsum(np.exp(ln_p - top))
    k = slice(servers_lo - j0, servers_hi - j0 + 1)
    out: np.ndarray = np.exp(ln_p[k] - top) / cdf[k]
    return out


def erlang_b(servers: int, offered_load: float) -> float:
    """Erlang B (blocking probability of c servers at offered load a): the recursion
    ``B(0) = 1, B(k) = a B(k-1) / (k + a B(k-1))`` up to ``EXACT_SERVERS``; above, the same
    value from the Poisson form over the terms that matter (``_erlang_b_tail``), so a fleet of
    100,000 replicas costs a few thousand terms, not 100,000 steps per call."""
    a = offered_load
    if a <= 0:
        return 0.0
    if servers <= EXACT_SERVERS or servers <= a:
        b = 1.0
        for k in range(1, servers + 1):
            b = a * b / (k + a * b)
        return b
    if servers > a + NEGLIGIBLE_SIGMAS * math.sqrt(a) + 60.0:
        return 0.0
    j0 = max(0, math.floor(a - WINDOW_SIGMAS * math.sqrt(a) - 10.0))
    ln_p = np.cumsum(np.log(a) - np.log(np.arange(j0 + 1, servers + 1, dtype=np.float64)))
    top = max(0.0, float(ln_p.max()))  # ln P(j0) - ln P(j0) = 0 is the first term
    return float(np.exp(ln_p[-1] - top) / (np.exp(-top) + np.exp(ln_p - top).sum()))


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability that an arrival waits in an M/M/c queue (Erlang C), ``a = lambda / mu``:
    ``C = c B / (c - a (1 - B))`` with ``B`` = ``erlang_b``. Returns 1 when ``a >= c`` (the
    queue grows without bound)."""
    if servers < 1:
        raise ValueError(f"servers: must be >= 1; got {servers!r}")
    if offered_load <= 0:
        return 0.0
    if offered_load >= servers:
        return 1.0
    b = erlang_b(servers, offered_load)
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
    if first > EXACT_SERVERS:
        return _replicas_needed_large(a, first, arrival_rate, service_seconds, slo_seconds, q, limit)
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


def _replicas_needed_large(a: float, first: int, arrival_rate: float, service_seconds: float,
                           slo_seconds: float, q: float, limit: int) -> int:
    """``replicas_needed`` for a load beyond ``EXACT_SERVERS``: every size from the first stable
    one to where the wait vanishes, at once (``_erlang_b_tail``)."""
    last = min(limit, math.ceil(a + NEGLIGIBLE_SIGMAS * math.sqrt(a) + 60.0))
    if last >= first:
        k = np.arange(first, last + 1, dtype=np.float64)
        b = _erlang_b_tail(first, last, a)
        c = k * b / (k - a * (1.0 - b))
        with np.errstate(divide="ignore"):
            wait = np.where(c <= 1.0 - q, 0.0, np.log(np.maximum(c, 1e-300) / (1.0 - q))
                            / (k / service_seconds - arrival_rate))
        ok = np.flatnonzero(service_seconds + wait <= slo_seconds)
        if len(ok):
            return first + int(ok[0])
    if last < limit:  # beyond the window the wait is 0: the next size meets the SLO
        return last + 1
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
