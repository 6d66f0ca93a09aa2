"""GPU time the cache saved: prefill work that did not have to be redone, over one window.

A cached prompt token is a token whose KV the server did not compute. What computing it
would have cost is estimated in up to three ways, and their spread is reported:

A. ``measured_time`` -- the deployment's own prefill timer. With a fitted cost model
   (``kvplan.models.prefill.fit``: fixed + per-token + attention [+ LMCache store/load] per request,
   non-negative least squares over the per-interval increases of the deployment's history,
   bootstrap band) a cached token is priced at its marginal cost (per-token + its attention),
   by tier: vLLM's own prefix cache (free) and LMCache (which carries its store and load
   cost). This is the figure the plan uses, with the fit's band; the FLOP-based estimators
   are shown beside it as a cross-check. A model that cannot separate the per-request from
   the per-token cost (``status = "unidentified"``) prices nothing and says which
   measurement would fix it.

   Without a cost model (a measurement built from window totals only) the fallback divides
   the window's prefill seconds, corrected for requests prefilling concurrently (Little's law
   ``L = prefill_seconds_sum / (window x engines)``, Poisson occupancy: busy share ``1 -
   exp(-L)``), by the computed tokens. That average carries every request's fixed cost and,
   under load, decode time sharing prefill steps: an upper bound, labelled as such.

B. ``compute_vllm_flops`` -- FLOPs per token from vLLM's own estimate
   (``vllm:estimated_flops_per_gpu_total``, per GPU, times the GPUs per engine, divided
   by all tokens processed), converted to seconds at ``gpu_peak_flops * assumed_prefill_mfu``.
   It averages prefill and decode tokens (decode tokens attend to the whole context, so this
   leans high for long contexts).

C. ``compute_params`` -- FLOPs per cached token = ``2 * model_params`` (one multiply-add per
   active weight) plus, when ``num_layers`` and ``attention_width`` are given, the attention
   term ``2 * num_layers * attention_width * c`` (``4 * L * d * i`` FLOPs at position ``i``,
   averaged over the cached prefix positions ``0..c``, ``c`` = cached tokens per request).
   Same conversion as B, so B and C share the MFU assumption; only A is independent of it.
   B and C run whenever the deployment facts (``kvplan.models.inputs.deployment.DeploymentFacts``) give
   the GPU's peak FLOP/s and the model's size.

Central value: a measured A/B (``MeasuredAB``) when there is one (labelled "measured"); else
the fitted model (A with a cost model); else the median of the available estimators. Band:
the fit's bootstrap band, or ``[min * (1 - u), max * (1 + u)]`` over the estimators, widened
by the relative uncertainty ``u`` of ``relative_uncertainty`` (short-window coverage; for the
estimator band also sampling noise and single-estimator model error). Monthly figures scale the
covered span linearly to 30.44 days: the span is assumed representative of the month.

A cache hit is not free: loading cached KV and storing new chunks cost GPU time. This module
reports that time (``hit_cost_gpu_seconds``: fitted LMCache overhead, else the assumed
transfer cost) next to the gross saving; ``benefit`` subtracts it.

What this module cannot know: whether the window's traffic mix is typical, prefill work that
overlaps decode on the GPU, anything the history did not exercise.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any

from ..core.calendar import SECONDS_PER_MONTH
from ..core.timeutil import duration
from ..core.vocabulary import PricedTier
from .fit import PrefillCostModel
from .measurement import PrefillMeasurement
from .window import MeasuredAB, TierSavings, tier_savings

FULL_COVERAGE_SECONDS = 86400.0
"""A window of at least one day covers the daily traffic cycle: no coverage penalty."""
COVERAGE_PENALTY_AT_ZERO = 0.5
"""Relative error added for coverage, shrinking linearly from 50 % (empty window) to 0 (one
day). Assumed by us: a one-hour window of a diurnal service can easily be off by half."""
SINGLE_ESTIMATOR_MODEL_ERROR = 0.3
"""Relative error added when only one estimator is available (no spread to look at)."""


@dataclass(frozen=True)
class EstimatorResult:
    """One way of pricing a cached token in GPU time."""

    name: str
    """``measured_time``, ``compute_vllm_flops`` or ``compute_params``."""
    available: bool
    """False when an input it needs is missing; ``note`` says which."""
    gpu_seconds_per_token: float | None
    """GPU-seconds one prompt token costs to compute."""
    saved_gpu_seconds: float | None
    """saved tokens x gpu_seconds_per_token, over the window."""
    note: str
    """How it was computed, or why it is unavailable."""


def fitted_tiers(m: PrefillMeasurement) -> TierSavings | None:
    """The fitted model's saving by tier over ``m.window`` (engine-seconds), or None."""
    if m.cost_model is None or m.window is None or not m.cost_model.identified:
        return None
    return tier_savings(m.cost_model, m.window)


