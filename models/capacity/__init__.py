"""How many GPUs: queueing primitives, the fleet needed with and without reuse (from a measured
goodput, or the M/M/c fallback), replicas that fit in GPU memory, purchase paths over the
horizon and growth from the measured trend.

The public names of the group, re-exported; each module says more."""

from __future__ import annotations

from .fleet import CapacityInputs, CapacityResult, plan_capacity
from .goodput import Goodput, SweepPoint, sweep_goodput
from .growth import GrowthTrend, measured_growth
from .horizon import HorizonPlan, plan_horizon
from .queueing import FleetBeyondLimit, replicas_needed
from .replica import ReplicaFit, replica_fit

__all__ = [
    "CapacityInputs", "CapacityResult", "FleetBeyondLimit", "Goodput", "GrowthTrend", "HorizonPlan", "ReplicaFit",
    "SweepPoint", "measured_growth", "plan_capacity", "plan_horizon", "replica_fit", "replicas_needed",
    "sweep_goodput"
]
