"""Saved prefill GPU time: the three estimators, their combination, edge cases."""

import math
from types import SimpleNamespace

import pytest

from kvplan.models.prefill.measurement import PrefillMeasurement, measurement_from_stats, with_hit_rate
from kvplan.models.prefill.savings import (
    estimate_compute_params,
    estimate_compute_vllm_flops,
    estimate_measured_time,
    estimate_savings,
    relative_uncertainty,
)

# A one-hour window on 2 GPUs (2 engines, TP 1). Every number below is chosen so the
# arithmetic is easy to do by hand.
#   prefill timer sum = 2 engines * 3600 s * ln 2  ->  L = ln 2 per engine
#   busy fraction = 1 - exp(-ln 2) = 0.5  ->  busy GPU-s = 0.5 * 3600 * 2 = 3600
#   computed tokens 1.8e6  ->  A: 3600 / 1.8e6 = 0.002 GPU-s/token
#   cached 1.2e6 of 3.0e6 prompt tokens (hit rate 0.4), 400 requests
BASE = dict(window_seconds=3600.0, requests=400, prompt_tokens=3.0e6,
            cached_prompt_tokens=1.2e6, computed_prompt_tokens=1.8e6, num_gpus=2,
            prefill_seconds_sum=2 * 3600 * math.log(2))
# B: 2e15 FLOPs per GPU / (1.8e6 computed + 2e5 generated) = 1e9 FLOPs/token,
#    at 50 % of 1e14 FLOP/s = 5e13 -> 2e-5 GPU-s/token -> saved 1.2e6 * 2e-5 = 24 GPU-s
# C: 2 * 1e9 params = 2e9 FLOPs + attention 2 * 10 layers * 1000 width * 3000-token prefix
#    (1.2e6 cached / 400 requests) = 6e7 -> 2.06e9 / 5e13 = 4.12e-5 -> saved 49.44 GPU-s
FULL = dict(BASE, estimated_flops=2e15, generation_tokens=2e5, gpu_peak_flops=1e14,
            assumed_prefill_mfu=0.5, model_params=1e9, num_layers=10, attention_width=1000)


def test_estimator_a_corrects_for_overlap():
    r = estimate_measured_time(PrefillMeasurement(**BASE))
    assert r.available
    assert r.gpu_seconds_per_token == pytest.approx(0.002)
    assert r.saved_gpu_seconds == pytest.approx(2400.0)  # 1.2e6 * 0.002
    # without the correction the timer sum (4990.6 s) would be read as GPU time
    assert r.gpu_seconds_per_token < 2 * 3600 * math.log(2) / 1.8e6


def test_estimator_a_never_exceeds_the_fleet():
    # L = 50 requests in prefill per engine: the GPUs are saturated, busy <= window * GPUs
    m = PrefillMeasurement(**dict(BASE, prefill_seconds_sum=50 * 3600 * 2))
    r = estimate_measured_time(m)
    assert r.gpu_seconds_per_token * 1.8e6 <= 3600 * 2
    assert r.gpu_seconds_per_token == pytest.approx(3600 * 2 / 1.8e6, rel=1e-9)


def test_estimator_a_without_overlap_matches_the_timer():
    # L = 0.001: prefills almost never overlap, GPU time ~= the timer sum (7.2 s)
    m = PrefillMeasurement(**dict(BASE, prefill_seconds_sum=0.001 * 3600 * 2))
    r = estimate_measured_time(m)
    assert r.gpu_seconds_per_token * 1.8e6 == pytest.approx(7.2, rel=1e-3)


def test_estimator_a_uses_tensor_parallel_gpus():
    # 4 GPUs as 2 engines of TP 2: same L = ln 2 per engine, busy = 0.5 * 3600 * 4 GPU-s
    m = PrefillMeasurement(**dict(BASE, num_gpus=4, tensor_parallel_size=2))
    assert estimate_measured_time(m).gpu_seconds_per_token == pytest.approx(7200 / 1.8e6)


def test_estimator_a_removes_transfer_time_before_dividing():
    # 1e6 tokens loaded at 1e-4 GPU-s each = 100 GPU-s of the 3600 busy were transfers
    m = PrefillMeasurement(**dict(BASE, transferred_cached_tokens=1e6,
                                  transfer_gpu_seconds_per_token=1e-4))
    assert m.hit_cost_gpu_seconds() == pytest.approx(100.0)
    assert estimate_measured_time(m).gpu_seconds_per_token == pytest.approx(3500 / 1.8e6)


def test_estimator_b_uses_vllm_flops_per_token():
    r = estimate_compute_vllm_flops(PrefillMeasurement(**FULL))
    assert r.gpu_seconds_per_token == pytest.approx(2e-5)
    assert r.saved_gpu_seconds == pytest.approx(24.0)