def cost_model_text(cost_model: PrefillCostModel) -> str:
    """The fitted parts with their bands in readable units (one line)."""
    units = {"fixed": ("ms/request", 1e3), "per_token": ("us/token", 1e6),
             "attention": ("ns/token^2", 1e9), "store": ("us/stored token", 1e6),
             "load": ("us/loaded token", 1e6), "lmcache_request": ("ms/LMCache request", 1e3)}
    out = []
    for p in cost_model.parts:
        u, k = units[p.name]
        out.append(f"{p.name} {p.value * k:.3g} {u} ({p.low * k:.3g}..{p.high * k:.3g})")
    return ", ".join(out)


def estimate_measured_time(m: PrefillMeasurement) -> EstimatorResult:
    """Estimator A: the deployment's prefill timer. With a cost model (``m.cost_model``,
    ``m.window``) the fitted marginal cost of the cached tokens beyond the baseline; without
    one, the window's average cost per computed token corrected for concurrent prefills (an
    upper bound)."""
    name = "measured_time"
    if m.cost_model is not None:
        cost_model = m.cost_model
        if not cost_model.identified:
            return EstimatorResult(name, False, None, None,
                                   f"{cost_model.reason}; to fix: {cost_model.fix}")
        tiers = fitted_tiers(m)
        if tiers is None or m.window is None:
            return EstimatorResult(name, False, None, None, "no priced window given")
        w, gpe = m.window, m.tensor_parallel_size
        gross = tiers.lmcache_gross if m.priced_tier == PricedTier.LMCACHE else tiers.gross
        c = cost_model.coef()
        computed_cost = (c["per_token"] * w.computed_tokens
                         + c["attention"] * (w.prompt_attention - w.cached_attention))
        per_token = gpe * computed_cost / w.computed_tokens if w.computed_tokens > 0 \
            else gpe * cost_model.marginal_seconds_per_token()
        note = (f"fitted on {cost_model.history}: {cost_model_text(cost_model)}; cached tokens priced at the "
                f"marginal cost (per-token + attention), x {gpe} GPU(s) per engine")
        if tiers.cap_factor < 1:
            note += (f"; scaled by {tiers.cap_factor:.2f}: the model claimed more prefill time "
                     "than the engines had")
        return EstimatorResult(name, True, per_token, gross.value * gpe, note)
    if m.prefill_seconds_sum is None:
        return EstimatorResult(name, False, None, None,
                               "vllm:request_prefill_time_seconds not reported")
    if m.computed_tokens <= 0:
        return EstimatorResult(name, False, None, None,
                               "no prompt tokens computed in the window: cost per token unknown")
    occupancy = m.prefill_seconds_sum / (m.window_seconds * m.engines)  # Little's law, L
    busy_fraction = 1.0 - math.exp(-occupancy)                           # P(N >= 1), Poisson
    busy_gpu_s = busy_fraction * m.window_seconds * m.num_gpus
    compute_gpu_s = max(0.0, busy_gpu_s - m.hit_cost_gpu_seconds())
    per_token = compute_gpu_s / m.computed_tokens
    no_overlap = min(m.prefill_seconds_sum, m.window_seconds * m.engines) \
        * m.tensor_parallel_size / m.computed_tokens
    note = (f"window average, no fitted cost model: mean requests in prefill per engine "
            f"L={occupancy:.3g}, busy fraction 1-exp(-L)={busy_fraction:.3g}; without the "
            f"overlap correction it would be {no_overlap:.3g} GPU-s/token. The average carries "
            "every request's fixed cost: an upper bound of the marginal cost")
    return EstimatorResult(name, True, per_token, per_token * m.saved_tokens, note)


