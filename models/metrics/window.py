"""Metric math over one window: token-weighted hit rates and TTFT/TPOT/ITL quantiles.

Inputs are per-series increases over the window (see ``sql`` macro ``increments``: the sum
of increases between the scrapes inside the window, Prometheus's reset rule, no
extrapolation). Rules that keep the numbers exact:

* sum the increases first, then divide: a hit rate is (sum of hit tokens) / (sum of
  queried tokens) over the window, never an average of per-interval ratios;
* a quantile is Prometheus's ``histogram_quantile`` on the summed bucket increases, and is
  reported with the bucket it lies in: it cannot be more precise than that bucket;
* a metric the deployment does not report is ``None``, never 0.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from kvplan.models.metrics import catalog as c


@dataclass(frozen=True)
class Increase:
    """Increase of one series over the window."""

    name: str
    increase: float
    family: str = ""
    model_name: str | None = None
    engine: str | None = None
    le: float | None = None
    labels: str = "{}"
    target: str = ""
    pairs: int = 0
    resets: int = 0
    broken: int = 0  # decreases with an unchanged _created: not counted (increments() macro)
    gaps: int = 0  # pairs spanning a scrape the series was missing from: continued from its last value


@dataclass(frozen=True)
class Quantile:
    """A histogram quantile and the bucket bounds it lies between.

    ``value`` follows Prometheus: linear interpolation inside the bucket; when the rank
    falls in the ``+Inf`` bucket, the highest finite bound (and ``in_inf`` is set: the true
    value is above ``lower`` with no upper bound)."""

    q: float
    value: float | None
    lower: float | None
    upper: float | None
    in_inf: bool = False
    observations: float = 0.0


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
    return [(r.le, r.increase) for r in rows if r.name == c.bucket_name(family) and r.le is not None]


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
    """What one window of one deployment says. ``None`` = not reported by these servers."""

    prefix_cache_hit_rate: float | None
    external_prefix_cache_hit_rate: float | None
    cached_prompt_tokens: float | None
    prompt_tokens: float | None
    requests: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    ttft_p50: Quantile | None = None
    ttft_p99: Quantile | None = None
    tpot_p50_s: float | None = None
    """Time per output token (``vllm:request_time_per_output_token_seconds``: one observation
    per request, its decode time / (output tokens - 1))."""
    tpot_p99_s: float | None = None
    itl_p50_s: float | None = None
    """Inter-token latency (``vllm:inter_token_latency_seconds``: one observation per output
    token after the first)."""
    itl_p99_s: float | None = None
    tpot_p50: Quantile | None = None
    tpot_p99: Quantile | None = None
    itl_p50: Quantile | None = None
    itl_p99: Quantile | None = None
    lmcache_lookup_hit_rate: float | None = None
    lmcache_l1_hit_rate: float | None = None
    lmcache_l2_hit_rate: float | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    external_prefix_cache_hits: float | None = None
    external_prefix_cache_queries: float | None = None
    prompt_tokens_by_source: dict[str, float] = field(default_factory=dict)
    cached_tokens_by_tier: dict[str, float] = field(default_factory=dict)
    generation_tokens: float | None = None
    prefill_seconds_sum: float | None = None
    prefill_requests: float | None = None
    prefill_computed_tokens: float | None = None
    estimated_flops: float | None = None
    counter_resets: int = 0
    counter_decreases: int = 0
    """Decreases of a counter whose _created did not change (or went backwards): a broken or
    replaced target, not a restart; those pairs count nothing."""
    notes: list[str] = field(default_factory=list)
    """Why a figure is missing or what was left out of it, in words (printed with the figures)."""

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in QUANTILE_FIELDS:
            q = d.pop(k)
            if q is not None:
                d[f"{k}_bucket"] = {"lower_s": q["lower"], "upper_s": q["upper"], "in_inf": q["in_inf"]}
            else:
                d[f"{k}_bucket"] = None
        return d


def window_stats(rows: list[Increase]) -> WindowStats:
    """Every headline number of a window, from its per-series increases."""
    hits = total(rows, c.total_name(c.PREFIX_HITS))
    queries = total(rows, c.total_name(c.PREFIX_QUERIES))
    ext_hits = total(rows, c.total_name(c.EXTERNAL_HITS))
    ext_queries = total(rows, c.total_name(c.EXTERNAL_QUERIES))
    cached = total(rows, c.total_name(c.PROMPT_TOKENS_CACHED))
    by_source = label_total(rows, c.total_name(c.PROMPT_BY_SOURCE), "source")
    by_tier = label_total(rows, c.total_name(c.CACHED_BY_SOURCE), "source")
    if cached is None and by_source:
        cached = by_source.get("local_cache_hit", 0.0) + by_source.get("external_kv_transfer", 0.0)
    p50, p99 = _p50_p99(rows, TTFT)
    tpot50, tpot99 = _p50_p99(rows, c.TPOT)
    itl50, itl99 = _p50_p99(rows, c.ITL)

    # LMCache: multi-process server (lmcache_mp_*), else in-process (lmcache:* inside vLLM)
    lm_req = total(rows, c.total_name(c.LM_REQUESTED))
    lm_hit = total(rows, c.total_name(c.LM_HIT))
    lm_l1 = total(rows, c.total_name(c.LM_HIT_L1))
    lm_l2 = total(rows, c.total_name(c.LM_HIT_L2))
    if lm_req is None:
        lm_req = total(rows, c.total_name(c.LM_INPROC_REQUESTED))
        lm_hit = total(rows, c.total_name(c.LM_INPROC_HIT))
    st = WindowStats(
        prefix_cache_hit_rate=ratio(hits, queries),
        external_prefix_cache_hit_rate=ratio(ext_hits, ext_queries),
        cached_prompt_tokens=cached,
        prompt_tokens=total(rows, c.total_name(c.PROMPT_TOKENS)),
        requests=total(rows, c.count_name(TTFT)),
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
        lmcache_l1_hit_rate=ratio(lm_l1, lm_req),
        lmcache_l2_hit_rate=ratio(lm_l2, lm_req),
        prefix_cache_hits=hits,
        prefix_cache_queries=queries,
        external_prefix_cache_hits=ext_hits,
        external_prefix_cache_queries=ext_queries,
        prompt_tokens_by_source=by_source,
        cached_tokens_by_tier=by_tier,
        generation_tokens=total(rows, c.total_name(c.GENERATION_TOKENS)),
        prefill_seconds_sum=total(rows, c.sum_name(c.PREFILL_TIME)),
        prefill_requests=total(rows, c.count_name(c.PREFILL_TIME)),
        prefill_computed_tokens=total(rows, c.sum_name(c.PREFILL_COMPUTED)),
        estimated_flops=total(rows, c.total_name(c.ESTIMATED_FLOPS)),
        counter_resets=sum(r.resets for r in rows),
        counter_decreases=sum(r.broken or 0 for r in rows),
        notes=_decrease_notes(rows) + _gap_notes(rows) + _sum_notes(rows),
    )
    for name in RATE_FIELDS:
        v = getattr(st, name)
        if v is not None and not 0 <= v <= 1:
            setattr(st, name, None)
            st.notes.append(f"{name}: not reported: the counters give {v:.4g}, outside [0, 1] (inconsistent "
                            "hits and queries in this window)")
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
               "lmcache_l1_hit_rate", "lmcache_l2_hit_rate")


def _decrease_notes(rows: list[Increase]) -> list[str]:
    broken: dict[str, int] = defaultdict(int)
    for r in rows:
        if r.broken:
            broken[f"{r.name} ({r.target})" if r.target else r.name] += r.broken
    if not broken:
        return []
    names = ", ".join(f"{k}: {v}" for k, v in sorted(broken.items())[:5])
    more = f" and {len(broken) - 5} more series" if len(broken) > 5 else ""
    return [f"warning: {sum(broken.values())} counter decrease(s) with an unchanged _created were not counted "
            f"(not a restart: a broken or replaced target) - {names}{more}"]


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


def parts_above_whole(values: Iterable[tuple[str, str | None, str | None, tuple, float]],
                      slack: float = PART_SLACK) -> list[str]:
    """Warnings for sums that cannot be: ``values`` are (name, model_name, engine, other labels,
    value) of one payload's samples or one window's increases; a part (summed over its ``PARTS``
    labels, L1 + L2 together) above its whole's series by more than ``slack`` is named."""
    rows = list(values)
    wholes = {(n, m, e, lab): v for n, m, e, lab, v in rows if n in {w for _, _, w in PARTS}}
    sums: dict[tuple, float] = defaultdict(float)
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
                              + ([f"engine={e}"] if e is not None else []))
            out.append(f"warning: {label} sums to {v:,.0f}, above {whole} = {w:,.0f}"
                       + (f" ({where})" if where else "") + ": a part cannot exceed the whole (inconsistent "
                       "counters; the figures that use them are suspect)")
    return out


