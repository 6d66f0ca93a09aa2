"""Metric math over one window: token-weighted hit rates and TTFT/TPOT/ITL quantiles.

Inputs are per-series increases over the window (see ``sql`` macro ``increments``: the sum
of increases between the scrapes inside the window, Prometheus's reset rule, no
extrapolation). Rules that keep the numbers exact:

* sum the increases first, then divide: a hit rate is (sum of hit tokens) / (sum of
  queried tokens) over the window, never an average of per-interval ratios;
* a quantile is Prometheus's ``histogram_quantile`` on the summed bucket increases, and is
  reported with the bucket it lies in: it cannot be more precise than that bucket;
* a metric the deployment does not report is ``None``, never 0.

The notes a window's figures carry (decreases, gaps, parts above their whole, why a window is
null) are in window_notes.py; the cache tiers in tiers.py.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from . import catalog as c
from .increase import Increase as Increase  # (importers take it from here)
from .spellings import BLOCK_HITS, BLOCK_QUERIES, cached_tokens, family_of, resolve, version_notes
from .window_notes import decrease_notes, gap_notes, sum_notes


@dataclass(frozen=True)
class Quantile:
    """A histogram quantile and the bucket bounds it lies between.

    ``value`` follows Prometheus: linear interpolation inside the bucket; when the rank
    falls in the ``+Inf`` bucket, the highest finite bound (and ``in_inf`` is set: the true
    value is above ``lower`` with no upper bound)."""

    q: float
    """The quantile asked for, in [0, 1] (0.5 = median, 0.99 = p99)."""
    value: float | None
    """Its value (seconds for the latency histograms); None when the histogram holds no
    observation or has no ``+Inf`` bucket."""
    lower: float | None
    """Lower bound of the bucket the value lies in (0 for the first bucket); None when unknown."""
    upper: float | None
    """Upper bound of that bucket; None when the rank falls in the ``+Inf`` bucket."""
    in_inf: bool = False
    """The rank falls in the ``+Inf`` bucket: the true value is above ``lower``, with no upper
    bound."""
    observations: float = 0.0
    """Observations in the histogram over the window (the ``+Inf`` bucket's count)."""


def bucket_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> Quantile:
    """Prometheus's ``histogram_quantile`` (promql/quantile.go, bucketQuantile) on
    cumulative (upper bound, count) pairs."""
    merged: dict[float, float] = defaultdict(float)
    for le, count in buckets:
        merged[le] += count  # coalesce equal bounds, as Prometheus does
    bs = sorted(merged.items())
    if not bs or not math.isinf(bs[-1][0]) or len(bs) < 2:
        return Quantile(q, None, None, None)
    # ensureMonotonic: a bucket count below its predecessor is raised to it
    fixed, top = [], 0.0
    for le, n in bs:
        top = max(top, n)
        fixed.append((le, top))
    bs = fixed
    total = bs[-1][1]
    if total == 0 or math.isnan(q):
        return Quantile(q, None, None, None, observations=total)
    if q < 0:
        return Quantile(q, -math.inf, None, None, observations=total)
    if q > 1:
        return Quantile(q, math.inf, None, None, observations=total)
    rank = q * total
    # sort.Search over all but the +Inf bucket: the first bucket holding the rank
    b = next((i for i in range(len(bs) - 1) if bs[i][1] >= rank), len(bs) - 1)
    if b == len(bs) - 1:
        return Quantile(q, bs[-2][0], bs[-2][0], None, in_inf=True, observations=total)
    if b == 0 and bs[0][0] <= 0:
        return Quantile(q, bs[0][0], None, bs[0][0], observations=total)
    start = bs[b - 1][0] if b > 0 else 0.0
    end, count = bs[b][0], bs[b][1]
    if b > 0:
        count -= bs[b - 1][1]
        rank -= bs[b - 1][1]
    return Quantile(q, start + (end - start) * (rank / count), start, end, observations=total)


def total(rows: Iterable[Increase], name: str) -> float | None:
    """Sum of the increases of every series with this sample name, or None if absent."""
    vals = [r.increase for r in rows if r.name == name]
    return sum(vals) if vals else None


def ratio(num: float | None, den: float | None) -> float | None:
    """num / den, None when either is missing or nothing was queried."""
    if num is None or den is None or den <= 0:
        return None
    return num / den


def histogram_buckets(rows: Iterable[Increase], family: str) -> list[tuple[float, float]]:
    name = c.bucket_name(family)  # once, not per row
    return [(r.le, r.increase) for r in rows if r.name == name and r.le is not None]


def label_total(rows: Iterable[Increase], name: str, key: str) -> dict[str, float]:
    """Sum of increases of ``name`` split by one label in ``labels`` (e.g. ``source``)."""
    out: dict[str, float] = defaultdict(float)
    for r in rows:
        if r.name == name:
            out[json.loads(r.labels).get(key, "")] += r.increase
    return dict(out)


TTFT = c.TTFT


@dataclass
class WindowStats:
    """What one window of one deployment says. ``None`` = not reported by these servers. The
    metric names below are today's spellings; an older release's are read in their place
    (``spellings.resolve``)."""

    prefix_cache_hit_rate: float | None
    """vLLM's own prefix cache: ``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries``
    (tokens), None outside [0, 1]."""
    external_prefix_cache_hit_rate: float | None
    """The KV connector's (e.g. LMCache) hit rate as vLLM counts it:
    ``vllm:external_prefix_cache_hits`` / ``..._queries`` (tokens)."""
    cached_prompt_tokens: float | None
    """Prompt tokens served from any cache, per target by the first rule its release allows
    (``vllm:prompt_tokens_cached``, else the local and external sources of
    ``vllm:prompt_tokens_by_source``, else prefix plus external hits: ``spellings.cached_tokens``),
    summed; None when a target with prompt tokens gives no way to tell its cached ones."""
    prompt_tokens: float | None
    """Prompt tokens of the window's requests (``vllm:prompt_tokens``)."""
    requests: float | None
    """Requests that got a first token (the TTFT histogram's count)."""
    ttft_p50_s: float | None
    """Median time to first token, seconds (``ttft_p50.value``)."""
    ttft_p99_s: float | None
    """99th percentile time to first token, seconds (``ttft_p99.value``)."""
    ttft_p50: Quantile | None = None
    """The TTFT median with the bucket it lies in."""
    ttft_p99: Quantile | None = None
    """The TTFT p99 with the bucket it lies in."""
    tpot_p50_s: float | None = None
    """Time per output token (``vllm:request_time_per_output_token_seconds``: one observation
    per request, its decode time / (output tokens - 1))."""
    tpot_p99_s: float | None = None
    """99th percentile time per output token, seconds."""
    itl_p50_s: float | None = None
    """Inter-token latency (``vllm:inter_token_latency_seconds``: one observation per output
    token after the first)."""
    itl_p99_s: float | None = None
    """99th percentile inter-token latency, seconds."""
    tpot_p50: Quantile | None = None
    """The TPOT median with its bucket."""
    tpot_p99: Quantile | None = None
    """The TPOT p99 with its bucket."""
    itl_p50: Quantile | None = None
    """The ITL median with its bucket."""
    itl_p99: Quantile | None = None
    """The ITL p99 with its bucket."""
    lmcache_lookup_hit_rate: float | None = None
    """LMCache lookup: multi-process ``lookup_hit_tokens / lookup_requested_tokens``, in-process
    ``lmcache:num_lookup_hits / num_lookup_tokens``."""
    lmcache_retrieve_hit_rate: float | None = None
    """LMCache in-process retrieve success ``num_hit_tokens / num_requested_tokens``: of the tokens
    vLLM asked LMCache to load, the share it loaded (not a hit rate of the prompt)."""
    prefix_cache_block_hit_rate: float | None = None
    """vLLM V1 0.7-0.8: prefix-cache hits / queries counted in blocks (no token figure then)."""
    prefix_cache_hit_rate_lifetime: float | None = None
    """vLLM V0's ``vllm:gpu_prefix_cache_hit_rate`` gauge (block hit rate since the engine started):
    a lifetime figure, never this window's rate (set by the reader that has the gauges)."""
    lmcache_l1_hit_rate: float | None = None
    """Share of LMCache MP's requested tokens found in L1 (CPU memory)."""
    lmcache_l2_hit_rate: float | None = None
    """Share of LMCache MP's requested tokens found in L2 (disk or remote)."""
    prefix_cache_hits: float | None = None
    """Tokens vLLM's prefix cache found cached (``vllm:prefix_cache_hits``)."""
    prefix_cache_queries: float | None = None
    """Tokens vLLM looked up in its prefix cache (``vllm:prefix_cache_queries``)."""
    external_prefix_cache_hits: float | None = None
    """Tokens the KV connector found (``vllm:external_prefix_cache_hits``)."""
    external_prefix_cache_queries: float | None = None
    """Tokens vLLM looked up through the KV connector (``vllm:external_prefix_cache_queries``)."""
    prompt_tokens_by_source: dict[str, float] = field(default_factory=dict)
    """Prompt tokens by where they came from (``vllm:prompt_tokens_by_source``, by its ``source``
    label)."""
    cached_tokens_by_tier: dict[str, float] = field(default_factory=dict)
    """Cached prompt tokens by cache tier (``vllm:prompt_tokens_cached_by_source``, by its
    ``source`` label)."""
    generation_tokens: float | None = None
    """Output tokens generated (``vllm:generation_tokens``)."""
    prefill_seconds_sum: float | None = None
    """Sum of the requests' prefill times, seconds (``vllm:request_prefill_time_seconds_sum``):
    timer time, overlapping prefills counted once each."""
    prefill_requests: float | None = None
    """Requests with a prefill time (``vllm:request_prefill_time_seconds_count``)."""
    prefill_computed_tokens: float | None = None
    """Prompt tokens vLLM computed in prefill, the cached ones left out
    (``vllm:request_prefill_kv_computed_tokens_sum``)."""
    estimated_flops: float | None = None
    """vLLM's estimate of the FLOPs each GPU did (``vllm:estimated_flops_per_gpu``)."""
    counter_resets: int = 0
    """Counter resets (server restarts) inside the window, over every series."""
    counter_decreases: int = 0
    """Decreases of a counter whose _created did not change (or went backwards): a broken or
    replaced target, not a restart; those pairs count nothing."""
    notes: list[str] = field(default_factory=list)
    """Why a figure is missing or what was left out of it, in words (printed with the figures)."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in QUANTILE_FIELDS:
            q = d.pop(k)
            if q is not None:
                d[f"{k}_bucket"] = {"lower_s": q["lower"], "upper_s": q["upper"], "in_inf": q["in_inf"]}
            else:
                d[f"{k}_bucket"] = None
        return d


def window_stats(rows: list[Increase], gauges: dict[str, float] | None = None,
                 cached_read: tuple[float | None, str] | None = None) -> WindowStats:
    """Every headline number of a window, from its per-series increases, each read with the
    names its release has (``spellings.resolve``); ``gauges`` (gauge family -> last value) only
    add notes and lifetime figures, never a window's rate. ``cached_read``: the cached prompt tokens
    read per target and scrape interval (``spellings.cached_per_stretch``), where the reader has
    the intervals; else they are read per target over the whole window."""
    present = {family_of(r.name)[0] for r in rows}
    rows, _used = resolve(rows)
    by_name: dict[str, list[float]] = {}  # each name's increases in row order: one pass, not one per figure
    for r in rows:
        by_name.setdefault(r.name, []).append(r.increase)

    def tot(name: str) -> float | None:
        """``total(rows, name)``."""
        vals = by_name.get(name)
        return sum(vals) if vals else None

    gauges = gauges or {}
    hits = tot(c.total_name(c.PREFIX_HITS))
    queries = tot(c.total_name(c.PREFIX_QUERIES))
    ext_hits = tot(c.total_name(c.EXTERNAL_HITS))
    ext_queries = tot(c.total_name(c.EXTERNAL_QUERIES))
    cached, _cached_from = cached_read if cached_read is not None else cached_tokens(rows)
    by_source = label_total(rows, c.total_name(c.PROMPT_BY_SOURCE), "source")
    by_tier = label_total(rows, c.total_name(c.CACHED_BY_SOURCE), "source")
    p50, p99 = _p50_p99(rows, TTFT)
    tpot50, tpot99 = _p50_p99(rows, c.TPOT)
    itl50, itl99 = _p50_p99(rows, c.ITL)

    # LMCache: multi-process server (lmcache_mp_*), else in-process (lmcache:* inside vLLM)
    lm_req = tot(c.total_name(c.LM_REQUESTED))
    lm_hit = tot(c.total_name(c.LM_HIT))
    lm_l1 = tot(c.total_name(c.LM_HIT_L1))
    lm_l2 = tot(c.total_name(c.LM_HIT_L2))
    if lm_req is None:  # in-process: the lookup counters, not the retrieve ones
        lm_req = tot(c.total_name(c.LM_INPROC_LOOKUP_TOKENS))
        lm_hit = tot(c.total_name(c.LM_INPROC_LOOKUP_HITS))
    requests = tot(c.count_name(TTFT))
    st = WindowStats(
        prefix_cache_hit_rate=ratio(hits, queries),
        external_prefix_cache_hit_rate=ratio(ext_hits, ext_queries),
        cached_prompt_tokens=cached,
        prompt_tokens=tot(c.total_name(c.PROMPT_TOKENS)),
        requests=requests,
        ttft_p50_s=p50.value if p50 else None,
        ttft_p99_s=p99.value if p99 else None,
        ttft_p50=p50,
        ttft_p99=p99,
        tpot_p50_s=tpot50.value if tpot50 else None,
        tpot_p99_s=tpot99.value if tpot99 else None,
        itl_p50_s=itl50.value if itl50 else None,
        itl_p99_s=itl99.value if itl99 else None,
        tpot_p50=tpot50,
        tpot_p99=tpot99,
        itl_p50=itl50,
        itl_p99=itl99,
        lmcache_lookup_hit_rate=ratio(lm_hit, lm_req),
        lmcache_retrieve_hit_rate=ratio(tot(c.total_name(c.LM_INPROC_HIT)),
                                        tot(c.total_name(c.LM_INPROC_REQUESTED))),
        prefix_cache_block_hit_rate=ratio(tot(BLOCK_HITS), tot(BLOCK_QUERIES)),
        prefix_cache_hit_rate_lifetime=gauges.get(c.GPU_PREFIX_HIT_RATE),
        lmcache_l1_hit_rate=ratio(lm_l1, lm_req),
        lmcache_l2_hit_rate=ratio(lm_l2, lm_req),
        prefix_cache_hits=hits,
        prefix_cache_queries=queries,
        external_prefix_cache_hits=ext_hits,
        external_prefix_cache_queries=ext_queries,
        prompt_tokens_by_source=by_source,
        cached_tokens_by_tier=by_tier,
        generation_tokens=tot(c.total_name(c.GENERATION_TOKENS)),
        prefill_seconds_sum=tot(c.sum_name(c.PREFILL_TIME)),
        prefill_requests=tot(c.count_name(c.PREFILL_TIME)),
        prefill_computed_tokens=tot(c.sum_name(c.PREFILL_COMPUTED)),
        estimated_flops=tot(c.total_name(c.ESTIMATED_FLOPS)),
        counter_resets=sum(r.resets for r in rows),
        counter_decreases=sum(r.broken or 0 for r in rows),
        notes=decrease_notes(rows) + gap_notes(rows) + sum_notes(rows),
    )
    for name in RATE_FIELDS:
        v = getattr(st, name)
        if v is not None and not 0 <= v <= 1:
            setattr(st, name, None)
            st.notes.append(f"{name}: not reported: the counters give {v:.4g}, outside [0, 1] (inconsistent "
                            "hits and queries in this window)")
    st.notes += version_notes(st, rows, present, gauges)
    return st


def _p50_p99(rows: list[Increase], family: str) -> tuple[Quantile | None, Quantile | None]:
    """p50 and p99 of one histogram family over the window (None, None: not reported)."""
    buckets = histogram_buckets(rows, family)
    if not buckets:
        return None, None
    return bucket_quantile(0.5, buckets), bucket_quantile(0.99, buckets)


QUANTILE_FIELDS = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "itl_p50", "itl_p99")
"""``WindowStats`` fields holding a ``Quantile``: ``to_dict`` writes each as ``<field>_bucket``
(lower_s, upper_s, in_inf) next to its ``<field>_s`` value."""

RATE_FIELDS = ("prefix_cache_hit_rate", "external_prefix_cache_hit_rate", "lmcache_lookup_hit_rate",
               "lmcache_retrieve_hit_rate", "prefix_cache_block_hit_rate",
               "lmcache_l1_hit_rate", "lmcache_l2_hit_rate")


def latency_quantiles(rows: Iterable[Increase]) -> tuple[dict[str, Quantile | None], dict[str, float | None]]:
    """p50 and p99 (``'TTFT p50'``, ``'queue p99'``, ...) and the mean of every latency
    histogram in ``catalog.LATENCIES``."""
    rows, _ = resolve(rows)  # each release read with its own names (SGLang, the old ITL name)
    qs, means = {}, {}
    for short, fam in c.LATENCIES.items():
        buckets = histogram_buckets(rows, fam)
        for q in (0.5, 0.99):
            qs[f"{short} p{round(q * 100)}"] = bucket_quantile(q, buckets) if buckets else None
        means[short] = ratio(total(rows, c.sum_name(fam)), total(rows, c.count_name(fam)))
    return qs, means
