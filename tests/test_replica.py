"""Issue 11: replicas that fit in GPU memory."""

import pytest

from kvplan.models.capacity.replica import replica_fit
from kvplan.models.core.errors import KvplanError
from kvplan.models.decision.presets import PRESETS
from kvplan.models.inputs.deployment import DeploymentFacts


def test_qwen3_235b_fp8_needs_four_h100():
    # 235e9 x 1 byte = 235 GB + KV 4 x 20,000 x 192,512 B = 15.4 GB = 250.4 GB;
    # usable 80 x 0.9 = 72 GB per GPU -> ceil(3.48) = 4
    facts = DeploymentFacts(total_model_params=235e9, weight_bytes_per_param=1.0,
                            kv_bytes_per_token=192_512, max_context_tokens=20_000)
    fit = replica_fit(facts, gpu_memory_gb=80, gpu_type="H100", concurrency=4, model_label="Qwen3-235B FP8")
    assert fit.weights_gb == pytest.approx(235.0)
    assert fit.kv_gb == pytest.approx(15.40096)
    assert fit.memory_gpus == 4 and fit.gpus_per_replica == 4 and not fit.fits_configured
    assert fit.message.startswith("Qwen3-235B FP8 weights 235 GB + KV 15 GB > 1 x 80 GB")
    assert "one replica needs >= 4 H100" in fit.message


def test_tensor_times_pipeline_parallel_is_the_floor():
    # 7e9 x 2 bytes = 14 GB fits one GPU, but TP 2 x PP 2 = 4 GPUs per replica
    fit = replica_fit(DeploymentFacts(tensor_parallel=2, pipeline_parallel=2, total_model_params=7e9),
                      gpu_memory_gb=80)
    assert fit.memory_gpus == 1 and fit.gpus_per_replica == 4 and fit.fits_configured and fit.message is None


def test_unknown_model_size_is_not_checked_and_says_so():
    fit = replica_fit(DeploymentFacts(tensor_parallel=2), gpu_memory_gb=80)
    assert fit.gpus_per_replica == 2 and not fit.memory_checked
    assert any("total_model_params" in n for n in fit.notes)


def test_active_params_are_flagged_as_a_floor():
    fit = replica_fit(DeploymentFacts(model_params=22e9), gpu_memory_gb=80)
    assert fit.weights_gb == pytest.approx(44.0)  # 22e9 x 2 bytes
    assert any("mixture-of-experts" in n for n in fit.notes)


def test_new_facts_validate():
    with pytest.raises(KvplanError, match="weight_bytes_per_param"):
        DeploymentFacts(weight_bytes_per_param=0)
    with pytest.raises(KvplanError, match="gpu_memory_utilization"):
        DeploymentFacts(gpu_memory_utilization=1.5)


def test_h100_preset_has_four_gpu_replicas_and_l40s_one():
    h = PRESETS["h100_lmcache_mp_shared_pool"].plan()
    assert h.gpus_per_replica >= 4
    assert "one replica needs >= 4 H100" in h.replica_message
    assert h.gpus_needed_with_reuse >= 4 and h.gpus_needed_with_reuse % 4 == 0
    l40s = PRESETS["l40s_agent_prefix_cache"].plan()
    # 30.5 GB FP8 weights + 10 x 16,384 x 49,152 B = 8.05 GB KV = 38.6 GB <= 48 x 0.9 = 43.2 GB
    assert l40s.gpus_per_replica == 1 and l40s.replica_message is None


def test_h100_preset_uses_dense_fp8_peak():
    m = PRESETS["h100_lmcache_mp_shared_pool"].inputs.measurement
    assert m.gpu_peak_flops == pytest.approx(1979e12)
