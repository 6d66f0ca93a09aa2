"""Altair charts of the Cost page (``kvplan.app.pages.cost``) and its report section: the monthly
benefit's waterfall, the capacity projection, the sensitivity tornado and the load sweep's
throughput-against-TTFT curves. Data in, chart out, no Streamlit; the dashboard and the report
render the same specs. Shared pieces (``Layered``, ``LEGEND``, ``frame``) are in ``charts``."""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd

from .charts import LEGEND, Layered, frame


def waterfall_chart(rows: Sequence) -> Layered:
    """``PlanResult.waterfall`` rows (label, usd, low, high): the four terms as floating bars
    from the running total, the total from zero, each with its band as an error bar."""
    data, run = [], 0.0
    for i, r in enumerate(rows):
        total = i == len(rows) - 1
        start = 0.0 if total else run
        end = r.usd if total else run + r.usd
        lo, hi = (r.low, r.high) if total else (run + r.low, run + r.high)
        data.append({"order": i, "term": r.label, "usd": r.usd, "start": start, "end": end,
                     "band_low": min(lo, hi), "band_high": max(lo, hi),
                     "kind": "total" if total else ("gain" if r.usd >= 0 else "cost")})
        if not total:
            run += r.usd
    df = frame(data, ["order", "term", "usd", "start", "end", "band_low", "band_high", "kind"])
    x = alt.X("term:N", sort=alt.SortField("order"), title=None,
              axis=alt.Axis(labelAngle=-30, labelAlign="right", labelLimit=230, labelOverlap=False))
    colors = alt.Scale(domain=["gain", "cost", "total"], range=["#2e7d32", "#c62828", "#1565c0"])
    base = alt.Chart(df)
    return alt.layer(
        base.mark_bar().encode(x=x, y=alt.Y("start:Q", title="$ / month"), y2=alt.Y2("end:Q"),
                               color=alt.Color("kind:N", scale=colors, legend=LEGEND),
                               tooltip=[alt.Tooltip("term:N"), alt.Tooltip("usd:Q", format="$,.0f"),
                                        alt.Tooltip("band_low:Q", format="$,.0f"),
                                        alt.Tooltip("band_high:Q", format="$,.0f")]),
        alt.Chart(df[df["band_low"] != df["band_high"]]).mark_errorbar(ticks=True).encode(
            x=x, y=alt.Y("band_low:Q", title="$ / month"), y2=alt.Y2("band_high:Q")),
        title="Monthly benefit: the four terms and the total, with bands",
    ).properties(height=300)


def capacity_chart(schedule: Sequence[dict], current_gpus: int | None) -> Layered:
    """Schedule rows (month, with_reuse, without_reuse): GPUs needed to meet the p99 TTFT
    target month by month, and the current fleet as a rule."""
    rows = [{"month": r["month"], "setup": label, "gpus": r[key]}
            for r in schedule for key, label in (("without_reuse", "without reuse"), ("with_reuse", "with reuse"))
            if r[key] is not None]
    df = frame(rows, ["month", "setup", "gpus"])
    layers = [alt.Chart(df).mark_line(point=True, interpolate="step-after").encode(
        x=alt.X("month:Q", title="months from now"), y=alt.Y("gpus:Q", title="GPUs needed"),
        color=alt.Color("setup:N", legend=LEGEND),
        tooltip=[alt.Tooltip("month:Q"), alt.Tooltip("setup:N"), alt.Tooltip("gpus:Q")])]
    if current_gpus is not None:
        layers.append(alt.Chart(pd.DataFrame({"gpus": [current_gpus], "label": [f"today: {current_gpus} GPUs"]}))
                      .mark_rule(strokeDash=[6, 4], color="gray")
                      .encode(y=alt.Y("gpus:Q"), tooltip=[alt.Tooltip("label:N")]))
    return (alt.layer(*layers, title="Capacity projection: GPUs needed to meet the p99 TTFT target")
            .properties(height=260))


