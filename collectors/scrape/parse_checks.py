"""The checks a payload passes beyond the parser's: it is metrics at all and not a router's,
samples outside their family's lines (strays) rejoin it, values are finite, not negative and
countable, ``_created`` times are possible, histograms are whole and cumulative, hits stay under
queries, and parts above their whole are flagged."""

from __future__ import annotations

import itertools
import math
from typing import Any

from ...models.metrics.window_notes import parts_above_whole
from .payload import PayloadError, Sample, find_line, fmt_labels

_PSTACK = "the vLLM production-stack router"
_ROUTER_FAMILIES = {  # families only a router or gateway declares -> what it is
    "vllm:healthy_pods_total": _PSTACK, "vllm:current_qps": _PSTACK, "vllm:avg_latency": _PSTACK,
    "vllm:num_incoming_requests": _PSTACK, "vllm:routing_decisions": _PSTACK,
}
_ROUTER_PREFIXES = {"inference_pool_": "an llm-d / Gateway API Inference Extension endpoint picker (EPP)",
                    "inference_model_": "an llm-d / Gateway API Inference Extension endpoint picker (EPP)",
                    "inference_objective_": "an llm-d / Gateway API Inference Extension endpoint picker (EPP)",
                    "dynamo_frontend_": "an NVIDIA Dynamo frontend"}


def router_of(families: dict[str, str]) -> tuple[str, list[str]] | None:
    """(what it is, the families that say so) when the payload is a router's or a gateway's,
    not an engine's: its vllm:* families, if any, are gauges it copied from the engines or its
    own request averages."""
    for name in sorted(families):
        hit = _ROUTER_FAMILIES.get(name) or next((w for p, w in _ROUTER_PREFIXES.items() if name.startswith(p)), None)
        if hit:
            return hit, [n for n in sorted(families) if n in _ROUTER_FAMILIES or n.startswith(tuple(_ROUTER_PREFIXES))]
    return None


def refuse_routers(source: str, families: dict[str, str]) -> None:
    found = router_of(families)
    if found is None:
        return
    what, names = found
    raise PayloadError(source, f"this is {what}'s /metrics ({', '.join(names[:4])}"
                               f"{' ...' if len(names) > 4 else ''}), not an engine's: its figures are routing "
                               "estimates and gauges copied from the engines (e.g. vllm:gpu_prefix_cache_hits_total as "
                               "a gauge). Point kvplan at each engine's own /metrics (vLLM, SGLang, LMCache) instead")


MAX_COUNTER = float(2**53)
"""The largest counter value kept: above 2**53 a double cannot count by one any more, so
such a value is corrupt (or a test of 1e308), not traffic."""
CREATED_AHEAD_S = 366 * 86400
"""A ``_created`` time more than this after the scrape time is impossible: refused."""
HIT_PAIRS = (
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    ("vllm:external_prefix_cache_hits_total", "vllm:external_prefix_cache_queries_total"),
    ("lmcache_mp_lookup_hit_tokens_total", "lmcache_mp_lookup_requested_tokens_total"),
    ("lmcache_mp_lookup_hit_l1_tokens_total", "lmcache_mp_lookup_requested_tokens_total"),
    ("lmcache_mp_lookup_hit_l2_tokens_total", "lmcache_mp_lookup_requested_tokens_total"),
    ("lmcache:num_hit_tokens_total", "lmcache:num_requested_tokens_total"),
    # the older releases' spellings, held to the same rule (QUANTITIES in models/metrics/catalog.py)
    ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
    ("vllm:gpu_prefix_cache_hits_blocks_total", "vllm:gpu_prefix_cache_queries_blocks_total"),
    ("lmcache:num_lookup_hits_total", "lmcache:num_lookup_tokens_total"),
)
"""(hits, queries) counters of one series: hits can never exceed queries in one payload."""


def _le(s: Sample) -> float:
    """A bucket sample's upper bound (``+Inf`` for a sample without one)."""
    return math.inf if s.le is None else s.le


SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "summary": ("", "_count", "_sum"),
            "gaugehistogram": ("_bucket", "_gcount", "_gsum"), "gauge": ("",), "info": ("_info",),
            "stateset": ("",)}


def regroup_strays(text: str, raw_families: list[Any]) -> tuple[list[Any], list[str]]:
    """Samples written outside their family's block (after another family's lines): the text
    parser makes each such run a new family of type unknown, which was stored untyped and left out
    of every total. Exposition requires a family's lines together; Prometheus itself reads the
    samples by name. Here they join the family their name belongs to (its type), with a warning."""
    owner: dict[str, Any] = {}
    for fam in raw_families:
        if fam.type != "unknown":
            for suffix in SUFFIXES.get(fam.type, ("",)):
                owner.setdefault(fam.name + suffix, fam)
    kept, warnings = [], []
    for fam in raw_families:
        homes = {id(owner[x.name]): owner[x.name] for x in fam.samples if x.name in owner}
        if fam.type != "unknown" or len(homes) != 1 or any(x.name not in owner for x in fam.samples):
            kept.append(fam)
            continue
        (target,) = homes.values()
        target.samples.extend(fam.samples)
        first = fam.samples[0]
        where = find_line(text, first.name, first.labels)
        more = f" and {len(fam.samples) - 1} more sample(s)" if len(fam.samples) > 1 else ""
        warnings.append(f"{first.name}{fmt_labels(first.labels)}" + (f" (line {where[-1]})" if where else "")
                        + f"{more} outside the lines of its family {target.name} ({target.type}; another family's "
                        "lines come between, or its TYPE line names it differently): read as part of it")
    return kept, warnings


