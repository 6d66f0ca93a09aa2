"""What the metrics cannot know about a deployment: GPUs per engine, the GPU, the model.

vLLM's /metrics say how many engines served, how many tokens they computed and how long each
request's prefill took. They do not say how many GPUs one engine spans (tensor x pipeline
parallel), what one GPU can do, or how large the model is. Without the parallelism an engine is
counted as one GPU (a TP=8 engine would be 8x too few GPU-hours); without the GPU's peak FLOP/s
and the model's size the FLOP-based estimators cannot run. Each field is optional except the
parallelism (default 1): a plan states which estimators ran and why the others did not.

Fields are declared with ``kvplan.models.core.fields.spec`` (unit, help, bounds once), like the price
book: the config's ``[deployments.facts]`` table, the dashboard form and ``kvplan config
check`` all read ``DEPLOYMENT_FIELDS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core import fields as _fields
from ..core.fields import FieldSpec
from ..core.fields import spec as _f

DEFAULT_PREFILL_MFU = 0.4
"""Assumed model-FLOPs utilisation of prefill (compute-bound; 30-60 % is typical)."""
DEFAULT_LMCACHE_CHUNK_TOKENS = 256
"""LMCache's default chunk size (``chunk_size``): it stores and looks up whole chunks."""


@dataclass(frozen=True)
class DeploymentFacts:
    """Facts about one deployment that its metrics do not carry. Per-field docs:
    ``DEPLOYMENT_FIELDS``. ``None`` = not given (the estimators that need it do not run)."""

    tensor_parallel: int = _f(1, "GPUs", "Tensor-parallel size of one vLLM engine (--tensor-parallel-size).",
                              kind="int", minimum=1, maximum=1024)
    pipeline_parallel: int = _f(1, "stages", "Pipeline-parallel size of one vLLM engine "
                                "(--pipeline-parallel-size). GPUs per engine = tensor x pipeline parallel.",
                                kind="int", minimum=1, maximum=1024)
    gpu_type: str = _f("", "", "GPU model, e.g. 'H100-SXM-80GB' (a label for the report).", kind="str")
    gpu_peak_flops: float | None = _f(None, "FLOP/s", "Dense peak of one GPU at the model's compute dtype, "
                                      "no sparsity (H100 SXM bf16: 989e12, fp8: 1979e12). Needed by the "
                                      "FLOP-based estimators.", kind="optional_float", minimum=1.0,
                                      maximum=1e18)
    model_params: float | None = _f(None, "parameters", "Parameters active per token (a mixture-of-experts "
                                    "model: the active ones, e.g. 22e9 for Qwen3-235B-A22B). Needed by the "
                                    "2 x params estimator.", kind="optional_float", minimum=1.0,
                                    maximum=1e14)
    model_layers: int | None = _f(None, "layers", "Transformer layers (num_hidden_layers); with hidden_size "
                                  "adds the attention term to the FLOP estimate.", kind="optional_int",
                                  minimum=1, maximum=10_000)
    hidden_size: int | None = _f(None, "", "Attention width: query heads x head dimension "
                                 "(e.g. 32 x 128 = 4096).", kind="optional_int", minimum=1,
                                 maximum=1_000_000)
    assumed_prefill_mfu: float = _f(DEFAULT_PREFILL_MFU, "share", "Share of the GPU's peak FLOP/s prefill "
                                    "achieves (assumed, not measured); the FLOP-based estimators divide by it.",
                                    minimum=0.01, maximum=1.0)
    lmcache_chunk_tokens: int = _f(DEFAULT_LMCACHE_CHUNK_TOKENS, "tokens", "LMCache chunk size: one "
                                   "lmcache_mp_l1_write_chunks increment stores this many tokens.", kind="int",
                                   minimum=1, maximum=1_000_000)

    total_model_params: float | None = _f(None, "parameters", "Parameters held in GPU memory: all of them, every "
                                          "expert of a mixture-of-experts model (235e9 for Qwen3-235B-A22B). Not "
                                          "given: model_params. With weight_bytes_per_param, the weights of the "
                                          "replica memory check.", kind="optional_float", minimum=1.0,
                                          maximum=1e14)
    weight_bytes_per_param: float = _f(2.0, "bytes", "Bytes per stored weight: 2 for BF16/FP16, 1 for FP8/INT8, "
                                       "0.5 for 4-bit.", minimum=0.0, exclusive_minimum=True, maximum=8.0)
    kv_bytes_per_token: float | None = _f(None, "bytes/token", "KV cache per token of context, all layers: layers x "
                                          "KV heads x head dim x 2 (K, V) x bytes per KV element (e.g. 94 x 4 x 128 "
                                          "x 2 x 2 = 192,512). Not given: KV is left out of the memory check.",
                                          kind="optional_float", minimum=0.0, maximum=1e9)
    max_context_tokens: int | None = _f(None, "tokens", "Context one sequence may hold (--max-model-len); the memory "
                                        "check reserves KV for the concurrency x this. Not given: the mean prompt.",
                                        kind="optional_int", minimum=1, maximum=1_000_000_000)
    gpu_memory_utilization: float = _f(0.9, "share", "Share of each GPU's memory vLLM may use "
                                       "(--gpu-memory-utilization; vLLM's default 0.9).", minimum=0.05, maximum=1.0)

    def __post_init__(self) -> None:
        _fields.check_all(self)

    @property
    def gpus_per_engine(self) -> int:
        """GPUs one vLLM engine occupies: tensor x pipeline parallel."""
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def flops_estimators_ready(self) -> bool:
        """True when the FLOP-based estimators can run (peak FLOP/s and model size given)."""
        return self.gpu_peak_flops is not None and self.model_params is not None

    def missing_for_flops(self) -> list[str]:
        """Fields the FLOP-based estimators still need."""
        return [n for n in ("gpu_peak_flops", "model_params") if getattr(self, n) is None]

    def to_dict(self) -> dict[str, Any]:
        return _fields.to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeploymentFacts:
        """Build from a dict (config file, form, database); missing keys take defaults.
        ``KvplanError`` names the field for unknown keys, wrong types or bounds."""
        return _fields.from_dict(cls, data)


DEPLOYMENT_FIELDS: tuple[FieldSpec, ...] = _fields.specs(DeploymentFacts)
"""One row per ``DeploymentFacts`` field: name, unit, help, kind, default, bounds. Fields
whose default is ``None`` are optional (not given = the estimator that needs it does not run)."""
