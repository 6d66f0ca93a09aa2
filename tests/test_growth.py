"""Growth from the measured trend (models/growth.py), worked out by hand."""

from __future__ import annotations

import math

import pytest

from kvplan.models.capacity.growth import MIN_TREND_DAYS, measured_growth


def test_an_exact_exponential_gives_its_monthly_rate():
    # +1 %/day for 30 days: monthly growth = 1.01^30.44 - 1 = 35.4 %
    days = [(d, 1000 * 1.01 ** d) for d in range(30)]
    t = measured_growth(days)
    assert t.rate_per_month == pytest.approx(1.01 ** 30.44 - 1) and t.days == 30
    assert "+35.4%/month" in t.note


def test_flat_noisy_and_short_histories():
    flat = [(d, 500.0 + (50 if d % 7 in (5, 6) else 0)) for d in range(28)]  # weekends busier, no growth
    assert abs(measured_growth(flat).rate_per_month) < 0.02
    assert measured_growth([(d, 100.0) for d in range(MIN_TREND_DAYS - 1)]) is None
    # days without requests do not count (an outage is not a collapse of demand)
    gaps = [(d, 0.0 if d % 2 else 100 * math.exp(0.01 * d)) for d in range(40)]
    assert measured_growth(gaps).days == 20
    assert measured_growth([(d, 10 * 2.0 ** d) for d in range(20)]).rate_per_month == 2.0  # clamped at +200 %
