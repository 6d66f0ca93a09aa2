"""histogram_quantile, checked against values worked out by hand from Prometheus's rule
(linear interpolation inside the bucket holding rank q*total; +Inf -> highest finite bound)."""

import math

from kvplan.models.metrics.window import bucket_quantile

INF = math.inf


def test_interpolates_inside_the_bucket():
    # buckets: 4 obs <= 0.1, 5 more <= 1.0, 1 more above; total 10
    b = [(0.1, 4), (1.0, 9), (INF, 10)]
    q = bucket_quantile(0.5, b)  # rank 5 -> bucket (0.1, 1.0], 1 of its 5 -> 0.1 + 0.9 * 1/5
    assert math.isclose(q.value, 0.28) and (q.lower, q.upper, q.in_inf) == (0.1, 1.0, False)
    q = bucket_quantile(0.2, b)  # rank 2 in first bucket, lower bound 0 -> 0.1 * 2/4
    assert math.isclose(q.value, 0.05) and q.lower == 0.0


def test_rank_in_inf_returns_highest_finite_bound_and_flags_it():
    b = [(0.1, 4), (1.0, 9), (INF, 10)]
    q = bucket_quantile(0.99, b)  # rank 9.9 > 9: lands in +Inf
    assert q.value == 1.0 and q.in_inf and q.upper is None and q.lower == 1.0


def test_unsorted_duplicate_and_nonmonotonic_buckets():
    # order does not matter; equal bounds coalesce; a dip is raised to its predecessor
    b = [(INF, 10), (1.0, 9), (0.1, 2), (0.1, 2), (0.5, 3)]
    q = bucket_quantile(0.5, b)  # cumulative 0.1:4, 0.5:4 (raised from 3), 1.0:9 -> rank 5 in (0.5,1]
    assert math.isclose(q.value, 0.5 + 0.5 * (1 / 5))


def test_no_observations_or_no_inf_bucket_gives_none():
    assert bucket_quantile(0.5, [(0.1, 0), (INF, 0)]).value is None
    assert bucket_quantile(0.5, [(0.1, 3), (1.0, 4)]).value is None
    assert bucket_quantile(0.5, []).value is None
