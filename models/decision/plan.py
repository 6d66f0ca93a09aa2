"""One call for the app and the report: measured window + prices + planning choices -> a plan.

``plan(inputs)`` runs savings -> capacity -> benefit -> decision once, the sensitivity
analysis, and gathers every assumption the numbers rest on, in one ``PlanResult`` whose
``to_dict()`` is JSON-serialisable (infinities and NaN become ``None``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ..core.calendar import SECONDS_PER_MONTH
from ..core.vocabulary import PricedTier, Tier
from ..inputs.pricebook import PriceBook
from ..prefill.measurement import PrefillMeasurement
from ..prefill.savings import EstimatorResult, PrefillSavings
from .benefit import WaterfallRow
from .sensitivity import SensitivityRow, sensitivity
from .tiers import TierDecision, decide_tiers, headline, named_reason
from .verdict import Decision, Evaluation, PlanInputs, evaluate

ASSUMPTIONS: tuple[str, ...] = (
    "A month is 30.44 days; the span the data covers inside the range asked for is scaled "
    "linearly to a month and assumed typical of it.",
    "Prefill cost per request = fixed + per-token x computed tokens + attention x (P^2 - C^2)/2 "
    "(+ LMCache store and load), fitted by non-negative least squares on the per-interval "
    "increases of the deployment's history; band = 5th-95th percentile of 200 bootstrap "
    "resamples of the intervals. Cached tokens are priced at the marginal cost (per-token + "
    "attention). Requests sharing an engine step are counted once (iteration-token histogram) "
    "and no interval claims more prefill time than interval x engines.",
    "vLLM's own prefix cache is free (it comes with vLLM); with LMCache the plan prices only "
    "what LMCache adds, net of its store and load cost.",
    "FLOPs estimators (B, C) convert FLOPs to GPU time at an assumed prefill MFU of the GPU's "
    "dense peak.",
    "Band = [lowest estimator x (1-u), highest x (1+u)], u from 1/sqrt(requests), a "
    "coverage penalty for windows under a day, and a model penalty when one estimator is left.",
    "Fleet sizing (capacity_method): 'goodput' = busiest-hour rate x (1 + headroom) / measured goodput "
    "per replica (TTFT p99 and TPOT p99 within SLO), rounded up to whole replicas; "
    "'queueing_fallback' (no sweep) = M/M/c (Erlang C) waiting time plus a deterministic prefill of "
    "the mean computed prompt on the busiest-hour rate; replicas scale linearly with tensor parallelism.",
    "GPUs per replica = max(TP x PP, ceil((weights + KV for the concurrency x context) / usable GPU "
    "memory)): a model that does not fit the configured parallelism is sized with the GPUs it needs.",
    "The verdict compares two paths over the horizon: the baseline buys whole replicas the month the "
    "SLO would break; the reuse path pays the cache overhead every month and buys against its smaller "
    "need. GPU-months x $/GPU-month + overhead; REUSE only when the reuse path costs less.",
    "Freed GPU time is spent once: either a smaller fleet (shrink, capped at GPUs removable "
    "under the SLO) or carried traffic (absorb_growth: deferral first, idle headroom valued "
    "only at headroom_fill_fraction).",
    "Every GPU-hour is priced at the price book's effective rate (cloud rent, or owned capital "
    "annuity at the cost of capital + power and hosting).",
)


def _clean(value: Any) -> Any:
    """JSON-safe copy: tuples to lists, non-finite floats to None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


NO_CAPACITY = "no capacity inputs (the window gives no load or no prefill cost to size a fleet from)"
"""Why the GPUs needed are None when the plan has no capacity model at all."""