def _sum_notes(rows: list[Increase]) -> list[str]:
    names = {n for p, _, w in PARTS for n in (p, w)}
    return parts_above_whole((r.name, r.model_name, r.engine, tuple(sorted(json.loads(r.labels or "{}").items())),
                              r.increase) for r in rows if r.name in names)


def _gap_notes(rows: list[Increase]) -> list[str]:
    gaps: dict[str, int] = defaultdict(int)
    for r in rows:
        if r.gaps:
            gaps[f"{r.name} ({r.target})" if r.target else r.name] += r.gaps
    if not gaps:
        return []
    names = ", ".join(f"{k}: {v}" for k, v in sorted(gaps.items())[:5])
    more = f" and {len(gaps) - 5} more series" if len(gaps) > 5 else ""
    return [f"note: {sum(gaps.values())} time(s) a series seen before was missing from a scrape of its target and "
            f"came back: counted from its last value, not from 0 (a truncated or partial payload?) - {names}{more}"]


def null_reasons(ok_scrapes: dict[str, int], data_span: tuple | None, model: str | None,
                 models: list[str]) -> list[str]:
    """Why every figure of a window is null, from what the database holds: ``ok_scrapes``
    (successful scrapes per target inside the window), the deployment's data span, the
    model asked for and the models in the data."""
    if model is not None and model not in models:
        return [f"no data for model {model!r}: the data has {', '.join(map(repr, models)) or 'no model_name'}"]
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


