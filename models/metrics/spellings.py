"""Read each target's increases with the names its release has (models.metrics.catalog.QUANTITIES).

Per target and quantity, the first spelling the target carries is read and renamed to the
quantity's canonical (newest vLLM) sample name; every other spelling of that quantity from the
same target is dropped, so a release that exports both (vLLM 0.9.2-0.11: ``vllm:gpu_prefix_cache_*``
and ``vllm:prefix_cache_*``) is never counted twice. LMCache in-process series of tensor-parallel
workers (``worker_id``) count the same tokens once per rank: the largest is kept, not their sum.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from functools import lru_cache
from typing import Any

from . import catalog as c

_HIST_SUFFIXES = ("_bucket", "_sum", "_count")


def family_of(name: str) -> tuple[str, str]:
    """(family, suffix) of a sample name: ``_total`` for counters, a histogram part, or ''.
    Kept per name (a window's rows repeat a few hundred names, and every reader splits them)."""
    got = _FAMILY_OF.get(name)
    if got is None:
        got = _split_family(name)
        if len(_FAMILY_OF) < 100_000:  # bounded: a long-running dashboard meets new names
            _FAMILY_OF[name] = got
    return got


_FAMILY_OF: dict[str, tuple[str, str]] = {}


def _split_family(name: str) -> tuple[str, str]:
    for suffix in ("_total", *_HIST_SUFFIXES):
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


def _quantities_of() -> dict[str, list[tuple[str, c.Spelling]]]:
    out: dict[str, list[tuple[str, c.Spelling]]] = defaultdict(list)
    for q in c.QUANTITIES.values():
        for s in q.spellings:
            out[s.family].append((q.key, s))
    return dict(out)


SPELLING_OF = _quantities_of()
"""family -> every (quantity, spelling) it is a spelling of."""


def resolve(rows: Iterable[Any]) -> tuple[list[Any], dict[str, set[str]]]:
    """The rows as one spelling per quantity and target (renamed to the canonical names), and
    per quantity the families that were read."""
    rows = _one_rank(list(rows))
    by_target: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        by_target[r.target].append(r)
    out: list[Any] = []
    used: dict[str, set[str]] = defaultdict(set)
    for target_rows in by_target.values():
        split = [family_of(r.name) for r in target_rows]
        present = {fam for fam, _ in split}
        chosen = {q.key: c.pick(q.key, present) for q in c.QUANTITIES.values()}
        for r, (fam, suffix) in zip(target_rows, split, strict=True):
            roles = SPELLING_OF.get(fam)
            if not roles:
                out.append(r)
                continue
            for key, sp in roles:
                if chosen[key] is not sp:
                    continue
                canon = c.QUANTITIES[key].spellings[0].family
                used[key].add(fam)
                out.append(r if canon == fam else replace(r, name=canon + suffix, family=canon))
    return out, dict(used)


def _one_rank(rows: list[Any]) -> list[Any]:
    """LMCache in-process series differ by ``worker_id`` (tensor-parallel ranks of one engine):
    every rank looks up and retrieves the same tokens, so one rank's increase is kept (the
    largest), not the sum over ranks."""
    keep: dict[tuple[Any, ...], Any] = {}
    out: list[Any] = []
    for r in rows:
        if not r.name.startswith("lmcache:"):
            out.append(r)
            continue
        labels = json.loads(r.labels or "{}")
        labels.pop("worker_id", None)
        key = (r.target, r.name, r.model_name, r.engine, r.le, json.dumps(labels, sort_keys=True))
        if key not in keep or r.increase > keep[key].increase:
            keep[key] = r
    return out + list(keep.values())


def _total(rows: Iterable[Any], name: str) -> float | None:
    vals = [r.increase for r in rows if r.name == name]
    return sum(vals) if vals else None


def cached_rule(counter: float | None, by_source: float | None, hits: float | None,
                ext: float | None, lm_loaded: float | None = None) -> tuple[float | None, str]:
    """Cached prompt tokens from what a window (or one interval) has, and where they came from.
    The one rule ``stats``, the plan, the prefill fit, the pages and the report share:

    1. ``counter``: ``vllm:prompt_tokens_cached`` (vLLM 0.16+; SGLang's ``sglang:cached_tokens``,
       summed over ``cache_source``);
    2. else ``by_source``: ``vllm:prompt_tokens_by_source`` local_cache_hit + external_kv_transfer;
    3. else prefix-cache ``hits`` + external hits ``ext`` (vLLM 0.9-0.15: the hits are the
       cached tokens; before 0.11 there are no external counters, so device hits only); where
       there are no external counters but LMCache runs in-process, the tokens LMCache loaded
       (``lmcache:num_hit_tokens``, ``lm_loaded``) are added: device hits + LMCache's;
    4. else unknown (None): never prompt tokens minus an absent computed-token family."""
    if counter is not None:
        return counter, c.PROMPT_TOKENS_CACHED
    if by_source is not None:
        return by_source, c.PROMPT_BY_SOURCE + " (local_cache_hit + external_kv_transfer)"
    if hits is None:
        return None, ""
    if ext is None and lm_loaded is not None:
        return hits + lm_loaded, "prefix-cache hits + tokens LMCache in-process loaded (lmcache:num_hit_tokens)"
    if ext is None:
        return hits, "prefix-cache hits (this release has no external prefix-cache counters)"
    return hits + ext, "prefix-cache hits + external prefix-cache hits"


def cached_tokens(rows: list[Any]) -> tuple[float | None, str]:
    """``cached_rule`` on a window's increases (``rows`` resolved to one spelling), applied per
    target and summed: a 0.14 server (no ``prompt_tokens_cached``: its hits) next to a 0.32 one
    (its counter) count both. A target with prompt tokens but no way to tell its cached ones
    makes the total unknown; targets without prompt tokens (an LMCache server) are not engines."""
    by_target: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        by_target[r.target].append(r)
    total, how = 0.0, set()
    found = False
    for target_rows in by_target.values():
        v, where = _target_cached(target_rows)
        if v is None:
            if _total(target_rows, c.total_name(c.PROMPT_TOKENS)) is not None:
                return None, ""
            continue
        found = True
        total += v
        how.add(where)
    return (total, "; ".join(sorted(how))) if found else (None, "")


CACHED_RULE_NAMES = tuple(sorted({c.total_name(f) for key in ("cached_tokens", "prefix_hits", "external_hits",
                                                                  "prompt_tokens")
                                   for f in c.QUANTITIES[key].families}
                                  | {c.total_name(c.PROMPT_BY_SOURCE), c.total_name(c.LM_INPROC_HIT)}))
"""Sample names ``cached_rule`` reads (every spelling, and the tokens LMCache in-process loaded),
and the prompt tokens it is checked against."""


def cached_per_stretch(intervals: Iterable[list[Any]]) -> tuple[float | None, str]:
    """``cached_tokens`` with the rule chosen per target AND per stretch of its life: ``intervals``
    are the increases of one target over one scrape interval each (the ``CACHED_RULE_NAMES``).
    A target upgraded mid-window (vLLM 0.15, no ``prompt_tokens_cached``, to 0.16) counts its
    hits before the upgrade and its counter after it, never the counter alone; unknown (None)
    as soon as one interval with prompt tokens gives no way to tell its cached ones. (A restart's
    pairs to a series' zero point end at that series' own _created, so an interval can hold one
    series alone: one without prompt tokens needs no cached ones.)"""
    return stretch_answer(*stretch_parts(intervals))


def stretch_parts(intervals: Iterable[list[Any]]) -> tuple[float, str, bool, bool]:
    """``cached_per_stretch``'s parts, to be added across spans read apart (a window's raw edges
    and its rolled-up days): the total, how it was read, whether any interval had a rule
    (found), whether one with prompt tokens had none (unknown)."""
    return _parts(resolve(rows)[0] for rows in intervals)


def _parts(resolved: Iterable[list[Any]]) -> tuple[float, str, bool, bool]:
    """``stretch_parts`` of intervals already resolved to canonical names, read in turn (stops
    at the first interval with prompt tokens and no rule: unknown)."""
    total, how, found = 0.0, set(), False
    for rows in resolved:
        v, where = _target_cached(rows)
        if v is None:
            if (_total(rows, c.total_name(c.PROMPT_TOKENS)) or 0.0) > 0:
                return 0.0, "", found, True
            continue
        found = True
        total += v
        how.add(where)
    return total, "; ".join(sorted(how)), found, False


def stretch_answer(total: float, how: str, found: bool, unknown: bool) -> tuple[float | None, str]:
    """The cached prompt tokens of ``stretch_parts`` (None: unknown, or no interval had a rule)."""
    return (total, how) if found and not unknown else (None, "")


def cached_of_interval_rows(rows: Iterable[dict[str, Any]], make: Any) -> tuple[float, str, bool, bool]:
    """``stretch_parts`` of the rows of the ``cached_intervals`` queries (one per target,
    interval end and series), grouped by (target, t_end) in the order read. Shared by the
    dashboard's window and the nightly rollup of a day. An interval without LMCache in-process
    rows (the usual one) is resolved on (name, labels, increase) triples, its spelling choice
    memoised by the set of families it holds: the same renaming, the same sums in the same
    order as ``stretch_parts`` on ``Increase`` rows, without building them (a month's first day
    holds ~10,000 rows); one with ``lmcache:`` rows (ranks to collapse) is made an increase
    by ``make`` (``Increase``) and goes through ``resolve``."""
    groups: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["target"], r["t_end"]), []).append(r)

    def resolved(target: str, group: list[dict[str, Any]]) -> list[Any]:
        if any(r["name"].startswith("lmcache:") for r in group):
            return resolve([make(**{k: v for k, v in r.items() if k not in ("target", "t_end")}, target=target)
                            for r in group])[0]
        return _renamed(group)
    return _parts(resolved(target, group) for (target, _), group in groups.items())


