"""The SGLang releases of the built engine fixtures (0.5.4 and 0.5.23), each as its source
declares its families (the file and release are cited in each one's docstring and meta)."""

from __future__ import annotations

from typing import Any

from kvplan.deploy.local.recorders.fixture_families import E2E, GAPS, MODEL, TTFT, Fam, c, const, obs_of

SGL_TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
SGL_E2E = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400]
SGL_ITL = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
           0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000]


def _sglang_scheduler(lab: dict[str, str]) -> list[Fam]:
    return [
        Fam("sglang:num_running_reqs", "gauge", "The number of running requests.", lab, const(0)),
        Fam("sglang:num_used_tokens", "gauge", "The number of used tokens.", lab, const(2048)),
        Fam("sglang:token_usage", "gauge", "The token usage.", lab, const(0.12)),
        Fam("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", lab, const(0.0)),
        Fam("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", lab, const(0)),
        # the last batch's prefix-cache hit rate, not the window's (constructed: 0.85, unlike the window's 0.6)
        Fam("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", lab, const(0.85)),
    ]


def sglang_054() -> tuple[list[Fam], dict[str, Any]]:
    """SGLang 0.5.4: python/sglang/srt/metrics/collector.py (TokenizerMetricsCollector,
    SchedulerMetricsCollector); labels from srt/managers/tokenizer_manager.py and
    srt/managers/scheduler_metrics_mixin.py."""
    tok = {"model_name": MODEL}
    sched = {"model_name": MODEL, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
    fams = _sglang_scheduler(sched) + [
        Fam("sglang:prompt_tokens", "counter", "Number of prefill tokens processed.", tok, c("prompt")),
        Fam("sglang:generation_tokens", "counter", "Number of generation tokens processed.", tok, c("output")),
        Fam("sglang:cached_tokens", "counter", "Number of cached prompt tokens.", tok, c("cached")),
        Fam("sglang:num_requests", "counter", "Number of requests processed.", tok, c("requests")),
        Fam("sglang:num_aborted_requests", "counter", "Number of requests aborted.", tok, const(0)),
        Fam("sglang:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.",
            tok, obs_of(TTFT), SGL_TTFT),
        Fam("sglang:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.",
            tok, obs_of(GAPS), SGL_ITL),
        Fam("sglang:e2e_request_latency_seconds", "histogram", "Histogram of End-to-end request latency in seconds",
            tok, obs_of(E2E), SGL_E2E),
    ]
    meta = {"source": {"repo": "sgl-project/sglang", "tag": "v0.5.4", "file": "python/sglang/srt/metrics/collector.py",
                       "also": "python/sglang/srt/managers/tokenizer_manager.py, scheduler_metrics_mixin.py (labels)",
                       "read_from": "the sglang==0.5.4 wheel on the package index"},
            "created": False,
            "why_built": ("SGLang's CPU backend needs sgl-kernel built for CPU; the index's sgl-kernel / "
                          "sglang-kernel wheels hold CUDA kernels only (sgl_kernel/flash_ops.abi3.so)"),
            "notes": ["sglang:cache_hit_rate is the last batch's rate (0.85 here), not the window's (0.6)"]}
    return fams, meta


def sglang_0523() -> tuple[list[Fam], dict[str, Any]]:
    """SGLang 0.5.23: python/sglang/srt/observability/metrics_collector.py. Cached tokens by
    ``cache_source`` (device/host/storage, or ``total`` when the request had no breakdown:
    one or the other per request, so the sum over cache_source is the cached tokens);
    prompt tokens, requests and TTFT carry ``is_streaming``."""
    tok = {"model_name": MODEL}
    sched = {"model_name": MODEL, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
    stream = {**tok, "is_streaming": "true"}
    # window's cached tokens by tier: device 4,000, host 1,500, total (no breakdown) 500 = 6,000;
    # before: device 1,920
    src = {"before": {"device": 1920, "host": 0, "total": 0}, "window": {"device": 4000, "host": 1500, "total": 500}}

    def cached(phase: str, lab: dict[str, str]) -> float:
        s = lab["cache_source"]
        return src["before"][s] + (src["window"][s] if phase == "after" else 0)

    fams = _sglang_scheduler(sched) + [
        Fam("sglang:prompt_tokens", "counter", "Number of prefill tokens processed.", stream, c("prompt")),
        Fam("sglang:generation_tokens", "counter", "Number of generation tokens processed.", stream, c("output")),
        Fam("sglang:cached_tokens", "counter", "Number of cached prompt tokens by source (device/host/storage).",
            {**tok, "cache_source": "device"}, series=[{"cache_source": "host"}, {"cache_source": "total"}],
            per_series=cached),
        Fam("sglang:num_requests", "counter", "Number of requests processed.", stream, c("requests")),
        Fam("sglang:num_aborted_requests", "counter", "Number of requests aborted.", tok, const(0)),
        Fam("sglang:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.",
            stream, obs_of(TTFT), SGL_TTFT),
        Fam("sglang:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.",
            tok, obs_of(GAPS), SGL_ITL),
        Fam("sglang:e2e_request_latency_seconds", "histogram", "Histogram of End-to-end request latency in seconds",
            stream, obs_of(E2E), SGL_E2E),
    ]
    meta = {"source": {"repo": "sgl-project/sglang", "tag": "v0.5.23",
                       "file": "python/sglang/srt/observability/metrics_collector.py",
                       "read_from": "the sglang==0.5.23 wheel on the package index"},
            "created": False, "why_built": sglang_054()[1]["why_built"],
            "notes": ["window cached tokens by cache_source: device 4,000 + host 1,500 + total 500 = 6,000"]}
    return fams, meta