def test_estimator_b_multiplies_per_gpu_flops_by_tensor_parallel_size():
    m = PrefillMeasurement(**dict(FULL, num_gpus=4, tensor_parallel_size=2))
    assert estimate_compute_vllm_flops(m).gpu_seconds_per_token == pytest.approx(4e-5)


def test_estimator_c_from_params_and_attention():
    r = estimate_compute_params(PrefillMeasurement(**FULL))
    assert r.gpu_seconds_per_token == pytest.approx(4.12e-5)
    assert r.saved_gpu_seconds == pytest.approx(49.44)


def test_estimator_c_without_architecture_is_two_flops_per_param():
    m = PrefillMeasurement(**dict(FULL, num_layers=None, attention_width=None))
    assert estimate_compute_params(m).gpu_seconds_per_token == pytest.approx(4e-5)  # 2e9/5e13


def test_combined_savings_median_band_and_month():
    s = estimate_savings(PrefillMeasurement(**FULL))
    assert [e.available for e in s.estimators] == [True, True, True]
    assert s.saved_gpu_seconds == pytest.approx(49.44)  # median of 2400, 24, 49.44
    assert s.gpu_seconds_per_token == pytest.approx(4.12e-5)  # median of 2e-3, 2e-5, 4.12e-5
    # u: sampling 1/sqrt(400) = 0.05; coverage 0.5 * (1 - 1/24) = 0.479167; 3 estimators
    u = math.sqrt(0.05 ** 2 + (0.5 * 23 / 24) ** 2)
    assert s.relative_uncertainty == pytest.approx(u)
    assert s.saved_gpu_seconds_low == pytest.approx(24.0 * (1 - u))
    assert s.saved_gpu_seconds_high == pytest.approx(2400.0 * (1 + u))
    to_month_hours = 2_630_016 / 3600 / 3600  # month seconds / window seconds / 3600
    assert s.gpu_hours_per_month == pytest.approx(49.44 * to_month_hours)
    assert s.gpu_hours_per_month_low == pytest.approx(24.0 * (1 - u) * to_month_hours)
    assert s.gpu_hours_per_month_high == pytest.approx(2400.0 * (1 + u) * to_month_hours)
    assert s.hit_rate == pytest.approx(0.4)
    assert s.prefill_tokens_per_gpu_second == pytest.approx(1 / 4.12e-5)


def test_no_flops_counter_falls_back_to_params():
    s = estimate_savings(PrefillMeasurement(**dict(FULL, estimated_flops=None)))
    by = {e.name: e for e in s.estimators}
    assert not by["compute_vllm_flops"].available
    assert "not reported" in by["compute_vllm_flops"].note
    assert by["compute_params"].available
    assert s.saved_gpu_seconds == pytest.approx((2400.0 + 49.44) / 2)  # median of two


def test_no_flops_and_no_params_leaves_a_single_estimator_with_a_wider_band():
    s = estimate_savings(PrefillMeasurement(**BASE))
    assert [e.name for e in s.estimators if e.available] == ["measured_time"]
    u = math.sqrt(0.05 ** 2 + (0.5 * 23 / 24) ** 2 + 0.3 ** 2)
    assert s.relative_uncertainty == pytest.approx(u)
    assert s.saved_gpu_seconds == pytest.approx(2400.0)


def test_no_estimator_at_all_is_unavailable_not_zero():
    s = estimate_savings(PrefillMeasurement(**dict(BASE, prefill_seconds_sum=None)))
    assert not s.available
    assert s.saved_gpu_seconds is None and s.gpu_hours_per_month is None
    assert any("no estimator" in n for n in s.notes)


def test_zero_hit_rate_saves_nothing():
    m = PrefillMeasurement(**dict(FULL, cached_prompt_tokens=0.0, computed_prompt_tokens=3.0e6))
    s = estimate_savings(m)
    assert s.available and s.hit_rate == 0
    assert s.saved_gpu_seconds == 0 and s.gpu_hours_per_month == 0
    assert s.saved_gpu_seconds_high == 0


def test_zero_requests_is_unavailable():
    m = PrefillMeasurement(window_seconds=3600, requests=0, prompt_tokens=0,
                           cached_prompt_tokens=0, num_gpus=1, prefill_seconds_sum=0.0)
    s = estimate_savings(m)
    assert not s.available
    assert all(e.note == "no traffic in the window" for e in s.estimators)
    assert s.relative_uncertainty >= 1.0  # sampling term is 100 % with no samples