class _Named:
    """What ``_target_cached`` reads of a row: its (canonical) name, labels and increase."""

    __slots__ = ("name", "labels", "increase")

    def __init__(self, name: str, labels: str | None, increase: float) -> None:
        self.name, self.labels, self.increase = name, labels, increase


def _renamed(group: list[dict[str, Any]]) -> list[_Named]:
    """``resolve`` of one target's rows without LMCache in-process ones (``_one_rank`` keeps
    them as they are): each row under its quantity's canonical name when its spelling is the
    one chosen, in ``resolve``'s order."""
    split = [family_of(r["name"]) for r in group]
    chosen = _chosen(frozenset(fam for fam, _ in split))
    out: list[_Named] = []
    for r, (fam, suffix) in zip(group, split, strict=True):
        roles = SPELLING_OF.get(fam)
        if not roles:
            out.append(_Named(r["name"], r["labels"], r["increase"]))
            continue
        for key, sp in roles:
            if chosen[key] is sp:
                out.append(_Named(c.QUANTITIES[key].spellings[0].family + suffix, r["labels"], r["increase"]))
    return out


_CHOSEN: dict[frozenset[str], dict[str, c.Spelling | None]] = {}


def _chosen(present: frozenset[str]) -> dict[str, c.Spelling | None]:
    """quantity -> the spelling ``c.pick`` chooses among ``present``, kept per family set."""
    got = _CHOSEN.get(present)
    if got is None:
        got = {q.key: c.pick(q.key, present) for q in c.QUANTITIES.values()}
        if len(_CHOSEN) < 10_000:
            _CHOSEN[present] = got
    return got