def _seconds_per_flop(gpu_peak_flops: float, mfu: float) -> float:
    return 1.0 / (gpu_peak_flops * mfu)


def estimate_compute_vllm_flops(m: PrefillMeasurement) -> EstimatorResult:
    """Estimator B: vLLM's estimated FLOPs per token at an assumed MFU."""
    name = "compute_vllm_flops"
    if m.estimated_flops is None:
        return EstimatorResult(name, False, None, None,
                               "vllm:estimated_flops_per_gpu_total not reported")
    if m.gpu_peak_flops is None:
        return EstimatorResult(name, False, None, None, "gpu_peak_flops not given")
    tokens = m.computed_tokens + (m.generation_tokens or 0.0)
    if tokens <= 0 or m.estimated_flops <= 0:
        return EstimatorResult(name, False, None, None, "no tokens/FLOPs counted in the window")
    flops_per_token = m.estimated_flops * m.tensor_parallel_size / tokens
    per_token = flops_per_token * _seconds_per_flop(m.gpu_peak_flops, m.assumed_prefill_mfu)
    note = (f"{flops_per_token:.3g} FLOPs/token (vLLM estimate over computed prompt + "
            f"generated tokens) at {m.assumed_prefill_mfu:.0%} of {m.gpu_peak_flops:.3g} FLOP/s")
    if m.generation_tokens is None:
        note += "; generation tokens not reported, counted as 0"
    return EstimatorResult(name, True, per_token, per_token * m.saved_tokens, note)


def estimate_compute_params(m: PrefillMeasurement) -> EstimatorResult:
    """Estimator C: 2 x active params (+ attention over the cached prefix) at an assumed MFU."""
    name = "compute_params"
    if m.model_params is None:
        return EstimatorResult(name, False, None, None, "model_params not given")
    if m.gpu_peak_flops is None:
        return EstimatorResult(name, False, None, None, "gpu_peak_flops not given")
    flops_per_token = 2.0 * m.model_params
    note = "2 x params"
    if m.num_layers and m.attention_width and m.requests:
        prefix = m.cached_prompt_tokens / m.requests
        flops_per_token += 2.0 * m.num_layers * m.attention_width * prefix
        note += f" + attention over a {prefix:.0f}-token cached prefix"
    per_token = flops_per_token * _seconds_per_flop(m.gpu_peak_flops, m.assumed_prefill_mfu)
    note = (f"{flops_per_token:.3g} FLOPs/token ({note}) at {m.assumed_prefill_mfu:.0%} of "
            f"{m.gpu_peak_flops:.3g} FLOP/s")
    return EstimatorResult(name, True, per_token, per_token * m.saved_tokens, note)


