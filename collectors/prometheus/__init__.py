"""Range ingestion from an existing Prometheus (or Thanos/Mimir): the HTTP client (``client``,
``stream``), the exact step arithmetic (``step_math``), rows per engine (``rows``), the
aggregated fleet mode and its recording rules (``fleet``, ``rules``), and the ingestion itself
(``ingest``).

The public names of the group, re-exported; each module says more."""

from __future__ import annotations

from .client import PromClient, PromError
from .ingest import chunk_bounds, ingest_range, ingest_window
from .rules import PER_ENGINE_LABELS, Window, render, render_prometheusrule
from .step_math import silent_stretches, step_gauges, step_increments

__all__ = [
    "PER_ENGINE_LABELS", "PromClient", "PromError", "Window", "chunk_bounds", "ingest_range", "ingest_window",
    "render", "render_prometheusrule", "silent_stretches", "step_gauges", "step_increments"
]