@dataclass(frozen=True)
class Tier:
    """One cache tier's token-weighted hit rate over the window."""

    key: str
    """device | external | lmcache | l1 | l2 (code filters on this, never on ``label``)."""
    label: str
    hit_rate: float | None
    hits: float | None
    queries: float | None


def tiers(s: WindowStats, rows: list[Increase]) -> list[Tier]:
    """Every cache tier of a window: vLLM's device prefix cache, the KV connector, LMCache."""
    req = total(rows, c.total_name(c.LM_REQUESTED))
    inproc = req is None and total(rows, c.total_name(c.LM_INPROC_REQUESTED)) is not None
    lm = "LMCache (in-process)" if inproc else "LMCache MP"
    hit_name = c.total_name(c.LM_INPROC_HIT if inproc else c.LM_HIT)
    return [
        Tier("device", "vLLM prefix cache (device)", s.prefix_cache_hit_rate, s.prefix_cache_hits,
             s.prefix_cache_queries),
        Tier("external", "KV connector (external, e.g. LMCache)", s.external_prefix_cache_hit_rate,
             s.external_prefix_cache_hits, s.external_prefix_cache_queries),
        Tier("lmcache", f"{lm} lookup, L1+L2", s.lmcache_lookup_hit_rate, total(rows, hit_name),
             total(rows, c.total_name(c.LM_INPROC_REQUESTED)) if inproc else req),
        Tier("l1", "LMCache MP L1 (CPU memory)", s.lmcache_l1_hit_rate, total(rows, c.total_name(c.LM_HIT_L1)), req),
        Tier("l2", "LMCache MP L2 (disk / remote)", s.lmcache_l2_hit_rate, total(rows, c.total_name(c.LM_HIT_L2)), req),
    ]


def latency_quantiles(rows: Iterable[Increase]) -> tuple[dict[str, Quantile | None], dict[str, float | None]]:
    """p50 and p99 (``'TTFT p50'``, ``'queue p99'``, ...) and the mean of every latency
    histogram in ``catalog.LATENCIES``."""
    rows = list(rows)
    qs, means = {}, {}
    for short, fam in c.LATENCIES.items():
        buckets = histogram_buckets(rows, fam)
        for q in (0.5, 0.99):
            qs[f"{short} p{round(q * 100)}"] = bucket_quantile(q, buckets) if buckets else None
        means[short] = ratio(total(rows, c.sum_name(fam)), total(rows, c.count_name(fam)))
    return qs, means
