"""Validation of the savings model against a measured A/B (the claim that makes the
tool trustworthy).

Method: the same request stream runs on a server with no reuse and on one with reuse, on the
same hardware, interleaved in segments (each side's segment k right after the other's, so slow
drifts of the machine hit both). The model predicts the engine time reuse saved from the
reuse-on side's metrics alone plus the history the fit is allowed (a calibration phase on the
same servers, stated in ``history``); the reuse-off side measures it.

"Measured" is engine time: the difference between the two sides' engine time (how it was
measured is stated in ``engine_time_source``; ``kvplan.deploy.local.recorders.ab`` uses the wall time of each
side's segments with the servers at real-time priority, and reports the worker processes' CPU
seconds beside it).

Tolerance (``tolerance``; ``gate``, the check CI applies to each run): the prediction must lie within
``REL_TOLERANCE`` of the measured saving where that saving exceeds ``BIG_SAVING`` of the cache-off
prefill time, else within ``ABS_TOLERANCE`` of the cache-off prefill time. Target: ``TARGET``.
The shares held in 31 of 32 scenario runs on this project's shared 2-core machine
(bench/results/validation.md lists the runs).

A scenario that misses is measured once more with new prompts (``ABValidation.second_run``) and
fails only when that run misses too (``ABValidation.held``): a single miss on a shared machine
happens (1 of 32), a broken model misses both runs (earlier versions were off by 1.1x to 4.7x).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .fit import fit_prefill_cost
from .interval import Interval, engine_prefill_seconds
from .table import rounds
from .window import PricedWindow, tier_savings

REL_TOLERANCE = 0.25
"""Allowed error as a share of the measured saving, when the saving is large."""
BIG_SAVING = 0.35
"""A saving is large when it exceeds this share of the cache-off prefill time (the scenarios with
reuse save 40-70 %; unique sessions, LMCache's cost alone, 12-33 %)."""
ABS_TOLERANCE = 0.15
"""Allowed error as a share of the cache-off prefill time otherwise."""
TARGET = 0.10
"""What we aim for (as a share of the measured saving, or of cache-off prefill time)."""


@dataclass(frozen=True)
class Tolerance:
    """The stated tolerance applied to one comparison."""

    rule: str
    """``share of measured`` or ``share of cache-off prefill``."""
    allowed: float
    """Largest allowed |predicted - measured|, seconds."""
    error: float
    """|predicted - measured|, seconds."""
    relative: float
    """error / the reference the rule uses (measured saving or cache-off prefill)."""
    ok: bool
    """error <= allowed."""


def tolerance(predicted: float, measured: float, off_prefill: float) -> Tolerance:
    """Apply the stated tolerance (module docstring)."""
    err = abs(predicted - measured)
    if off_prefill > 0 and abs(measured) > BIG_SAVING * off_prefill:
        allowed = REL_TOLERANCE * abs(measured)
        return Tolerance("share of measured", allowed, err, err / abs(measured), err <= allowed)
    allowed = ABS_TOLERANCE * off_prefill
    share = err / off_prefill if off_prefill > 0 else float("inf")
    return Tolerance("share of cache-off prefill", allowed, err, share, err <= allowed)


def gate(predicted: float, measured: float, off_prefill: float) -> Tolerance:
    """The check CI fails on: the stated tolerance itself, on the one scale its rule names (no
    wider gate, no choice of whichever scale allows more)."""
    return tolerance(predicted, measured, off_prefill)


@dataclass(frozen=True)
class ABValidation:
    """One scenario's prediction against its measurement (engine-seconds)."""

    scenario: str
    """Name of the A/B scenario (the workload both sides ran)."""
    predicted_saved_s: float | None
    """Model: saved prefill engine time of the reuse-on side (device + LMCache net)."""
    predicted_low_s: float | None
    """Low end of the predicted saving's band, engine-seconds."""
    predicted_high_s: float | None
    """High end of the predicted saving's band, engine-seconds."""
    measured_saved_s: float
    """Engine time of the reuse-off side minus the reuse-on side."""
    off_engine_s: float
    """Engine time the reuse-off side took, seconds."""
    on_engine_s: float
    """Engine time the reuse-on side took, seconds."""
    off_prefill_s: float
    """Cache-off prefill time: the reuse-off side's prefill timers as engine time."""
    engine_time_source: str
    """How engine time was measured."""
    device_s: float | None = None
    """Predicted saving of vLLM's own prefix cache."""
    lmcache_s: float | None = None
    """Predicted net part of LMCache (negative when it costs more than it saves)."""
    lmcache_overhead_s: float | None = None
    """Predicted LMCache overhead (lookups, stores, loads)."""
    on_cached_tokens: float = 0.0
    """Prompt tokens the reuse-on side served from a cache (device and LMCache)."""
    on_intervals: int = 0
    """Scrape intervals of the reuse-on side."""
    requests: int = 0
    """Requests each side sent."""
    history: str = ""
    """What the fit used."""
    cost_model: dict[str, Any] = field(default_factory=dict)
    """The prefill cost model the prediction used (``PrefillCostModel.to_dict()``)."""
    tolerance: Tolerance | None = None
    """The stated tolerance applied to predicted vs measured; None when nothing was predicted."""
    cross_check: dict[str, Any] = field(default_factory=dict)
    """Other measures of the same difference (e.g. worker CPU seconds)."""
    second_run: ABValidation | None = None
    """The same scenario measured once more with new prompts, when this run missed the stated
    tolerance (``held``)."""

    @property
    def held(self) -> bool:
        """What CI fails on: the stated tolerance held on this run, or, when it missed, on the
        second run of the same scenario (a miss on a noisy machine is confirmed before it fails the
        suite; a broken model misses both: module docstring)."""
        if self.tolerance is not None and self.tolerance.ok:
            return True
        return self.second_run is not None and self.second_run.held

    @property
    def error_s(self) -> float | None:
        if self.predicted_saved_s is None:
            return None
        return self.predicted_saved_s - self.measured_saved_s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["error_s"] = self.error_s
        return d


def validate_ab(scenario: str, *, history: Sequence[Interval], history_label: str,
                on: Sequence[Interval], off: Sequence[Interval], on_span: tuple[float, float],
                off_engine_s: float, on_engine_s: float, engine_time_source: str,
                requests: int = 0, cross_check: dict[str, Any] | None = None) -> ABValidation:
    """Predict the saving from the reuse-on side's intervals (``on``, inside ``on_span``) with
    the cost model fitted on ``history`` (which includes them), and compare with the measured
    engine times of both sides. ``off`` (the reuse-off side's intervals) gives the cache-off
    prefill time the tolerance is scaled by."""
    cost_model = fit_prefill_cost(history, history=history_label)
    window = PricedWindow.from_intervals(on, t_from=on_span[0], t_to=on_span[1])
    tiers = tier_savings(cost_model, window)
    off_prefill = sum(engine_prefill_seconds(r)[0] for r in rounds(off) if r.requests > 0)
    measured = off_engine_s - on_engine_s
    pred = lo = hi = None
    tol = None
    if tiers is not None:
        pred, lo, hi = tiers.total.value, tiers.total.low, tiers.total.high
        tol = tolerance(pred, measured, off_prefill)
    return ABValidation(
        scenario=scenario, predicted_saved_s=pred, predicted_low_s=lo, predicted_high_s=hi,
        measured_saved_s=measured, off_engine_s=off_engine_s, on_engine_s=on_engine_s,
        off_prefill_s=off_prefill, engine_time_source=engine_time_source,
        device_s=tiers.device.value if tiers else None,
        lmcache_s=tiers.lmcache.value if tiers else None,
        lmcache_overhead_s=tiers.lmcache_overhead.value if tiers else None,
        on_cached_tokens=window.cached_tokens, on_intervals=sum(1 for r in rounds(on) if r.requests > 0),
        requests=requests, history=cost_model.history, cost_model=cost_model.to_dict(), tolerance=tol,
        cross_check=dict(cross_check or {}))