@lru_cache(maxsize=4096)
def _source_label(labels: str | None) -> Any:
    """The ``source`` label of a labels JSON (``prompt_tokens_by_source``), parsed once per text."""
    return json.loads(labels or "{}").get("source")


CACHED_DAY = c.total_name(c.CACHED_DAY_FAMILY)
"""The kvplan-own sample the nightly rollup stores a day's cached prompt tokens under (read per
target and scrape interval), beside the day's increases in ``daily_rollups``."""


def _target_cached(rows: list[Any]) -> tuple[float | None, str]:
    by_source = [r for r in rows if r.name == c.total_name(c.PROMPT_BY_SOURCE)]
    keep = ("local_cache_hit", "external_kv_transfer")
    src = (sum(r.increase for r in by_source if _source_label(r.labels) in keep)
           if by_source else None)
    return cached_rule(_total(rows, c.total_name(c.PROMPT_TOKENS_CACHED)), src,
                       _total(rows, c.total_name(c.PREFIX_HITS)), _total(rows, c.total_name(c.EXTERNAL_HITS)),
                       _total(rows, c.total_name(c.LM_INPROC_HIT)))


BLOCK_HITS = c.total_name(c.GPU_PREFIX_HITS + c.BLOCKS_SUFFIX)
BLOCK_QUERIES = c.total_name(c.GPU_PREFIX_QUERIES + c.BLOCKS_SUFFIX)

