"""Workload runs side by side (evaluation step 4: pilot against the baseline)."""

from __future__ import annotations

from typing import Any

from .window import ratio

COMPARE = (  # key, label, unit, better: 'lower' (factor = baseline / candidate) or 'higher'
    ("wall_s", "total time", "s", "lower"),
    ("ttft_p50_s", "TTFT p50", "s", "lower"),
    ("ttft_p99_s", "TTFT p99", "s", "lower"),
    ("tokens_per_s_p50", "tok/s p50 per user", "tok/s", "higher"),
    ("aggregate_tokens_per_s", "aggregate throughput", "tok/s", "higher"),
    ("requests_with_cache_share", "requests with cached tokens", "share", "higher"),
    ("failed", "failed requests", "requests", "lower"),
)

CPU_NOTE = ("CPU-scale: measured on a CPU stack with a tiny model; the milliseconds are not GPU "
            "results, only the ratios between runs carry over as a direction.")


def compare_runs(baseline: dict[str, Any], candidate: dict[str, Any]) -> list[dict[str, Any]]:
    """The article's side-by-side table: each metric for both runs and the improvement
    factor (baseline / candidate for times, candidate / baseline for rates)."""
    rows = []
    for key, label, unit, better in COMPARE:
        a, b = baseline.get(key), candidate.get(key)
        if better == "lower":
            factor = ratio(a, b) if b else None
        else:
            factor = ratio(b, a) if a else None
        rows.append({"metric": label, "unit": unit, "baseline": a, "candidate": b, "factor": factor,
                     "better": better})
    return rows


def default_pair(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(baseline, candidate) of runs listed newest first: the latest unique-sessions run
    against the latest shared-prefix one, else the two latest runs (older as baseline)."""
    if len(runs) < 2:
        return None
    uniq = [r for r in runs if r["scenario"] == "unique"]
    shared = [r for r in runs if r["scenario"] == "shared_prefix"]
    if uniq and shared:
        return uniq[0], shared[0]
    return runs[1], runs[0]


def is_cpu_scale(measured_on: str | None) -> bool:
    """Whether a run was measured on a CPU stack (its figures are not GPU results)."""
    return "cpu" in (measured_on or "").lower()
