"""The source articles' published scenarios as PLANNING PRESETS -- never measured data.

Each preset turns an article's published figures into inputs the model accepts, so a user
without metrics yet can see how the plan behaves. Every preset lists which figures are
published (and where) and which we assumed or derived. A preset's "window" is synthetic: one
day of traffic at an assumed request rate, with a prefill timer sum chosen so that estimator A
returns the per-token cost derived from the published TTFT (the inverse of its overlap
correction). Results computed from a preset are labelled ``planning_preset`` everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..inputs.deployment import DeploymentFacts
from ..inputs.planning import PlanningInputs
from ..inputs.pricebook import PriceBook
from ..prefill.measurement import PrefillMeasurement
from .plan import PlanResult, plan
from .verdict import PlanInputs

SYNTHETIC_WINDOW_SECONDS = 86400.0
"""Presets describe one day of steady traffic (no short-window penalty)."""


@dataclass(frozen=True)
class Preset:
    """A labelled planning scenario taken from a source article."""

    key: str
    """Stable identifier."""
    title: str
    """Shown in the app; always says it is a planning preset."""
    source_file: str
    """Article file in the project's seeds the figures come from."""
    published: dict[str, str]
    """Figures as the article publishes them."""
    assumed: tuple[str, ...]
    """What we assumed or derived to turn them into model inputs."""
    inputs: PlanInputs
    """Inputs for ``plan``."""
    kind: str = "planning_preset"
    """Always 'planning_preset': never measured data."""

    def plan(self) -> PlanResult:
        """Run the model on this preset, labelled as such."""
        return plan(self.inputs, label=f"PLANNING PRESET: {self.title}",
                    source="planning_preset",
                    extra_assumptions=tuple(f"[preset] {a}" for a in self.assumed))


def synthetic_window(*, requests_per_second: float, prompt_tokens_per_request: float,
                     hit_rate: float, gpu_seconds_per_token: float, num_gpus: int,
                     baseline_hit_rate: float = 0.0, tensor_parallel_size: int = 1,
                     transfer_gpu_seconds_per_token: float = 0.0,
                     window_seconds: float = SYNTHETIC_WINDOW_SECONDS,
                     model_params: float | None = None, num_layers: int | None = None,
                     attention_width: int | None = None, gpu_peak_flops: float | None = None,
                     transferred_cached_tokens: float | None = None) -> PrefillMeasurement:
    """A window of steady traffic whose estimator A yields ``gpu_seconds_per_token``. The
    served model's facts (``model_params`` ... ``transferred_cached_tokens``) pass through to
    the ``PrefillMeasurement`` fields of the same names.

    busy GPU-seconds = computed tokens x cost + transfer time; busy fraction b = busy /
    (window x GPUs); invert b = 1 - exp(-L) to L = -ln(1 - b); timer sum = L x window x
    engines."""
    requests = requests_per_second * window_seconds
    prompt = requests * prompt_tokens_per_request
    cached, baseline = prompt * hit_rate, prompt * baseline_hit_rate
    computed = prompt - cached
    busy = computed * gpu_seconds_per_token + (cached - baseline) * transfer_gpu_seconds_per_token
    busy_fraction = busy / (window_seconds * num_gpus)
    if busy_fraction >= 1:
        raise ValueError("synthetic_window: the load exceeds the fleet's prefill capacity")
    engines = num_gpus // tensor_parallel_size
    occupancy = -math.log(1.0 - busy_fraction)
    return PrefillMeasurement(
        window_seconds=window_seconds, requests=requests, prompt_tokens=prompt,
        cached_prompt_tokens=cached, computed_prompt_tokens=computed,
        prefill_seconds_sum=occupancy * window_seconds * engines, prefill_count=requests,
        num_gpus=num_gpus, tensor_parallel_size=tensor_parallel_size,
        baseline_cached_prompt_tokens=baseline,
        transfer_gpu_seconds_per_token=transfer_gpu_seconds_per_token, model_params=model_params,
        num_layers=num_layers, attention_width=attention_width, gpu_peak_flops=gpu_peak_flops,
        transferred_cached_tokens=transferred_cached_tokens)