def relative_uncertainty(samples: float, window_seconds: float, n_estimators: int) -> float:
    """Relative half-width of the band around the estimators' range.

    Three independent sources, added in quadrature:
    * sampling: ``1 / sqrt(samples)`` (Poisson counting noise; 100 % with no samples);
    * coverage: ``0.5 * (1 - window/1 day)`` for windows shorter than a day (the window may
      miss the daily cycle; 0 from one day on);
    * model: 0.3 when only one estimator is available (nothing to cross-check it with).
    """
    sampling = 1.0 / math.sqrt(samples) if samples >= 1 else 1.0
    coverage = COVERAGE_PENALTY_AT_ZERO * max(0.0, 1.0 - window_seconds / FULL_COVERAGE_SECONDS)
    single_estimator = SINGLE_ESTIMATOR_MODEL_ERROR if n_estimators == 1 else 0.0
    return math.sqrt(sampling ** 2 + coverage ** 2 + single_estimator ** 2)


@dataclass(frozen=True)
class PrefillSavings:
    """Prefill GPU time the cache saved in the window, and per month.

    Values are ``None`` when no estimator could run (see ``estimators[*].note``)."""

    estimators: tuple[EstimatorResult, ...]
    """Every estimator, available or not."""
    window_seconds: float
    """Window the estimate comes from, seconds."""
    requests: float
    """Requests in the window."""
    hit_rate: float | None
    """cached / prompt tokens in the window."""
    baseline_hit_rate: float | None
    """Hit rate the compared-against set-up would have had (0 = no cache)."""
    gpu_seconds_per_token: float | None
    """Central GPU-seconds to compute one prompt token (median of estimators)."""
    saved_gpu_seconds: float | None
    """Central saved GPU-seconds in the window (median of estimators)."""
    saved_gpu_seconds_low: float | None
    """Lowest estimator x (1 - relative_uncertainty), floored at 0."""
    saved_gpu_seconds_high: float | None
    """Highest estimator x (1 + relative_uncertainty)."""
    relative_uncertainty: float
    """Band widening from sample size, window length and estimator count."""
    gpu_hours_per_month: float | None
    """Central saved GPU-hours per 30.44-day month at the window's traffic."""
    gpu_hours_per_month_low: float | None
    """Low end of the band, GPU-hours/month."""
    gpu_hours_per_month_high: float | None
    """High end of the band, GPU-hours/month."""
    hit_cost_gpu_seconds: float
    """GPU-seconds spent loading cached KV in the window (subtracted in ``benefit``)."""
    hit_cost_gpu_hours_per_month: float
    """The same, per month."""
    notes: tuple[str, ...] = ()
    """Caveats produced while estimating."""
    source: str = "estimators"
    """Where the central value comes from: ``measured`` (an A/B), ``fitted`` (the cost model
    fitted from the deployment's metrics), ``estimators`` (median of the estimators) or
    ``no_hits`` (nothing cached: 0, or LMCache's measured lookup time, with no cost model)."""
    priced_tier: PricedTier = PricedTier.ALL
    """``all`` (every cache tier against no cache) or ``lmcache`` (what LMCache adds)."""
    tiers: TierSavings | None = None
    """The fitted saving by tier over the window, GPU-seconds (device, LMCache gross, overhead
    and net, total, and the window's prefill GPU time with and without reuse)."""
    cost_model: PrefillCostModel | None = None
    """The fitted prefill cost model, when one was given."""
    asked_seconds: float | None = None
    """Length of the range asked for (``window_seconds`` is the span the data covers)."""
    estimator_spread: tuple[float, float] | None = None
    """Lowest and highest saved GPU-seconds over the available estimators."""
    measured_ab: MeasuredAB | None = None
    """The A/B that overrode the model (``source == "measured"``)."""

    @property
    def available(self) -> bool:
        return self.saved_gpu_seconds is not None

    @property
    def saved_band(self) -> tuple[float, float, float] | None:
        """(central, low, high) saved GPU-seconds over the window, or None when unavailable."""
        c, lo, hi = self.saved_gpu_seconds, self.saved_gpu_seconds_low, self.saved_gpu_seconds_high
        return None if c is None or lo is None or hi is None else (c, lo, hi)

    @property
    def prefill_gpu_seconds_with_reuse(self) -> float | None:
        """Prefill GPU-seconds of the window as it ran (fitted model), or None."""
        return self.tiers.with_reuse.value if self.tiers else None

    @property
    def prefill_gpu_seconds_without_reuse(self) -> float | None:
        """Prefill GPU-seconds the window would have taken with nothing cached."""
        return self.tiers.without_reuse.value if self.tiers else None

    @property
    def prefill_tokens_per_gpu_second(self) -> float | None:
        """Per-GPU prefill capacity, tokens/s (1 / central GPU-seconds per token)."""
        if not self.gpu_seconds_per_token:
            return None
        return 1.0 / self.gpu_seconds_per_token


