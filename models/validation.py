"""Validation of the savings model against a measured A/B (issue: the claim that makes the
tool trustworthy).

Method: the same workload runs once with reuse off and once with reuse on, on the same
hardware. From the metrics of the cache-ON run alone, the model predicts how much prefill
time the cache saved (estimator A of ``models.prefill``: measured seconds per computed
token x tokens served from cache). The cache-OFF run measures what that prefill really
cost. The error is reported as a share of the cache-off prefill time, so a scenario with
nothing to save (unique sessions) is judged on the same scale as one that saves most.

What this cannot know: the per-token cost of the tokens a cache serves is inferred from the
tokens it did not serve (the tails). On a GPU with large batches that cost is close to
linear; on a CPU with a tiny model fixed per-request overheads dominate short prefills, so
the prediction leans high. Lookup/transfer cost on a hit, and attention being cheaper at
early positions, are not separated either.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from models.prefill import estimate_measured_time, measurement_from_stats


@dataclass(frozen=True)
class ABValidation:
    """One scenario's prediction against its measurement (seconds of prefill time)."""

    scenario: str
    predicted_saved_s: float | None
    """Model, from the cache-on window alone."""
    measured_saved_s: float | None
    """Cache-off prefill seconds minus cache-on prefill seconds (vLLM's prefill timer)."""
    off_prefill_s: float | None
    on_prefill_s: float | None
    on_cached_tokens: float
    on_computed_tokens: float | None
    error_share_of_off: float | None
    """(predicted - measured) / cache-off prefill time."""

    def to_dict(self) -> dict:
        return asdict(self)


def validate_ab(scenario: str, off, on, *, on_window_seconds: float, num_gpus: int = 1) -> ABValidation:
    """``off``/``on``: ``models.metrics.WindowStats`` of the two runs' windows."""
    m = measurement_from_stats(on, window_seconds=on_window_seconds, num_gpus=num_gpus)
    est = estimate_measured_time(m)
    predicted = est.saved_gpu_seconds if est.available else None
    off_s, on_s = off.prefill_seconds_sum, on.prefill_seconds_sum
    measured = off_s - on_s if off_s is not None and on_s is not None else None
    err = None
    if predicted is not None and measured is not None and off_s:
        err = (predicted - measured) / off_s
    return ABValidation(scenario, predicted, measured, off_s, on_s, on.cached_prompt_tokens or 0.0,
                        on.prefill_computed_tokens, err)
