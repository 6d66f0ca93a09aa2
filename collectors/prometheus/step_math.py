"""The exact arithmetic of Prometheus range ingestion, pure and vectorised (numpy arrays, times
in integer milliseconds): per-step counter increases with the same reset and ``_created`` rules
as the ``increments()`` SQL macro, gauges at step ends, and the silent stretches that become
gaps. ``kvplan.collectors.prometheus.ingest`` fetches the raw samples and stores what these return."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Raw:
    """The raw samples of one series, sorted by time."""

    name: str
    labels: dict[str, str]
    t: np.ndarray  # int64 ms
    v: np.ndarray  # float64

    @classmethod
    def from_result(cls, r: dict) -> Raw:
        vals = r["values"]
        t = np.array([round(float(x[0]) * 1000) for x in vals], dtype=np.int64)
        v = np.array([float(x[1]) for x in vals], dtype=np.float64)
        order = np.argsort(t, kind="stable")
        labels = {k: str(x) for k, x in r["metric"].items()}
        return cls(labels.get("__name__", ""), labels, t[order], v[order])


def step_increments(t: np.ndarray, v: np.ndarray, created: np.ndarray, c0: int, c1: int, step: int,
                    max_span: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Per-step (step end, increase, pairs, resets) of one counter series over the pairs
    whose later sample lies in (c0, c1], and how many pairs were further apart than
    ``max_span`` (not counted). ``created``: the series' _created time (ms) as of each
    sample, NaN when unknown."""
    cur = np.nonzero((t > c0) & (t <= c1) & np.isfinite(v))[0]
    if cur.size == 0:
        return (*_empty(), 0)
    prev = cur - 1
    has_p = prev >= 0
    tp = np.where(has_p, t[np.maximum(prev, 0)], np.iinfo(np.int64).min).astype(np.float64)
    vp = np.where(has_p, v[np.maximum(prev, 0)], np.nan)
    tc, vc, cr = t[cur].astype(np.float64), v[cur], created[cur]
    restart = np.isfinite(cr) & (cr > tp) & (cr <= tc)          # the process (re)started after p
    start = np.where(restart, cr, tp)
    keep = (has_p | restart) & (tc - start <= max_span)
    crp = np.where(has_p, created[np.maximum(prev, 0)], np.nan)
    pm = process_max_before(v, created)[cur]
    with np.errstate(invalid="ignore"):
        drop = has_p & (vc < vp)
        # _created known on both sides (increments() macro): a sample counts what its own process
        # (its _created) added since that process's highest earlier value; a decrease with an
        # unchanged _created (a glitch), or a process first seen after another one answered (two
        # processes behind one URL), counts nothing and is no reset
        known = np.isfinite(cr) & np.isfinite(crp) & ~restart
        # a process's first sample counts from 0 when it started inside what was fetched (the
        # macro's zero point at _created), else nothing: it was alive before, answering elsewhere
        born = t.size > 0 and np.isfinite(cr) & (cr >= t[0])
        own = np.where(np.isfinite(pm), np.maximum(vc - pm, 0.0), np.where(born, vc, 0.0))
        delta = np.where(known, own, np.where(restart | drop, vc, vc - vp))
        resets = np.where(known, False, np.where(restart, has_p & (vp > 0), drop))
    ends = (t[cur] + step - 1) // step * step
    far = int(((has_p | restart) & ~keep).sum())
    return (*_per_step(ends[keep], delta[keep], resets[keep].astype(np.int64)), far)


def process_max_before(v: np.ndarray, created: np.ndarray) -> np.ndarray:
    """For each sample, the highest earlier value of the same process (the same _created); NaN
    for a process's first sample and where _created is unknown."""
    out = np.full(v.shape, np.nan)
    for c in np.unique(created[np.isfinite(created)]):
        idx = np.nonzero(created == c)[0]
        if idx.size > 1:
            out[idx[1:]] = np.maximum.accumulate(v[idx])[:-1]
    return out


def _per_step(ends, delta, resets):
    if ends.size == 0:
        return _empty()
    uniq, inv = np.unique(ends, return_inverse=True)
    return (uniq, np.bincount(inv, weights=delta), np.bincount(inv).astype(np.int64),
            np.bincount(inv, weights=resets).astype(np.int64))


def _empty():
    e = np.array([], dtype=np.int64)
    return e, np.array([], dtype=np.float64), e, e


def step_gauges(t: np.ndarray, v: np.ndarray, c0: int, c1: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """(step end, last value inside the step) of one gauge series over (c0, c1]."""
    cur = np.nonzero((t > c0) & (t <= c1) & np.isfinite(v))[0]
    if cur.size == 0:
        return np.array([], dtype=np.int64), np.array([], dtype=np.float64)
    ends = (t[cur] + step - 1) // step * step
    last = np.r_[ends[1:] != ends[:-1], True]
    return ends[last], v[cur][last]


def silent_stretches(times: np.ndarray, c0: int, c1: int, gap_after: int, known: bool) -> list[tuple[int, int]]:
    """Stretches longer than ``gap_after`` without a sample of one target that END inside
    (c0, c1] (a stretch belongs to the chunk holding its end, so it is recorded once and
    whole: its start may lie up to ``lookback`` before c0). ``times``: the target's sample
    times, sorted or not; ``known``: seen before this chunk, so silence from c0 counts."""
    pts = np.unique(times)
    if pts.size == 0:
        return [(c0, c1)] if known else []
    out = []
    if pts[0] > c0 and known and pts[0] - c0 > gap_after:
        out.append((c0, int(pts[0])))
    for i in np.nonzero(np.diff(pts) > gap_after)[0]:
        if pts[i + 1] > c0:
            out.append((int(pts[i]), int(pts[i + 1])))
    if c1 - pts[-1] > gap_after:
        out.append((int(pts[-1]), c1))
    return out