def _gpu_tiers(m: PrefillMeasurement) -> TierSavings | None:
    tiers = fitted_tiers(m)
    if tiers is None:
        return None
    k = float(m.tensor_parallel_size)
    return replace(tiers, **{f: getattr(tiers, f).scaled(k) for f in TierSavings.__dataclass_fields__
                             if f != "cap_factor"})


def _window_notes(m: PrefillMeasurement, asked: float | None, fitted: bool) -> list[str]:
    """The notes a window's savings start with: how much of the span asked for the data covers, a
    window shorter than an hour, the prefill cost model's notes, a cache hit's cost assumed 0."""
    notes: list[str] = []
    if m.window is not None and asked and m.window.covered_seconds < asked * 0.999:
        notes.append(f"the data covers {m.window.covered_seconds / 3600:.2f} h of the "
                     f"{asked / 3600:.2f} h asked for ({m.window.coverage:.0%}): the covered "
                     "span is priced")
    if m.window_seconds < 3600:
        notes.append(f"window is {duration(m.window_seconds)}, shorter than an hour: "
                     "monthly figures are a long extrapolation")
    if m.cost_model is not None:
        notes.extend(f"prefill cost model: {n}" for n in m.cost_model.notes)
    if not fitted and m.transfer_gpu_seconds_per_token == 0 and m.saved_tokens > 0 \
            and m.transferred_cached_tokens != 0:
        notes.append("cost of a cache hit (lookup/transfer) not given: assumed 0")
    return notes


