"""Altair chart builders (kvplan.app.charts): the data each chart plots, and that every spec
renders through vl-convert (the report's path), with data and without."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pandas as pd
import pytest
import vl_convert

from kvplan.app import charts, charts_cost
from kvplan.models.decision.benefit import WaterfallRow
from kvplan.models.decision.sensitivity import SensitivityRow


def data(chart) -> pd.DataFrame:
    """All rows a (possibly layered) chart plots."""
    spec = chart.to_dict()
    frames = [pd.DataFrame(v) for v in spec.get("datasets", {}).values()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


WF = [WaterfallRow("Saved prefill", 100.0, 80.0, 120.0), WaterfallRow("Throughput", 50.0, 40.0, 60.0),
      WaterfallRow("Deferral", 0.0, 0.0, 0.0), WaterfallRow("Overhead", -30.0, -30.0, -30.0),
      WaterfallRow("Monthly benefit", 120.0, 90.0, 150.0)]


def test_waterfall_floats_each_term_from_the_running_total():
    chart = charts_cost.waterfall_chart(WF)
    df = data(chart).drop_duplicates("order").set_index("term")
    # error bars only where there is a band
    bars = chart.to_dict()["layer"][1]
    ticks = pd.DataFrame(chart.to_dict()["datasets"][bars["data"]["name"]])
    assert ticks["term"].tolist() == ["Saved prefill", "Throughput", "Monthly benefit"]
    assert df.loc["Saved prefill", ["start", "end"]].tolist() == [0, 100]
    assert df.loc["Throughput", ["start", "end", "band_low", "band_high"]].tolist() == [100, 150, 140, 160]
    assert df.loc["Overhead", ["start", "end", "kind"]].tolist() == [150, 120, "cost"]
    assert df.loc["Monthly benefit", ["start", "end", "band_low", "band_high", "kind"]].tolist() == [
        0, 120, 90, 150, "total"]
    assert df["order"].tolist() == [0, 1, 2, 3, 4]


def test_tornado_keeps_the_order_and_draws_the_base():
    rows = [SensitivityRow("hit rate", "share", 0.5, 0.4, 0.6, -10.0, 90.0, 40.0),
            SensitivityRow("GPU price", "$/GPU-hour", 2.5, 1.9, 3.1, 20.0, 60.0, 40.0)]
    df = data(charts_cost.tornado_chart(rows))
    bars = df.dropna(subset=["input"])
    assert bars[["input", "side", "benefit"]].values.tolist() == [
        ["hit rate", "input low", -10.0], ["hit rate", "input high", 90.0],
        ["GPU price", "input low", 20.0], ["GPU price", "input high", 60.0]]
    assert set(df["base"].dropna()) == {40.0}


def test_quantile_band_marks_inf_and_slo():
    t = datetime(2026, 11, 2)
    rows = [{"bucket": t, "metric": "TTFT", "quantile": "p99", "value": 2560.0, "lower": 2560.0, "upper": None,
             "in_inf": True},
            {"bucket": t, "metric": "TTFT", "quantile": "p50", "value": 0.07, "lower": 0.06, "upper": 0.08,
             "in_inf": False},
            {"bucket": t, "metric": "queue", "quantile": "p50", "value": 1.0, "lower": 0.8, "upper": 1.0,
             "in_inf": False}]
    c = charts.quantile_band_chart(rows, "TTFT", "t", slo_s=2.0)
    spec = c.to_dict()
    marks = [layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"] for layer in spec["layer"]]
    assert marks == ["area", "line", "point", "rule"]
    df = data(c)
    p99 = df[(df["quantile"] == "p99")].iloc[0]
    assert p99["band_top"] == 2560.0  # no upper bound: the band stops at the lower one
    assert set(df["metric"].dropna()) == {"TTFT"} and 2.0 in set(df["slo"].dropna())


def test_capacity_leaves_out_unreachable_months():
    sched = [{"month": 0, "with_reuse": 2, "without_reuse": None}, {"month": 1, "with_reuse": 3, "without_reuse": 5}]
    df = data(charts_cost.capacity_chart(sched, 4))
    lines = df.dropna(subset=["setup"])
    assert lines[["month", "setup", "gpus"]].values.tolist() == [
        [0, "with reuse", 2], [1, "without reuse", 5], [1, "with reuse", 3]]
    assert 4 in set(df["gpus"]) and "today: 4 GPUs" in set(df["label"].dropna())


def test_hit_rate_axis_is_a_share_of_tokens():
    spec = charts.tier_hit_rate_chart([{"bucket": datetime(2026, 11, 2), "tier": "x", "hit_rate": 0.4}]).to_dict()
    enc = spec["layer"][-1]["encoding"]  # (the chart is a layer: gap bands, when any, under the line)
    y = enc["y"]
    assert y["scale"]["domain"] == [0, 1] and y["axis"]["format"] == "%"
    assert enc["x"]["scale"]["type"] == "utc"


BUILDERS = {
    "tier": lambda rows: charts.tier_hit_rate_chart(rows),
    "cached": lambda rows: charts.cached_tokens_chart(rows),
    "gauge": lambda rows: charts.gauge_chart(rows, "g"),
    "band": lambda rows: charts.quantile_band_chart(rows, "TTFT", "b", 2.0),
    "phases": lambda rows: charts.phases_chart(rows),
    "waterfall": lambda rows: charts_cost.waterfall_chart(WF if rows else []),
    "capacity": lambda rows: charts_cost.capacity_chart(
        [{"month": 0, "with_reuse": 1, "without_reuse": 2}] if rows else [], 1),
    "tornado": lambda rows: charts_cost.tornado_chart(
        [SensitivityRow("h", "s", 0.5, 0.4, 0.6, 1.0, 2.0, 1.5)] if rows else []),
}
ROW = {"bucket": datetime(2026, 11, 2), "tier": "t", "hit_rate": 0.5, "source": "device", "tokens": 10.0,
       "series": "s", "mean": 0.2, "max": 0.3, "metric": "TTFT", "quantile": "p50", "value": 0.07, "lower": 0.06,
       "upper": 0.08, "in_inf": False}


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("rows", [[ROW], []], ids=["data", "empty"])
def test_every_chart_renders_to_svg(name, rows):
    svg = vl_convert.vegalite_to_svg(BUILDERS[name](rows).to_dict())
    assert svg.startswith("<svg") and "</svg>" in svg


def test_improvement_factors_read_as_the_change_they_are():
    from kvplan.app.report import fmt

    assert fmt.change(3.1, "lower", time_like=True) == "3.1x shorter"
    assert fmt.change(1 / 1.6, "lower", time_like=True) == "1.6x longer"
    assert fmt.change(2.6, "lower") == "2.6x lower"
    assert fmt.change(0.5, "higher") == "2.0x lower"
    assert fmt.change(None, "higher") == "n/a"


# ---- time axes and gaps ---------------------------------------------------------------------------

T0 = datetime(2026, 11, 30, 13, 0)


def _layers(spec: dict):
    for layer in spec.get("layer", []):
        if "layer" in layer:
            yield from _layers(layer)
        else:
            yield layer


def _layer(chart, mark: str) -> pd.DataFrame:
    spec = chart.to_dict()
    for layer in _layers(spec):
        m = layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"]
        if m == mark:
            return pd.DataFrame(spec["datasets"][layer.get("data", spec.get("data"))["name"]])
    raise AssertionError(f"no {mark} layer")


def _axis_labels(chart) -> list[str]:
    """The x-axis labels as vl-convert draws them (the report's renderer, Vega's own code)."""
    svg = vl_convert.vegalite_to_svg(chart.to_dict())
    axis = svg[svg.index('aria-label="X-axis'):]
    axis = axis[:axis.index('aria-label="Y-axis')] if 'aria-label="Y-axis' in axis else axis
    return [x for x in re.findall(r"<text[^>]*>([^<]+)</text>", axis) if not x.startswith("time (")]


def test_a_line_breaks_at_a_missing_bucket_and_the_gap_is_shaded():
    rows = [{"bucket": T0 + timedelta(minutes=5 * i), "tier": "device", "hit_rate": 0.5} for i in (0, 1, 2, 5, 6)]
    tl = charts.Timeline(step_s=300, t_from=T0, t_to=T0 + timedelta(minutes=30))
    c = charts.tier_hit_rate_chart(rows, tl=tl)
    line = _layer(c, "line")
    nulls = line[line["hit_rate"].isna()]
    # 13:15 and 13:20 have no value: a null row each, so Vega-Lite stops the line there
    assert sorted(nulls["when"]) == ["2026-11-30 13:15", "2026-11-30 13:20"]
    rect = _layer(c, "rect")
    assert rect[["from", "to"]].values.tolist() == [["2026-11-30 13:12", "2026-11-30 13:22"]]


def test_no_band_and_no_null_rows_without_gaps():
    rows = [{"bucket": T0 + timedelta(minutes=5 * i), "tier": "device", "hit_rate": 0.5} for i in range(4)]
    c = charts.tier_hit_rate_chart(rows, tl=charts.Timeline(step_s=300, t_from=T0, t_to=T0 + timedelta(minutes=20)))
    assert [la["mark"]["type"] for la in c.to_dict()["layer"]] == ["line"]
    assert _layer(c, "line")["hit_rate"].notna().all()


def test_a_recorded_gap_is_shaded_and_one_series_breaks_inside_it():
    rows = [{"bucket": T0 + timedelta(minutes=5 * i), "series": s, "mean": 0.1, "max": 0.2}
            for i in range(8) for s in ("vllm-0", "vllm-1") if not (s == "vllm-1" and i in (3, 4))]
    gap = charts.Gap(T0 + timedelta(minutes=12), T0 + timedelta(minutes=26), "vllm-1: 3 failed scrape(s)")
    c = charts.gauge_chart(rows, "g", tl=charts.Timeline(step_s=300, t_from=T0, t_to=T0 + timedelta(minutes=40),
                                                        gaps=(gap,)))
    rect = _layer(c, "rect")
    assert rect[["reason", "from", "to"]].values.tolist() == [["vllm-1: 3 failed scrape(s)", "2026-11-30 13:12",
                                                               "2026-11-30 13:26"]]
    assert _layer(c, "text")["label"].tolist() == ["vllm-1: 3 failed scrape(s)"]  # said on the chart
    line = _layer(c, "line")
    assert sorted(line[line["mean"].isna()]["series"]) == ["vllm-1", "vllm-1"]


def test_axis_labels_are_24_hour_in_the_zone_named_on_the_axis():
    rows = [{"bucket": T0 + timedelta(minutes=10 * i), "tier": "t", "hit_rate": 0.5} for i in range(13)]
    utc = charts.tier_hit_rate_chart(rows, tl=charts.Timeline(step_s=600))
    labels = _axis_labels(utc)
    assert labels and all(re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", x) for x in labels), labels
    assert "13:00" in labels and "15:00" in labels
    assert "time (UTC, 24-hour)" in vl_convert.vegalite_to_svg(utc.to_dict())
    tokyo = charts.tier_hit_rate_chart(rows, tl=charts.Timeline(tz="Asia/Tokyo", step_s=600))
    labels = _axis_labels(tokyo)  # UTC+9: 13:00 UTC is 22:00, 15:00 UTC is midnight (the date)
    assert "22:00" in labels and "01 Dec" in labels and not any(re.search(r"AM|PM", x) for x in labels)
    assert "time (Asia/Tokyo, 24-hour)" in vl_convert.vegalite_to_svg(tokyo.to_dict())
    when = _layer(tokyo, "line")["when"]
    assert when.iloc[0] == "2026-11-30 22:00"


def test_a_month_long_axis_is_labelled_weekly_and_a_short_one_as_before():
    # October 2026: the 1st is a Thursday, so its Sundays are the 4th, 11th, 18th and 25th
    rows = [{"bucket": datetime(2026, 10, 1) + timedelta(days=i), "tier": "t", "hit_rate": 0.5} for i in range(29)]
    month = charts.Timeline(step_s=86400, t_from=datetime(2026, 10, 1), t_to=datetime(2026, 10, 29))
    assert _axis_labels(charts.tier_hit_rate_chart(rows, tl=month)) == ["04 Oct", "11 Oct", "18 Oct", "25 Oct"]
    assert data(charts.tier_hit_rate_chart(rows, tl=month))["hit_rate"].notna().sum() == 29  # every day still drawn
    # under three weeks: Vega's own ticks, every other day over 20 days (10 labels)
    short = charts.Timeline(step_s=86400, t_from=datetime(2026, 10, 1), t_to=datetime(2026, 10, 20))
    labels = _axis_labels(charts.tier_hit_rate_chart(rows[:20], tl=short))
    assert labels[:3] == ["02 Oct", "04 Oct", "06 Oct"] and len(labels) == 10, labels
