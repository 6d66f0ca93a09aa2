"""What the savings are computed from: one window of one deployment as counter increases
(``PrefillMeasurement``: requests, prompt, computed and cached tokens, prefill seconds, the
fitted cost model and the priced window, the deployment facts), built from ``stats`` or from a
``PricedWindow``; and the same window at another hit rate (``with_hit_rate``, for the
sensitivity). The estimators that price it are in ``kvplan.models.prefill.savings``."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..core.timeutil import aware_utc
from ..core.vocabulary import PricedTier
from .fit import PrefillCostModel
from .table import IntervalTable
from .window import MeasuredAB, PricedWindow

if TYPE_CHECKING:
    from ..inputs.deployment import DeploymentFacts

DEFAULT_PREFILL_MFU = 0.4
"""Assumed model-FLOPs utilisation of prefill (compute-bound; 30-60 % is typical)."""


@dataclass(frozen=True)
class PrefillMeasurement:
    """Counter increases over one window of one deployment (all engines summed).

    ``None`` means "not reported by these servers", never zero."""

    window_seconds: float
    """Length of the window, seconds (> 0)."""
    requests: float
    """Requests finished in the window (increase of ``vllm:time_to_first_token_seconds_count``
    or ``vllm:request_success_total``)."""
    prompt_tokens: float
    """Prompt tokens received (``vllm:prompt_tokens_total``), cached or not."""
    cached_prompt_tokens: float
    """Prompt tokens served from any cache tier: device, host, disk, remote
    (``vllm:prompt_tokens_cached_total``)."""
    num_gpus: int
    """GPUs serving this traffic: engines x tensor-parallel size."""
    computed_prompt_tokens: float | None = None
    """Prompt tokens actually computed (``vllm:request_prefill_kv_computed_tokens_sum``);
    ``None`` = prompt_tokens - cached_prompt_tokens."""
    prefill_seconds_sum: float | None = None
    """Sum of per-request prefill wall times, seconds
    (``vllm:request_prefill_time_seconds_sum``). Needed by estimator A."""
    prefill_count: float | None = None
    """Requests observed by the prefill timer (``..._prefill_time_seconds_count``); used as
    the sample size of the uncertainty. ``None`` = ``requests``."""
    estimated_flops: float | None = None
    """Sum over engine series of the increase of ``vllm:estimated_flops_per_gpu_total`` (each
    series counts one GPU of its engine). Needed by estimator B."""
    generation_tokens: float | None = None
    """Output tokens generated (``vllm:generation_tokens_total``); estimator B divides FLOPs by
    computed prompt + generated tokens. ``None`` = 0 (B then leans high)."""
    mean_prompt_tokens: float | None = None
    """Mean prompt length, tokens; ``None`` = prompt_tokens / requests."""
    tensor_parallel_size: int = 1
    """GPUs per engine (tensor parallel). ``num_gpus`` must be a multiple of it."""
    model_params: float | None = None
    """Parameters active per token (for a mixture-of-experts model: the active ones, e.g.
    22e9 for Qwen3-235B-A22B). Needed by estimator C."""
    num_layers: int | None = None
    """Transformer layers; with ``attention_width`` adds the attention term to estimator C."""
    attention_width: int | None = None
    """Query heads x head dimension (e.g. 32 x 128 = 4096)."""
    gpu_peak_flops: float | None = None
    """Dense peak FLOP/s of one GPU at the model's compute dtype (no sparsity). Needed by B, C."""
    assumed_prefill_mfu: float = DEFAULT_PREFILL_MFU
    """Share of ``gpu_peak_flops`` prefill achieves (0-1]. Assumed, not measured."""
    baseline_cached_prompt_tokens: float = 0.0
    """Cached tokens the set-up being compared against would also have had (e.g. the per-rank
    private caches before a shared LMCache pool). Only the difference is a saving; 0 = compare
    with no cache at all."""
    transferred_cached_tokens: float | None = None
    """Cached tokens that had to be moved into GPU memory from host, disk or remote
    (``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}``). ``None`` =
    every incremental cached token (conservative)."""
    transfer_gpu_seconds_per_token: float = 0.0
    """GPU-seconds the GPU waits per transferred cached token (lookup + load). Assumed 0 unless
    given; e.g. KV bytes per token / host-to-device bandwidth. A fitted cost model's LMCache
    overhead replaces it."""
    cost_model: PrefillCostModel | None = None
    """Prefill cost fitted from the deployment's history (``kvplan.models.prefill.fit``); estimator A
    uses it (with ``window``) instead of the window average."""
    window: PricedWindow | None = None
    """The priced window by tier (device / LMCache cached tokens, attention sums)."""
    measured_ab: MeasuredAB | None = None
    """A measured A/B of this deployment: overrides every estimator, labelled "measured"."""
    priced_tier: PricedTier = PricedTier.ALL
    """Which cached tokens the plan prices: ``all`` (every cache tier against no cache) or
    ``lmcache`` (only what LMCache adds: the baseline keeps vLLM's own prefix cache, which
    comes with vLLM for free; ``baseline_cached_prompt_tokens`` = its hits)."""

    def __post_init__(self) -> None:
        _positive("window_seconds", self.window_seconds)
        for name in ("requests", "prompt_tokens", "cached_prompt_tokens",
                     "baseline_cached_prompt_tokens", "transfer_gpu_seconds_per_token"):
            _non_negative(name, getattr(self, name))
        for name in ("computed_prompt_tokens", "prefill_seconds_sum", "prefill_count",
                     "estimated_flops", "generation_tokens", "mean_prompt_tokens",
                     "transferred_cached_tokens"):
            if getattr(self, name) is not None:
                _non_negative(name, getattr(self, name))
        for name in ("model_params", "gpu_peak_flops", "num_layers", "attention_width"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        if not isinstance(self.num_gpus, int) or self.num_gpus < 1:
            raise ValueError(f"PrefillMeasurement.num_gpus: must be a whole number >= 1; "
                             f"got {self.num_gpus!r}")
        if not isinstance(self.tensor_parallel_size, int) or self.tensor_parallel_size < 1 \
                or self.num_gpus % self.tensor_parallel_size:
            raise ValueError("PrefillMeasurement.tensor_parallel_size: must be >= 1 and divide "
                             f"num_gpus={self.num_gpus}; got {self.tensor_parallel_size!r}")
        if not 0 < self.assumed_prefill_mfu <= 1:
            raise ValueError("PrefillMeasurement.assumed_prefill_mfu: must be in (0, 1]; "
                             f"got {self.assumed_prefill_mfu!r}")
        if self.cached_prompt_tokens > self.prompt_tokens:
            raise ValueError("PrefillMeasurement.cached_prompt_tokens: exceeds prompt_tokens "
                             f"({self.cached_prompt_tokens} > {self.prompt_tokens})")
        if self.priced_tier not in set(PricedTier):
            raise ValueError(f"PrefillMeasurement.priced_tier: must be one of {', '.join(PricedTier)}; "
                             f"got {self.priced_tier!r}")
        object.__setattr__(self, "priced_tier", PricedTier(self.priced_tier))  # "lmcache" is the member
        if self.baseline_cached_prompt_tokens > self.cached_prompt_tokens:
            raise ValueError("PrefillMeasurement.baseline_cached_prompt_tokens: exceeds "
                             "cached_prompt_tokens")

    # ---- derived quantities -----------------------------------------------------------
    @property
    def engines(self) -> int:
        """Serving engines (data-parallel replicas)."""
        return self.num_gpus // self.tensor_parallel_size

    @property
    def computed_tokens(self) -> float:
        """Prompt tokens computed (measured if reported, else prompt - cached)."""
        if self.computed_prompt_tokens is not None:
            return self.computed_prompt_tokens
        return self.prompt_tokens - self.cached_prompt_tokens

    @property
    def saved_tokens(self) -> float:
        """Cached tokens beyond the baseline's: the prefill the change being priced avoided."""
        return self.cached_prompt_tokens - self.baseline_cached_prompt_tokens

    @property
    def hit_rate(self) -> float | None:
        """Token-weighted hit rate: cached / prompt tokens (``None`` with no prompts)."""
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def baseline_hit_rate(self) -> float | None:
        return self.baseline_cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens \
            else None

    @property
    def mean_prompt(self) -> float | None:
        if self.mean_prompt_tokens is not None:
            return self.mean_prompt_tokens
        return self.prompt_tokens / self.requests if self.requests else None

    @property
    def samples(self) -> float:
        """Sample size behind the per-token cost (prefill observations, else requests)."""
        return self.prefill_count if self.prefill_count is not None else self.requests

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.window_seconds

    def hit_cost_gpu_seconds(self) -> float:
        """GPU-seconds the cache layer cost in the window (a hit is not free): with a fitted
        cost model, LMCache's overhead (lookups as vLLM timed them, store and load as fitted),
        plus the assumed transfer cost for loaded tokens when the model has no load term;
        without one, the transferred tokens x ``transfer_gpu_seconds_per_token``."""
        cost_model = self.cost_model
        if cost_model is not None and cost_model.identified and self.window is not None:
            c = cost_model.coef()
            w = self.window
            load = c["load"] if cost_model.part("load") else self.transfer_gpu_seconds_per_token
            overhead = (load * w.external_cached + c["store"] * w.stored_tokens * w.store_exposure
                        + c["lmcache_request"] * w.exposed_lookups + w.lookup_seconds)
            return overhead * self.tensor_parallel_size
        moved = self.transferred_cached_tokens
        if moved is None:
            moved = self.saved_tokens
        return moved * self.transfer_gpu_seconds_per_token


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or math.isinf(value):
        raise ValueError(f"PrefillMeasurement.{name}: must be a finite number > 0; got {value!r}")


def _non_negative(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
            or math.isinf(value):
        raise ValueError(f"PrefillMeasurement.{name}: must be a finite number >= 0; "
                         f"got {value!r}")


def with_hit_rate(m: PrefillMeasurement, hit_rate: float) -> PrefillMeasurement:
    """The same window as if ``hit_rate`` of prompt tokens had been cached (what-if for the
    sensitivity analysis). Prefill seconds and FLOPs are scaled with the computed tokens
    (per-request seconds and FLOPs per computed token held fixed; estimator A's overlap
    correction is then re-applied to the new load); the baseline's hits are kept, clamped to
    the new rate. A priced window is scaled with it (``PricedWindow.at_hit_rate``: tiers in
    today's proportions), and for ``priced_tier == "lmcache"`` the baseline follows its device
    hits."""
    if not 0.0 <= hit_rate <= 1.0:
        raise ValueError(f"hit_rate: must be in [0, 1]; got {hit_rate!r}")
    cached = m.prompt_tokens * hit_rate
    computed_now = m.computed_tokens
    computed_new = m.prompt_tokens - cached
    scale = computed_new / computed_now if computed_now > 0 else 1.0
    flops = m.estimated_flops
    if flops is not None:
        gen = m.generation_tokens or 0.0
        flops = flops * (computed_new + gen) / (computed_now + gen) if computed_now + gen > 0 \
            else flops
    transferred = m.transferred_cached_tokens
    if transferred is not None and m.cached_prompt_tokens > 0:
        transferred = transferred * cached / m.cached_prompt_tokens
    window = m.window.at_hit_rate(hit_rate) if m.window is not None else None
    baseline = min(m.baseline_cached_prompt_tokens, cached)
    if window is not None and m.priced_tier == PricedTier.LMCACHE:
        baseline = min(window.device_cached, cached)
    return replace(
        m, cached_prompt_tokens=cached, computed_prompt_tokens=computed_new,
        prefill_seconds_sum=(None if m.prefill_seconds_sum is None
                             else m.prefill_seconds_sum * scale),
        estimated_flops=flops, transferred_cached_tokens=transferred,
        baseline_cached_prompt_tokens=baseline, window=window)


def measurement_from_stats(stats: Any, *, window_seconds: float, num_gpus: int,
                           **assumptions: Any) -> PrefillMeasurement:
    """Build a measurement from a ``kvplan.models.metrics.window.WindowStats``-like object (duck-typed:
    ``requests``, ``prompt_tokens``, ``cached_prompt_tokens``, ``prefill_*``,
    ``estimated_flops``, ``generation_tokens``, ``prompt_tokens_by_source``). Counters the
    servers did not report stay ``None``; missing prompt/cached/request counts become 0 (no
    traffic seen). ``assumptions`` are passed through (model_params, gpu_peak_flops, ...)."""
    by_source = getattr(stats, "prompt_tokens_by_source", None) or {}
    transferred = by_source.get("external_kv_transfer")
    kwargs: dict[str, Any] = dict(
        window_seconds=window_seconds, num_gpus=num_gpus,
        requests=getattr(stats, "requests", None) or 0.0,
        prompt_tokens=getattr(stats, "prompt_tokens", None) or 0.0,
        cached_prompt_tokens=getattr(stats, "cached_prompt_tokens", None) or 0.0,
        computed_prompt_tokens=getattr(stats, "prefill_computed_tokens", None),
        prefill_seconds_sum=getattr(stats, "prefill_seconds_sum", None),
        prefill_count=getattr(stats, "prefill_requests", None),
        estimated_flops=getattr(stats, "estimated_flops", None),
        generation_tokens=getattr(stats, "generation_tokens", None),
        transferred_cached_tokens=transferred,
    )
    kwargs.update(assumptions)
    return PrefillMeasurement(**kwargs)


def measurement_from_window(window: PricedWindow, cost_model: PrefillCostModel | None, *,
                            facts: Any = None, lmcache: bool | None = None,
                            stats: Any = None, engines: int | None = None,
                            measured_ab: MeasuredAB | None = None) -> PrefillMeasurement:
    """The measurement of a priced window (``kvplan.app.data.prefill.plan_measurement``) with its fitted
    cost model and the deployment facts (``kvplan.models.inputs.deployment.DeploymentFacts``):

    * ``window_seconds`` is the span the data covers (not the range asked for);
    * GPUs = engines (most seen in one interval, or ``engines``) x ``facts.gpus_per_engine``;
    * with LMCache (``lmcache``; default: the window has LMCache hits or stores) the plan prices
      what LMCache adds: the baseline keeps vLLM's own prefix-cache hits (free);
    * ``stats`` (a ``kvplan.models.metrics.window.WindowStats`` of the same range) supplies vLLM's FLOP
      counter and generation tokens for estimator B."""
    from ..inputs.deployment import DeploymentFacts

    facts = facts or DeploymentFacts()
    if lmcache is None:
        lmcache = window.external_cached > 0 or window.stored_tokens > 0
    gpe = facts.gpus_per_engine
    n_engines = max(engines or window.engines, 1)
    cached = window.cached_tokens
    return PrefillMeasurement(
        window_seconds=max(window.covered_seconds, 1.0), requests=window.requests,
        prompt_tokens=window.prompt_tokens, cached_prompt_tokens=cached,
        computed_prompt_tokens=window.computed_tokens, num_gpus=n_engines * gpe,
        tensor_parallel_size=gpe, prefill_count=window.requests,
        prefill_seconds_sum=window.prefill_engine_seconds,
        estimated_flops=getattr(stats, "estimated_flops", None) if stats is not None else None,
        generation_tokens=(getattr(stats, "generation_tokens", None) if stats is not None
                           else window.generation_tokens),
        mean_prompt_tokens=window.prompt_tokens / window.requests if window.requests else None,
        model_params=facts.model_params, num_layers=facts.model_layers,
        attention_width=facts.hidden_size, gpu_peak_flops=facts.gpu_peak_flops,
        assumed_prefill_mfu=facts.assumed_prefill_mfu,
        baseline_cached_prompt_tokens=min(window.device_cached, cached) if lmcache else 0.0,
        transferred_cached_tokens=window.external_cached,
        cost_model=cost_model, window=window, measured_ab=measured_ab,
        priced_tier=PricedTier.LMCACHE if lmcache else PricedTier.ALL)


def price_window(ivs: IntervalTable, t_from: datetime, t_to: datetime, cost: PrefillCostModel | None, *,
                 facts: DeploymentFacts, stats: Any = None, num_gpus: int | None = None,
                 measured: MeasuredAB | None = None) -> PrefillMeasurement:
    """The measurement of [t_from, t_to] (aware or naive UTC) from its prefill intervals, priced
    with ``cost`` (``measurement_from_window``); ``num_gpus`` (the fleet) sets the engines."""
    window = PricedWindow.from_intervals(ivs, t_from=aware_utc(t_from).timestamp(), t_to=aware_utc(t_to).timestamp())
    engines = max(1, num_gpus // facts.gpus_per_engine) if num_gpus else None
    return measurement_from_window(window, cost, facts=facts, stats=stats, measured_ab=measured,
                                   engines=engines)
