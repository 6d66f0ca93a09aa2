"""What prefill costs and what the cache saved: the per-interval observations (as objects, and as
columns for the fit and the window over long histories), the fitted cost model (fixed + per-token
+ attention [+ LMCache] per request, with a bootstrap band), the priced window by tier, the
measurement and its estimators, and the validation against a measured A/B.

The public names of the group, re-exported; each module says more."""

from __future__ import annotations

from .fit import CostPart, CostStatus, PrefillCostModel, fit_prefill_cost
from .interval import Interval
from .measurement import (
    PrefillMeasurement,
    measurement_from_stats,
    measurement_from_window,
    with_hit_rate,
)
from .savings import PrefillSavings, estimate_savings
from .table import IntervalTable, rounds
from .validation import ABValidation, validate_ab
from .window import MeasuredAB, PricedWindow, TierSavings, tier_savings

__all__ = [
    "ABValidation", "CostPart", "CostStatus", "Interval", "IntervalTable", "MeasuredAB", "PrefillCostModel",
    "PrefillMeasurement", "PrefillSavings", "PricedWindow", "TierSavings", "estimate_savings", "fit_prefill_cost",
    "measurement_from_stats", "measurement_from_window", "rounds", "tier_savings", "validate_ab", "with_hit_rate"
]
