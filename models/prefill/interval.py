"""Observations the prefill cost model is fitted on: one target's (or one scrape round's)
increases over one scrape interval (``Interval``), scrape rounds (``rounds``), and the engine
time an interval's prefill timers stand for (``engine_prefill_seconds``). The model and the fit
are in ``kvplan.models.prefill.fit``."""

from __future__ import annotations

import math
from dataclasses import dataclass

DECODE_STEP_SHARE = 0.25
"""Engine steps with fewer tokens than this share of a mean prefill count as decode-only."""


@dataclass(frozen=True)
class Interval:
    """Increases of one target (or one scrape round of a deployment) over one scrape
    interval. ``None`` = not reported by these servers."""

    t_start: float
    """Start (the previous sample), unix seconds."""
    t_end: float
    """End (this sample), unix seconds."""
    requests: float = 0.0
    """Requests whose prefill finished (``vllm:request_prefill_time_seconds_count``)."""
    prefill_seconds: float = 0.0
    """Their summed prefill timers (``..._sum``), seconds."""
    computed_tokens: float = 0.0
    """Their computed prompt tokens (``vllm:request_prefill_kv_computed_tokens_sum``)."""
    prompt_tokens: float | None = None
    """Their prompt tokens (``vllm:request_prompt_tokens_sum``)."""
    cached_tokens: float | None = None
    """Cached prompt tokens counted by vLLM's iteration counters
    (``vllm:prompt_tokens_cached_total``); used when ``prompt_tokens`` is missing."""
    external_tokens: float | None = None
    """Of the cached ones, supplied by the KV connector (LMCache)
    (``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}``)."""
    stored_tokens: float | None = None
    """Tokens LMCache stored (``lmcache_mp_l1_write_chunks_total`` x chunk size)."""
    lookup_seconds: float | None = None
    """Time vLLM spent in LMCache lookups (``vllm:lmcache_mp_lookup_duration_seconds_sum``):
    measured, it blocks the scheduler before the request's prefill starts."""
    lookups: float | None = None
    """LMCache lookups vLLM made (``..._lookup_duration_seconds_count``): requests that went
    through LMCache."""
    engines: int = 0
    """vLLM engines reporting in the interval."""
    inference_seconds: float | None = None
    """Summed running-phase timers (``vllm:request_inference_time_seconds_sum``)."""
    generation_tokens: float | None = None
    """Output tokens (``vllm:generation_tokens_total``)."""
    step_buckets: tuple[tuple[float, float], ...] = ()
    """Cumulative (le, steps) of ``vllm:iteration_tokens_total`` increases."""
    targets: tuple[str, ...] = ()
    """Targets summed into this row."""
    reset: bool = False
    """A counter restarted inside the interval."""

    @property
    def seconds(self) -> float:
        return max(0.0, self.t_end - self.t_start)

    @property
    def request_cached(self) -> float:
        """Cached tokens of the requests counted here (P - T), else the iteration counter."""
        if self.prompt_tokens is not None:
            return max(0.0, self.prompt_tokens - self.computed_tokens)
        return max(0.0, self.cached_tokens or 0.0)

    @property
    def request_prompt(self) -> float:
        return self.computed_tokens + self.request_cached

    @property
    def external_share(self) -> float:
        """Share of cached tokens the connector supplied (0 when unknown or none)."""
        if not self.cached_tokens or self.external_tokens is None:
            return 0.0
        return min(1.0, max(0.0, self.external_tokens / self.cached_tokens))

    def max_decode_batch(self) -> float:
        """Most requests that can have decoded together in one step of this interval: the
        requests that finished in it, or twice the mean number running (running-phase timers /
        interval), whichever is larger."""
        running = 0.0
        if self.inference_seconds is not None and self.seconds > 0:
            running = 2.0 * self.inference_seconds / (self.seconds * max(self.engines, 1))
        return max(1.0, self.requests / max(self.engines, 1), math.ceil(running))

    def alone_share(self) -> float:
        """How often a request had the engine to itself: the share of decode-only steps that
        carried a single token (1 when the histogram is missing: assume no concurrency)."""
        if not self.step_buckets or self.requests <= 0:
            return 1.0
        buckets = sorted(self.step_buckets)
        steps = self.prefill_steps() or 0.0
        decode = buckets[-1][1] - steps
        single = next((c for le, c in buckets if le >= 1.0), 0.0)
        return min(1.0, single / decode) if decode > 0 else 1.0

    def decode_batch(self) -> float | None:
        """Mean requests per decode-only engine step: (output tokens - requests, the first
        token of each coming from its prefill step) / decode-only steps; None without the
        iteration-token histogram or output tokens."""
        if not self.step_buckets or self.generation_tokens is None or self.requests <= 0:
            return None
        decode_steps = sorted(self.step_buckets)[-1][1] - (self.prefill_steps() or 0.0)
        if decode_steps <= 0:
            return None
        return max(1.0, (self.generation_tokens - self.requests) / decode_steps)

    def exposure(self) -> float:
        """Chance that the engine had nothing else to run while a request waited on the cache
        layer: ``exp(-(B - 1))`` with ``B`` the mean decode batch (the other requests running
        taken as Poisson with mean ``B - 1``); 1 when unknown."""
        b = self.decode_batch()
        return 1.0 if b is None else math.exp(-(b - 1.0))

    def prefill_steps(self) -> float | None:
        """Engine steps that carried prefill tokens (see module docstring), or None."""
        if not self.step_buckets or self.requests <= 0:
            return None
        limit = DECODE_STEP_SHARE * self.computed_tokens / self.requests
        batch = self.max_decode_batch()
        buckets = sorted(self.step_buckets)
        total = buckets[-1][1]
        bound = next((le for le, _ in buckets if le >= batch), None)
        if bound is None or bound > limit:  # decode batches as large as prefills: the smaller
            bound = max((le for le, _ in buckets if le <= min(batch, limit)), default=None)
        decode = next((c for le, c in buckets if le == bound), 0.0) if bound is not None else 0.0
        return max(0.0, total - decode)


def engine_prefill_seconds(iv: Interval) -> tuple[float, float, bool]:
    """(engine prefill seconds, co-batching factor, capped) of one interval: the summed
    timers scaled by prefill steps / requests when requests shared steps, then at most
    ``interval x engines``."""
    y = iv.prefill_seconds
    steps = iv.prefill_steps()
    factor = 1.0
    if steps is not None and 0 < steps < iv.requests:
        factor = steps / iv.requests
    y *= factor
    cap = iv.seconds * max(iv.engines, 1)
    capped = cap > 0 and y > cap
    return (min(y, cap) if cap > 0 else y), factor, capped
