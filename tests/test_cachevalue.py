"""Capacity in dollars: hand-computed optimum and break-even on a two-step curve."""

import numpy as np
import pytest

from kvplan.models.cache.sim import Curve
from kvplan.models.cache.value import ValueInputs, optimum, tokens_per_month, value_at
from kvplan.models.core.calendar import SECONDS_PER_MONTH

# Hit rate 0.5 from 1 chunk on, 0.8 from 10 chunks on.
CURVE = Curve(depths=np.array([0, 9]), cum_hit_tokens=np.array([0, 50, 80]), total_tokens=100,
              requests=3, references=10, unique_chunks=10)


def inputs(usd_per_gb_month):
    # 1 GB per chunk; 1e6 tokens/month x 3.6 ms = 1 GPU-hour at a 100 % hit rate = $100/month.
    return ValueInputs(bytes_per_chunk=10**9, requested_tokens_per_month=1e6,
                       seconds_per_cached_token=0.0036, usd_per_gpu_hour=100.0,
                       usd_per_gb_month=usd_per_gb_month)


def test_value_at_a_capacity():
    (row,) = value_at(CURVE, inputs(4.0), [5])
    assert row.capacity_gb == 5 and row.hit_rate == 0.5
    assert row.saved_gpu_hours_per_month == pytest.approx(0.5)
    assert row.saved_usd_per_month == pytest.approx(50.0)
    assert row.memory_usd_per_month == pytest.approx(20.0)
    assert row.net_usd_per_month == pytest.approx(30.0)


def test_expensive_memory_stops_paying_after_the_first_step():
    # net(1 GB) = 50 - 4 = 46 > net(10 GB) = 80 - 40 = 40; break-even at 0.8 x 100 / 4 = 20 GB
    o = optimum(CURVE, inputs(4.0))
    assert o["best"].capacity_gb == 1 and o["best"].net_usd_per_month == pytest.approx(46)
    assert o["break_even"].capacity_gb == 20
    assert o["break_even"].net_usd_per_month == pytest.approx(0.0)
    assert o["saved_usd_per_month_at_infinite"] == pytest.approx(80.0)


def test_cheap_memory_buys_the_second_step():
    o = optimum(CURVE, inputs(2.0))  # net(1) = 48 < net(10) = 80 - 20 = 60
    assert o["best"].capacity_chunks == 10 and o["best"].net_usd_per_month == pytest.approx(60)
    assert o["break_even"].capacity_gb == 40


def test_no_cache_when_nothing_pays():
    o = optimum(CURVE, inputs(1000.0))
    assert o["best"].capacity_chunks == 0 and o["best"].net_usd_per_month == 0


def test_free_memory_never_breaks_even_and_the_best_is_the_ceiling():
    o = optimum(CURVE, inputs(0.0))
    assert o["best"].capacity_chunks == 10 and o["break_even"] is None


def test_monthly_volume_and_bad_inputs():
    assert tokens_per_month(100, 10) == pytest.approx(10 * SECONDS_PER_MONTH)
    with pytest.raises(ValueError):
        tokens_per_month(100, 0)
    with pytest.raises(ValueError):
        ValueInputs(0, 1, 1, 1, 1)
