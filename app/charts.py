"""Altair chart builders: data in, chart out, no Streamlit. The dashboard and the report
render the same specs (the report through vl-convert). Time axes are UTC."""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd

TIME = alt.X("bucket:T", title="time (UTC)", scale=alt.Scale(type="utc"))
LEGEND = alt.Legend(orient="bottom", title=None, labelLimit=360, columns=3)


def frame(rows: Sequence[dict], columns: Sequence[str]) -> pd.DataFrame:
    """Rows as a frame with these columns, also when there are none. Aware times (kvplan's
    instants are UTC-aware) become naive UTC here, at the chart's border: the axes are UTC."""
    df = pd.DataFrame(list(rows))
    if df.empty:
        return df.reindex(columns=list(columns))
    for col in df.columns:
        if isinstance(df[col].dtype, pd.DatetimeTZDtype):
            df[col] = df[col].dt.tz_convert("UTC").dt.tz_localize(None)
    return df


def tier_hit_rate_chart(rows: Sequence[dict], title: str = "Hit rate by cache tier "
                        "(share of looked-up prompt tokens found, per time bucket)") -> alt.Chart:
    """Rows: bucket, tier, hit_rate (token-weighted: each bucket's hits / its queries)."""
    df = frame(rows, ["bucket", "tier", "hit_rate"])
    return (alt.Chart(df, title=title).mark_line(point=True)
            .encode(x=TIME,
                    y=alt.Y("hit_rate:Q", title="hit rate", axis=alt.Axis(format="%"),
                            scale=alt.Scale(domain=[0, 1])),
                    color=alt.Color("tier:N", legend=LEGEND),
                    tooltip=[alt.Tooltip("bucket:T"), "tier:N", alt.Tooltip("hit_rate:Q", format=".1%")])
            .properties(height=260))


def cached_tokens_chart(rows: Sequence[dict]) -> alt.Chart:
    """Rows: bucket, source, tokens (vllm:prompt_tokens_cached_by_source_total), stacked."""
    df = frame(rows, ["bucket", "source", "tokens"])
    return (alt.Chart(df, title="Cached prompt tokens by the tier that supplied them")
            .mark_bar()
            .encode(x=TIME, y=alt.Y("sum(tokens):Q", title="tokens", stack="zero"),
                    color=alt.Color("source:N", legend=LEGEND),
                    tooltip=[alt.Tooltip("bucket:T"), "source:N", alt.Tooltip("tokens:Q", format=",.0f")])
            .properties(height=220))


def gauge_chart(rows: Sequence[dict], title: str, percent: bool = True) -> alt.Chart:
    """Rows: bucket, series, mean, max. The mean per bucket as a line, the max as points."""
    df = frame(rows, ["bucket", "series", "mean", "max"])
    y = alt.Axis(format="%") if percent else alt.Axis()
    base = alt.Chart(df).encode(x=TIME, color=alt.Color("series:N", legend=LEGEND))
    return alt.layer(
        base.mark_line().encode(y=alt.Y("mean:Q", title="mean (line), max (points)", axis=y),
                                tooltip=[alt.Tooltip("bucket:T"), "series:N", alt.Tooltip("mean:Q", format=".1%"),
                                         alt.Tooltip("max:Q", format=".1%")]),
        base.mark_point(size=20).encode(y="max:Q"),
        title=title,
    ).properties(height=220)


def quantile_band_chart(rows: Sequence[dict], metric: str, title: str, slo_s: float | None = None) -> alt.Chart:
    """Rows: bucket, metric, quantile, value, lower, upper, in_inf. For ``metric``: p50 and
    p99 lines, the band between the bounds of the histogram bucket each lies in, a red
    triangle where the rank landed in +Inf (the value is then only a lower bound), and the
    SLO as a dashed rule."""
    df = frame(rows, ["bucket", "metric", "quantile", "value", "lower", "upper", "in_inf"])
    df = df[df["metric"] == metric].copy()
    df["band_top"] = df["upper"].where(~df["in_inf"].astype(bool) & df["upper"].notna(), df["lower"])
    df["band_bottom"] = df["lower"].fillna(0.0)
    base = alt.Chart(df).encode(x=TIME)
    layers = [
        base.mark_area(opacity=0.18).encode(y=alt.Y("band_bottom:Q", title="seconds"), y2="band_top:Q",
                                            color=alt.Color("quantile:N", legend=None)),
        base.mark_line(point=True).encode(
            color=alt.Color("quantile:N", legend=LEGEND),
            y="value:Q", tooltip=[alt.Tooltip("bucket:T"), "quantile:N", alt.Tooltip("value:Q", format=".3f"),
                                  alt.Tooltip("lower:Q", title="bucket from"), alt.Tooltip("upper:Q", title="bucket to")]),
    ]
    inf = df[df["in_inf"].astype(bool)]
    if not inf.empty:
        layers.append(alt.Chart(inf).mark_point(shape="triangle-up", size=140, color="red", filled=True)
                      .encode(x=TIME, y="value:Q"))
    if slo_s is not None:
        layers.append(alt.Chart(pd.DataFrame({"slo": [slo_s], "label": [f"SLO {slo_s:g} s"]}))
                      .mark_rule(strokeDash=[6, 4], color="gray").encode(y="slo:Q", tooltip=["label:N"]))
    return alt.layer(*layers, title=title).properties(height=260)