def estimate_savings(m: PrefillMeasurement) -> PrefillSavings:
    """Run every estimator on one window and combine them (see the module docstring)."""
    to_month_hours = SECONDS_PER_MONTH / m.window_seconds / 3600.0
    hit_cost = m.hit_cost_gpu_seconds()
    if m.requests <= 0 or m.prompt_tokens <= 0:
        results = tuple(EstimatorResult(n, False, None, None, "no traffic in the window")
                        for n in ("measured_time", "compute_vllm_flops", "compute_params"))
    else:
        results = (estimate_measured_time(m), estimate_compute_vllm_flops(m),
                   estimate_compute_params(m))
    ok = [r for r in results if r.available]
    # an available estimator has both figures
    saved = [r.saved_gpu_seconds for r in ok if r.saved_gpu_seconds is not None]
    tiers = _gpu_tiers(m) if m.requests > 0 else None
    fitted = tiers is not None and results[0].available
    u = relative_uncertainty(m.samples, m.window_seconds, len(ok))
    u_cov = relative_uncertainty(float("inf"), m.window_seconds, 2)  # coverage only
    asked = m.window.asked_seconds if m.window is not None else None
    notes = _window_notes(m, asked, fitted)
    spread = None
    if saved:
        spread = (min(saved), max(saved))
        if len(ok) > 1:
            notes.append("estimators: " + ", ".join(f"{r.name} {r.saved_gpu_seconds:,.4g}"
                                                    for r in ok) + " GPU-s saved")
    common: dict[str, Any] = dict(estimators=results, window_seconds=m.window_seconds, requests=m.requests,
                                  hit_rate=m.hit_rate, baseline_hit_rate=m.baseline_hit_rate,
                                  hit_cost_gpu_seconds=hit_cost,
                                  hit_cost_gpu_hours_per_month=hit_cost * to_month_hours,
                                  priced_tier=m.priced_tier, tiers=tiers, cost_model=m.cost_model,
                                  asked_seconds=asked, estimator_spread=spread, measured_ab=m.measured_ab)
    per_tokens = [r.gpu_seconds_per_token for r in ok if r.gpu_seconds_per_token is not None]
    per_token = statistics.median(per_tokens) if per_tokens else None

    def banded(per_token: float | None, central: float, low: float, high: float, rel_u: float,
               **kw: Any) -> PrefillSavings:
        """The savings with a band, in the window and per month."""
        return PrefillSavings(
            gpu_seconds_per_token=per_token, saved_gpu_seconds=central,
            saved_gpu_seconds_low=low, saved_gpu_seconds_high=high, relative_uncertainty=rel_u,
            gpu_hours_per_month=central * to_month_hours, gpu_hours_per_month_low=low * to_month_hours,
            gpu_hours_per_month_high=high * to_month_hours, notes=tuple(notes), **common, **kw)

    ab = m.measured_ab
    if ab is not None and ab.saved_per_cached_token is not None:
        # the A/B measured the net saving: the cache layer's cost is already in it
        common.update(hit_cost_gpu_seconds=0.0, hit_cost_gpu_hours_per_month=0.0)
        central = ab.saved_per_cached_token * m.saved_tokens * m.tensor_parallel_size
        low, high = central * (1.0 - u_cov), central * (1.0 + u_cov)
        low, high = min(low, high), max(low, high)
        notes.append(f"measured beats modelled: {ab.label} saved "
                     f"{ab.saved_engine_seconds:,.4g} engine-s over {ab.on_cached_tokens:,.0f} "
                     f"cached tokens ({ab.engine_seconds_source}); applied to this window's "
                     f"{m.saved_tokens:,.0f} cached tokens")
        return banded(per_token, central, low, high, u_cov, source="measured")
    if not ok and m.requests > 0 and m.prompt_tokens > 0 and m.cached_prompt_tokens <= 0:
        # nothing cached, nothing saved, whatever the cost per token: vLLM's tier saved 0 and
        # LMCache (when in the window) cost the lookup time vLLM measured
        lookup = (m.window.lookup_seconds if m.window is not None and m.priced_tier == PricedTier.LMCACHE else 0.0) \
            * m.tensor_parallel_size
        notes.append("no cache hits in the window: the saving is 0" + (
            f", less the {lookup:,.4g} GPU-s of LMCache lookups vLLM timed" if lookup else "") +
            ", whatever the cost per token (" + "; ".join(f"{r.name}: {r.note}" for r in results) + ")")
        central = -lookup if lookup else 0.0
        return banded(None, central, central, central, u, source="no_hits")
    if not ok:
        notes.append("no estimator available: " + "; ".join(f"{r.name}: {r.note}" for r in results))
        return PrefillSavings(gpu_seconds_per_token=None, saved_gpu_seconds=None,
                              saved_gpu_seconds_low=None, saved_gpu_seconds_high=None,
                              relative_uncertainty=u, gpu_hours_per_month=None,
                              gpu_hours_per_month_low=None, gpu_hours_per_month_high=None,
                              notes=tuple(notes), **common)
    if fitted and tiers is not None and results[0].saved_gpu_seconds is not None:
        gross = tiers.lmcache_gross if m.priced_tier == PricedTier.LMCACHE else tiers.gross
        central = results[0].saved_gpu_seconds
        low = max(0.0, gross.low * (1.0 - u_cov))
        high = gross.high * (1.0 + u_cov)
        per_token = results[0].gpu_seconds_per_token
        return banded(per_token, central, low, high, u_cov, source="fitted")
    central = statistics.median(saved)
    low = max(0.0, min(saved) * (1.0 - u))
    high = max(saved) * (1.0 + u)
    return banded(per_token, central, low, high, u)
