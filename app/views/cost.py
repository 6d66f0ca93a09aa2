"""Cost & decision page: the plan's waterfall, capacity schedule, sensitivity, price book."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ...models.decision.plan import PlanResult
from ...models.inputs.planning import PlanningInputs
from ...models.inputs.pricebook import PriceBook
from ...sql.db import Source
from ..data.history import History
from ..data.plan import history_for, plan_window
from ..data.store import DeploymentSettings, Facts
from ..data.sweeps import SweepView, sweep_view_of
from ..data.window import load_window


@dataclass(frozen=True)
class CostView:
    plan: PlanResult
    pricebook_origin: str
    """Where the price book came from (saved, config file, defaults)."""
    gpus_origin: str
    """Which rule gave the fleet size (``kvplan.app.data.store.fleet``)."""
    facts: Facts
    """The deployment facts in force and where they came from."""
    pricebook: PriceBook
    planning: PlanningInputs
    schedule: list[dict]
    """Capacity projection: month, GPUs needed with and without reuse (None: unreachable)."""
    sweep: SweepView | None = None
    """The deployment's latest load sweep at the planning SLOs (empty when none is stored)."""


def capacity_schedule(plan: PlanResult) -> list[dict]:
    """A plan's capacity projection: month, load, GPUs needed with and without reuse."""
    cap = plan.evaluation.capacity
    return [] if cap is None else [
        {"month": r.month, "requests_per_second": r.requests_per_second,
         "with_reuse": r.gpus_needed_with_reuse, "without_reuse": r.gpus_needed_without_reuse}
        for r in cap.schedule]


def cost_view(source: Source, deployment: str, t_from: datetime, t_to: datetime, model_name: str | None = None, *,
              cfg: DeploymentSettings = DeploymentSettings(), history: History | None = None) -> CostView:
    win = load_window(source, deployment, t_from, t_to, model_name)
    pw = plan_window(source, win, history or history_for(source, win, cfg))
    pl = pw.plan.inputs.planning
    sweep = sweep_view_of(pw.sweep, pl.ttft_p99_slo_seconds, pl.tpot_p99_slo_seconds)
    return CostView(pw.plan, pw.prices.origin, pw.fleet.origin, pw.facts, pw.plan.inputs.pricebook, pl,
                    capacity_schedule(pw.plan), sweep)
