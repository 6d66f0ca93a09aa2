"""Replicas that fit: how many GPUs one serving replica needs.

A replica (one vLLM engine) spans ``tensor_parallel x pipeline_parallel`` GPUs
(``DeploymentFacts``). It must also hold, across those GPUs:

* the weights: ``total_model_params x weight_bytes_per_param`` (all experts of a
  mixture-of-experts model, not only the active ones);
* the KV cache of the sequences it serves at once: ``concurrency x context x
  kv_bytes_per_token`` (context = ``max_context_tokens``, else the mean prompt; concurrency =
  the measured running requests per replica, else 1);

against ``gpu_memory_gb x gpu_memory_utilization`` per GPU (the price book's GPU, vLLM's
memory share). The GPUs per replica are

    max(TP x PP, ceil((weights + KV) / (gpu_memory_gb x gpu_memory_utilization)))

When the configured TP x PP is too small the result says so with the numbers (``message``)
and sizes with the memory minimum: a 235 GB model is never a 1-GPU replica. When the model's
size is not given the memory is not checked (``memory_checked`` False, a note says which fact
is missing). Activation memory and CUDA graphs are not modelled (the 10 % vLLM leaves aside
covers part of them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..inputs.deployment import DeploymentFacts

GB = 1e9
"""Bytes per GB (decimal, as GPU memory is sold)."""


@dataclass(frozen=True)
class ReplicaFit:
    """GPUs one replica needs and why."""

    gpus_per_replica: int
    """GPUs the plan sizes one replica with: max(TP x PP, memory minimum)."""
    configured_gpus: int
    """TP x PP of the deployment facts."""
    memory_gpus: int | None
    """ceil(memory needed / usable memory per GPU); None when the memory was not checked."""
    weights_gb: float | None
    """Weights, GB (None: model size not given)."""
    kv_gb: float | None
    """KV cache for the concurrency x context, GB (0 when kv_bytes_per_token is not given)."""
    usable_gb_per_gpu: float
    """gpu_memory_gb x gpu_memory_utilization."""
    fits_configured: bool
    """True when TP x PP GPUs hold the weights and KV (or memory was not checked)."""
    message: str | None
    """A configured replica that does not fit, with the numbers; None when it fits."""
    notes: tuple[str, ...] = ()
    """What the check could not include."""

    @property
    def memory_checked(self) -> bool:
        """True when the weights were known and the memory checked."""
        return self.memory_gpus is not None


def replica_fit(facts: DeploymentFacts, *, gpu_memory_gb: float, gpu_type: str = "GPU",
                concurrency: float | None = None, mean_prompt_tokens: float | None = None,
                model_label: str = "the model") -> ReplicaFit:
    """GPUs per replica (module docstring). Never raises for a model too large: the answer is
    the number of GPUs it needs, with a message."""
    configured = facts.tensor_parallel * facts.pipeline_parallel
    usable = gpu_memory_gb * facts.gpu_memory_utilization
    params = facts.total_model_params if facts.total_model_params is not None else facts.model_params
    notes: list[str] = []
    if params is None:
        notes.append("replica memory not checked: give total_model_params (or model_params) and "
                     "weight_bytes_per_param in the deployment facts")
        return ReplicaFit(configured, configured, None, None, None, usable, True, None, tuple(notes))
    if facts.total_model_params is None:
        notes.append("weights from model_params (active parameters): a mixture-of-experts model holds all its "
                     "experts; give total_model_params")
    weights = params * facts.weight_bytes_per_param / GB
    kv = 0.0
    if facts.kv_bytes_per_token is None:
        notes.append("KV cache left out of the replica memory check (kv_bytes_per_token not given)")
    else:
        context = facts.max_context_tokens or mean_prompt_tokens
        seqs = concurrency if concurrency is not None and concurrency > 0 else 1.0
        if concurrency is None:
            notes.append("KV cache reserved for 1 running sequence per replica (concurrency not measured)")
        if context is None:
            notes.append("KV cache left out: neither max_context_tokens nor a mean prompt is known")
        else:
            kv = seqs * context * facts.kv_bytes_per_token / GB
    need = weights + kv
    memory_gpus = max(1, math.ceil(need / usable - 1e-12))
    gpus = max(configured, memory_gpus)
    fits = memory_gpus <= configured
    message = None
    if not fits:
        message = (f"{model_label} weights {weights:,.0f} GB + KV {kv:,.0f} GB > {configured} x "
                   f"{gpu_memory_gb:,.0f} GB ({configured * usable:,.0f} GB usable at "
                   f"{facts.gpu_memory_utilization:.0%}): one replica needs >= {memory_gpus} {gpu_type}; "
                   f"sized with {gpus} GPUs per replica")
    return ReplicaFit(gpus, configured, memory_gpus, weights, kv, usable, fits, message, tuple(notes))
