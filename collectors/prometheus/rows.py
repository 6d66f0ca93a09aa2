"""Raw Prometheus samples of one chunk turned into the rows kvplan stores: per series and step,
the exact increases (``collectors.prometheus.step_math``) and the gauges' last values."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from ...models.metrics.catalog import FAMILIES
from ..scrape.parse_checks import MAX_COUNTER
from ..scrape.relabel import model_label
from ..scrape.store import series_id
from .step_math import Raw, step_gauges, step_increments

_OWN_LABELS = ("__name__", "instance", "job", "model_name", "engine", "le")
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
             "gauge": ("",)}


@dataclass
class Chunk:
    """What one chunk (t0, t1] produced, before it is written."""

    t0: int
    t1: int
    series: list[Raw] = field(default_factory=list)
    error: str | None = None

    @property
    def n_raw(self) -> int:
        return sum(int(((s.t > self.t0) & (s.t <= self.t1)).sum()) for s in self.series)


def family_query(family: str, selector: str, range_s: int) -> str:
    names = "|".join(family + s for s in _SUFFIXES[FAMILIES[family]])
    sel = f",{selector}" if selector else ""
    return f'{{__name__=~"{names}"{sel}}}[{range_s}s]'


def split_name(name: str) -> tuple[str, str, bool]:
    """(family, type, is_created) of a sample name kvplan asked for."""
    for fam, typ in FAMILIES.items():
        for suffix in _SUFFIXES[typ]:
            if name == fam + suffix:
                return fam, typ, suffix == "_created"
    raise KeyError(name)


def target_name(labels: dict[str, str]) -> str:
    return "/".join(x for x in (labels.get("job"), labels.get("instance")) if x) or "(no job/instance)"


def _rest(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in _OWN_LABELS))


def _le(labels: dict[str, str]) -> float | None:
    return float(labels["le"]) if "le" in labels else None


def _created_index(series: list[Raw]) -> dict[tuple, Raw]:
    out = {}
    for s in series:
        fam, _, is_created = split_name(s.name)
        if is_created:
            out[(target_name(s.labels), fam, tuple(sorted((k, v) for k, v in s.labels.items()
                                                          if k not in ("__name__", "le"))))] = s
    return out


def _created_at(c: Raw | None, t: np.ndarray) -> np.ndarray:
    """The _created value (ms) in force at each time of ``t`` (the latest at or before it)."""
    if c is None or c.t.size == 0:
        return np.full(t.shape, np.nan)
    i = np.searchsorted(c.t, t, side="right") - 1
    return np.where(i >= 0, c.v[np.maximum(i, 0)] * 1000.0, np.nan)


@dataclass
class Rows:
    """Column lists of one chunk, ready for Arrow."""

    series: dict[str, list] = field(default_factory=lambda: {k: [] for k in (
        "series_id", "target_id", "name", "family", "type", "model_name", "engine", "le", "labels")})
    inc: dict[str, list] = field(default_factory=lambda: {k: [] for k in (
        "series_id", "ts", "delta", "pairs", "resets")})
    gauge: dict[str, list] = field(default_factory=lambda: {k: [] for k in ("series_id", "ts", "value")})
    far: int = 0  # pairs of samples further apart than lookback: not counted
    refused: int = 0  # samples not finite, negative (counters) or above 2**53: not stored, as in a direct import
    refused_examples: list[str] = field(default_factory=list)


def _usable(s: Raw, typ: str, rows: Rows) -> tuple[np.ndarray, np.ndarray]:
    """``s``'s samples without the values a direct import refuses (``parse_checks``): a counter or
    histogram part that is NaN, infinite, negative or above 2**53, a gauge that is not finite.
    Left out, they do not break the pairs around them: the good samples on either side pair."""
    if typ == "gauge":
        ok = np.isfinite(s.v)
    else:
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(s.v) & (s.v >= 0) & (s.v <= MAX_COUNTER)
    if ok.all():
        return s.t, s.v
    bad = np.flatnonzero(~ok)
    rows.refused += int(bad.size)
    if len(rows.refused_examples) < 3:
        i = int(bad[0])
        rows.refused_examples.append(f"{target_name(s.labels)} {s.name} = {s.v[i]!r} at "
                                     f"{np.datetime64(int(s.t[i]), 'ms')}Z")
    return s.t[ok], s.v[ok]


def build_rows(chunk: Chunk, target_ids: dict[str, int], step: int, lookback: int) -> Rows:
    rows = Rows()
    created = _created_index(chunk.series)
    # when each target was scraped, as far as this chunk's series show: a counter absent from
    # one of its target's scrapes and present in the next was 0 at the earlier one (LMCache MP
    # exposes counters only after their first increment, without _created); the same rule as
    # migration 006 applies to direct scrapes
    seen: dict[str, list[np.ndarray]] = {}
    for s in chunk.series:
        seen.setdefault(target_name(s.labels), []).append(s.t)
    scraped = {k: np.unique(np.concatenate(v)) for k, v in seen.items()}
    for s in chunk.series:
        fam, typ, is_created = split_name(s.name)
        if is_created:
            continue
        tname = target_name(s.labels)
        rest = _rest(s.labels)
        sid = series_id(target_ids[tname], s.name, model_label(s.labels.get("model_name")), s.labels.get("engine"),
                        _le(s.labels), rest)
        st, sv = _usable(s, typ, rows)
        if typ == "gauge":
            ends, vals = step_gauges(st, sv, chunk.t0, chunk.t1, step)
            if ends.size == 0:
                continue
            rows.gauge["series_id"].append(np.full(ends.size, sid, dtype=np.int64))
            rows.gauge["ts"].append(ends)
            rows.gauge["value"].append(vals)
        else:
            key = (tname, fam, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("__name__", "le"))))
            t, v = st, sv
            times = scraped[tname]
            k = int(np.searchsorted(times, t[0])) - 1 if t.size else -1
            first_created = _created_at(created.get(key), t[:1])[0] if t.size else np.nan
            if k >= 0 and np.isfinite(first_created) and first_created < times[k]:
                k = -1  # its _created says it existed at that scrape: missing from it, not born after it
            if k >= 0:  # born after the target's scrape at times[k]
                t, v = np.concatenate([times[k:k + 1], t]), np.concatenate([[0.0], v])
            cr = _created_at(created.get(key), t)
            ends, delta, pairs, resets, far = step_increments(t, v, cr, chunk.t0, chunk.t1, step, lookback)
            rows.far += far
            if ends.size == 0:
                continue
            for col, arr in (("series_id", np.full(ends.size, sid, dtype=np.int64)), ("ts", ends),
                             ("delta", delta), ("pairs", pairs), ("resets", resets)):
                rows.inc[col].append(arr)
        se = rows.series
        for col, val in (("series_id", sid), ("target_id", target_ids[tname]), ("name", s.name), ("family", fam),
                         ("type", typ), ("model_name", model_label(s.labels.get("model_name"))),
                         ("engine", s.labels.get("engine")), ("le", _le(s.labels)),
                         ("labels", json.dumps(dict(rest), sort_keys=True, separators=(",", ":")))):
            se[col].append(val)
    return rows


