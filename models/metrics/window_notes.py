"""What a window's figures say in words: notes on counter decreases and series gaps, the
check that no part (prompt tokens by source, cached tokens, LMCache L1/L2 hits) sums above its
whole, and why every figure of a window is null (``null_reasons``)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from ..core.vocabulary import NoteKind
from . import catalog as c
from .increase import Increase


def _per_series(rows: list[Increase], field: str) -> tuple[int, str] | None:
    """The sum of ``field`` (a count such as ``broken`` or ``gaps``) over ``rows`` and the series
    that have it ("name (target): n", the first five, then how many more); None when none has."""
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        n = getattr(r, field)
        if n:
            counts[f"{r.name} ({r.target})" if r.target else r.name] += n
    if not counts:
        return None
    names = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())[:5])
    more = f" and {len(counts) - 5} more series" if len(counts) > 5 else ""
    return sum(counts.values()), names + more


def decrease_notes(rows: list[Increase]) -> list[str]:
    found = _per_series(rows, "broken")
    if found is None:
        return []
    total, names = found
    return [f"warning: {total} counter decrease(s) with an unchanged _created, or sample(s) of two processes "
            "behind one target (their _created alternate), were not counted as a restart: each process counts only "
            f"what it added, a drop and the climb back to where it was are not counted (a broken or replaced "
            f"target) - {names}"]


PARTS = (
    (c.total_name(c.PROMPT_BY_SOURCE), ("source",), c.total_name(c.PROMPT_TOKENS)),
    (c.total_name(c.PROMPT_TOKENS_CACHED), (), c.total_name(c.PROMPT_TOKENS)),
    (c.total_name(c.LM_HIT_L1), (), c.total_name(c.LM_HIT)),
    (c.total_name(c.LM_HIT_L2), (), c.total_name(c.LM_HIT)),
)
"""(part, labels summed over, whole): counters whose parts can never add up to more than the whole:
prompt tokens by source, and the cached ones, against all prompt tokens; LMCache's L1 and L2 hits
(summed together) against all its hits."""
PART_SLACK = 0.01
"""A part may exceed its whole by this share before it is flagged: two counters updated one after
the other can be caught between the two updates by a scrape (a window edge)."""


def parts_above_whole(values: Iterable[tuple[str, str | None, str | None, tuple[tuple[str, str], ...], float]],
                      slack: float = PART_SLACK, target: str = "") -> list[str]:
    """Warnings for sums that cannot be: ``values`` are (name, model_name, engine, other labels,
    value) of one payload's samples or one target's increases over a window; a part (summed over
    its ``PARTS`` labels, L1 + L2 together) above its whole's series by more than ``slack`` is
    named. Rows with the same key (a window read summed over targets) add up on both sides, so
    parts and whole always cover the same servers."""
    rows = list(values)
    wholes: dict[tuple[str, str | None, str | None, tuple[tuple[str, str], ...]], float] = defaultdict(float)
    for n, m, e, lab, v in rows:
        if n in {w for _, _, w in PARTS}:
            wholes[(n, m, e, lab)] += v
    sums: dict[tuple[str, str, str | None, str | None, tuple[tuple[str, str], ...]], float] = defaultdict(float)
    for part, summed, whole in PARTS:
        label = "lmcache_mp_lookup_hit_l1_tokens_total + _l2_tokens_total" if whole == c.total_name(c.LM_HIT) \
            else part
        for n, m, e, lab, v in rows:
            if n == part:
                sums[(label, whole, m, e, tuple((k, x) for k, x in lab if k not in summed))] += v
    out = []
    for (label, whole, m, e, lab), v in sorted(sums.items(), key=str):
        w = wholes.get((whole, m, e, lab))
        if w is not None and v > w * (1.0 + slack) + 1e-9:
            where = ", ".join([f"{k}={x}" for k, x in lab] + ([f"model_name={m}"] if m is not None else [])
                              + ([f"engine={e}"] if e is not None else []) + ([f"target {target}"] if target else []))
            out.append(f"warning: {label} sums to {v:,.0f}, above {whole} = {w:,.0f}"
                       + (f" ({where})" if where else "") + ": a part cannot exceed the whole (inconsistent "
                       "counters; the figures that use them are suspect)")
    return out


def sum_notes(rows: list[Increase]) -> list[str]:
    """``parts_above_whole`` per target: each server's parts against that server's whole."""
    names = {n for p, _, w in PARTS for n in (p, w)}
    by_target: dict[str, list[Increase]] = defaultdict(list)
    for r in rows:
        if r.name in names:
            by_target[r.target].append(r)
    return [note for target, trows in sorted(by_target.items()) for note in parts_above_whole(
        ((r.name, r.model_name, r.engine, tuple(sorted(json.loads(r.labels or "{}").items())), r.increase)
         for r in trows), target=target)]


def gap_notes(rows: list[Increase]) -> list[str]:
    found = _per_series(rows, "gaps")
    if found is None:
        return []
    total, names = found
    return [NoteKind.NOTE.of(f"{total} time(s) a series was missing from a scrape of its target (a truncated or "
                             "partial payload?): counted from its last value before, or, first seen under a _created "
                             f"older than that scrape, from its first value, never from 0 - {names}")]


def null_reasons(ok_scrapes: dict[str, int], data_span: tuple[datetime | None, datetime | None] | None,
                 model_name: str | None, model_names: list[str]) -> list[str]:
    """Why every figure of a window is null, from what the database holds: ``ok_scrapes``
    (successful scrapes per target inside the window), the deployment's data span, the
    model asked for and the models in the data."""
    if model_name is not None and model_name not in model_names:
        known = ", ".join(map(repr, model_names)) or "no model_name"
        return [f"no data for model {model_name!r}: the data has {known}"]
    if not any(ok_scrapes.values()):
        where = (f"; the data spans {data_span[0]:%Y-%m-%d %H:%M} .. {data_span[1]:%Y-%m-%d %H:%M} UTC"
                 if data_span and data_span[0] is not None else "")
        return [f"no data in the window: no successful scrape in it{where}"]
    if max(ok_scrapes.values()) < 2:
        return [f"only one scrape per target in the window ({len(ok_scrapes)} target(s): "
                f"{', '.join(sorted(ok_scrapes)[:4])}{' ...' if len(ok_scrapes) > 4 else ''}): an increase needs two "
                "scrapes of the same target. Snapshots of one server must share its target name: name the files "
                "NAME@TIME.prom (e.g. vllm-0@2026-11-30T11:00:00Z.prom) or pass --target"]
    return ["no counter increase in the window (no traffic, or the counters' scrapes are not in it)"]
