"""Overview page: the window's plan (``kvplan.app.data.plan``), hit rates and TTFT over time."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ...models.decision.plan import PlanResult
from ...models.metrics.slo import Slo, slo_attainment
from ...sql.db import Source
from ..data.history import History
from ..data.plan import PlannedWindow, history_for, plan_window
from ..data.points import latency_points, tier_points
from ..data.store import DeploymentSettings, Facts
from ..data.sweeps import SweepPair
from ..data.window import TimeBucket, Window, load_window, load_window_and_buckets, window_buckets


@dataclass(frozen=True)
class Overview:
    window: Window
    plan: PlanResult
    pricebook_origin: str
    gpus: int
    gpus_origin: str
    slo: Slo
    facts: Facts | None = None
    """The deployment facts in force and where they came from."""
    sweep: SweepPair | None = None
    """The newest load-sweep pair the plan was sized from."""
    tier_points: list[dict] = field(default_factory=list)
    latency_points: list[dict] = field(default_factory=list)


def overview(source: Source, deployment: str, t_from: datetime, t_to: datetime, model_name: str | None = None,
             step_s: int | None = None, *, cfg: DeploymentSettings = DeploymentSettings(),
             win: Window | None = None, history: History | None = None) -> Overview:
    """Overview page: the window's plan (monthly benefit, decision), hit rate, TTFT vs SLO;
    with ``step_s`` also the hit-rate and latency points over time. ``win``: the window, and
    ``history``: the deployment's history, if already loaded (the report shares them across
    its sections)."""
    if win is None and step_s:  # one scan of the raw edges for both
        win, buckets = load_window_and_buckets(source, deployment, t_from, t_to, step_s, model_name)
    else:
        win = win or load_window(source, deployment, t_from, t_to, model_name)
        buckets = window_buckets(source, deployment, t_from, t_to, step_s, model_name) if step_s else []
    return overview_of(win, plan_window(source, win, history or history_for(source, win, cfg)), buckets)


def overview_of(win: Window, pw: PlannedWindow, buckets: list[TimeBucket]) -> Overview:
    """The Overview of a loaded window, its plan and its time buckets (reads nothing)."""
    return Overview(win, pw.plan, pw.prices.origin, pw.fleet.gpus, pw.fleet.origin,
                    slo_attainment(win.rows, pw.plan.inputs.planning.ttft_p99_slo_seconds), pw.facts,
                    pw.sweep, tier_points(buckets), latency_points(buckets))
