"""Metric math over a window: the catalog of metric families kvplan reads, exact window increases,
token-weighted hit rates by tier, histogram quantiles, SLO attainment, how a long window is
split into rolled-up days, the serving topology and workload runs side by side.

The public names of the group, re-exported; each module says more."""

from __future__ import annotations

from .runs import compare_runs
from .serving import ServingTopology, serving_topology
from .slo import Slo, slo_attainment, tpot_slo_attainment
from .spans import Spans, plan_spans
from .tiers import Tier, tiers
from .window import Increase, Quantile, WindowStats, latency_quantiles, window_stats

__all__ = [
    "Increase", "Quantile", "ServingTopology", "Slo", "Spans", "Tier", "WindowStats", "compare_runs",
    "latency_quantiles", "plan_spans", "serving_topology", "slo_attainment", "tiers", "tpot_slo_attainment",
    "window_stats"
]
