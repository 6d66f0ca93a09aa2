"""One call for the app and the report: measured window + prices + planning choices -> a plan.

``plan(inputs)`` runs savings -> capacity -> benefit -> decision once, the sensitivity
analysis, and gathers every assumption the numbers rest on, in one ``PlanResult`` whose
``to_dict()`` is JSON-serialisable (infinities and NaN become ``None``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from models.benefit import WaterfallRow
from models.decision import Decision, Evaluation, PlanInputs, SensitivityRow, evaluate, sensitivity
from models.prefill import EstimatorResult

ASSUMPTIONS: tuple[str, ...] = (
    "A month is 30.44 days; the measured window is scaled linearly to a month and assumed "
    "typical of it.",
    "Prefill GPU time per token (estimator A) corrects vLLM's per-request prefill timer for "
    "overlap: engine busy fraction = 1 - exp(-L), L = prefill seconds / (window x engines) "
    "(Little's law, Poisson occupancy).",
    "FLOPs estimators (B, C) convert FLOPs to GPU time at an assumed prefill MFU of the GPU's "
    "dense peak.",
    "Band = [lowest estimator x (1-u), highest x (1+u)], u from 1/sqrt(requests), a "
    "coverage penalty for windows under a day, and a model penalty when one estimator is left.",
    "Fleet sizing: M/M/c (Erlang C) waiting time plus a deterministic prefill of the mean "
    "computed prompt; replicas scale linearly with tensor parallelism.",
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
            "current_gpus", "gpus_needed_with_reuse", "gpus_needed_without_reuse",
            "runout_month_with_reuse", "runout_month_without_reuse", "deferral_months",
            "assumptions")}
        d["decision"] = self.decision.kind
        d["reason"] = self.decision.reason
        d["flips"] = list(self.decision.flips)
        d["waterfall"] = [r._asdict() for r in self.waterfall]
        d["sensitivity"] = [asdict(r) for r in self.sensitivity]
        d["estimators"] = [asdict(e) for e in self.estimators]
        d["inputs"] = {"measurement": asdict(self.inputs.measurement),
                       "pricebook": self.inputs.pricebook.to_dict(),
                       "planning": asdict(self.inputs.planning)}
        return _clean(d)


def plan(inputs: PlanInputs, label: str = "measured window", source: str = "measured",
         extra_assumptions: tuple[str, ...] = ()) -> PlanResult:
    """Evaluate ``inputs`` once, add the sensitivity rows and the assumption list."""
    if source not in ("measured", "planning_preset"):
        raise ValueError(f"source: must be 'measured' or 'planning_preset'; got {source!r}")
    ev = evaluate(inputs)
    s, c, b = ev.savings, ev.capacity, ev.benefit
    notes = list(s.notes) + (list(b.notes) if b else [])
    notes += [f"estimator {e.name}: {e.note}" for e in s.estimators]
    return PlanResult(
        label=label, source=source, realisation=inputs.planning.realisation,
        decision=ev.decision,
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
        runout_month_with_reuse=c.runout_month_with_reuse if c else None,
        runout_month_without_reuse=c.runout_month_without_reuse if c else None,
        deferral_months=c.deferral_months if c else None,
        waterfall=b.waterfall() if b else [],
        sensitivity=sensitivity(inputs),
        estimators=list(s.estimators),
        assumptions=list(ASSUMPTIONS) + list(extra_assumptions) + notes,
        inputs=inputs, evaluation=ev)

