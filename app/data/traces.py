"""The request traces imported for the what-if: which deployments have one, each trace's row, and
the time a trace spans. Their requests are read by ``collectors.traces.load_trace``."""

from __future__ import annotations

from ...sql.db import Source


def trace_deployments(source: Source) -> list[str]:
    """Deployments with at least one imported trace."""
    return [r["deployment"] for r in source.fetch("trace_deployments")]


def traces_of(source: Source, deployment: str) -> list[dict]:
    """The deployment's traces (``name``, ``format``, ``requests``, ...), as the what-if page lists them."""
    return source.fetch("traces", deployment=deployment)


def trace_span(source: Source, trace_id: int) -> tuple[float, float]:
    """First and last arrival of a trace, in its own time unit (0, 0 when it has no time)."""
    (row,) = source.fetch("trace_span", trace_id=trace_id)
    return float(row["t0"] or 0.0), float(row["t1"] or 0.0)
