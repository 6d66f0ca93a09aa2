"""What the metrics cannot know about a deployment: GPUs per engine, the GPU, the model.

vLLM's /metrics say how many engines served, how many tokens they computed and how long each
request's prefill took. They do not say how many GPUs one engine spans (tensor x pipeline
parallel), what one GPU can do, or how large the model is. Without ``gpus_per_engine`` an
engine is counted as one GPU (a TP=8 engine would be 8x too few GPU-hours); without the GPU's
peak FLOP/s and the model's size the FLOP-based estimators cannot run. Each field is optional
except the parallelism (default 1): a plan states which estimators ran and why the others did
not.

``DEPLOYMENT_FIELDS`` documents every field (unit, help, kind, bounds) the way
``models.pricebook.FIELDS`` documents the price book, so the config file and the dashboard
form can be generated from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from models.pricebook import FieldSpec

DEFAULT_PREFILL_MFU = 0.4
"""Assumed model-FLOPs utilisation of prefill (compute-bound; 30-60 % is typical)."""
DEFAULT_LMCACHE_CHUNK_TOKENS = 256
"""LMCache's default chunk size (``chunk_size``): it stores and looks up whole chunks."""


def _f(default: Any, unit: str, help: str, kind: str = "float", minimum: float | None = None,
       maximum: float | None = None, optional: bool = True) -> Any:
    meta = {"unit": unit, "help": help, "kind": kind, "minimum": minimum, "maximum": maximum,
            "optional": optional}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class DeploymentFacts:
    """Facts about one deployment that its metrics do not carry. Per-field docs:
    ``DEPLOYMENT_FIELDS``. ``None`` = not given (the estimators that need it do not run)."""

    tensor_parallel: int = _f(1, "GPUs", "Tensor-parallel size of one vLLM engine "
                              "(--tensor-parallel-size).", kind="int", minimum=1,
                              optional=False)
    pipeline_parallel: int = _f(1, "stages", "Pipeline-parallel size of one vLLM engine "
                                "(--pipeline-parallel-size). GPUs per engine = tensor x "
                                "pipeline parallel.", kind="int", minimum=1, optional=False)
    gpu_type: str = _f("", "", "GPU model, e.g. 'H100-SXM-80GB' (a label for the report).",
                       kind="str")
    gpu_peak_flops: float | None = _f(None, "FLOP/s", "Dense peak of one GPU at the model's "
                                      "compute dtype, no sparsity (H100 SXM bf16: 989e12). "
                                      "Needed by the FLOP-based estimators.", minimum=1.0)
    model_params: float | None = _f(None, "parameters", "Parameters active per token (a "
                                    "mixture-of-experts model: the active ones, e.g. 22e9 for "
                                    "Qwen3-235B-A22B). Needed by the 2 x params estimator.",
                                    minimum=1.0)
    model_layers: int | None = _f(None, "layers", "Transformer layers (num_hidden_layers); "
                                  "with hidden_size adds the attention term to the FLOP "
                                  "estimate.", kind="int", minimum=1)
    hidden_size: int | None = _f(None, "", "Attention width: query heads x head dimension "
                                 "(e.g. 32 x 128 = 4096).", kind="int", minimum=1)
    assumed_prefill_mfu: float = _f(DEFAULT_PREFILL_MFU, "share", "Share of the GPU's peak "
                                    "FLOP/s prefill achieves (assumed, not measured); the "
                                    "FLOP-based estimators divide by it.", minimum=0.01,
                                    maximum=1.0, optional=False)
    lmcache_chunk_tokens: int = _f(DEFAULT_LMCACHE_CHUNK_TOKENS, "tokens", "LMCache chunk "
                                   "size: one lmcache_mp_l1_write_chunks increment stores "
                                   "this many tokens.", kind="int", minimum=1, optional=False)

    def __post_init__(self) -> None:
        for spec in DEPLOYMENT_FIELDS:
            _check(spec, getattr(self, spec.name))

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
        return {spec.name: getattr(self, spec.name) for spec in DEPLOYMENT_FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DeploymentFacts":
        """Build from a dict (config file, form, database); missing keys take defaults.
        Raises ``ValueError`` naming the field for unknown keys, wrong types or bounds."""
        known = {spec.name: spec for spec in DEPLOYMENT_FIELDS}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"DeploymentFacts: unknown field {unknown[0]!r} "
                             f"(known: {', '.join(known)})")
        return cls(**{k: _coerce(known[k], v) for k, v in data.items()})


def _optional(spec: FieldSpec) -> bool:
    return bool(_OPTIONAL.get(spec.name, True))


def _coerce(spec: FieldSpec, value: Any) -> Any:
    if value is None and _optional(spec):
        return None
    if spec.kind == "str":
        if not isinstance(value, str):
            raise ValueError(f"DeploymentFacts.{spec.name}: expected text, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"DeploymentFacts.{spec.name}: expected a number ({spec.unit}), "
                         f"got {value!r}")
    if spec.kind == "int":
        if float(value) != int(value):
            raise ValueError(f"DeploymentFacts.{spec.name}: expected a whole number, "
                             f"got {value!r}")
        return int(value)
    return float(value)


def _check(spec: FieldSpec, value: Any) -> None:
    name = f"DeploymentFacts.{spec.name}"
    if value is None:
        if _optional(spec):
            return
        raise ValueError(f"{name}: required")
    if spec.kind == "str":
        if not isinstance(value, str):
            raise ValueError(f"{name}: expected text, got {value!r}")
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) \
            or math.isinf(value):
        raise ValueError(f"{name}: expected a finite number ({spec.unit}), got {value!r}")
    if spec.kind == "int" and int(value) != value:
        raise ValueError(f"{name}: expected a whole number, got {value!r}")
    if spec.minimum is not None and value < spec.minimum:
        raise ValueError(f"{name}: must be >= {spec.minimum:g} {spec.unit}; got {value!r}")
    if spec.maximum is not None and value > spec.maximum:
        raise ValueError(f"{name}: must be <= {spec.maximum:g} {spec.unit}; got {value!r}")


_OPTIONAL = {f.name: f.metadata["optional"] for f in fields(DeploymentFacts)}
DEPLOYMENT_FIELDS: tuple[FieldSpec, ...] = tuple(
    FieldSpec(name=f.name, unit=f.metadata["unit"], help=f.metadata["help"],
              kind=f.metadata["kind"], default=f.default, minimum=f.metadata["minimum"],
              maximum=f.metadata["maximum"])
    for f in fields(DeploymentFacts)
)
"""One row per ``DeploymentFacts`` field: name, unit, help, kind, default, bounds. Fields
whose default is ``None`` are optional (not given = the estimator that needs it does not
run)."""
