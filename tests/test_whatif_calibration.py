"""Today's TTFT error carried into the alternatives (``kvplan.models.cache.calibration``): the
ratios and their block-bootstrap intervals on hand-built measurements, each expected value
worked out below from Prometheus's bucket interpolation, not from the code under test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvplan.models.cache.calibration import MeasuredInterval, calibrate_today, calibrated

BOUNDS = (0.1, 0.2, 0.4)


def interval(t_end: float, ttfts: list[float]) -> MeasuredInterval:
    """A scrape interval whose histogram observed exactly these TTFTs."""
    les = [*BOUNDS, math.inf]
    return MeasuredInterval(t_end, float(len(ttfts)), float(sum(ttfts)),
                            tuple((le, float(sum(v <= le for v in ttfts))) for le in les))


def test_a_uniformly_twice_as_slow_engine_gives_ratio_two_for_every_statistic():
    """Predicted 0.05, 0.05, 0.15, 0.15 s; measured twice each (0.1, 0.1, 0.3, 0.3): the mean and
    the p99 read twice as high; the p50 reads the same through these buckets (both in the first)."""
    pred = np.array([0.05, 0.05, 0.15, 0.15])
    at = np.array([1.0, 1.2, 3.0, 3.2])  # first tokens: two in block (0, 2], two in (2, 4]
    meas = [interval(2.0, [0.1, 0.1]), interval(4.0, [0.3, 0.3])]
    c = calibrate_today(pred, at, meas, block_s=2.0, draws=200)
    # mean: (0.8 / 4) / (0.4 / 4) = 2, and every block alike: the interval is [2, 2]
    assert c.mean.ratio == pytest.approx(2.0) and c.mean.lo == pytest.approx(2.0) and c.mean.hi == pytest.approx(2.0)
    # measured cumulative: le 0.1: 2, 0.2: 2, 0.4: 4, +Inf: 4. p50, rank 2: first bucket, 0.1 x 2/2 = 0.1.
    # p99, rank 3.96: bucket (0.2, 0.4], 0.2 + 0.2 x (3.96 - 2) / 2 = 0.396.
    # predicted: le 0.1: 2, 0.2: 4. p50: 0.1 x 2/2 = 0.1; p99: 0.1 + 0.1 x 1.96 / 2 = 0.198.
    assert c.p50.measured == pytest.approx(0.1) and c.p50.predicted == pytest.approx(0.1)
    assert c.p50.ratio == pytest.approx(1.0)
    assert c.p99.measured == pytest.approx(0.396) and c.p99.predicted == pytest.approx(0.198)
    assert c.p99.ratio == pytest.approx(2.0)
    assert c.blocks == 2 and c.requests_predicted == 4 and c.requests_measured == 4


def test_blocks_that_disagree_give_an_interval_spanning_them():
    """Block 1 measured as predicted (0.1 s twice), block 2 three times slower (0.3 s twice against
    0.1). Whole span: 0.8 / 0.4 = 2. Two blocks drawn with replacement: both block 1 (ratio 1,
    a quarter of the draws), both block 2 (ratio 3, a quarter), one of each (2, half): the 10th
    percentile is 1, the 90th 3."""
    pred = np.array([0.1, 0.1, 0.1, 0.1])
    at = np.array([0.5, 1.5, 2.5, 3.5])
    meas = [interval(2.0, [0.1, 0.1]), interval(4.0, [0.3, 0.3])]
    c = calibrate_today(pred, at, meas, block_s=2.0, draws=400, seed=3)
    assert c.mean.ratio == pytest.approx(2.0)
    assert c.mean.lo == pytest.approx(1.0) and c.mean.hi == pytest.approx(3.0)
    value, iv = calibrated(c, "mean", 0.05)
    assert value == pytest.approx(0.1) and iv == pytest.approx([0.05, 0.15])


def test_a_request_counts_in_the_block_of_its_first_token():
    """Block 1's requests now predicted at 0.3 s (measured 0.1: ratio 1/3), block 2's at 0.1
    (measured 0.3: ratio 3): the whole span reads 0.8 / 0.8 = 1, the draws of one block alone 1/3
    and 3 (each a quarter of the draws: the 10th and 90th percentiles)."""
    pred = np.array([0.3, 0.3, 0.1, 0.1])
    at = np.array([0.5, 1.5, 2.5, 3.5])
    meas = [interval(2.0, [0.1, 0.1]), interval(4.0, [0.3, 0.3])]
    c = calibrate_today(pred, at, meas, block_s=2.0, draws=400, seed=3)
    assert c.mean.ratio == pytest.approx(1.0)  # 0.8 / 0.8
    assert c.mean.lo == pytest.approx(1 / 3) and c.mean.hi == pytest.approx(3.0)


def test_without_a_measurement_nothing_is_calibrated_and_says_so():
    c = calibrate_today(np.array([0.1]), np.array([1.0]), [])
    assert not c.calibrated and c.notes and "not calibrated" in c.notes[0]
    assert calibrated(c, "mean", 0.25) == (0.25, None)
    assert c.to_dict()["calibrated"] is False
    # a measured histogram but no predicted TTFT (NaN: a request on no engine)
    c = calibrate_today(np.array([np.nan]), np.array([1.0]), [interval(2.0, [0.1])])
    assert not c.calibrated and calibrated(c, "p99", None) == (None, None)


def test_the_page_and_the_report_format_raw_and_calibrated_ttft_alike():
    """``app/report/fmt``'s what-if TTFT formatters (the What-if page and the report's section 8
    both use them): the strings each wrote before they shared them."""
    from types import SimpleNamespace

    from kvplan.app.report import fmt

    assert fmt.ttft_s(0.12345) == "0.123 s" and fmt.ttft_s(None) == "-"
    assert fmt.ttft_interval((0.1534, 0.2036)) == "0.153-0.204 s" and fmt.ttft_interval(None) == "-"
    pred = np.array([0.05, 0.05, 0.15, 0.15])
    c = calibrate_today(pred, np.array([1.0, 1.2, 3.0, 3.2]), [interval(2.0, [0.1, 0.1]), interval(4.0, [0.3, 0.3])],
                        block_s=2.0, draws=200)
    assert fmt.calibration_ratio(c.mean) == "x2.00 (2.00-2.00)"  # the ratio 2 worked out above
    none = calibrate_today(np.array([0.1]), np.array([1.0]), [])
    assert fmt.calibration_ratio(none.mean) == "not calibrated"  # the report's words
    assert fmt.calibration_ratio(None, "- (not calibrated)") == "- (not calibrated)"  # the page's
    row = SimpleNamespace(ttft_mean_s=0.175, ttft_mean_s_interval=(0.153, 0.204), ttft_mean_s_raw=0.114,
                          ttft_p50_s=0.1694, ttft_p50_s_raw=0.093, ttft_p99_s=0.38, ttft_p99_s_interval=None,
                          ttft_p99_s_raw=None)
    assert dict(zip(fmt.TTFT_SIDE_BY_SIDE, fmt.ttft_side_by_side(row), strict=True)) == {
        "TTFT mean": "0.175 s", "mean interval": "0.153-0.204 s", "mean raw": "0.114 s", "p50": "0.169 s",
        "p50 raw": "0.093 s", "p99": "0.380 s", "p99 interval": "-", "p99 raw": "-"}