def part_exceeds_whole(samples: list[Sample]) -> list[str]:
    """Sums that cannot be, within one payload (``kvplan.models.metrics.window_notes.parts_above_whole``)."""
    return parts_above_whole((x.name, x.model_name, x.engine, x.labels, x.value) for x in samples)


def _monotonic(fam_type: str, name: str) -> bool:
    """Samples that only count up from 0: counters, histogram buckets and counts, summary counts."""
    return fam_type == "counter" or (fam_type in ("histogram", "summary") and name.endswith(("_bucket", "_count")))


def refuse_what_is_not_metrics(source: str, text: str) -> None:
    if not text.strip():
        raise PayloadError(source, "empty body: no metrics at all")
    head = text.lstrip()[:200].lower()
    if head.startswith("<!doctype") or head.startswith("<html") or "<html" in head:
        raise PayloadError(source, "this is an HTML page, not Prometheus metrics: "
                                   "is this the /metrics URL (not a login page or proxy)?", line=1)
    if head.startswith("{") or head.startswith("["):
        raise PayloadError(source, "this looks like JSON, not Prometheus text exposition", line=1)


def created_time(source: str, text: str, s: Any, at_s: float) -> float:
    c = float(s.value)
    why = ("is not a number" if math.isnan(c) else "is not finite" if not math.isfinite(c)
           else "is before 1970" if c <= 0
           else "is more than a year after the scrape time" if c > at_s + CREATED_AHEAD_S else None)
    if why:
        where = find_line(text, s.name, s.labels)
        raise PayloadError(source, f"{s.name}{fmt_labels(s.labels)} = {s.value}: a _created time "
                                   f"(unix seconds of the series' start) {why}",
                           line=where[0] if where else None)
    return c


def value_is_kept(source: str, text: str, s: Any, fam_type: str, value: float, warnings: list[str]) -> bool:
    quantile = fam_type == "summary" and "quantile" in s.labels
    if not math.isfinite(value):
        if fam_type in ("counter", "histogram", "summary") and not quantile:
            lines_at = find_line(text, s.name, s.labels)
            raise PayloadError(source, f"{s.name}{fmt_labels(s.labels)} is {s.value}: a {fam_type} "
                                       "must be a finite number", line=lines_at[0] if lines_at else None)
        # a gauge, or a summary quantile (NaN when nothing was observed lately): kept out
        warnings.append(f"{s.name}{fmt_labels(s.labels)} is {s.value}; not stored")
        return False
    too_big = abs(value) > MAX_COUNTER
    if _monotonic(fam_type, s.name) and (value < 0 or too_big):
        lines_at = find_line(text, s.name, s.labels)
        why = "negative" if value < 0 else f"above 2**53 ({MAX_COUNTER:.4g}), beyond exact counting"
        raise PayloadError(source, f"{s.name}{fmt_labels(s.labels)} = {s.value}: a {fam_type} value cannot be "
                                   f"{why}", line=lines_at[0] if lines_at else None)
    if too_big:
        warnings.append(f"{s.name}{fmt_labels(s.labels)} is {s.value} (above 2**53); not stored")
        return False
    return True


def check_histograms(source: str, samples: list[Sample]) -> None:
    """Each histogram series needs a ``+Inf`` bucket equal to its ``_count`` and
    non-decreasing cumulative buckets; a payload cut off mid-histogram fails here."""
    buckets: dict[tuple, list[Sample]] = {}
    counts: dict[tuple, float] = {}
    for s in samples:
        if s.type != "histogram":
            continue
        ident = (s.family, s.model_name, s.engine, s.labels)
        if s.name.endswith("_bucket"):
            buckets.setdefault(ident, []).append(s)
        elif s.name.endswith("_count"):
            counts[ident] = s.value
    for ident, bs in buckets.items():
        family = ident[0]
        bs = sorted(bs, key=_le)
        label = f"{family} (model_name={ident[1]}, engine={ident[2]})"
        if not math.isinf(_le(bs[-1])):
            raise PayloadError(source, f"histogram {label} has no le=\"+Inf\" bucket: payload truncated?")
        for a, b in itertools.pairwise(bs):
            if b.value < a.value:
                raise PayloadError(source, f"histogram {label}: bucket le={b.le} ({b.value}) is below "
                                           f"le={a.le} ({a.value}); buckets must be cumulative")
        if ident in counts and counts[ident] != bs[-1].value:
            raise PayloadError(source, f"histogram {label}: _count {counts[ident]} != +Inf bucket {bs[-1].value}")
        if ident not in counts:
            raise PayloadError(source, f"histogram {label} has buckets but no _count: payload truncated?")


def check_hits(source: str, text: str, samples: list[Sample]) -> None:
    """Within one payload, a hits counter never exceeds the queries counter of its series."""
    by_key = {(x.name, x.model_name, x.engine, x.labels): x for x in samples}
    for hits_name, queries_name in HIT_PAIRS:
        for (name, model_name, engine, labels), h in by_key.items():
            if name != hits_name:
                continue
            q = by_key.get((queries_name, model_name, engine, labels))
            if q is not None and h.value > q.value:
                lbl = dict(labels, **({"model_name": model_name} if model_name is not None else {}),
                           **({"engine": engine} if engine is not None else {}))
                where = find_line(text, hits_name, lbl)
                raise PayloadError(source, f"{hits_name}{fmt_labels(lbl)} = {h.value:g} is above "
                                           f"{queries_name} = {q.value:g}: hits cannot exceed queries",
                                   line=where[0] if where else None)
