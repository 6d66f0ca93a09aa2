"""Today's TTFT error carried into every alternative (``kvplan whatif``'s calibrated TTFTs).

The replay (``kvplan.models.cache.latency``) predicts today's own set-up beside what today's TTFT
histogram measured over the same span. Under concurrency it is low (the wait before a request's
lookup, behind the engine step that was running when it arrived, is not in the trace; neither is
the API server's and the cache server's CPU time under load), by about the same factor for every
set-up of the same requests on the same engines.

**Method: a ratio per statistic.** For the mean, the p50 and the p99 alike, today's measured value
over today's predicted value, over the same requests and span; every alternative's raw
prediction times that ratio. Quantiles are read the same way on both sides: the measured one from
the histogram (``bucket_quantile`` on the summed bucket increases), the predicted one from today's
predicted TTFTs put into the same buckets (``latency.as_histogram``), so the bucket's linear
interpolation cancels out of the ratio.

**How far to trust it: a block bootstrap.** The span's scrape intervals are binned into blocks of
``BLOCK_S`` seconds; each predicted request goes to the block its first token is predicted in
(lookup time + predicted TTFT). ``DRAWS`` times, blocks are drawn with replacement and both sides
recomputed on the drawn blocks; the ratio's ``LEVEL`` central interval (10th to 90th percentile)
times the raw prediction is the calibrated value's interval. It says how steady today's error is
across the span, not what a topology-specific effect (a cache server slower under more fan-in)
adds: that is not in today's data.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..metrics.window import bucket_quantile
from .latency import as_histogram

BLOCK_S = 2.0
"""Seconds of span per bootstrap block (at least one scrape interval: an interval's increases are
never split)."""
DRAWS = 400
"""Bootstrap draws."""
LEVEL = 0.8
"""Central share of the draws the interval holds (0.8: the 10th to the 90th percentile)."""
STATS = ("mean", "p50", "p99")
METHOD = ("today's measured / predicted TTFT, per statistic (mean; p50 and p99 both read through the "
          "measured histogram's buckets), times each set-up's raw prediction")


@dataclass(frozen=True)
class MeasuredInterval:
    """One vLLM target's scrape interval of today's TTFT histogram."""

    t_end: float
    """End of the interval (the later scrape), unix seconds."""
    count: float
    """TTFT observations over the interval (``_count`` increase)."""
    sum_s: float
    """Sum of those TTFTs, seconds (``_sum`` increase)."""
    buckets: tuple[tuple[float, float], ...]
    """Cumulative (upper bound, count increase) pairs, ``+Inf`` included."""


@dataclass(frozen=True)
class Ratio:
    """Today's measured / predicted for one statistic, with its bootstrap interval."""

    stat: str
    """``mean``, ``p50`` or ``p99``."""
    measured: float | None
    """Today's measured value, seconds (histogram: sum / count, or ``bucket_quantile``)."""
    predicted: float | None
    """Today's predicted value, seconds (mean; quantiles read through the measured buckets)."""
    ratio: float | None
    """measured / predicted; None when either is missing or the predicted is 0."""
    lo: float | None
    """The ratio's lower interval end (``LEVEL`` of the bootstrap draws lie between lo and hi)."""
    hi: float | None
    """The ratio's upper interval end."""

    def apply(self, raw: float | None) -> float | None:
        """The calibrated value of a raw prediction (the raw one when there is no ratio)."""
        if raw is None or self.ratio is None:
            return raw
        return raw * self.ratio

    def interval(self, raw: float | None) -> list[float] | None:
        """[low, high] of the calibrated value; None without a ratio or its interval."""
        if raw is None or self.lo is None or self.hi is None:
            return None
        return [raw * self.lo, raw * self.hi]

    def to_dict(self) -> dict[str, Any]:
        return {"measured_s": self.measured, "predicted_s": self.predicted, "ratio": self.ratio,
                "ratio_interval": [self.lo, self.hi] if self.lo is not None else None}