def tornado_chart(rows: Sequence) -> Layered:
    """``PlanResult.sensitivity`` rows: the monthly benefit with each input moved down and
    up, largest swing on top; the base benefit as a rule."""
    data = []
    for i, r in enumerate(rows):
        for side, inp, ben in (("low", r.low_input, r.low_benefit), ("high", r.high_input, r.high_benefit)):
            data.append({"order": i, "input": r.name, "side": f"input {side}", "value": inp, "unit": r.unit,
                         "benefit": ben, "base": r.base_benefit})
    df = frame(data, ["order", "input", "side", "value", "unit", "benefit", "base"])
    y = alt.Y("input:N", sort=alt.SortField("order"), title=None)
    base_val = rows[0].base_benefit if rows else 0.0
    return alt.layer(
        alt.Chart(df).mark_bar(opacity=0.85).encode(
            y=y, x=alt.X("base:Q", title="monthly benefit ($)"), x2=alt.X2("benefit:Q"),
            color=alt.Color("side:N", legend=LEGEND),
            tooltip=[alt.Tooltip("input:N"), alt.Tooltip("side:N"), alt.Tooltip("value:Q"), alt.Tooltip("unit:N"),
                     alt.Tooltip("benefit:Q", format="$,.0f")]),
        alt.Chart(pd.DataFrame({"base": [base_val]})).mark_rule(color="black").encode(x=alt.X("base:Q")),
        title="Sensitivity: monthly benefit with one input moved",
    ).properties(height=max(120, 44 * len(rows)))


def sweep_curves_chart(rows: Sequence[dict], ttft_slo_s: float | None = None,
                       goodput_rows: Sequence[dict] = (), load_kind: str = "concurrency") -> Layered:
    """``SweepView.rows`` (side, offered, throughput_rps, ttft_p99_s, passes, ...): achieved
    throughput against TTFT p99, one line per side (without / with reuse) through the levels in
    order of offered load, levels that miss the SLOs as hollow points; the TTFT SLO as a dashed
    rule and, from ``SweepView.goodput_rows`` (side, goodput_rps), each side's goodput as a
    dotted rule in its colour."""
    unit = "users" if load_kind == "concurrency" else "req/s offered"
    df = frame(rows, ["side", "offered", "throughput_rps", "ttft_p50_s", "ttft_p99_s", "tpot_p99_s", "passes",
                      "misses"])
    df = df.sort_values(["side", "offered"], kind="stable").reset_index(drop=True)
    sides = alt.Scale(domain=["without reuse", "with reuse"], range=["#c62828", "#1565c0"])
    x = alt.X("throughput_rps:Q", title="achieved throughput (requests/s)")
    base = alt.Chart(df).encode(x=x, color=alt.Color("side:N", scale=sides, legend=LEGEND))
    tips = [alt.Tooltip("side:N"), alt.Tooltip("offered:Q", title=f"level ({unit})"),
            alt.Tooltip("throughput_rps:Q", format=".2f", title="requests/s"),
            alt.Tooltip("ttft_p50_s:Q", format=".3f", title="TTFT p50 (s)"),
            alt.Tooltip("ttft_p99_s:Q", format=".3f", title="TTFT p99 (s)"),
            alt.Tooltip("tpot_p99_s:Q", format=".4f", title="TPOT p99 (s)"), alt.Tooltip("misses:N", title="misses")]
    layers: list = [
        base.mark_line().encode(y=alt.Y("ttft_p99_s:Q", title="TTFT p99 (s)"), order=alt.Order("offered:Q")),
        base.mark_point(size=70).encode(y=alt.Y("ttft_p99_s:Q"), tooltip=tips,
                                        fill=alt.FillValue(**alt.condition("datum.passes",
                                                                           alt.Color("side:N", scale=sides),
                                                                           alt.value("white")))),
    ]
    if ttft_slo_s is not None:
        layers.append(alt.Chart(pd.DataFrame({"slo": [ttft_slo_s], "label": [f"TTFT p99 SLO {ttft_slo_s:g} s"]}))
                      .mark_rule(strokeDash=[6, 4], color="gray")
                      .encode(y=alt.Y("slo:Q"), tooltip=[alt.Tooltip("label:N")]))
    if goodput_rows:
        g = frame(goodput_rows, ["side", "goodput_rps", "limited_by"])
        layers.append(alt.Chart(g).mark_rule(strokeDash=[2, 3]).encode(
            x=alt.X("goodput_rps:Q"), color=alt.Color("side:N", scale=sides, legend=LEGEND),
            tooltip=[alt.Tooltip("side:N"), alt.Tooltip("goodput_rps:Q", format=".2f", title="goodput (requests/s)"),
                     alt.Tooltip("limited_by:N", title="limited by")]))
    return alt.layer(*layers, title="Load sweep: throughput against TTFT p99, without and with reuse"
                     ).properties(height=280)