# ---- (a) one L40S, an agent workload, vLLM's built-in prefix cache ------------------------
L40S_TTFT_P50_UNIQUE_S = 9.652
L40S_TTFT_P50_SHARED_S = 3.773
L40S_USERS = 10
L40S_CONTEXT_TOKENS = 16384
L40S_PREFILL_TOKENS_PER_S = 5.5 * L40S_CONTEXT_TOKENS / L40S_TTFT_P50_UNIQUE_S
"""~9,336 tok/s: 10 prompts arriving together are prefilled one after another, so the median
(5.5th) waits 5.5 x 16,384 / R = the unique-session TTFT p50."""
L40S_IMPLIED_HIT_RATE = 1.0 - L40S_TTFT_P50_SHARED_S / L40S_TTFT_P50_UNIQUE_S
"""~0.609: with TTFT proportional to the tokens computed, shared/unique TTFT = 1 - hit rate."""
L40S_TOTAL_PARAMS = 30.5e9
"""Qwen3-Coder-30B-A3B: 30.5e9 parameters in all (3.3e9 active)."""
L40S_KV_BYTES_PER_TOKEN = 48 * 4 * 128 * 2 * 1
"""48 layers x 4 KV heads x 128 dims x (K, V) x 1 byte (FP8 KV) = 49,152 bytes: the article's ~48 KB."""


def l40s_agent() -> Preset:
    rps = L40S_USERS / 60.0
    m = synthetic_window(
        requests_per_second=rps, prompt_tokens_per_request=L40S_CONTEXT_TOKENS,
        hit_rate=L40S_IMPLIED_HIT_RATE, gpu_seconds_per_token=1.0 / L40S_PREFILL_TOKENS_PER_S,
        num_gpus=1, model_params=3.3e9, num_layers=48, attention_width=32 * 128,
        gpu_peak_flops=181e12, transferred_cached_tokens=0.0)
    facts = DeploymentFacts(gpu_type="L40S-48GB", gpu_peak_flops=181e12, model_params=3.3e9,
                            total_model_params=L40S_TOTAL_PARAMS, weight_bytes_per_param=1.0,
                            kv_bytes_per_token=L40S_KV_BYTES_PER_TOKEN, max_context_tokens=L40S_CONTEXT_TOKENS)
    pb = PriceBook(gpu_type="L40S-48GB", gpu_memory_gb=48.0, pricing_mode="cloud", usd_per_gpu_hour=1.00,
                   cache_tier_gb_cpu=0.0, cache_service_node_usd_per_month=0.0,
                   ops_hours_per_month=1.0, usd_per_ops_hour=100.0, gpus_per_node=1)
    planning = PlanningInputs(ttft_p99_slo_seconds=5.0, growth_rate_per_month=0.05,
                              horizon_months=12, realisation="absorb_growth")
    return Preset(
        key="l40s_agent_prefix_cache",
        title="Coding agent on one L40S, vLLM prefix caching (qwen3-coder-30b, 10 users, 16K)",
        source_file="000_cb5ff613366fdd9c.txt",
        published={
            "model / GPU": "qwen3-coder-30b, fp8 KV cache, one L40S, vLLM --enable-prefix-caching",
            "load": "10 users, 16K context, same 10 requests twice",
            "TTFT p50": "9,652 ms unique sessions vs 3,773 ms shared prefix (2.6x)",
            "total time": "16.1 s vs 5.2 s (3.1x)",
            "tok/s p50 per user": "15.9 vs 73.6 (4.6x)",
            "aggregate throughput": "199 vs 740 tok/s (3.7x)",
            "KV cache per token": "about 48 KB",
            "hit rate": "not measured (the article names it as the missing number)",
        },
        assumed=(
            "Model = Qwen3-Coder-30B-A3B: 3.3e9 active params, 48 layers, 32 x 128 attention "
            "width, 4 KV heads (48 x 4 x 128 x 2 x 1 byte = 48 KB/token: matches the article).",
            f"Prefill speed {L40S_PREFILL_TOKENS_PER_S:,.0f} tokens/s derived from TTFT p50 "
            "(10 prompts of 16,384 tokens served in turn; median waits 5.5 prompts).",
            f"Hit rate {L40S_IMPLIED_HIT_RATE:.1%} derived as 1 - 3,773/9,652 (TTFT "
            "proportional to computed tokens); the article did not measure it.",
            "Each of the 10 users sends one 16K-token request per minute, steadily, for a day.",
            "Cache hits come from GPU memory (vLLM prefix cache): no transfer cost, no cache "
            "service, 1 ops hour/month at $100.",
            "L40S: $1.00/GPU-hour cloud, 181 TFLOP/s dense BF16 peak, 40 % prefill MFU.",
            "p99 TTFT target 5 s, growth 5 %/month, 12-month horizon, freed time absorbs growth.",
            "Replica memory: 30.5e9 parameters in FP8 (30.5 GB; the model ran on one 48 GB L40S, so "
            "its weights cannot be BF16) + KV for the 10 users x 16,384 tokens x 48 KB (8.1 GB) "
            "fits one L40S at vLLM's 90 % memory share (43.2 GB).",
            "No load sweep: the fleet is sized with the queueing fallback.",
        ),
        inputs=PlanInputs(m, pb, planning, facts=facts, concurrency_per_replica=float(L40S_USERS)))