@dataclass(frozen=True)
class PlanResult:
    """Everything a page or a report shows about one plan."""

    label: str
    """What this plan is of (a deployment window, or a planning preset's title)."""
    source: str
    """``measured`` or ``planning_preset`` (presets are never measured data)."""
    realisation: str
    """``shrink`` or ``absorb_growth``."""
    decision: Decision
    """Verdict, one-sentence reason and flips."""
    monthly_benefit_usd: float | None
    """Central monthly benefit, $ (None when there is no estimate)."""
    monthly_benefit_low_usd: float | None
    """Low end of the band, $/month."""
    monthly_benefit_high_usd: float | None
    """High end of the band, $/month."""
    terms: dict[str, float | None]
    """saved_prefill_usd, throughput_usd, deferral_usd, overhead_usd ($/month)."""
    saved_prefill_gpu_hours: float | None
    """Freed prefill GPU-hours per month at today's traffic (central)."""
    saved_prefill_gpu_hours_low: float | None
    """Low end of the band, GPU-hours/month."""
    saved_prefill_gpu_hours_high: float | None
    """High end of the band, GPU-hours/month."""
    hit_rate: float | None
    """Token-weighted hit rate of the window."""
    current_gpus: int | None
    """GPUs in the fleet today."""
    gpus_needed_with_reuse: int | None
    """GPUs meeting the p99 TTFT target at today's load with reuse (None: unreachable on
    this GPU)."""
    gpus_needed_without_reuse: int | None
    """... without reuse."""
    why_no_gpus_with_reuse: str | None
    """Why ``gpus_needed_with_reuse`` is None (``capacity.fleet.why_unsized``; also without capacity inputs)."""
    why_no_gpus_without_reuse: str | None
    """... ``gpus_needed_without_reuse``."""
    runout_month_with_reuse: float | None
    """Month the current fleet misses the target with reuse (0 = today, None = not within
    the horizon)."""
    runout_month_without_reuse: float | None
    """... without reuse."""
    deferral_months: float | None
    """How much later the first purchase comes thanks to reuse."""
    waterfall: list[WaterfallRow]
    """(label, signed $/month, low, high) per term, then the total."""
    sensitivity: list[SensitivityRow]
    """Tornado rows, largest swing first."""
    estimators: list[EstimatorResult]
    """Every saved-prefill estimator, available or not."""
    assumptions: list[str]
    """Static model assumptions, then the notes this run produced."""
    inputs: PlanInputs = field(repr=False)
    """What the plan was computed from."""
    evaluation: Evaluation = field(repr=False)
    """Full intermediate results (savings, capacity, benefit)."""
    window_seconds: float | None = None
    """The span the data covers inside the range asked for: what was priced, seconds."""
    asked_seconds: float | None = None
    """Length of the range asked for, seconds (None when the measurement has no window)."""
    coverage: float | None = None
    """window_seconds / asked_seconds."""
    saved_prefill_gpu_seconds: float | None = None
    """GPU-seconds of prefill the caches saved in the covered span, net of LMCache's overhead
    (device + lmcache)."""
    saved_prefill_gpu_seconds_low: float | None = None
    """Low end of its band."""
    saved_prefill_gpu_seconds_high: float | None = None
    """High end of its band."""
    saving_source: str | None = None
    """``measured`` (an A/B overrode the model), ``fitted`` (the cost model) or ``estimators``."""
    priced_tier: PricedTier | None = None
    """``lmcache`` (the decision weighs what LMCache adds) or ``all``."""
    prefill_cost_model: dict[str, Any] | None = None
    """The fitted parts with their bands, the history used, status and fix."""
    topology_finding: dict[str, Any] | None = None
    """``PlanInputs.topology`` with its sentence: an alternative cache set-up that holds the TTFT
    SLO where today's misses, with the GPUs each needs (``models.cache.alternatives``)."""
    saved_by_tier: dict[Tier, dict[str, float] | None] = field(default_factory=dict)
    """``device`` (vLLM's own prefix cache, free) and ``lmcache`` (net of its overhead; also
    ``gross`` and ``overhead``), GPU-seconds in the covered span, each with ``low``/``high``."""
    usd_per_1m_prompt_tokens_with_reuse: float | None = None
    """Prefill GPU cost per million prompt tokens as the window ran, $."""
    usd_per_1m_prompt_tokens_without_reuse: float | None = None
    """... had nothing been cached (no LMCache either), $."""
    usd_per_1m_output_tokens_with_reuse: float | None = None
    """Decode GPU cost per million output tokens (engine busy time - prefill time), $."""
    usd_per_1m_output_tokens_without_reuse: float | None = None
    """The same without reuse: decode work does not change with reuse, so it is equal (LMCache
    work that lands in decode steps is not modelled)."""
    capacity_method: str | None = None
    """``goodput`` (a measured sweep sized the fleet) or ``queueing_fallback``."""
    gpus_per_replica: int | None = None
    """GPUs one replica needs: max(TP x PP, memory minimum)."""
    replica_message: str | None = None
    """Set when the configured replica does not fit in GPU memory (with the numbers)."""
    peak_hour_requests_per_s: float | None = None
    """Request rate the fleet was sized on: the busiest hour's (the mean when not given)."""
    purchase_schedule_without_reuse: list[dict[str, int]] = field(default_factory=list)
    """Baseline path purchases over the horizon: ``[{month, gpus}]``."""
    purchase_schedule_with_reuse: list[dict[str, int]] = field(default_factory=list)
    """Reuse path purchases: ``[{month, gpus}]``."""
    horizon_cost_usd: dict[str, float | None] = field(default_factory=dict)
    """``{baseline, reuse}``: cost of each path over the horizon, $ (None: the path breaks)."""
    flip_probability: float | None = None
    """Share of resampled scenarios whose verdict differs from this one (None: no verdict)."""
    decision_by_tier: dict[Tier, TierDecision] = field(default_factory=dict)
    """One decision per cache tier: ``device`` (vLLM's prefix cache, free) and ``lmcache``
    (the LMCache service on its margin), each with its kind, monthly benefit and reason
    (``kvplan.models.decision.tiers``)."""
    headline: str = ""
    """One line naming both tier decisions."""

    @property
    def reason(self) -> str:
        """The verdict's one-sentence reason."""
        return self.decision.reason

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (inputs included; raw evaluation objects left out)."""
        d = {k: getattr(self, k) for k in (
            "label", "source", "realisation", "monthly_benefit_usd", "monthly_benefit_low_usd",
            "monthly_benefit_high_usd", "terms", "saved_prefill_gpu_hours",
            "saved_prefill_gpu_hours_low", "saved_prefill_gpu_hours_high", "hit_rate",
            "current_gpus", "gpus_needed_with_reuse", "gpus_needed_without_reuse", "why_no_gpus_with_reuse",
            "why_no_gpus_without_reuse",
            "runout_month_with_reuse", "runout_month_without_reuse", "deferral_months",
            "assumptions", "window_seconds", "asked_seconds", "coverage",
            "saved_prefill_gpu_seconds", "saved_prefill_gpu_seconds_low",
            "saved_prefill_gpu_seconds_high", "saving_source", "priced_tier",
            "prefill_cost_model", "saved_by_tier", "usd_per_1m_prompt_tokens_with_reuse",
            "usd_per_1m_prompt_tokens_without_reuse", "usd_per_1m_output_tokens_with_reuse",
            "usd_per_1m_output_tokens_without_reuse", "capacity_method", "gpus_per_replica",
            "replica_message", "peak_hour_requests_per_s", "purchase_schedule_without_reuse",
            "purchase_schedule_with_reuse", "horizon_cost_usd", "flip_probability", "topology_finding")}
        d["decision"] = self.decision.kind
        d["decision_by_tier"] = {k: t.to_dict() for k, t in self.decision_by_tier.items()}
        d["headline"] = self.headline
        d["reason"] = self.decision.reason
        d["flips"] = list(self.decision.flips)
        d["waterfall"] = [r._asdict() for r in self.waterfall]
        d["sensitivity"] = [asdict(r) for r in self.sensitivity]
        d["estimators"] = [asdict(e) for e in self.estimators]
        meas = {k: v for k, v in asdict(self.inputs.measurement).items()
                if k not in ("cost_model", "window", "measured_ab")}
        i = self.inputs
        d["inputs"] = {"measurement": meas,
                       "pricebook": i.pricebook.to_dict(),
                       "planning": asdict(i.planning),
                       "facts": i.facts.to_dict() if i.facts is not None else None,
                       "goodput": asdict(i.goodput) if i.goodput is not None else None,
                       "peak_hour_requests_per_s": i.peak_hour_requests_per_s,
                       "concurrency_per_replica": i.concurrency_per_replica}
        clean: dict[str, Any] = _clean(d)
        return clean


def plan(inputs: PlanInputs, label: str = "measured window", source: str = "measured",
         extra_assumptions: tuple[str, ...] = ()) -> PlanResult:
    """Evaluate ``inputs`` once, add the sensitivity rows and the assumption list."""
    if source not in ("measured", "planning_preset"):
        raise ValueError(f"source: must be 'measured' or 'planning_preset'; got {source!r}")
    ev = evaluate(inputs)
    s, c, b = ev.savings, ev.capacity, ev.benefit
    extra = prefill_figures(inputs.measurement, s, inputs.pricebook)
    notes = list(s.notes) + (list(b.notes) if b else [])
    fit = ev.replica
    if fit is not None:
        notes += ([f"replica: {fit.message}"] if fit.message else []) + [f"replica: {n}" for n in fit.notes]
    if c is not None and c.inputs.goodput is not None:
        notes.append(f"goodput per replica: {c.inputs.goodput.without_reuse_rps:g} req/s without reuse, "
                     f"{c.inputs.goodput.with_reuse_rps:g} with ({c.inputs.goodput.source})")
    hz = ev.horizon
    notes += [f"estimator {e.name}: {e.note}" for e in s.estimators]
    if inputs.topology is not None and inputs.topology.holds_where_today_misses:
        notes.append(f"topology: {inputs.topology.sentence()}")
    tiers = decide_tiers(inputs, ev)
    return PlanResult(
        label=label, source=source, realisation=inputs.planning.realisation,
        decision=named_reason(inputs, ev), decision_by_tier=tiers, headline=headline(tiers),
        monthly_benefit_usd=b.monthly_benefit_usd if b else None,
        monthly_benefit_low_usd=b.monthly_benefit_low_usd if b else None,
        monthly_benefit_high_usd=b.monthly_benefit_high_usd if b else None,
        terms={"saved_prefill_usd": b.saved_prefill_usd if b else None,
               "throughput_usd": b.throughput_usd if b else None,
               "deferral_usd": b.deferral_usd if b else None,
               "overhead_usd": b.overhead_usd if b else None},
        saved_prefill_gpu_hours=s.gpu_hours_per_month,
        saved_prefill_gpu_hours_low=s.gpu_hours_per_month_low,
        saved_prefill_gpu_hours_high=s.gpu_hours_per_month_high,
        hit_rate=s.hit_rate,
        current_gpus=c.inputs.current_gpus if c else None,
        gpus_needed_with_reuse=c.gpus_needed_with_reuse if c else None,
        gpus_needed_without_reuse=c.gpus_needed_without_reuse if c else None,
        why_no_gpus_with_reuse=c.why_none_with_reuse if c else NO_CAPACITY,
        why_no_gpus_without_reuse=c.why_none_without_reuse if c else NO_CAPACITY,
        runout_month_with_reuse=c.runout_month_with_reuse if c else None,
        runout_month_without_reuse=c.runout_month_without_reuse if c else None,
        deferral_months=c.deferral_months if c else None,
        waterfall=b.waterfall() if b else [],
        sensitivity=sensitivity(inputs),
        estimators=list(s.estimators),
        assumptions=list(ASSUMPTIONS) + list(extra_assumptions) + notes,
        inputs=inputs, evaluation=ev,
        capacity_method=c.method if c else None,
        gpus_per_replica=fit.gpus_per_replica if fit else None,
        replica_message=fit.message if fit else None,
        peak_hour_requests_per_s=c.inputs.sizing_rate if c else None,
        purchase_schedule_without_reuse=hz.baseline.schedule() if hz else [],
        purchase_schedule_with_reuse=hz.reuse.schedule() if hz else [],
        horizon_cost_usd=hz.to_dict() if hz else {"baseline": None, "reuse": None},
        flip_probability=ev.flip_probability,
        topology_finding=inputs.topology.to_dict() if inputs.topology is not None else None, **extra)


def _band(b: Any) -> dict[str, float]:
    return {"value": b.value, "low": b.low, "high": b.high}


def prefill_figures(m: PrefillMeasurement, s: PrefillSavings, pricebook: PriceBook
                    ) -> dict[str, Any]:
    """The prefill figures of a plan (the ``PlanResult`` fields from ``window_seconds`` to
    ``usd_per_1m_output_tokens_without_reuse``) from the measurement and its savings."""
    w = m.window
    usd_per_gpu_s = pricebook.effective_usd_per_gpu_hour() / 3600.0
    out: dict[str, Any] = {
        "window_seconds": m.window_seconds,
        "asked_seconds": w.asked_seconds if w is not None else None,
        "coverage": w.coverage if w is not None else None,
        "saving_source": s.source if s.available else None,
        "priced_tier": m.priced_tier,
        "prefill_cost_model": m.cost_model.to_dict() if m.cost_model is not None else None,
    }
    t = s.tiers
    band = s.saved_band
    saved: float | None
    lo: float | None
    hi: float | None
    with_reuse: float | None
    without: float | None
    if t is not None:
        out["saved_by_tier"] = {
            Tier.DEVICE: _band(t.device),
            Tier.LMCACHE: {**_band(t.lmcache), "gross": t.lmcache_gross.value,
                        "overhead": t.lmcache_overhead.value}}
        total = t.total
        saved, lo, hi = total.value, total.low, total.high
        with_reuse, without = t.with_reuse.value, t.without_reuse.value
    elif m.requests > 0 and m.cached_prompt_tokens <= 0 and (band is None or s.source == "no_hits"):
        # no hits, no saving, whatever the cost model: vLLM's tier saved 0; LMCache (when in the
        # window) cost the lookup time vLLM measured
        lookup = (w.lookup_seconds if w is not None else 0.0) * m.tensor_parallel_size
        zero = {"value": 0.0, "low": 0.0, "high": 0.0}
        out["saved_by_tier"] = {Tier.DEVICE: zero, Tier.LMCACHE: (
            {"value": -lookup, "low": -lookup, "high": -lookup, "gross": 0.0, "overhead": lookup, "source": "measured"}
            if m.priced_tier == PricedTier.LMCACHE else None)}
        saved = lo = hi = -lookup if m.priced_tier == PricedTier.LMCACHE else 0.0
        with_reuse = without = None
    else:
        out["saved_by_tier"] = {Tier.DEVICE: None, Tier.LMCACHE: None}
        saved = lo = hi = None
        with_reuse = without = None
        if band is not None:
            saved, lo, hi = (x - s.hit_cost_gpu_seconds for x in band)
        if s.gpu_seconds_per_token is not None:
            with_reuse = s.gpu_seconds_per_token * m.computed_tokens + s.hit_cost_gpu_seconds
            without = s.gpu_seconds_per_token * m.prompt_tokens
    if s.source == "measured" and band is not None:
        # the A/B replaces the model for the priced tier; the other tier stays fitted
        measured, m_lo, m_hi = band
        key = Tier.LMCACHE if m.priced_tier == PricedTier.LMCACHE else None
        if key:
            out["saved_by_tier"][Tier.LMCACHE] = {"value": measured, "low": m_lo, "high": m_hi,
                                               "source": "measured"}
            device = out["saved_by_tier"][Tier.DEVICE]["value"] if out["saved_by_tier"][Tier.DEVICE] else 0.0
            saved = device + measured
            lo = device + m_lo
            hi = device + m_hi
        else:
            saved, lo, hi = measured, m_lo, m_hi
        if without is not None:
            with_reuse = without - saved
    out["saved_prefill_gpu_seconds"] = saved
    out["saved_prefill_gpu_seconds_low"] = lo
    out["saved_prefill_gpu_seconds_high"] = hi
    prompt = m.prompt_tokens
    out["usd_per_1m_prompt_tokens_with_reuse"] = (
        with_reuse * usd_per_gpu_s / prompt * 1e6 if with_reuse is not None and prompt else None)
    out["usd_per_1m_prompt_tokens_without_reuse"] = (
        without * usd_per_gpu_s / prompt * 1e6 if without is not None and prompt else None)
    decode = None
    if w is not None and w.engine_busy_seconds is not None and with_reuse is not None:
        decode = max(0.0, w.engine_busy_seconds * m.tensor_parallel_size - with_reuse)
    gen = m.generation_tokens
    per_out = decode * usd_per_gpu_s / gen * 1e6 if decode is not None and gen else None
    out["usd_per_1m_output_tokens_with_reuse"] = per_out
    out["usd_per_1m_output_tokens_without_reuse"] = per_out
    return out



TIERS = ((Tier.DEVICE, "vLLM prefix cache", "free: it comes with vLLM"),
         (Tier.LMCACHE, "LMCache, net of its overhead", "what the decision on LMCache weighs"))


def tier_attribution(p: PlanResult) -> list[dict[str, Any]]:
    """The saved prefill by cache tier per month (Overview, Cost page, report): one row per
    tier the plan attributed, GPU-hours/month with band and $/month at the price book's rate,
    and where the figure came from (``fitted`` or ``measured``)."""
    if not p.window_seconds or not p.saved_by_tier:
        return []
    k = SECONDS_PER_MONTH / p.window_seconds / 3600.0
    usd_h = p.inputs.pricebook.effective_usd_per_gpu_hour()
    rows = []
    for key, label, note in TIERS:
        t = p.saved_by_tier.get(key)
        if t is None:
            continue
        rows.append({"key": key, "tier": label, "note": note, "gpu_hours_per_month": t["value"] * k,
                     "low": t["low"] * k, "high": t["high"] * k, "usd_per_month": t["value"] * k * usd_h,
                     "source": t.get("source", p.saving_source or "fitted")})
    return rows
