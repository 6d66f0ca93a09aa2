"""How many GPUs the prefill load needs to meet a p99 TTFT target, with and without reuse.

Queueing model (M/M/c waiting time + deterministic service):

* The fleet is ``c`` serving replicas (``gpus_per_replica`` GPUs each, tensor parallel).
  Requests arrive as a Poisson stream of ``requests_per_second``.
* A request's prefill occupies one replica for ``S = computed tokens / replica throughput``
  seconds, with ``computed tokens = mean_prompt_tokens * (1 - hit_rate)`` and replica
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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from models.prefill import PrefillMeasurement, PrefillSavings
from models.pricebook import PriceBook

MAX_REPLICAS = 1_000_000
"""Search limit for the replica count (a guard, never reached by a sane input)."""


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
        ]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"CapacityInputs.{name}: out of range; "
                                 f"got {getattr(self, name)!r}")

    def service_seconds(self, hit_rate: float) -> float:
        """Prefill time of a mean request on one replica at this hit rate, seconds."""
        rate = self.prefill_tokens_per_gpu_second * self.gpus_per_replica \
            * self.prefill_capacity_share
        return self.mean_prompt_tokens * (1.0 - hit_rate) / rate

    def load_at(self, month: float) -> float:
        """Request rate at ``month`` months from now."""
        return self.requests_per_second * (1.0 + self.growth_rate_per_month) ** month


# ---- queueing primitives ----------------------------------------------------------------
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
                    q: float) -> int | None:
    """Fewest replicas whose TTFT q-quantile meets the SLO (at least 1). ``None`` when no
    number of replicas can: a single prefill already takes longer than the SLO."""
    if service_seconds > slo_seconds:
        return None
    if arrival_rate <= 0 or service_seconds <= 0:
        return 1
    c = max(1, math.floor(arrival_rate * service_seconds) + 1)  # first stable size
    while c <= MAX_REPLICAS:
        if ttft_quantile(c, arrival_rate, service_seconds, q) <= slo_seconds:
            return c
        c += 1
    raise ValueError("replicas_needed: no fleet below the search limit meets the SLO")


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


# ---- the capacity plan -------------------------------------------------------------------
@dataclass(frozen=True)
class MonthRow:
    """GPUs needed at the load of one month (``None`` = SLO unreachable on this GPU)."""

    month: int
    """Months from now (0 = today)."""
    requests_per_second: float
    """Load that month."""
    gpus_needed_without_reuse: int | None
    """GPUs meeting the SLO at the baseline hit rate."""
    gpus_needed_with_reuse: int | None
    """GPUs meeting the SLO with reuse."""


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


def gpus_needed(inputs: CapacityInputs, hit_rate: float, arrival_rate: float) -> int | None:
    """GPUs meeting the SLO at ``arrival_rate`` and ``hit_rate``."""
    reps = replicas_needed(arrival_rate, inputs.service_seconds(hit_rate),
                           inputs.ttft_p99_slo_seconds, inputs.slo_quantile)
    return None if reps is None else reps * inputs.gpus_per_replica


def fleet_max_load(inputs: CapacityInputs, hit_rate: float) -> float:
    """Largest request rate the current fleet serves within the SLO at ``hit_rate``."""
    return max_arrival_rate(inputs.current_gpus // inputs.gpus_per_replica,
                            inputs.service_seconds(hit_rate), inputs.ttft_p99_slo_seconds,
                            inputs.slo_quantile)


def plan_capacity(inputs: CapacityInputs, pricebook: PriceBook) -> CapacityResult:
    """GPUs needed with and without reuse, run-out months and the deferral (module docs)."""
    h_with, h_without = inputs.hit_rate, inputs.baseline_hit_rate
    s_with, s_without = inputs.service_seconds(h_with), inputs.service_seconds(h_without)
    replicas_now = inputs.current_gpus // inputs.gpus_per_replica
    lam, q = inputs.requests_per_second, inputs.slo_quantile

    def ttft_now(s: float) -> float | None:
        if replicas_now < 1:
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

    schedule = tuple(
        MonthRow(m, inputs.load_at(m), gpus_needed(inputs, h_without, inputs.load_at(m)),
                 gpus_needed(inputs, h_with, inputs.load_at(m)))
        for m in range(inputs.horizon_months))
    deferred: float | None = 0.0
    for row in schedule:
        add_without = _added(row.gpus_needed_without_reuse, inputs.current_gpus)
        add_with = _added(row.gpus_needed_with_reuse, inputs.current_gpus)
        if add_without is None:  # the baseline cannot meet the SLO on this GPU at all
            deferred = None
            break
        # add_with is never None here: reuse only shortens the prefill (hit_rate >= baseline)
        deferred += add_without - add_with
    return CapacityResult(
        inputs=inputs, service_seconds_with_reuse=s_with, service_seconds_without_reuse=s_without,
        gpus_needed_with_reuse=gpus_needed(inputs, h_with, lam),
        gpus_needed_without_reuse=gpus_needed(inputs, h_without, lam),
        ttft_p99_with_reuse_s=ttft_now(s_with), ttft_p99_without_reuse_s=ttft_now(s_without),
        max_requests_per_second_with_reuse=None if math.isinf(max_with) else max_with,
        max_requests_per_second_without_reuse=None if math.isinf(max_without) else max_without,
        runout_month_with_reuse=run_with, runout_month_without_reuse=run_without,
        deferral_months=deferral, deferral_is_lower_bound=lower_bound,
        deferred_gpu_months=deferred,
        deferral_usd=None if deferred is None else deferred * pricebook.usd_per_gpu_month(),
        schedule=schedule)


def growth_that_lasts(inputs: CapacityInputs, hit_rate: float) -> float | None:
    """Highest monthly growth at which the current fleet meets the SLO through the horizon
    at ``hit_rate``: ``(max load / load now) ** (1 / horizon) - 1``. ``None`` if unbounded
    (no load or no prefill work); negative if the fleet is already short today."""
    max_load = fleet_max_load(inputs, hit_rate)
    if inputs.requests_per_second <= 0 or math.isinf(max_load):
        return None
    if max_load <= 0:
        return -1.0
    return (max_load / inputs.requests_per_second) ** (1.0 / inputs.horizon_months) - 1.0


def hit_rate_that_lasts(inputs: CapacityInputs) -> float | None:
    """Lowest hit rate at which the current fleet meets the SLO through the horizon at the
    given growth (bisection; more hits = less prefill). ``None`` if even 100 % is not enough."""
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
                         prefill_capacity_share: float = 1.0) -> CapacityInputs | None:
    """Capacity inputs from a measured window: load, prompt length and hit rates from the
    counters, per-GPU prefill speed from the central estimate of GPU-seconds per token.
    ``None`` when the window cannot provide them (no traffic, no estimator)."""
    speed = savings.prefill_tokens_per_gpu_second
    if speed is None or measurement.mean_prompt is None or measurement.hit_rate is None:
        return None
    return CapacityInputs(
        ttft_p99_slo_seconds=ttft_p99_slo_seconds,
        requests_per_second=measurement.requests_per_second,
        mean_prompt_tokens=measurement.mean_prompt,
        hit_rate=measurement.hit_rate,
        baseline_hit_rate=measurement.baseline_hit_rate or 0.0,
        prefill_tokens_per_gpu_second=speed,
        current_gpus=measurement.num_gpus if current_gpus is None else current_gpus,
        growth_rate_per_month=growth_rate_per_month, horizon_months=horizon_months,
        gpus_per_replica=measurement.tensor_parallel_size,
        prefill_capacity_share=prefill_capacity_share)