@dataclass(frozen=True)
class Calibration:
    """The three ratios and what they came from."""

    mean: Ratio
    """Today's measured / predicted mean TTFT."""
    p50: Ratio
    """Today's measured / predicted p50 TTFT (both read through the measured buckets)."""
    p99: Ratio
    """Today's measured / predicted p99 TTFT (both read through the measured buckets)."""
    blocks: int
    """Bootstrap blocks with a measurement or a prediction in them."""
    requests_predicted: int
    """Today's requests with a predicted TTFT."""
    requests_measured: float
    """Today's TTFT observations (the histogram's count over the span)."""
    draws: int
    """Bootstrap draws behind each ratio's interval."""
    level: float
    """Share of the draws the interval holds (e.g. 0.8: the 10th to 90th percentile)."""
    notes: tuple[str, ...] = ()
    """Why a ratio is missing or how far to trust it."""

    @property
    def calibrated(self) -> bool:
        return self.mean.ratio is not None

    def ratio(self, stat: str) -> Ratio:
        return {"mean": self.mean, "p50": self.p50, "p99": self.p99}[stat]

    def to_dict(self) -> dict[str, Any]:
        return {"method": METHOD, "calibrated": self.calibrated,
                **{s: self.ratio(s).to_dict() for s in STATS},
                "interval": f"{self.level:.0%} of {self.draws} block-bootstrap draws ({self.blocks} blocks of "
                            f"{BLOCK_S:g} s over today's span)",
                "blocks": self.blocks, "requests_predicted": self.requests_predicted,
                "requests_measured": self.requests_measured, "notes": list(self.notes)}


def _bounds(intervals: Sequence[MeasuredInterval]) -> list[float]:
    return sorted({le for iv in intervals for le, _ in iv.buckets if math.isfinite(le)})


def _stats(ttft: np.ndarray, count: float, sum_s: float, buckets: dict[float, float],
           bounds: list[float]) -> dict[str, tuple[float | None, float | None]]:
    """(measured, predicted) per statistic on one set of blocks."""
    out: dict[str, tuple[float | None, float | None]] = {}
    v = ttft[np.isfinite(ttft)]
    out["mean"] = (sum_s / count if count > 0 else None, float(v.mean()) if len(v) else None)
    pred_h = as_histogram(v, bounds)
    meas_h = sorted(buckets.items())
    for stat, q in (("p50", 0.5), ("p99", 0.99)):
        m = bucket_quantile(q, meas_h).value if count > 0 else None
        p = bucket_quantile(q, pred_h).value if len(v) else None
        out[stat] = (m, p)
    return out


def _ratio(m: float | None, p: float | None) -> float | None:
    if m is None or p is None or not p > 0 or not math.isfinite(m) or not math.isfinite(p):
        return None
    return float(m) / float(p)


