"""Runs page: every workload-driver run with its request-weighted cache shares
(``kvplan.app.data.runs``, which the Cache page reads too)."""

from __future__ import annotations

from ..data.runs import RunsView, runs_view

__all__ = ["RunsView", "runs_view"]