def phases_chart(rows: Sequence[dict], metrics: Sequence[str] = ("prefill", "decode")) -> alt.Chart:
    """Rows as for ``quantile_band_chart``: the p50 and p99 of several phases together."""
    df = frame(rows, ["bucket", "metric", "quantile", "value"])
    df = df[df["metric"].isin(list(metrics))]
    return (alt.Chart(df, title=" vs ".join(m.capitalize() for m in metrics) + " time per request (p50, p99)")
            .mark_line(point=True)
            .encode(x=TIME, y=alt.Y("value:Q", title="seconds"),
                    color=alt.Color("metric:N", legend=LEGEND),
                    strokeDash=alt.StrokeDash("quantile:N", legend=LEGEND),
                    tooltip=[alt.Tooltip("bucket:T"), "metric:N", "quantile:N", alt.Tooltip("value:Q", format=".3f")])
            .properties(height=240))


def waterfall_chart(rows: Sequence) -> alt.Chart:
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
    x = alt.X("term:N", sort=alt.SortField("order"), title=None, axis=alt.Axis(labelAngle=-30, labelAlign="right", labelLimit=230, labelOverlap=False))
    colors = alt.Scale(domain=["gain", "cost", "total"], range=["#2e7d32", "#c62828", "#1565c0"])
    base = alt.Chart(df)
    return alt.layer(
        base.mark_bar().encode(x=x, y=alt.Y("start:Q", title="$ / month"), y2="end:Q",
                               color=alt.Color("kind:N", scale=colors, legend=LEGEND),
                               tooltip=["term:N", alt.Tooltip("usd:Q", format="$,.0f"),
                                        alt.Tooltip("band_low:Q", format="$,.0f"),
                                        alt.Tooltip("band_high:Q", format="$,.0f")]),
        alt.Chart(df[df["band_low"] != df["band_high"]]).mark_errorbar(ticks=True).encode(
            x=x, y=alt.Y("band_low:Q", title="$ / month"), y2="band_high:Q"),
        title="Monthly benefit: the four terms and the total, with bands",
    ).properties(height=300)


def capacity_chart(schedule: Sequence[dict], current_gpus: int | None) -> alt.Chart:
    """Schedule rows (month, with_reuse, without_reuse): GPUs needed to meet the p99 TTFT
    target month by month, and the current fleet as a rule."""
    rows = [{"month": r["month"], "setup": label, "gpus": r[key]}
            for r in schedule for key, label in (("without_reuse", "without reuse"), ("with_reuse", "with reuse"))
            if r[key] is not None]
    df = frame(rows, ["month", "setup", "gpus"])
    layers = [alt.Chart(df).mark_line(point=True, interpolate="step-after").encode(
        x=alt.X("month:Q", title="months from now"), y=alt.Y("gpus:Q", title="GPUs needed"),
        color=alt.Color("setup:N", legend=LEGEND), tooltip=["month:Q", "setup:N", "gpus:Q"])]
    if current_gpus is not None:
        layers.append(alt.Chart(pd.DataFrame({"gpus": [current_gpus], "label": [f"today: {current_gpus} GPUs"]}))
                      .mark_rule(strokeDash=[6, 4], color="gray").encode(y="gpus:Q", tooltip=["label:N"]))
    return alt.layer(*layers, title="Capacity projection: GPUs needed to meet the p99 TTFT target").properties(height=260)


def tornado_chart(rows: Sequence) -> alt.Chart:
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
            y=y, x=alt.X("base:Q", title="monthly benefit ($)"), x2="benefit:Q",
            color=alt.Color("side:N", legend=LEGEND),
            tooltip=["input:N", "side:N", "value:Q", "unit:N", alt.Tooltip("benefit:Q", format="$,.0f")]),
        alt.Chart(pd.DataFrame({"base": [base_val]})).mark_rule(color="black").encode(x="base:Q"),
        title="Sensitivity: monthly benefit with one input moved",
    ).properties(height=max(120, 44 * len(rows)))
