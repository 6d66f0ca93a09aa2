"""kvplan.models.capacity.goodput: goodput read off a load sweep, with numbers worked out by hand."""

from __future__ import annotations

import dataclasses

import pytest

from kvplan.models.capacity.goodput import (
    ERRORS,
    LOWEST_FAILS,
    NOT_REACHED,
    TPOT,
    TTFT,
    Goodput,
    SweepPoint,
    failed_metrics,
    side_goodput,
    sweep_goodput,
)
from kvplan.models.core.errors import KvplanError


def pt(offered, rps, ttft99, tpot99=0.01, failed=0):
    return SweepPoint(offered=offered, throughput_rps=rps, ttft_p50_s=None if ttft99 is None else ttft99 / 2,
                      ttft_p99_s=ttft99, tpot_p99_s=tpot99, requests=20, failed=failed)


CURVE = [pt(1, 2.0, 0.10, 0.010), pt(2, 3.5, 0.20, 0.012), pt(4, 5.0, 0.60, 0.015)]


def test_goodput_is_the_frozen_dataclass_the_capacity_model_takes():
    assert [f.name for f in dataclasses.fields(Goodput)] == ["without_reuse_rps", "with_reuse_rps", "source"]
    g = Goodput(1.0, 2.0, "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.with_reuse_rps = 3.0  # type: ignore[misc]


def test_ttft_limits_interpolated_between_last_passing_and_first_failing_level():
    g = side_goodput(CURVE, ttft_slo_s=0.30, tpot_slo_s=0.05)
    # level 2 passes (0.20 s), level 4 fails (0.60 s): (0.30 - 0.20) / (0.60 - 0.20) = 0.25 of the
    # way from 3.5 to 5.0 req/s -> 3.5 + 0.25 * 1.5 = 3.875
    assert g.rps == pytest.approx(3.875)
    assert g.limited_by == TTFT
    assert (g.passing.offered, g.failing.offered) == (2, 4)
    assert "25%" in g.note


def test_tpot_limits_when_it_crosses_its_slo_first():
    pts = [pt(1, 2.0, 0.10, 0.010), pt(2, 3.5, 0.20, 0.012), pt(4, 5.0, 0.60, 0.030)]
    g = side_goodput(pts, ttft_slo_s=0.50, tpot_slo_s=0.020)
    # TTFT would cross at (0.50-0.20)/(0.60-0.20) = 0.75; TPOT at (0.020-0.012)/(0.030-0.012) = 4/9
    assert g.limited_by == TPOT
    assert g.rps == pytest.approx(3.5 + 4 / 9 * 1.5)  # 4.1667


def test_without_a_tpot_slo_tpot_is_not_checked():
    pts = [pt(1, 2.0, 0.10, 0.010), pt(2, 3.5, 0.20, 5.0)]
    assert side_goodput(pts, ttft_slo_s=0.5).limited_by == NOT_REACHED
    g = side_goodput(pts, ttft_slo_s=0.5, tpot_slo_s=1.0)
    # TPOT 0.010 -> 5.0 s crosses 1.0 s at 0.99 / 4.99 of the way from 2.0 to 3.5 req/s
    assert g.limited_by == TPOT and g.rps == pytest.approx(2.0 + 0.99 / 4.99 * 1.5)


def test_every_level_passing_gives_a_lower_bound():
    g = side_goodput(CURVE, ttft_slo_s=1.0)
    assert g.rps == 5.0 and g.limited_by == NOT_REACHED and g.failing is None
    assert "lower bound" in g.note


def test_no_level_passing_gives_zero():
    g = side_goodput(CURVE, ttft_slo_s=0.05)
    assert g.rps == 0.0 and g.limited_by == LOWEST_FAILS and g.passing is None
    assert "lowest level (1)" in g.note


def test_highest_passing_throughput_counts_even_after_a_noisy_failure():
    # 4 fails (0.40 > 0.35) but 8 passes again with more throughput; 16 fails.
    pts = [pt(2, 2.0, 0.10), pt(4, 4.0, 0.40), pt(8, 7.0, 0.30), pt(16, 9.0, 0.80)]
    g = side_goodput(pts, ttft_slo_s=0.35)
    # from level 8 (0.30 s, 7 req/s) to 16 (0.80 s, 9 req/s): 0.05/0.50 = 0.1 -> 7.2
    assert g.passing.offered == 8 and g.failing.offered == 16
    assert g.rps == pytest.approx(7.2)


def test_throughput_falling_past_capacity_never_lowers_goodput_below_the_passing_level():
    pts = [pt(4, 4.0, 0.20), pt(8, 8.0, 0.38), pt(12, 7.0, 1.00)]
    g = side_goodput(pts, ttft_slo_s=0.5)
    assert g.rps == pytest.approx(8.0) and g.limited_by == TTFT


def test_failed_requests_fail_a_level():
    pts = [pt(1, 2.0, 0.10), pt(2, 3.5, 0.20, failed=2)]
    assert failed_metrics(pts[1], 1.0, None) == [ERRORS]
    g = side_goodput(pts, ttft_slo_s=1.0)
    assert g.rps == 2.0 and g.limited_by == ERRORS
    # a level whose every request failed has no TTFT at all
    assert failed_metrics(pt(4, 0.0, None), 1.0, None) == [ERRORS]


def test_levels_are_read_in_order_of_offered_load():
    assert side_goodput(CURVE[::-1], ttft_slo_s=0.30).rps == pytest.approx(3.875)


def test_sweep_goodput_pairs_the_sides_and_says_where_it_comes_from():
    on = [pt(1, 2.0, 0.03), pt(2, 4.0, 0.04), pt(4, 8.0, 0.05), pt(8, 12.0, 0.45)]
    sg = sweep_goodput(CURVE, on, 0.30, 0.05, label="load sweep 'p1' (CPU stack)")
    # on: from 4 (0.05 s, 8 req/s) to 8 (0.45 s, 12 req/s): 0.25/0.40 = 0.625 -> 8 + 2.5 = 10.5
    assert sg.goodput.without_reuse_rps == pytest.approx(3.875)
    assert sg.goodput.with_reuse_rps == pytest.approx(10.5)
    assert sg.off.limited_by == sg.on.limited_by == TTFT
    assert "load sweep 'p1' (CPU stack)" in sg.goodput.source
    assert "TTFT p99 <= 0.3 s, TPOT p99 <= 0.05 s" in sg.goodput.source


@pytest.mark.parametrize("slo", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_slos_are_user_errors(slo):
    with pytest.raises(KvplanError):
        side_goodput(CURVE, ttft_slo_s=slo)
    with pytest.raises(KvplanError):
        side_goodput(CURVE, ttft_slo_s=0.3, tpot_slo_s=slo)


def test_a_tpot_slo_needs_measured_tpot_and_a_sweep_needs_levels():
    with pytest.raises(KvplanError, match="TPOT"):
        side_goodput([pt(1, 1.0, 0.1, None)], ttft_slo_s=0.3, tpot_slo_s=0.1)
    with pytest.raises(KvplanError, match="no levels"):
        side_goodput([], ttft_slo_s=0.3)
