"""Growth from the measured trend: the compound monthly growth of requests that best fits the
deployment's whole days (least squares on the logarithm of each day's requests, with a level per
weekday so that the weekly pattern is not read as growth).

A planning input (``PlanningInputs.growth_source = "measured_trend"``) switches the plan from
the growth the user typed to this one. Fewer than ``MIN_TREND_DAYS`` whole days with requests
give no trend (a week of data says more about weekdays than about growth); the plan then keeps
the typed growth and says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.calendar import DAYS_PER_MONTH

MIN_TREND_DAYS = 14
"""Whole days with requests a trend needs."""
LIMITS = (-0.99, 2.0)
"""The trend is clamped to the bounds of ``PlanningInputs.growth_rate_per_month``."""


@dataclass(frozen=True)
class GrowthTrend:
    rate_per_month: float
    """Compound monthly growth (0.05 = +5 %/month)."""
    days: int
    """Whole days the fit used."""
    note: str
    """The trend in words, with the days it was fitted on (shown with the plan)."""


def measured_growth(daily: Sequence[tuple[float, float]]) -> GrowthTrend | None:
    """``daily``: (day number, requests) of whole UTC days. None with fewer than
    ``MIN_TREND_DAYS`` days with requests."""
    pts = [(float(d), math.log(n)) for d, n in daily if n > 0]
    if len(pts) < MIN_TREND_DAYS:
        return None
    # log requests = weekday level + slope x day: the weekly pattern (busy weekdays, quiet
    # weekends) is not mistaken for growth when the history ends on a busy day
    x = np.zeros((len(pts), 8))
    for i, (d, _) in enumerate(pts):
        x[i, 0] = d
        x[i, 1 + int(d) % 7] = 1.0
    y = np.array([v for _, v in pts])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    slope = float(coef[0])  # log requests per day
    rate = min(LIMITS[1], max(LIMITS[0], math.exp(slope * DAYS_PER_MONTH) - 1.0))
    return GrowthTrend(rate, len(pts), f"measured trend {rate:+.1%}/month (log-linear fit over {len(pts)} whole "
                                       "days of requests)")
