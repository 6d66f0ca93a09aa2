"""Number formatting shared by the dashboard pages and the capacity report, so a number
reads the same on a page and in the PDF (the browser test compares them)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ...models.metrics.window import Quantile

if TYPE_CHECKING:
    from ...models.cache.calibration import Ratio
    from ...models.decision.plan import PlanResult

NOT_REPORTED = "not reported"


def pct(v: float | None, none: str = NOT_REPORTED) -> str:
    return none if v is None else f"{v:.1%}"


def secs(v: float | None, none: str = "no requests") -> str:
    """Seconds as ms under 10 s, else s."""
    if v is None:
        return none
    return f"{v * 1000:.0f} ms" if v < 10 else f"{v:.1f} s"


def quantile(q: Quantile | None, none: str = "no requests") -> str:
    """A histogram quantile; one landing in +Inf is flagged (its value is only a lower bound)."""
    if q is None or q.value is None:
        return none
    return secs(q.value) + (" (≥, in +Inf bucket)" if q.in_inf else "")


def reported_quantile(q: Quantile | None) -> str:
    """``quantile`` for a family a vLLM version may not expose (TPOT, ITL): None (no such
    histogram in the window) reads "not reported", a histogram without observations "no requests"."""
    return quantile(q, NOT_REPORTED if q is None else "no requests")


def bucket(q: Quantile | None) -> str:
    """The histogram bucket a quantile lies in."""
    if q is None or q.value is None:
        return ""
    lower = "0" if q.lower is None else f"{q.lower:g}"
    upper = "+Inf" if q.in_inf or q.upper is None else f"{q.upper:g}"
    return f"bucket {lower}..{upper} s"


def usd(v: float | None, none: str = "n/a") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return none
    return f"-${-v:,.0f}" if v < 0 else f"${v:,.0f}"


def usd_band(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "no band"
    return f"{usd(low)} .. {usd(high)}"


def count(v: float | None, none: str = "0") -> str:
    return none if not v else f"{v:,.0f}"


def change(factor: float | None, better: str, time_like: bool = False) -> str:
    """An improvement factor as words: 3.1x shorter / lower / higher, and a factor under 1 as
    the change it really is (0.6x "shorter" is 1.7x longer)."""
    if not factor:
        return "n/a"
    up, down = ("longer", "shorter") if time_like else ("higher", "lower")
    good = down if better == "lower" else up
    bad = up if better == "lower" else down
    return f"{factor:.1f}x {good}" if factor >= 1 else f"{1 / factor:.1f}x {bad}"


def number(v: float | None, unit: str = "", none: str = "n/a") -> str:
    if v is None:
        return none
    if unit == "s":
        return secs(v, none)
    if unit == "share":
        return pct(v, none)
    if float(v).is_integer() or abs(v) >= 100:
        text = f"{v:,.0f}"
    else:
        text = f"{v:,.1f}" if abs(v) >= 10 else f"{v:.2f}"
    return f"{text} {unit}".strip() if unit and unit not in ("requests",) else text


def months(v: float | None, none: str = "not within the horizon") -> str:
    if v is None:
        return none
    return "today" if v <= 0 else f"month {v:.1f}"


def gpus(v: int | None, why: str | None = None) -> str:
    """A fleet size, or why there is none (``Plan.why_no_gpus_*``)."""
    if v is not None:
        return f"{v:,d}"
    return f"not known: {why}" if why else "unreachable on this GPU"


BADGE_COLORS = {"BUY": "red", "REUSE": "green", "NOT_WORTH_IT": "gray", "NEED_DATA": "orange"}
"""Decision verdict -> badge colour (page) and CSS class (report)."""


def usd_cents(v: float | None, none: str = "n/a") -> str:
    """Dollars with cents below $100 ($ per 1M tokens are often cents)."""
    if v is None:
        return none
    return f"${v:,.2f}" if abs(v) < 100 else f"${v:,.0f}"


def cost_model_line(p: PlanResult) -> str:
    """Where the plan's saved prefill comes from: the priced span, the cost model (fitted parts
    with bands, the history it used) or the measured A/B, and why not when it could not fit."""
    cov = ""
    if p.coverage is not None and p.window_seconds is not None:
        cov = (f"Priced span: {p.window_seconds / 3600:,.1f} h of data "
               f"({p.coverage:.0%} of the range asked for). ")
    m = p.inputs.measurement
    ab = m.measured_ab
    if p.saving_source == "measured" and ab is not None:
        return cov + f"Saved prefill: measured ({ab.label}; engine time from {ab.engine_seconds_source})."
    cm = m.cost_model
    if cm is None:
        return cov + "Saved prefill: estimators only (no cost model)."
    if not cm.identified:
        return cov + f"Prefill cost model not identified: {cm.reason}. To fix: {cm.fix}"
    from ...models.prefill.savings import cost_model_text

    return cov + f"Prefill cost model ({cm.source}): {cost_model_text(cm)}; fitted on {cm.history}."


def schedule(rows: list[dict] | None) -> str:
    """A purchase schedule ([{month, gpus}]) as text: "2 GPUs in month 5, 1 in month 14"."""
    if not rows:
        return "no purchase within the horizon"
    parts = [f"{r['gpus']} GPU{'s' if r['gpus'] != 1 else ''} in month {r['month']}" for r in rows]
    return ", ".join(parts)


def capacity_method(p: PlanResult) -> str:
    """How the fleet was sized, in words."""
    if p.capacity_method == "goodput":
        return "measured goodput per replica (load sweep)"
    if p.capacity_method == "queueing_fallback":
        return "queueing formula (fallback: no load sweep measured)"
    return "n/a"


# -- the what-if's TTFT, raw and calibrated side by side (the What-if page and the report) -------
def ttft_s(v: float | None) -> str:
    """A TTFT in seconds, three decimals ("-": none)."""
    return f"{v:.3f} s" if v is not None else "-"


def ttft_interval(v: tuple[float, float] | None) -> str:
    """A calibrated TTFT's interval ("lo-hi s"; "-": none)."""
    return f"{v[0]:.3f}-{v[1]:.3f} s" if v else "-"


def calibration_ratio(r: Ratio | None, none: str = "not calibrated") -> str:
    """Today's measured / predicted for one statistic (``Calibration.mean``, ``.p50``, ``.p99``)
    and its interval (``models.cache.calibration``)."""
    if r is None or r.ratio is None:
        return none
    return f"x{r.ratio:.2f}" + (f" ({r.lo:.2f}-{r.hi:.2f})" if r.lo is not None and r.hi is not None else "")


TTFT_SIDE_BY_SIDE = ("TTFT mean", "mean interval", "mean raw", "p50", "p50 raw", "p99", "p99 interval", "p99 raw")
"""The columns ``ttft_side_by_side`` fills, in order."""


def ttft_side_by_side(r: Any) -> list[str]:
    """A set-up's TTFT (``views.whatif_topology.SetupLatency``) calibrated, its interval and the
    replay's raw value, in the order of ``TTFT_SIDE_BY_SIDE``."""
    return [ttft_s(r.ttft_mean_s), ttft_interval(r.ttft_mean_s_interval), ttft_s(r.ttft_mean_s_raw),
            ttft_s(r.ttft_p50_s), ttft_s(r.ttft_p50_s_raw),
            ttft_s(r.ttft_p99_s), ttft_interval(r.ttft_p99_s_interval), ttft_s(r.ttft_p99_s_raw)]
