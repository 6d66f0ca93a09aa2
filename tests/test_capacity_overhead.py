"""Issue 27, part 3.4: the capacity model charges a tier's overhead where it credits that
tier's GPUs. Before, LMCache's hits shortened every request's prefill and its lookups, stores
and loads were charged nowhere in the fleet size: whole GPUs went to a tier whose net saving
was small.

Worked by hand (M/M/c waiting + deterministic service, p99; c = 1: Erlang C = a = lambda S;
W99 = ln(C / 0.01) / (c / S - lambda) when C > 0.01): one GPU per replica at 10,000 prompt
tokens/s, mean prompt 10,000 tokens, 0.2 req/s, p99 TTFT target 2 s.

* baseline (vLLM's own cache: hit rate 0): S = 1.0 s. c = 1: C = 0.2, W99 = ln 20 / 0.8 =
  3.745 s: misses. c = 2: rho = 0.1, a^2/2 / (1 - rho) = 0.02 / 0.9 = 0.02222, C = 0.02222 /
  (1.2 + 0.02222) = 0.01818, W99 = ln 1.818 / (2 - 0.2) = 0.332 s, TTFT 1.33 s: 2 GPUs.
* with LMCache (hit rate 0.5), no overhead: S = 0.5 s. c = 1: C = 0.1, W99 = ln 10 / 1.8 =
  1.279 s, TTFT 1.78 s: 1 GPU. One whole GPU credited.
* with LMCache's overhead of 0.45 GPU-s per request (net saving 0.5 - 0.45 = 0.05 GPU-s a
  request, a tenth of the gross): S = 0.95 s. c = 1: C = 0.19, W99 = ln 19 / (1/0.95 - 0.2) =
  3.45 s: misses. c = 2: a^2/2 / (1 - 0.095) = 0.01805 / 0.905 = 0.019945, C = 0.019945 /
  1.209945 = 0.01648, W99 = ln 1.648 / (2/0.95 - 0.2) = 0.262 s, TTFT 1.21 s: 2 GPUs.
  No GPU credited."""

import math
from dataclasses import replace

import pytest

from kvplan.models.capacity.fleet import CapacityInputs, plan_capacity
from kvplan.models.inputs.pricebook import PriceBook

BASE = CapacityInputs(ttft_p99_slo_seconds=2.0, requests_per_second=0.2, mean_prompt_tokens=10_000,
                      hit_rate=0.5, prefill_tokens_per_gpu_second=10_000, current_gpus=2)


def test_without_overhead_the_hits_alone_give_a_gpu_back():
    cap = plan_capacity(BASE, PriceBook())
    assert cap.service_seconds_with_reuse == pytest.approx(0.5)
    assert (cap.gpus_needed_without_reuse, cap.gpus_needed_with_reuse) == (2, 1)


def test_the_overhead_is_charged_where_the_gpus_are_credited():
    cap = plan_capacity(replace(BASE, reuse_overhead_gpu_seconds_per_request=0.45), PriceBook())
    assert cap.service_seconds_with_reuse == pytest.approx(0.95)
    assert cap.service_seconds_without_reuse == pytest.approx(1.0)  # the baseline pays no LMCache
    assert (cap.gpus_needed_without_reuse, cap.gpus_needed_with_reuse) == (2, 2)  # was (2, 1)
    # today's two GPUs, p99 by hand: 0.95 + ln(0.01648 / 0.01) / (2 / 0.95 - 0.2)
    c = (0.19 ** 2 / 2 / (1 - 0.095)) / (1 + 0.19 + 0.19 ** 2 / 2 / (1 - 0.095))
    assert cap.ttft_p99_with_reuse_s == pytest.approx(0.95 + math.log(c / 0.01) / (2 / 0.95 - 0.2), rel=1e-6)


def test_a_tensor_parallel_replica_spreads_the_overhead_over_its_gpus():
    # 2 GPUs a replica: 20,000 tokens/s; 0.45 GPU-s of overhead is 0.225 s of the replica
    cap = plan_capacity(replace(BASE, gpus_per_replica=2, reuse_overhead_gpu_seconds_per_request=0.45),
                        PriceBook())
    assert cap.service_seconds_with_reuse == pytest.approx(5000 / 20_000 + 0.225)


def test_the_overhead_must_not_be_negative():
    with pytest.raises(ValueError, match="reuse_overhead_gpu_seconds_per_request"):
        replace(BASE, reuse_overhead_gpu_seconds_per_request=-1.0)