# ---- (b) 8x H100, Qwen3-235B-A22B, LMCache multi-process shared pool ---------------------
H100_RANKS = 8
H100_TTFT_MEAN_PRIVATE_S = 4.0
H100_TTFT_MEAN_SHARED_S = 0.33
H100_PROMPT_TOKENS = 20000
_R = H100_TTFT_MEAN_SHARED_S / H100_TTFT_MEAN_PRIVATE_S
H100_SHARED_HIT_RATE = (1.0 - _R) / (1.0 - _R / H100_RANKS)
"""~0.927: private caches hit only when a turn lands on the rank that served the previous one
(1 in 8 with random routing), so private hit rate = h/8; with TTFT proportional to computed
tokens, (1 - h) / (1 - h/8) = 0.33 / 4."""
H100_PRIVATE_HIT_RATE = H100_SHARED_HIT_RATE / H100_RANKS
H100_PREFILL_TOKENS_PER_S = (1.0 - H100_PRIVATE_HIT_RATE) * H100_PROMPT_TOKENS \
    / H100_TTFT_MEAN_PRIVATE_S
"""~4,420 tok/s per rank: mean TTFT with private caches ~= prefill time of the computed part."""
H100_KV_BYTES_PER_TOKEN = 94 * 4 * 128 * 2 * 2
"""94 layers x 4 KV heads x 128 dims x (K, V) x 2 bytes (BF16 KV) = 188 KB."""
H100_HOST_TO_DEVICE_BYTES_PER_S = 25e9
H100_FP8_DENSE_FLOPS = 1979e12
"""H100 SXM dense FP8 peak (989e12 is dense BF16; 3,958e12 is FP8 with sparsity)."""
H100_TOTAL_PARAMS = 235e9
"""Qwen3-235B-A22B: 235e9 parameters held in memory (22e9 active per token)."""
H100_CONCURRENCY_PER_REPLICA = 4.0
"""Assumed running conversations per replica for the KV part of the memory check (not published)."""


