"""Cost & decision page: the plan's waterfall, capacity schedule, sensitivity, price book."""

from __future__ import annotations

from dataclasses import dataclass

from app.data.store import DeploymentSettings
from app.views.overview import Overview, overview
from models.decision import PlanningInputs
from models.plan import PlanResult
from models.pricebook import PriceBook


@dataclass(frozen=True)
class CostView:
    overview: Overview
    pricebook: PriceBook
    planning: PlanningInputs
    schedule: list[dict]
    """Capacity projection: month, GPUs needed with and without reuse (None: unreachable)."""


def capacity_schedule(plan: PlanResult) -> list[dict]:
    """A plan's capacity projection: month, load, GPUs needed with and without reuse."""
    cap = plan.evaluation.capacity
    return [] if cap is None else [
        {"month": r.month, "requests_per_second": r.requests_per_second,
         "with_reuse": r.gpus_needed_with_reuse, "without_reuse": r.gpus_needed_without_reuse}
        for r in cap.schedule]


def cost_view(source, deployment: str, t_from, t_to, model: str | None = None, *,
              cfg: DeploymentSettings = DeploymentSettings()) -> CostView:
    ov = overview(source, deployment, t_from, t_to, model, cfg=cfg)
    return CostView(ov, ov.plan.inputs.pricebook, ov.plan.inputs.planning, capacity_schedule(ov.plan))
