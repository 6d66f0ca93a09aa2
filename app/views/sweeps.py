"""Load-sweep view: the latest sweep pair of a deployment as plain rows for
``kvplan.app.charts_cost.sweep_curves_chart``, with both goodputs at the SLOs and how each was limited.
Not wired into a page yet. ``SweepView`` and ``sweep_view_of`` live in ``kvplan.app.data.sweeps``
(the Cost view and the report build one from the pair the plan read)."""

from __future__ import annotations

from ...sql.db import Source
from ..data.store import load_pricebook
from ..data.sweeps import SweepView, latest_sweep_pair, sweep_view_of

__all__ = ["SweepView", "sweep_view", "sweep_view_of"]

def sweep_view(source: Source, deployment: str, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None, *,
               prices: dict | None = None) -> SweepView:
    """``ttft_slo_s`` None: the planning inputs' p99 TTFT SLO; ``tpot_slo_s`` None: TPOT is not
    checked. ``prices``: the config's default price table (as the other views)."""
    if ttft_slo_s is None:
        ttft_slo_s = load_pricebook(source, deployment, prices).planning.ttft_p99_slo_seconds
    return sweep_view_of(latest_sweep_pair(source, deployment), ttft_slo_s, tpot_slo_s)
