"""The prefill intervals as columns: what the fit and the priced window compute on.

A 90-day history of 16 targets is 34,560 intervals; as ``Interval`` objects, grouping them into
scrape rounds and summing the window walked each one in Python (seconds per page).
``IntervalTable`` holds the same intervals as numpy arrays, one per field (``NaN`` where an
``Interval`` holds ``None``), the iteration-token histograms as one matrix over the union of
their bounds with a mask of the bounds each row has, and computes ``rounds`` and every derived
figure of ``kvplan.models.prefill.interval`` (prefill steps, alone share, decode batch,
exposure, engine prefill seconds) over all rows at once.

**Same numbers.** Every figure is computed with the same floating-point operations, in the same
order, as the per-interval code: sums over a round or a window accumulate left to right
(``np.cumsum``, or one addition per member), never numpy's pairwise sum; ``exp`` is
``math.exp``. tests/test_prefill_table.py compares both on recorded data and on the
dashboard benchmark's 90 days.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

import numpy as np

from .interval import DECODE_STEP_SHARE, Interval

OPTIONAL = ("prompt_tokens", "cached_tokens", "external_tokens", "stored_tokens", "lookup_seconds", "lookups",
            "inference_seconds", "generation_tokens")
"""``Interval`` fields that may be ``None`` (``NaN`` in the table)."""
PLAIN = ("requests", "prefill_seconds", "computed_tokens")
"""``Interval`` fields that default to 0."""


def seq_sum(x: np.ndarray) -> float:
    """Left-to-right sum from 0.0, as Python's ``sum`` adds (numpy's own sum is pairwise)."""
    return float(np.cumsum(x)[-1]) if len(x) else 0.0


def none_as_zero(v: np.ndarray) -> np.ndarray:
    """A NaN-for-None column with None read as 0 (``x or 0.0``)."""
    return np.where(np.isnan(v), 0.0, v)


@dataclass(frozen=True, eq=False)
class IntervalTable:
    """Intervals as columns (module doc); row ``i`` is ``Interval`` ``i``."""

    t_start: np.ndarray
    """Each row's ``Interval.t_start`` (unix seconds)."""
    t_end: np.ndarray
    """``Interval.t_end``."""
    requests: np.ndarray
    """``Interval.requests``."""
    prefill_seconds: np.ndarray
    """``Interval.prefill_seconds``."""
    computed_tokens: np.ndarray
    """``Interval.computed_tokens``."""
    prompt_tokens: np.ndarray
    """``Interval.prompt_tokens`` (NaN: None)."""
    cached_tokens: np.ndarray
    """``Interval.cached_tokens`` (NaN: None)."""
    external_tokens: np.ndarray
    """``Interval.external_tokens`` (NaN: None)."""
    stored_tokens: np.ndarray
    """``Interval.stored_tokens`` (NaN: None)."""
    lookup_seconds: np.ndarray
    """``Interval.lookup_seconds`` (NaN: None)."""
    lookups: np.ndarray
    """``Interval.lookups`` (NaN: None)."""
    engines: np.ndarray
    """``Interval.engines`` (integers)."""
    inference_seconds: np.ndarray
    """``Interval.inference_seconds`` (NaN: None)."""
    generation_tokens: np.ndarray
    """``Interval.generation_tokens`` (NaN: None)."""
    les: np.ndarray
    """Bucket bounds of the iteration-token histograms, ascending (the union over rows)."""
    buckets: np.ndarray
    """rows x bounds: cumulative steps at each bound (0 where the row lacks the bound)."""
    has: np.ndarray
    """rows x bounds: the row's histogram has the bound."""
    targets: tuple[tuple[str, ...], ...]
    """``Interval.targets`` of each row."""
    reset: np.ndarray
    """``Interval.reset`` (booleans)."""

    # ---- building --------------------------------------------------------------------
    @classmethod
    def of(cls, intervals: Iterable[Interval] | IntervalTable) -> IntervalTable:
        """The table of ``intervals`` (a table is returned as it is)."""
        if isinstance(intervals, IntervalTable):
            return intervals
        rows = list(intervals)
        cols: dict[str, Any] = {}
        for name in ("t_start", "t_end", *PLAIN):
            cols[name] = np.array([getattr(r, name) for r in rows], float)
        for name in OPTIONAL:
            cols[name] = np.array([np.nan if getattr(r, name) is None else getattr(r, name) for r in rows], float)
        cols["engines"] = np.array([r.engines for r in rows], np.int64)
        cols["reset"] = np.array([r.reset for r in rows], bool)
        les, buckets, has = histogram_matrix([dict(r.step_buckets) for r in rows])
        return cls(les=les, buckets=buckets, has=has, targets=tuple(r.targets for r in rows), **cols)

    @classmethod
    def empty(cls) -> IntervalTable:
        return cls.of([])

    def __len__(self) -> int:
        return len(self.t_end)

    def __iter__(self) -> Iterator[Interval]:
        return iter(self.intervals())

    def take(self, idx: np.ndarray) -> IntervalTable:
        """The rows ``idx`` (indices or a mask), in that order."""
        ix = np.arange(len(self))[idx]
        out = {f.name: getattr(self, f.name)[ix] for f in fields(self) if f.name not in ("les", "targets")}
        return IntervalTable(les=self.les, targets=tuple(self.targets[i] for i in ix.tolist()), **out)

    def intervals(self) -> list[Interval]:
        """The rows as ``Interval`` objects."""
        def opt(v: float) -> float | None:
            return None if math.isnan(v) else v

        les = self.les.tolist()
        out = []
        for i in range(len(self)):
            b = self.buckets[i].tolist()
            kw: dict[str, Any] = {name: opt(float(getattr(self, name)[i])) for name in OPTIONAL}
            out.append(Interval(
                t_start=float(self.t_start[i]), t_end=float(self.t_end[i]), requests=float(self.requests[i]),
                prefill_seconds=float(self.prefill_seconds[i]), computed_tokens=float(self.computed_tokens[i]),
                engines=int(self.engines[i]), targets=self.targets[i], reset=bool(self.reset[i]),
                step_buckets=tuple((les[j], b[j]) for j in np.flatnonzero(self.has[i]).tolist()), **kw))
        return out

    # ---- per-row figures (``Interval``'s properties and methods, over every row) --------
    @property
    def seconds(self) -> np.ndarray:
        out: np.ndarray = np.maximum(0.0, self.t_end - self.t_start)
        return out

    @property
    def request_cached(self) -> np.ndarray:
        out: np.ndarray = np.where(np.isnan(self.prompt_tokens), np.maximum(0.0, none_as_zero(self.cached_tokens)),
                                   np.maximum(0.0, self.prompt_tokens - self.computed_tokens))
        return out

    @property
    def request_prompt(self) -> np.ndarray:
        out: np.ndarray = self.computed_tokens + self.request_cached
        return out

    @property
    def external_share(self) -> np.ndarray:
        c, e = self.cached_tokens, self.external_tokens
        ok = ~np.isnan(c) & (c != 0) & ~np.isnan(e)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(ok, np.minimum(1.0, np.maximum(0.0, e / np.where(ok, c, 1.0))), 0.0)

    def max_decode_batch(self) -> np.ndarray:
        eng = np.maximum(self.engines, 1).astype(float)
        sec = self.seconds
        ok = ~np.isnan(self.inference_seconds) & (sec > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            running = np.where(ok, 2.0 * self.inference_seconds / (sec * eng), 0.0)
        out: np.ndarray = np.maximum(np.maximum(1.0, self.requests / eng), np.ceil(running))
        return out

    def _total(self) -> np.ndarray:
        """Each row's steps at its highest bound (0 without a histogram)."""
        last = np.where(self.has.any(axis=1), self.has.shape[1] - 1 - np.argmax(self.has[:, ::-1], axis=1), 0)
        return np.where(self.has.any(axis=1), self.buckets[np.arange(len(self)), last] if len(self.les) else 0.0,
                        0.0)

    def _at_first(self, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found, steps at the first bound where ``ok``) per row."""
        found: np.ndarray = np.asarray(ok.any(axis=1))
        j = np.argmax(ok, axis=1)
        val = self.buckets[np.arange(len(self)), j] if len(self.les) else np.zeros(len(self))
        return found, np.where(found, val, 0.0)

    def prefill_steps(self) -> np.ndarray:
        """``Interval.prefill_steps`` per row, NaN where it is None."""
        n = len(self)
        if not len(self.les):
            return np.full(n, np.nan)
        valid = self.has.any(axis=1) & (self.requests > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            limit = DECODE_STEP_SHARE * self.computed_tokens / self.requests
        batch = self.max_decode_batch()
        le = self.les[None, :]
        found, _ = self._at_first(self.has & (le >= batch[:, None]))
        j = np.argmax(self.has & (le >= batch[:, None]), axis=1)
        bound = np.where(found, self.les[j], np.nan)
        redo = ~found | (bound > limit)
        below = self.has & (le <= np.minimum(batch, limit)[:, None])
        has_below = below.any(axis=1)
        jb = below.shape[1] - 1 - np.argmax(below[:, ::-1], axis=1)
        bound = np.where(redo, np.where(has_below, self.les[jb], np.nan), bound)
        # the steps at the bound (the first bound equal to it, as the per-interval code finds it)
        at = self.has & (le == bound[:, None])
        got, decode = self._at_first(at)
        steps = np.maximum(0.0, self._total() - np.where(got, decode, 0.0))
        return np.where(valid, steps, np.nan)

    def alone_share(self) -> np.ndarray:
        if not len(self.les):
            return np.ones(len(self))
        valid = self.has.any(axis=1) & (self.requests > 0)
        steps = np.nan_to_num(self.prefill_steps(), nan=0.0)
        decode = self._total() - steps
        _, single = self._at_first(self.has & (self.les[None, :] >= 1.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(decode > 0, np.minimum(1.0, single / np.where(decode > 0, decode, 1.0)), 1.0)
        return np.where(valid, share, 1.0)

    def decode_batch(self) -> np.ndarray:
        """``Interval.decode_batch`` per row, NaN where it is None."""
        if not len(self.les):
            return np.full(len(self), np.nan)
        valid = self.has.any(axis=1) & ~np.isnan(self.generation_tokens) & (self.requests > 0)
        steps = np.nan_to_num(self.prefill_steps(), nan=0.0)
        decode = self._total() - steps
        valid &= decode > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            b = np.maximum(1.0, (self.generation_tokens - self.requests) / np.where(valid, decode, 1.0))
        return np.where(valid, b, np.nan)

    def exposure(self) -> np.ndarray:
        """``Interval.exposure`` per row (``math.exp``: the same figure to the bit)."""
        return np.array([1.0 if math.isnan(b) else math.exp(-(b - 1.0)) for b in self.decode_batch().tolist()])

    def engine_prefill_seconds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(engine prefill seconds, co-batching factor, capped) per row (``engine_prefill_seconds``)."""
        steps = self.prefill_steps()
        shared = ~np.isnan(steps) & (steps > 0) & (steps < self.requests)
        with np.errstate(divide="ignore", invalid="ignore"):
            factor = np.where(shared, steps / np.where(shared, self.requests, 1.0), 1.0)
        y = self.prefill_seconds * factor
        cap = self.seconds * np.maximum(self.engines, 1)
        capped = (cap > 0) & (y > cap)
        return np.where(cap > 0, np.minimum(y, cap), y), factor, capped

    # ---- scrape rounds -----------------------------------------------------------------
    def rounds(self, tolerance_s: float | None = None) -> IntervalTable:
        """``kvplan.models.prefill.table.rounds`` over the table: rows sorted by end (stable),
        grouped while ends stay within ``tolerance_s`` of the group's first and no target
        repeats, each group summed in row order. With the default tolerance computed once per
        table: the fit and the priced window of one history share them."""
        if tolerance_s is None:
            return self._default_rounds
        return self._rounds(tolerance_s)

    @cached_property
    def _default_rounds(self) -> IntervalTable:
        return self._rounds(None)

    def _rounds(self, tolerance_s: float | None) -> IntervalTable:
        n = len(self)
        if not n:
            return self
        order = np.argsort(self.t_end, kind="stable")
        if tolerance_s is None:
            sec = self.seconds[order]
            lengths = np.sort(sec[sec > 0])
            tolerance_s = min(2.0, 0.25 * float(lengths[len(lengths) // 2])) if len(lengths) else 0.0
        ends = self.t_end[order].tolist()
        starts = [0]
        first = ends[0]
        seen = set(self.targets[int(order[0])])
        for k in range(1, n):
            tg = self.targets[int(order[k])]
            if ends[k] - first <= tolerance_s and seen.isdisjoint(tg):
                seen.update(tg)
            else:
                starts.append(k)
                first = ends[k]
                seen = set(tg)
        return self.take(order)._merge(np.array(starts))

    def _merge(self, starts: np.ndarray) -> IntervalTable:
        """Sum the groups of consecutive rows beginning at ``starts`` (``interval.merge``)."""
        n, g = len(self), len(starts)
        size = np.diff(np.append(starts, n))

        def fold(col: np.ndarray, op: Any, init: float) -> np.ndarray:
            acc = np.full(g, init, dtype=col.dtype if col.dtype != bool else bool)
            for k in range(int(size.max())):
                live = size > k
                acc[live] = op(acc[live], col[starts[live] + k])
            return acc

        def total(col: np.ndarray) -> np.ndarray:
            return fold(col, np.add, 0.0)

        def opt_sum(col: np.ndarray) -> np.ndarray:
            some = fold(~np.isnan(col), np.logical_or, False)
            return np.where(some, total(none_as_zero(col)), np.nan)

        any_prompt = fold(~np.isnan(self.prompt_tokens), np.logical_or, False)
        buckets = np.empty((g, len(self.les)))
        for j in range(len(self.les)):
            buckets[:, j] = total(self.buckets[:, j])
        has = np.zeros((g, len(self.les)), bool)
        for j in range(len(self.les)):
            has[:, j] = fold(self.has[:, j], np.logical_or, False)
        bounds = np.append(starts, n).tolist()
        return IntervalTable(
            t_start=fold(self.t_start, np.minimum, np.inf), t_end=fold(self.t_end, np.maximum, -np.inf),
            requests=total(self.requests), prefill_seconds=total(self.prefill_seconds),
            computed_tokens=total(self.computed_tokens),
            prompt_tokens=np.where(any_prompt, total(self.request_prompt), np.nan),
            cached_tokens=opt_sum(self.cached_tokens), external_tokens=opt_sum(self.external_tokens),
            stored_tokens=opt_sum(self.stored_tokens), lookup_seconds=opt_sum(self.lookup_seconds),
            lookups=opt_sum(self.lookups), engines=fold(self.engines, np.add, 0),
            inference_seconds=opt_sum(self.inference_seconds), generation_tokens=opt_sum(self.generation_tokens),
            les=self.les, buckets=buckets, has=has,
            targets=tuple(tuple(t for tg in self.targets[a:b] for t in tg)
                          for a, b in zip(bounds[:-1], bounds[1:], strict=True)),
            reset=fold(self.reset, np.logical_or, False))


def histogram_matrix(rows: Sequence[dict[float, float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bounds, rows x bounds steps, rows x bounds present) of per-row {bound: steps}."""
    les = np.array(sorted({le for r in rows for le in r}), float)
    buckets = np.zeros((len(rows), len(les)))
    has = np.zeros((len(rows), len(les)), bool)
    where = {le: j for j, le in enumerate(les.tolist())}
    for i, r in enumerate(rows):
        for le, c in r.items():
            buckets[i, where[le]] = c
            has[i, where[le]] = True
    return les, buckets, has


def rounds(intervals: Iterable[Interval], tolerance_s: float | None = None) -> list[Interval]:
    """Group every target's intervals into scrape rounds (ends within ``tolerance_s``, default
    a quarter of the median interval, at most 2 s; never two intervals of one target) and sum
    each round: deployment-level rows, so LMCache's stores (a separate target) line up with the
    vLLM intervals they belong to. Computed over columns."""
    return IntervalTable.of(intervals).rounds(tolerance_s).intervals()