def test_window_shorter_than_an_hour_widens_and_warns():
    short = estimate_savings(PrefillMeasurement(**dict(FULL, window_seconds=900)))
    hour = estimate_savings(PrefillMeasurement(**FULL))
    day = estimate_savings(PrefillMeasurement(**dict(FULL, window_seconds=86400)))
    assert short.relative_uncertainty > hour.relative_uncertainty > day.relative_uncertainty
    assert day.relative_uncertainty == pytest.approx(0.05)  # only 1/sqrt(400) is left
    assert any("shorter than an hour" in n for n in short.notes)
    assert not any("shorter than an hour" in n for n in hour.notes)


def test_relative_uncertainty_rule():
    assert relative_uncertainty(100, 86400, 2) == pytest.approx(0.1)
    assert relative_uncertainty(100, 0, 2) == pytest.approx(math.sqrt(0.01 + 0.25))
    assert relative_uncertainty(0, 86400 * 7, 2) == pytest.approx(1.0)
    assert relative_uncertainty(10_000, 86400, 1) == pytest.approx(math.sqrt(0.0001 + 0.09))


def test_prefill_count_is_the_sample_size_when_given():
    s = estimate_savings(PrefillMeasurement(**dict(FULL, prefill_count=2500, window_seconds=86400)))
    assert s.relative_uncertainty == pytest.approx(0.02)  # 1/sqrt(2500)


def test_baseline_hits_are_not_a_saving():
    # the set-up compared against already had 0.2e6 of the 1.2e6 cached tokens
    m = PrefillMeasurement(**dict(BASE, baseline_cached_prompt_tokens=0.2e6))
    assert estimate_measured_time(m).saved_gpu_seconds == pytest.approx(1.0e6 * 0.002)
    assert estimate_savings(m).baseline_hit_rate == pytest.approx(0.2e6 / 3.0e6)


def test_hit_cost_defaults_to_every_incremental_cached_token():
    m = PrefillMeasurement(**dict(BASE, transfer_gpu_seconds_per_token=1e-5))
    s = estimate_savings(m)
    assert s.hit_cost_gpu_seconds == pytest.approx(12.0)  # 1.2e6 * 1e-5
    assert s.hit_cost_gpu_hours_per_month == pytest.approx(12.0 * 2_630_016 / 3600 / 3600)


def test_computed_tokens_default_to_prompt_minus_cached():
    m = PrefillMeasurement(**dict(BASE, computed_prompt_tokens=None))
    assert m.computed_tokens == pytest.approx(1.8e6)
    assert m.mean_prompt == pytest.approx(7500.0)  # 3e6 / 400


@pytest.mark.parametrize("change, field", [
    ({"window_seconds": 0}, "window_seconds"),
    ({"cached_prompt_tokens": 4e6}, "cached_prompt_tokens"),
    ({"num_gpus": 0}, "num_gpus"),
    ({"num_gpus": 3, "tensor_parallel_size": 2}, "tensor_parallel_size"),
    ({"requests": -1}, "requests"),
    ({"assumed_prefill_mfu": 0}, "assumed_prefill_mfu"),
    ({"baseline_cached_prompt_tokens": 2e6}, "baseline_cached_prompt_tokens"),
    ({"gpu_peak_flops": 0}, "gpu_peak_flops"),
])
def test_invalid_measurements_name_the_field(change, field):
    with pytest.raises(ValueError, match=field):
        PrefillMeasurement(**dict(FULL, **change))


def test_with_hit_rate_scales_the_window():
    m = with_hit_rate(PrefillMeasurement(**FULL), 0.7)
    assert m.cached_prompt_tokens == pytest.approx(2.1e6)
    assert m.computed_prompt_tokens == pytest.approx(0.9e6)
    assert m.prefill_seconds_sum == pytest.approx(2 * 3600 * math.log(2) * 0.5)  # half computed
    # FLOPs scale with computed + generated tokens: (0.9e6 + 2e5) / (1.8e6 + 2e5) = 0.55
    assert m.estimated_flops == pytest.approx(2e15 * 0.55)
    with pytest.raises(ValueError, match="hit_rate"):
        with_hit_rate(m, 1.5)


def test_measurement_from_window_stats():
    stats = SimpleNamespace(requests=400.0, prompt_tokens=3e6, cached_prompt_tokens=1.2e6,
                            prefill_computed_tokens=1.8e6, prefill_seconds_sum=10.0,
                            prefill_requests=390.0, estimated_flops=None,
                            generation_tokens=5e4,
                            prompt_tokens_by_source={"external_kv_transfer": 7e5})
    m = measurement_from_stats(stats, window_seconds=3600, num_gpus=2, model_params=1e9)
    assert (m.requests, m.prompt_tokens, m.cached_prompt_tokens) == (400.0, 3e6, 1.2e6)
    assert m.prefill_count == 390.0 and m.estimated_flops is None
    assert m.transferred_cached_tokens == 7e5 and m.model_params == 1e9
