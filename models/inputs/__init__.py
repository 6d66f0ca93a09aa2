"""What the user owns, not what is measured: the price book, the deployment facts the metrics
cannot know (GPUs per engine, the GPU, the model) and the planning inputs (SLOs, growth,
horizon, realisation), and kvplan's settings as data (``settings``, ``settings_checks``: declared
and checked here, loaded by ``kvplan.app.config``).

The public names of the group, re-exported; each module says more."""

from __future__ import annotations

from .deployment import DeploymentFacts
from .planning import PlanningInputs, prices_from_table
from .pricebook import PriceBook
from .settings import DeploymentConfig, PrometheusConfig, ScheduleConfig, Settings, TargetConfig
from .settings_checks import PER_ENGINE_LABELS, check_selector, check_url, duration_s, same_server_notes

__all__ = [
    "PER_ENGINE_LABELS", "DeploymentConfig", "DeploymentFacts", "PlanningInputs", "PriceBook", "PrometheusConfig",
    "ScheduleConfig", "Settings", "TargetConfig", "check_selector", "check_url", "duration_s", "prices_from_table",
    "same_server_notes"
]