def h100_lmcache_mp() -> Preset:
    m = synthetic_window(
        requests_per_second=1.0, prompt_tokens_per_request=H100_PROMPT_TOKENS,
        hit_rate=H100_SHARED_HIT_RATE, baseline_hit_rate=H100_PRIVATE_HIT_RATE,
        gpu_seconds_per_token=1.0 / H100_PREFILL_TOKENS_PER_S, num_gpus=H100_RANKS,
        transfer_gpu_seconds_per_token=H100_KV_BYTES_PER_TOKEN / H100_HOST_TO_DEVICE_BYTES_PER_S,
        model_params=22e9, num_layers=94, attention_width=64 * 128, gpu_peak_flops=H100_FP8_DENSE_FLOPS)
    facts = DeploymentFacts(gpu_type="H100-80GB", gpu_peak_flops=H100_FP8_DENSE_FLOPS, model_params=22e9,
                            total_model_params=H100_TOTAL_PARAMS, weight_bytes_per_param=1.0,
                            kv_bytes_per_token=float(H100_KV_BYTES_PER_TOKEN),
                            max_context_tokens=H100_PROMPT_TOKENS)
    pb = PriceBook(gpu_type="H100-80GB", gpu_memory_gb=80.0, pricing_mode="owned", capex_usd_per_gpu=35000.0,
                   amortisation_months=36, power_hosting_usd_per_gpu_month=300.0,
                   cost_of_capital_annual=0.08, usd_per_gb_month_cpu_memory=1.0,
                   cache_tier_gb_cpu=400.0, cache_service_node_usd_per_month=100.0,
                   ops_hours_per_month=8.0, usd_per_ops_hour=100.0, gpus_per_node=8)
    planning = PlanningInputs(ttft_p99_slo_seconds=6.0, growth_rate_per_month=0.10,
                              horizon_months=24, realisation="absorb_growth")
    return Preset(
        key="h100_lmcache_mp_shared_pool",
        title="Qwen3-235B-A22B-FP8 on 8x H100: LMCache multi-process 400 GB shared pool vs "
              "8 private 50 GB caches",
        source_file="002_ec5439aae3fd9797.txt",
        published={
            "model / GPU": "Qwen3-235B-A22B-Instruct-2507-FP8, 8x H100 80GB, vLLM 0.18.1, "
                           "LMCache 0.4.3-dev (LMCache's benchmark, not reproduced by the article)",
            "cache": "50 GB CPU per rank = 400 GB; in-process: 8 isolated caches; "
                     "multi-process: one shared pool",
            "mean TTFT": "about 4 s -> under 0.33 s (~14x), largest gain at P99",
            "workload": "multi-turn conversations; a turn routed to another rank re-does "
                        "the whole prefill in in-process mode",
            "hit rate, prompt length, request rate": "not published",
        },
        assumed=(
            "8 data-parallel ranks, one GPU each as a serving replica; random routing.",
            f"Mean prompt {H100_PROMPT_TOKENS:,} tokens (conversation history); 1 request/s "
            "for the node, steadily, for a day.",
            f"Shared-pool hit rate {H100_SHARED_HIT_RATE:.1%} and private-cache hit rate "
            f"{H100_PRIVATE_HIT_RATE:.1%} derived from the 4 s -> 0.33 s TTFT (private caches hit "
            "1 turn in 8; TTFT proportional to computed tokens). The saving priced is the "
            "difference: the in-process set-up is the baseline.",
            f"Prefill speed {H100_PREFILL_TOKENS_PER_S:,.0f} tokens/s per rank from the 4 s "
            "mean TTFT with private caches (no queueing assumed).",
            "Model: 22e9 active params, 94 layers, 64 x 128 attention width, 4 KV heads, BF16 "
            "KV (188 KB/token) loaded from host at 25 GB/s, the GPU waiting for it.",
            "H100: 1,979 TFLOP/s dense FP8 peak (989 is dense BF16), 40 % prefill MFU; owned at $35,000 per GPU "
            "(server share included), 36 months, 8 % cost of capital, $300/GPU-month power and "
            "hosting.",
            "Cache: 400 GB host RAM at $1/GB-month, $100/month for the service's CPU, 8 ops "
            "hours/month at $100.",
            "p99 TTFT target 6 s, growth 10 %/month, 24-month horizon, freed time absorbs growth.",
            "Replica memory: 235e9 parameters in FP8 = 235 GB of weights + KV for 4 running "
            "conversations x 20,000 tokens x 188 KB (15.4 GB) = 250 GB, over 72 GB usable per H100 "
            "(90 %): one replica needs >= 4 H100 (the 8 ranks are data-parallel attention over "
            "expert-parallel weights: 8 private KV caches, one copy of the weights per 4+ GPUs). "
            "The fleet is sized in 4-GPU replicas.",
            "No load sweep: the fleet is sized with the queueing fallback.",
        ),
        inputs=PlanInputs(m, pb, planning, facts=facts, concurrency_per_replica=H100_CONCURRENCY_PER_REPLICA))


PRESETS: dict[str, Preset] = {p.key: p for p in (l40s_agent(), h100_lmcache_mp())}
"""Every preset by key."""
