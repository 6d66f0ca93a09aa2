"""How many GPUs the prefill load needs to meet a p99 TTFT target, with and without reuse.

Queueing model (M/M/c waiting time + deterministic service):

* The fleet is ``c`` serving replicas (``gpus_per_replica`` GPUs each, tensor parallel).
  Requests arrive as a Poisson stream of ``requests_per_second``.
* A request's prefill occupies one replica for ``S = computed tokens / replica throughput``
  seconds (on the reuse path plus the reuse's own overhead per request, LMCache's lookups,
  stores and loads, ``reuse_overhead_gpu_seconds_per_request``: a tier is credited GPUs net of
  its cost), with ``computed tokens = mean_prompt_tokens * (1 - hit_rate)`` and replica
  throughput ``prefill_tokens_per_gpu_second * gpus_per_replica * prefill_capacity_share``
  (linear tensor-parallel scaling: optimistic). Reuse enters only through ``hit_rate``.
* Waiting time ``W`` before a replica is free: M/M/c, ``P(W > t) = C(c, a) * exp(-(c/S -
  lambda) * t)`` with ``a = lambda * S`` and ``C`` the Erlang C formula. Its q-quantile is 0
  when ``C <= 1 - q``, else ``ln(C / (1 - q)) / (c/S - lambda)``.
* TTFT = W + S, with S taken as the mean (deterministic): then the p99 of TTFT is exactly
  ``S + W_p99``. M/M/c waits are longer than those of deterministic service (about twice,
  for M/D/c at moderate load), so the fleet size is conservative; prompt-length variation is
  ignored, which goes the other way. Decode steps sharing the GPU are represented only by
  ``prefill_capacity_share``; time to the first decode step is ignored.

Growth: load at month m is ``lambda * (1 + growth_rate_per_month) ** m``. A fleet "runs out"
at the (fractional) month its load reaches the largest arrival rate it can serve within the
SLO. The deferral is the difference between the run-out months with and without reuse, and in
GPU-months: the month-by-month difference in GPUs each set-up must add over the horizon, priced
at ``PriceBook.usd_per_gpu_month()`` (cloud: rent; owned: capital annuity at the cost of capital
+ power and hosting).

What this model cannot know: burstiness beyond Poisson, routing imbalance between replicas,
prompt-length tails, preemption, the decode SLO.

Two sizing methods (``CapacityInputs.method``):

* ``goodput`` -- a measured ``Goodput`` per replica (requests/s at which TTFT p99 and TPOT p99
  still meet their SLOs, from a load sweep, without and with reuse) is given: replicas =
  ``ceil(peak-hour rate x (1 + headroom) / goodput)``, x GPUs per replica. Batching, KV-capped
  concurrency and decode are in the measurement; the queue above is not used.
* ``queueing_fallback`` -- no sweep: the M/M/c model above, on the peak-hour rate. Headroom is
  not added: the p99 of the Poisson queue is the margin. Labelled as the fallback it is.

Both size on the busiest hour's rate (``peak_requests_per_second``; the window's mean when not
given). A fleet beyond ``MAX_FLEET_GPUS`` is not searched: it is reported as beyond the limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..inputs.pricebook import PriceBook
from ..prefill.measurement import PrefillMeasurement
from ..prefill.savings import PrefillSavings
from .goodput import Goodput
from .queueing import (
    FleetBeyondLimit,
    max_arrival_rate,
    replicas_needed,
    runout_month,
    ttft_quantile,
)

MAX_FLEET_GPUS = 10_000
"""Search limit of a plan's fleet: more GPUs than this are "beyond 10,000 GPUs" (a BUY with a
note), never searched (runaway growth would otherwise size fleets of millions)."""
CAPACITY_METHODS = ("goodput", "queueing_fallback")


@dataclass(frozen=True)
class CapacityInputs:
    """Load, speed and target of one deployment."""

    ttft_p99_slo_seconds: float
    """Target: the ``slo_quantile`` of time to first token must not exceed this, seconds."""
    requests_per_second: float
    """Measured arrival rate now (requests in the window / window seconds)."""
    mean_prompt_tokens: float
    """Mean prompt length, tokens."""
    hit_rate: float
    """Share of prompt tokens served from cache with reuse (token-weighted, 0-1)."""
    prefill_tokens_per_gpu_second: float
    """Prefill capacity of one GPU, tokens/s (1 / measured GPU-seconds per token)."""
    current_gpus: int
    """GPUs in the fleet today."""
    baseline_hit_rate: float = 0.0
    """Hit rate without the reuse being priced (0 = no cache at all)."""
    growth_rate_per_month: float = 0.0
    """Compound monthly growth of the request rate (0.1 = +10 %/month)."""
    horizon_months: int = 24
    """Planning horizon, months."""
    gpus_per_replica: int = 1
    """GPUs per serving replica (tensor-parallel size)."""
    prefill_capacity_share: float = 1.0
    """Share of GPU time available to prefill (the rest goes to decode). 1 = optimistic."""
    slo_quantile: float = 0.99
    """Quantile the SLO applies to."""
    goodput: Goodput | None = None
    """Measured goodput per replica; None = size with the queueing fallback."""
    peak_requests_per_second: float | None = None
    """Arrival rate of the busiest hour; None = ``requests_per_second`` (the mean)."""
    headroom: float = 0.0
    """Goodput method: spare share kept above the peak-hour demand (0.2 = 20 %)."""
    reuse_overhead_gpu_seconds_per_request: float = 0.0
    """GPU-seconds a request spends on the reuse being priced (LMCache's lookups, stores and
    loads), charged to the prefill of every request on the reuse path (a hit rate above the
    baseline's): the GPUs a tier is credited with are net of its overhead. The goodput method
    measured it already."""

    def __post_init__(self) -> None:
        checks = [
            ("ttft_p99_slo_seconds", self.ttft_p99_slo_seconds > 0),
            ("requests_per_second", self.requests_per_second >= 0),
            ("mean_prompt_tokens", self.mean_prompt_tokens >= 0),
            ("hit_rate", 0 <= self.hit_rate <= 1),
            ("baseline_hit_rate", 0 <= self.baseline_hit_rate <= self.hit_rate),
            ("prefill_tokens_per_gpu_second", self.prefill_tokens_per_gpu_second > 0),
            ("current_gpus", isinstance(self.current_gpus, int) and self.current_gpus >= 0),
            ("growth_rate_per_month", self.growth_rate_per_month > -1),
            ("horizon_months", isinstance(self.horizon_months, int) and self.horizon_months >= 1),
            ("gpus_per_replica", isinstance(self.gpus_per_replica, int)
             and self.gpus_per_replica >= 1),
            ("prefill_capacity_share", 0 < self.prefill_capacity_share <= 1),
            ("slo_quantile", 0 < self.slo_quantile < 1),
            ("peak_requests_per_second", self.peak_requests_per_second is None
             or self.peak_requests_per_second >= 0),
            ("headroom", 0 <= self.headroom <= 10),
            ("reuse_overhead_gpu_seconds_per_request", self.reuse_overhead_gpu_seconds_per_request >= 0),
        ]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"CapacityInputs.{name}: out of range; "
                                 f"got {getattr(self, name)!r}")

    def service_seconds(self, hit_rate: float) -> float:
        """Prefill time of a mean request on one replica at this hit rate, seconds; above the
        baseline's hit rate (the reuse path) plus the reuse's overhead on that replica."""
        rate = self.prefill_tokens_per_gpu_second * self.gpus_per_replica \
            * self.prefill_capacity_share
        overhead = self.reuse_overhead_gpu_seconds_per_request / (
            self.gpus_per_replica * self.prefill_capacity_share) if hit_rate > self.baseline_hit_rate else 0.0
        return self.mean_prompt_tokens * (1.0 - hit_rate) / rate + overhead

    @property
    def method(self) -> str:
        """``goodput`` (a measured goodput is given) or ``queueing_fallback``."""
        return "goodput" if self.goodput is not None else "queueing_fallback"

    @property
    def sizing_rate(self) -> float:
        """Rate the fleet is sized on: the busiest hour's, else the mean."""
        if self.peak_requests_per_second is not None:
            return self.peak_requests_per_second
        return self.requests_per_second

    def load_at(self, month: float) -> float:
        """Sizing (peak-hour) request rate at ``month`` months from now."""
        return self.sizing_rate * math.pow(1.0 + self.growth_rate_per_month, month)


# ---- the capacity plan -------------------------------------------------------------------
@dataclass(frozen=True)
class MonthRow:
    """GPUs needed at the load of one month (``None`` = SLO unreachable on this GPU)."""

    month: int
    """Months from now (0 = today)."""
    requests_per_second: float
    """Load that month."""
    gpus_needed_without_reuse: int | None
    """GPUs meeting the SLO at the baseline hit rate (None: unreachable or beyond the limit)."""
    gpus_needed_with_reuse: int | None
    """GPUs meeting the SLO with reuse."""
    beyond_without_reuse: bool = False
    """True when ``gpus_needed_without_reuse`` is None because it exceeds ``MAX_FLEET_GPUS``."""
    beyond_with_reuse: bool = False
    """... with reuse."""


@dataclass(frozen=True)
class CapacityResult:
    """Fleet sizes, run-out months and the purchase deferral reuse buys."""

    inputs: CapacityInputs
    """What the plan was computed from."""
    service_seconds_with_reuse: float
    """Prefill time of a mean request with reuse, seconds."""
    service_seconds_without_reuse: float
    """... without reuse (baseline hit rate)."""
    gpus_needed_with_reuse: int | None
    """GPUs meeting the SLO at today's load with reuse (None: unreachable on this GPU)."""
    gpus_needed_without_reuse: int | None
    """... without reuse."""
    ttft_p99_with_reuse_s: float | None
    """Modelled TTFT quantile on the current fleet with reuse (None: overloaded)."""
    ttft_p99_without_reuse_s: float | None
    """... without reuse."""
    max_requests_per_second_with_reuse: float | None
    """Largest load the current fleet serves within the SLO with reuse (None: unbounded)."""
    max_requests_per_second_without_reuse: float | None
    """... without reuse."""
    runout_month_with_reuse: float | None
    """Month the current fleet stops meeting the SLO with reuse; 0 = already; None = not
    within the horizon."""
    runout_month_without_reuse: float | None
    """... without reuse."""
    deferral_months: float
    """How much later the first purchase comes thanks to reuse (0 if none is due)."""
    deferral_is_lower_bound: bool
    """True when the reuse fleet lasts past the horizon (deferral = horizon - run-out)."""
    deferred_gpu_months: float | None
    """Sum over the horizon's months of (GPUs the baseline must add - GPUs the reuse fleet
    must add). None when the baseline cannot meet the SLO at all on this GPU."""
    deferral_usd: float | None
    """deferred_gpu_months x PriceBook.usd_per_gpu_month(), over the whole horizon."""
    schedule: tuple[MonthRow, ...]
    """GPUs needed month by month (0 .. horizon-1)."""
    why_none_with_reuse: str | None = None
    """Why ``gpus_needed_with_reuse`` is None (the report and the JSON say it); None when it is a number."""
    why_none_without_reuse: str | None = None
    """... ``gpus_needed_without_reuse``."""
    beyond_limit_with_reuse: bool = False
    """True when today's load with reuse needs more than ``MAX_FLEET_GPUS`` GPUs."""
    beyond_limit_without_reuse: bool = False
    """... without reuse."""

    @property
    def method(self) -> str:
        """``goodput`` or ``queueing_fallback``."""
        return self.inputs.method

    @property
    def gpus_added_without_reuse(self) -> tuple[int | None, ...]:
        return tuple(_added(r.gpus_needed_without_reuse, self.inputs.current_gpus)
                     for r in self.schedule)

    @property
    def gpus_added_with_reuse(self) -> tuple[int | None, ...]:
        return tuple(_added(r.gpus_needed_with_reuse, self.inputs.current_gpus)
                     for r in self.schedule)


def _added(needed: int | None, current: int) -> int | None:
    return None if needed is None else max(0, needed - current)


def replica_goodput(inputs: CapacityInputs, hit_rate: float) -> float:
    """Goodput method: the measured goodput per replica, with reuse when ``hit_rate`` is above
    the baseline's, else without (the sweep measured those two points only)."""
    g = inputs.goodput
    assert g is not None
    return g.with_reuse_rps if hit_rate > inputs.baseline_hit_rate else g.without_reuse_rps


def size_fleet(inputs: CapacityInputs, hit_rate: float, arrival_rate: float) -> tuple[int | None, bool]:
    """(GPUs meeting the SLO at ``arrival_rate`` and ``hit_rate``, beyond the search limit).
    GPUs is None when unreachable (a single prefill exceeds the SLO, or a goodput of 0) or
    beyond ``MAX_FLEET_GPUS`` (then the flag is True)."""
    gpr = inputs.gpus_per_replica
    limit = max(1, MAX_FLEET_GPUS // gpr)
    if inputs.goodput is not None:
        g = replica_goodput(inputs, hit_rate)
        if g <= 0:
            return None, False
        reps = max(1, math.ceil(arrival_rate * (1.0 + inputs.headroom) / g - 1e-9))
        return (None, True) if reps > limit else (reps * gpr, False)
    try:
        found = replicas_needed(arrival_rate, inputs.service_seconds(hit_rate),
                                inputs.ttft_p99_slo_seconds, inputs.slo_quantile, limit)
    except FleetBeyondLimit:
        return None, True
    return (None, False) if found is None else (found * gpr, False)


def fleet_max_load(inputs: CapacityInputs, hit_rate: float) -> float:
    """Largest request rate the current fleet serves within the SLO at ``hit_rate``."""
    replicas = inputs.current_gpus // inputs.gpus_per_replica
    if inputs.goodput is not None:
        return replicas * replica_goodput(inputs, hit_rate) / (1.0 + inputs.headroom)
    return max_arrival_rate(replicas, inputs.service_seconds(hit_rate), inputs.ttft_p99_slo_seconds,
                            inputs.slo_quantile)


def _schedule(inputs: CapacityInputs) -> tuple[MonthRow, ...]:
    """GPUs needed month by month; once a path is beyond the limit under growth it stays so
    (not searched again)."""
    rows: list[MonthRow] = []
    beyond_wo = beyond_w = False
    growing = inputs.growth_rate_per_month >= 0
    for m in range(inputs.horizon_months):
        load = inputs.load_at(m)
        if beyond_wo and growing:
            wo: int | None = None
        else:
            wo, beyond_wo = size_fleet(inputs, inputs.baseline_hit_rate, load)
        if beyond_w and growing:
            w: int | None = None
        else:
            w, beyond_w = size_fleet(inputs, inputs.hit_rate, load)
        rows.append(MonthRow(m, load, wo, w, beyond_wo, beyond_w))
    return tuple(rows)


def why_unsized(inputs: CapacityInputs, hit_rate: float, gpus: int | None, beyond: bool) -> str | None:
    """Why a fleet size is None, in words a user and a test can read (None: it is a number)."""
    if gpus is not None:
        return None
    if beyond:
        return f"more than {MAX_FLEET_GPUS:,} GPUs (the search limit)"
    if inputs.goodput is not None:
        side = "with" if hit_rate > inputs.baseline_hit_rate else "without"
        return (f"no goodput {side} reuse: the measured load sweep's lowest level already misses the SLOs, so "
                "no number of replicas is known to hold them")
    return (f"one request's prefill alone exceeds the TTFT p{inputs.slo_quantile * 100:g} SLO "
            f"({inputs.ttft_p99_slo_seconds:g} s) on this GPU: no fleet size holds it")


def plan_capacity(inputs: CapacityInputs, pricebook: PriceBook) -> CapacityResult:
    """GPUs needed with and without reuse, run-out months and the deferral (module docs)."""
    h_with, h_without = inputs.hit_rate, inputs.baseline_hit_rate
    s_with, s_without = inputs.service_seconds(h_with), inputs.service_seconds(h_without)
    replicas_now = inputs.current_gpus // inputs.gpus_per_replica
    lam, q = inputs.sizing_rate, inputs.slo_quantile

    def ttft_now(s: float) -> float | None:
        if replicas_now < 1 or inputs.goodput is not None:
            return None
        t = ttft_quantile(replicas_now, lam, s, q)
        return None if math.isinf(t) else t

    max_with, max_without = fleet_max_load(inputs, h_with), fleet_max_load(inputs, h_without)
    run_with = runout_month(lam, max_with, inputs.growth_rate_per_month, inputs.horizon_months)
    run_without = runout_month(lam, max_without, inputs.growth_rate_per_month,
                               inputs.horizon_months)
    if run_without is None:
        deferral, lower_bound = 0.0, False
    elif run_with is None:
        deferral, lower_bound = inputs.horizon_months - run_without, True
    else:
        deferral, lower_bound = run_with - run_without, False

    schedule = _schedule(inputs)
    deferred: float | None = 0.0
    for row in schedule:
        add_without = _added(row.gpus_needed_without_reuse, inputs.current_gpus)
        add_with = _added(row.gpus_needed_with_reuse, inputs.current_gpus)
        if deferred is None or add_without is None or add_with is None:  # unreachable or beyond the limit
            deferred = None
            break
        deferred += add_without - add_with
    need_with, beyond_with = (schedule[0].gpus_needed_with_reuse, schedule[0].beyond_with_reuse)
    need_without, beyond_without = (schedule[0].gpus_needed_without_reuse, schedule[0].beyond_without_reuse)
    return CapacityResult(
        inputs=inputs, service_seconds_with_reuse=s_with, service_seconds_without_reuse=s_without,
        gpus_needed_with_reuse=need_with, gpus_needed_without_reuse=need_without,
        beyond_limit_with_reuse=beyond_with, beyond_limit_without_reuse=beyond_without,
        ttft_p99_with_reuse_s=ttft_now(s_with), ttft_p99_without_reuse_s=ttft_now(s_without),
        max_requests_per_second_with_reuse=None if math.isinf(max_with) else max_with,
        max_requests_per_second_without_reuse=None if math.isinf(max_without) else max_without,
        runout_month_with_reuse=run_with, runout_month_without_reuse=run_without,
        deferral_months=deferral, deferral_is_lower_bound=lower_bound,
        deferred_gpu_months=deferred,
        deferral_usd=None if deferred is None else deferred * pricebook.usd_per_gpu_month(),
        schedule=schedule,
        why_none_with_reuse=why_unsized(inputs, h_with, need_with, beyond_with),
        why_none_without_reuse=why_unsized(inputs, h_without, need_without, beyond_without))


def growth_that_lasts(inputs: CapacityInputs, hit_rate: float) -> float | None:
    """Highest monthly growth at which the current fleet meets the SLO through the horizon
    at ``hit_rate``: ``(max load / load now) ** (1 / horizon) - 1``. ``None`` if unbounded
    (no load or no prefill work); negative if the fleet is already short today."""
    max_load = fleet_max_load(inputs, hit_rate)
    if inputs.sizing_rate <= 0 or math.isinf(max_load):
        return None
    if max_load <= 0:
        return -1.0
    return math.pow(max_load / inputs.sizing_rate, 1.0 / inputs.horizon_months) - 1.0


def hit_rate_that_lasts(inputs: CapacityInputs) -> float | None:
    """Lowest hit rate at which the current fleet meets the SLO through the horizon at the
    given growth (bisection; more hits = less prefill). ``None`` if even 100 % is not enough,
    or with a measured goodput (measured at two hit rates only: no curve to bisect)."""
    if inputs.goodput is not None:
        return None
    horizon_load = inputs.load_at(inputs.horizon_months)

    def lasts(h: float) -> bool:
        return fleet_max_load(inputs, h) >= horizon_load

    if not lasts(1.0):
        return None
    if lasts(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(40):  # 1e-12
        mid = (lo + hi) / 2.0
        lo, hi = (lo, mid) if lasts(mid) else (mid, hi)
    return hi


def capacity_inputs_from(measurement: PrefillMeasurement, savings: PrefillSavings, *,
                         ttft_p99_slo_seconds: float, growth_rate_per_month: float = 0.0,
                         horizon_months: int = 24, current_gpus: int | None = None,
                         prefill_capacity_share: float = 1.0, gpus_per_replica: int | None = None,
                         goodput: Goodput | None = None, peak_requests_per_second: float | None = None,
                         headroom: float = 0.0) -> CapacityInputs | None:
    """Capacity inputs from a measured window: load, prompt length and hit rates from the
    counters, per-GPU prefill speed from the central estimate of GPU-seconds per token.
    ``None`` when the window cannot provide them (no traffic, no estimator)."""
    speed = savings.prefill_tokens_per_gpu_second
    if speed is None or measurement.mean_prompt is None or measurement.hit_rate is None:
        return None
    # the cache layer's cost in the window (LMCache's overhead; 0 when a measured A/B nets it)
    overhead = max(0.0, savings.hit_cost_gpu_seconds)
    per_request = overhead / measurement.requests if measurement.requests > 0 else 0.0
    return CapacityInputs(
        ttft_p99_slo_seconds=ttft_p99_slo_seconds,
        requests_per_second=measurement.requests_per_second,
        mean_prompt_tokens=measurement.mean_prompt,
        hit_rate=measurement.hit_rate,
        baseline_hit_rate=measurement.baseline_hit_rate or 0.0,
        prefill_tokens_per_gpu_second=speed,
        current_gpus=measurement.num_gpus if current_gpus is None else current_gpus,
        growth_rate_per_month=growth_rate_per_month, horizon_months=horizon_months,
        gpus_per_replica=gpus_per_replica or measurement.tensor_parallel_size,
        prefill_capacity_share=prefill_capacity_share, goodput=goodput,
        peak_requests_per_second=peak_requests_per_second, headroom=headroom,
        reuse_overhead_gpu_seconds_per_request=per_request)