NOTED = {  # WindowStats field -> (quantity, what it is)
    "prefix_cache_hit_rate": ("prefix_hits", "prefix-cache hit rate"),
    "cached_prompt_tokens": ("cached_tokens", "cached prompt tokens"),
    "ttft_p50_s": ("ttft", "TTFT"),
    "itl_p50_s": ("itl", "ITL"),
    "tpot_p50_s": ("tpot", "TPOT (per request)"),
    "external_prefix_cache_hit_rate": ("external_hits", "external (KV connector) hit rate"),
    "prefill_requests": ("prefill_time", "per-request prefill timer (the plan's prefill cost fit needs it: "
                                         "NEED_DATA without it)"),
}


def version_notes(st: Any, rows: list[Any], present: set[str], gauges: dict[str, float]) -> list[str]:
    """A note for every headline figure the payloads cannot back: the family that is missing,
    the releases that lack it, and what the payload has instead (``present``: the families of
    the window's increases, ``gauges``: gauge family -> its last value)."""
    if not present:
        return []
    notes: list[str] = []
    for name, (key, what) in NOTED.items():
        if getattr(st, name) is not None:
            continue
        q = c.QUANTITIES[key]
        if any(s.family in present for s in q.spellings):
            continue  # the family is there: it counted nothing in this window (no hits, no traffic)
        if q.lacking == "no release" or not _release_lacks(key, st, present):
            continue
        instead = _instead(key, present, gauges)
        notes.append(f"{what}: not reported: no {' / '.join(q.families)} in the data ({q.lacking})"
                     + (f"; the payload has {instead}" if instead else ""))
    if st.prefix_cache_block_hit_rate is not None:
        notes.append(f"prefix-cache hit rate in blocks {st.prefix_cache_block_hit_rate:.4g} "
                     f"({c.GPU_PREFIX_HITS} / {c.GPU_PREFIX_QUERIES} count blocks in vLLM V1 0.7-0.8): blocks are "
                     "not tokens, so no token hit rate or cached tokens are reported")
    if st.lmcache_lookup_hit_rate is None and any(g.startswith("lmcache:") for g in gauges) \
            and not any(f.startswith("lmcache:num_") for f in present):
        notes.append("LMCache in-process: lmcache:* gauges but no lmcache:num_* counter in the data: LMCache "
                     "counted no lookup (its counters appear at their first increment; a worker that failed to "
                     "start, e.g. 'No supported cpu connector found', runs degraded and counts nothing)")
    if c.SG_CACHE_HIT_RATE in gauges:
        notes.append(f"{c.SG_CACHE_HIT_RATE} = {gauges[c.SG_CACHE_HIT_RATE]:.4g} is the last batch's prefix-cache "
                     "hit rate, not this window's: the window's is sglang:cached_tokens / sglang:prompt_tokens")
    return notes


def _release_lacks(key: str, st: Any, present: set[str]) -> bool:
    """Whether the payload shows a release that lacks the quantity (rather than a payload that
    simply holds fewer families): only then is the null worth a version note."""
    if key == "cached_tokens":
        return st.prefix_cache_hits is None
    if key == "external_hits":  # the pre-0.11 spelling is there
        return c.GPU_PREFIX_HITS in present
    if key == "tpot":  # per-token ITL without the per-request histogram: before 0.11, or SGLang
        return any(s.family in present for s in c.QUANTITIES["itl"].spellings)
    if key == "prefill_time":
        return any(f.startswith("sglang:") for f in present)
    return True


def _instead(key: str, present: set[str], gauges: dict[str, float]) -> str:
    if key in ("prefix_hits", "cached_tokens"):
        if c.GPU_PREFIX_HIT_RATE in gauges:
            return (f"only {c.GPU_PREFIX_HIT_RATE} = {gauges[c.GPU_PREFIX_HIT_RATE]:.4g}, a gauge of the block hit "
                    "rate since the engine started (vLLM V0): a lifetime figure, not this window's")
        if c.GPU_PREFIX_HITS + c.BLOCKS_SUFFIX in present:
            return f"{c.GPU_PREFIX_HITS} / {c.GPU_PREFIX_QUERIES} in blocks (vLLM V1 0.7-0.8)"
    if key == "itl" and c.TPOT in present:
        return f"{c.TPOT} (one value per request)"
    return ""
