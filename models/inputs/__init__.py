"""What the user owns, not what is measured: the price book, the deployment facts the metrics
cannot know (GPUs per engine, the GPU, the model) and the planning inputs (SLOs, growth,
horizon, realisation).

The public names of the group, re-exported; each module says more."""

from __future__ import annotations

from .deployment import DeploymentFacts
from .planning import PlanningInputs, prices_from_table
from .pricebook import PriceBook

__all__ = [
    "DeploymentFacts", "PlanningInputs", "PriceBook", "prices_from_table"
]
