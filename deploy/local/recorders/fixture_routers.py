"""The routers and gateways of the built engine fixtures: the vLLM production-stack router,
the llm-d endpoint picker (EPP) and the NVIDIA Dynamo frontend, whose /metrics kvplan must refuse
or label (each one's source is cited in its docstring and meta)."""

from __future__ import annotations

from typing import Any

from kvplan.deploy.local.recorders.fixture_families import E2E, GAPS, MODEL, TTFT, Fam, c, const, obs_of


def production_stack_router() -> tuple[list[Fam], dict[str, Any]]:
    """vLLM production-stack router: src/vllm_router/services/metrics_service/__init__.py and
    src/vllm_router/routers/metrics_router.py. Its vllm:* families are gauges labelled ``server``
    (what the router scraped from each engine, or its own request stats), not an engine's counters."""
    servers = [{"server": "http://engine-0:8000"}, {"server": "http://engine-1:8000"}]
    s0 = servers[0]
    more = servers[1:]
    hits = {"before": 1920.0, "after": 7920.0}
    fams = [
        Fam("vllm:num_requests_running", "gauge", "Number of running requests", s0, const(0), series=more),
        Fam("vllm:num_requests_waiting", "gauge", "Number of waiting requests", s0, const(0), series=more),
        Fam("vllm:gpu_prefix_cache_hit_rate", "gauge", "GPU Prefix Cache Hit Rate", s0, const(0.5), series=more),
        Fam("vllm:gpu_prefix_cache_hits_total", "gauge", "Total GPU Prefix Cache Hits", s0,
            lambda p: hits[p], series=more),
        Fam("vllm:gpu_prefix_cache_queries_total", "gauge", "Total GPU Prefix Cache Queries", s0,
            c("prompt"), series=more),
        Fam("vllm:current_qps", "gauge", "Current Queries Per Second", s0, const(0.5), series=more),
        Fam("vllm:avg_decoding_length", "gauge", "Average Decoding Length", s0, const(16), series=more),
        Fam("vllm:num_prefill_requests", "gauge", "Number of Prefill Requests", s0, const(0), series=more),
        Fam("vllm:num_decoding_requests", "gauge", "Number of Decoding Requests", s0, const(0), series=more),
        Fam("vllm:healthy_pods_total", "gauge", "Number of healthy vLLM pods", s0, const(1), series=more),
        Fam("vllm:avg_latency", "gauge", "Average end-to-end request latency", s0, const(1.25), series=more),
        Fam("vllm:avg_itl", "gauge", "Average Inter-Token Latency", s0, const(0.045), series=more),
        Fam("vllm:num_requests_swapped", "gauge", "Number of swapped requests", s0, const(0), series=more),
        Fam("vllm:num_incoming_requests", "counter",
            "Total valid incoming requests to router (including when no backends available).",
            {"model": MODEL}, c("requests")),
        Fam("router_cpu_usage_percent", "gauge", "CPU usage percent", {}, const(3.0)),
        Fam("router_memory_usage_percent", "gauge", "Memory usage percent", {}, const(20.0)),
        Fam("router_disk_usage_percent", "gauge", "Disk usage percent", {}, const(40.0)),
    ]
    meta = {"source": {"repo": "vllm-project/production-stack",
                       "file": "src/vllm_router/services/metrics_service/__init__.py",
                       "commit": "0c740a253d0c4673480b932d51b57520a695c926",
                       "also": "src/vllm_router/routers/metrics_router.py at 02605e693c77dedf7a0140deb8cc8632b8e73796"},
            "created": True, "why_built": "a router, not an engine: kvplan must refuse or label it",
            "notes": ["vllm:gpu_prefix_cache_hits_total / _queries_total are gauges labelled server"]}
    return fams, meta


def llmd_epp() -> tuple[list[Fam], dict[str, Any]]:
    """llm-d's endpoint picker (Gateway API Inference Extension EPP): site-src/guides/metrics.md."""
    m = {"model_name": MODEL, "target_model_name": MODEL}
    pool = {"name": "vllm-pool"}
    fams = [
        Fam("inference_model_request", "counter", "Counter of inference model requests broken out for each model "
            "and target model.", m, c("requests")),
        Fam("inference_model_request_duration_seconds", "histogram", "Inference model response latency "
            "distribution in seconds for each model and target model.", m, obs_of(E2E),
            [0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60]),
        Fam("inference_pool_average_kv_cache_utilization", "gauge", "The average kv cache utilization for an "
            "inference server pool.", pool, const(0.05)),
        Fam("inference_pool_average_queue_size", "gauge", "The average number of requests pending in the model "
            "server queue.", pool, const(0)),
        Fam("inference_pool_ready_pods", "gauge", "The number of ready pods in the inference server pool.",
            pool, const(2)),
    ]
    meta = {"source": {"repo": "kubernetes-sigs/gateway-api-inference-extension", "file": "site-src/guides/metrics.md",
                       "also": "pkg/epp/metrics/metrics.go (names and label names as documented there)"},
            "created": True, "why_built": "a gateway (endpoint picker), not an engine: kvplan must refuse or label it",
            "notes": ["bucket bounds of inference_model_request_duration_seconds as in metrics.go at the time of "
                      "writing; only the names matter for detection"]}
    return fams, meta


def dynamo_frontend() -> tuple[list[Fam], dict[str, Any]]:
    """NVIDIA Dynamo frontend: lib/runtime/src/metrics/prometheus_names.rs (frontend_service)."""
    m = {"model": MODEL}
    fams = [
        Fam("dynamo_frontend_requests", "counter", "Total number of LLM requests processed",
            {**m, "endpoint": "completions", "request_type": "unary", "status": "success"}, c("requests")),
        Fam("dynamo_frontend_inflight_requests", "gauge", "Number of inflight requests", m, const(0)),
        Fam("dynamo_frontend_time_to_first_token_seconds", "histogram", "Time to first token in seconds", m,
            obs_of(TTFT), [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]),
        Fam("dynamo_frontend_inter_token_latency_seconds", "histogram", "Inter-token latency in seconds", m,
            obs_of(GAPS), [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1]),
        Fam("dynamo_frontend_kv_hit_rate", "gauge", "Predicted KV cache hit rate at routing time (0.0-1.0)", m,
            const(0.55)),
    ]
    meta = {"source": {"repo": "ai-dynamo/dynamo", "file": "lib/runtime/src/metrics/prometheus_names.rs",
                       "commit": "04070c75b52f33346a2d5723eed93a0093e77bad"},
            "created": True, "why_built": "a frontend (router), not an engine: kvplan must refuse or label it",
            "notes": ["names from prometheus_names.rs (prefix dynamo_frontend_); bucket bounds are placeholders, "
                      "only the names matter for detection; dynamo_frontend_kv_hit_rate is the router's prediction"]}
    return fams, meta