def calibrate_today(ttft: np.ndarray, first_token_at: np.ndarray, intervals: Sequence[MeasuredInterval], *,
                    block_s: float = BLOCK_S, draws: int = DRAWS, level: float = LEVEL,
                    seed: int = 0) -> Calibration:
    """Today's ratios (module doc). ``ttft``: today's predicted TTFT per request (NaN: none);
    ``first_token_at``: when each was predicted to get its first token (unix seconds);
    ``intervals``: today's measured TTFT histogram per target and scrape interval over the span."""
    ttft = np.asarray(ttft, float)
    at = np.asarray(first_token_at, float)
    ok = np.isfinite(ttft) & np.isfinite(at)
    ttft, at = ttft[ok], at[ok]
    ivs = [iv for iv in intervals if iv.count > 0]
    notes: list[str] = []
    bounds = _bounds(ivs)
    n_meas = float(sum(iv.count for iv in ivs))

    def none(why: str) -> Calibration:
        r = {s: Ratio(s, None, None, None, None, None) for s in STATS}
        return Calibration(r["mean"], r["p50"], r["p99"], 0, len(ttft), n_meas, draws, level, (why,))

    if not ivs:
        return none("no TTFT histogram over today's span: the alternatives are not calibrated")
    if not len(ttft):
        return none("no predicted TTFT for today: the alternatives are not calibrated")
    t0 = min(float(at.min()), min(iv.t_end for iv in ivs)) - 1e-9
    # block of each interval and each request: (t0 + k x block_s, t0 + (k+1) x block_s]
    iv_block = np.array([max(0, math.ceil((iv.t_end - t0) / block_s) - 1) for iv in ivs], dtype=np.int64)
    rq_block = np.maximum(0, np.ceil((at - t0) / block_s).astype(np.int64) - 1)
    ids = sorted(set(iv_block.tolist()) | set(rq_block.tolist()))
    k = len(ids)
    pos = {b: i for i, b in enumerate(ids)}
    b_count, b_sum = np.zeros(k), np.zeros(k)
    b_buckets: list[dict[float, float]] = [{} for _ in range(k)]
    for iv, b in zip(ivs, iv_block.tolist(), strict=True):
        i = pos[b]
        b_count[i] += iv.count
        b_sum[i] += iv.sum_s
        for le, n in iv.buckets:
            b_buckets[i][le] = b_buckets[i].get(le, 0.0) + n
    rq_pos = np.array([pos[b] for b in rq_block.tolist()], dtype=np.int64)
    by_block = [ttft[rq_pos == i] for i in range(k)]

    def on(weights: np.ndarray) -> dict[str, tuple[float | None, float | None]]:
        """Both sides on the blocks drawn ``weights`` times each."""
        buckets: dict[float, float] = {}
        for i in np.flatnonzero(weights):
            for le, n in b_buckets[i].items():
                buckets[le] = buckets.get(le, 0.0) + n * float(weights[i])
        v = np.concatenate([np.repeat(by_block[i], int(weights[i])) for i in np.flatnonzero(weights)] or [ttft[:0]])
        return _stats(v, float(b_count @ weights), float(b_sum @ weights), buckets, bounds)

    whole = on(np.ones(k, dtype=np.int64))
    rng = np.random.default_rng(seed)
    samples: dict[str, list[float]] = {s: [] for s in STATS}
    if k >= 2:
        for _ in range(draws):
            w = np.bincount(rng.integers(0, k, size=k), minlength=k)
            for s, (m, p) in on(w).items():
                r = _ratio(m, p)
                if r is not None:
                    samples[s].append(r)
    else:
        notes.append("one block only: no interval")
    tail = (1 - level) / 2
    out = {}
    for s in STATS:
        m, p = whole[s]
        xs = np.array(samples[s])
        enough = len(xs) >= draws // 2
        lo = float(np.quantile(xs, tail)) if enough else None
        hi = float(np.quantile(xs, 1 - tail)) if enough else None
        out[s] = Ratio(s, None if m is None else float(m), None if p is None else float(p), _ratio(m, p), lo, hi)
    if bucket_quantile(0.99, sorted(_sum_buckets(b_buckets).items())).in_inf:
        notes.append("today's measured p99 lies in the +Inf bucket: its ratio is a lower bound")
    return Calibration(out["mean"], out["p50"], out["p99"], k, len(ttft), n_meas, draws, level, tuple(notes))


def _sum_buckets(blocks: list[dict[float, float]]) -> dict[float, float]:
    out: dict[float, float] = {}
    for bk in blocks:
        for le, n in bk.items():
            out[le] = out.get(le, 0.0) + n
    return out


def calibrated(cal: Calibration, stat: str, raw: float | None) -> tuple[float | None, list[float] | None]:
    """(calibrated value, its interval) of one raw prediction."""
    r = cal.ratio(stat)
    return r.apply(raw), r.interval(raw)
