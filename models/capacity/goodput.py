"""Goodput of one replica from a load sweep.

A sweep raises the offered load on one replica in levels (concurrent users, or requests/s) and
records, per level, the achieved throughput (completed requests/s) and the client-side TTFT and
TPOT percentiles. The *goodput* of that replica is the highest throughput at which the latency
SLOs still hold:

* a level **passes** when its TTFT p99 <= the TTFT SLO, its TPOT p99 <= the TPOT SLO (when one is
  given) and none of its requests failed;
* goodput = the throughput of the passing level with the highest throughput, moved towards the
  first failing level after it by linear interpolation on the metric that limited it: with
  ``m`` the limiting metric, ``P`` the passing and ``F`` the failing level,
  ``goodput = X_P + (slo - m_P) / (m_F - m_P) * (X_F - X_P)`` (never below ``X_P``). When both
  metrics fail at ``F`` the one that crosses its SLO first (smaller fraction) limits;
* no failing level above the best passing one: goodput = its throughput, a lower bound
  (``limited_by = "not reached"``); no passing level at all: goodput 0 (``"lowest level fails"``).

Pure functions, no I/O: ``kvplan.app.data.sweeps`` reads the points, the plan reads ``Goodput``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.errors import KvplanError

TTFT = "ttft_p99"
TPOT = "tpot_p99"
ERRORS = "errors"
NOT_REACHED = "not reached"
LOWEST_FAILS = "lowest level fails"


@dataclass(frozen=True)
class Goodput:
    """Requests/s one replica serves within the SLOs, without and with KV reuse, and where the
    figures come from (the sweep pair, its SLOs, what it was measured on)."""

    without_reuse_rps: float
    """Goodput with reuse off, requests/s per replica."""
    with_reuse_rps: float
    """Goodput with reuse on, requests/s per replica."""
    source: str
    """Where it was measured (sweep, SLOs, stack, model): printed with the plan."""

    def __post_init__(self) -> None:
        for name in ("without_reuse_rps", "with_reuse_rps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"Goodput.{name}: must be a finite number >= 0; got {v!r}")


@dataclass(frozen=True)
class SweepPoint:
    """One level of a sweep, as measured by the client."""

    offered: float
    """Offered load of the level: concurrent users or requests/s (the sweep's ``load_kind``)."""
    throughput_rps: float
    """Completed requests / (last answer - first request sent)."""
    ttft_p50_s: float | None
    """Median time to first token of the level's successful requests, s; None when none succeeded."""
    ttft_p99_s: float | None
    """99th percentile time to first token, s; None when no request succeeded."""
    tpot_p99_s: float | None
    """Per request (total - TTFT) / (output tokens - 1); None with one output token."""
    requests: int = 0
    """Requests sent at this level."""
    failed: int = 0
    """Requests that failed or got no first token."""
    tpot_p50_s: float | None = None
    """Median time per output token, s; None with one output token."""


@dataclass(frozen=True)
class SideGoodput:
    """The goodput of one side of a sweep and how it was found."""

    rps: float
    """Goodput, requests/s: the highest passing throughput, interpolated towards the first failing
    level where TTFT or TPOT crosses its SLO."""
    limited_by: str
    """``ttft_p99`` | ``tpot_p99`` | ``errors`` | ``not reached`` | ``lowest level fails``."""
    passing: SweepPoint | None
    """The passing level the goodput starts from (highest throughput among passing levels)."""
    failing: SweepPoint | None
    """The first failing level after it (None: none failed)."""
    note: str
    """How the goodput was read off the sweep, in one sentence (shown with the plan)."""


@dataclass(frozen=True)
class SweepGoodput:
    goodput: Goodput
    """Both sides' goodputs as the capacity plan takes them."""
    off: SideGoodput
    """The side with KV reuse off."""
    on: SideGoodput
    """The side with KV reuse on."""


def _check_slo(value: float | None, what: str) -> None:
    if value is not None and (not math.isfinite(value) or value <= 0):
        raise KvplanError(f"must be a positive number of seconds, not {value!r}", source=what)


def failed_metrics(p: SweepPoint, ttft_slo_s: float, tpot_slo_s: float | None) -> list[str]:
    """What makes level ``p`` miss the SLOs (empty: it passes)."""
    out = []
    if p.ttft_p99_s is None or p.failed > 0:
        out.append(ERRORS)
    if p.ttft_p99_s is not None and p.ttft_p99_s > ttft_slo_s:
        out.append(TTFT)
    if tpot_slo_s is not None and p.tpot_p99_s is not None and p.tpot_p99_s > tpot_slo_s:
        out.append(TPOT)
    return out


def _metric(p: SweepPoint, name: str) -> float | None:
    return p.ttft_p99_s if name == TTFT else p.tpot_p99_s


def side_goodput(points: Sequence[SweepPoint], ttft_slo_s: float,
                 tpot_slo_s: float | None = None) -> SideGoodput:
    """Goodput of one side (module docstring). ``tpot_slo_s`` None: TPOT is not checked."""
    _check_slo(ttft_slo_s, "TTFT SLO")
    _check_slo(tpot_slo_s, "TPOT SLO")
    if ttft_slo_s is None:
        raise KvplanError("a TTFT SLO is needed to read goodput off a sweep", source="TTFT SLO")
    if not points:
        raise KvplanError("the sweep has no levels", source="sweep")
    if tpot_slo_s is not None and all(p.tpot_p99_s is None for p in points if p.ttft_p99_s is not None):
        raise KvplanError("a TPOT SLO was given but the sweep measured no TPOT (one output token per "
                          "request); sweep with at least 2 output tokens", source="TPOT SLO")
    pts = sorted(points, key=lambda p: p.offered)
    fails = [failed_metrics(p, ttft_slo_s, tpot_slo_s) for p in pts]
    passing = [i for i, f in enumerate(fails) if not f]
    slos = f"TTFT p99 <= {ttft_slo_s:g} s" + (f", TPOT p99 <= {tpot_slo_s:g} s" if tpot_slo_s else "")
    if not passing:
        first = pts[0]
        return SideGoodput(0.0, LOWEST_FAILS, None, first,
                           f"even the lowest level ({first.offered:g}) misses {slos} "
                           f"({', '.join(fails[0])}): goodput 0 at these SLOs")
    best = max(passing, key=lambda i: (pts[i].throughput_rps, i))
    p = pts[best]
    after = [i for i in range(best + 1, len(pts)) if fails[i]]
    if not after:
        upto = "" if pts[-1] is p else f" up to {pts[-1].offered:g}"
        return SideGoodput(p.throughput_rps, NOT_REACHED, p, None,
                           f"no level from {p.offered:g}{upto} missed {slos}: goodput is at least "
                           f"{p.throughput_rps:.3g} req/s (a lower bound; sweep higher)")
    f = pts[after[0]]
    crossings = []
    for m in (TTFT, TPOT):
        if m in fails[after[0]]:
            lo, hi, slo = _metric(p, m), _metric(f, m), (ttft_slo_s if m == TTFT else tpot_slo_s)
            if slo is not None and lo is not None and hi is not None and hi > lo:
                crossings.append(((slo - lo) / (hi - lo), m))
    if not crossings:  # failed by errors only
        return SideGoodput(p.throughput_rps, ERRORS, p, f,
                           f"level {f.offered:g} had {f.failed} failed request(s): goodput is the "
                           f"throughput of level {p.offered:g}")
    frac, metric = min(crossings)
    rps = max(p.throughput_rps, p.throughput_rps + frac * (f.throughput_rps - p.throughput_rps))
    return SideGoodput(rps, metric, p, f,
                       f"{metric.replace('_', ' ').upper()} limits: interpolated {frac:.0%} of the way "
                       f"from level {p.offered:g} ({p.throughput_rps:.3g} req/s, {_metric(p, metric):.3g} s) "
                       f"to level {f.offered:g} ({f.throughput_rps:.3g} req/s, {_metric(f, metric):.3g} s)")


def sweep_goodput(off: Sequence[SweepPoint], on: Sequence[SweepPoint], ttft_slo_s: float,
                  tpot_slo_s: float | None = None, *, label: str = "load sweep") -> SweepGoodput:
    """Both sides' goodputs as one ``Goodput``; ``label`` names the sweep pair (and what it was
    measured on) in ``Goodput.source``."""
    a, b = side_goodput(off, ttft_slo_s, tpot_slo_s), side_goodput(on, ttft_slo_s, tpot_slo_s)
    slos = f"TTFT p99 <= {ttft_slo_s:g} s" + (f", TPOT p99 <= {tpot_slo_s:g} s" if tpot_slo_s else "")
    source = (f"{label} at {slos}: without reuse limited by {a.limited_by}, with reuse by {b.limited_by}")
    return SweepGoodput(Goodput(a.rps, b.rps, source), a, b)
