"""Altair chart builders: data in, chart out, no Streamlit. The dashboard and the report
render the same specs (the report through vl-convert)."""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd

from app.service import Point


def points_frame(points: Sequence[Point]) -> pd.DataFrame:
    return pd.DataFrame([p.__dict__ for p in points])


def hit_rate_chart(points: Sequence[Point]) -> alt.Chart:
    """Token-weighted hit rate per time bucket: vLLM's device cache and the KV connector's
    (LMCache) external cache."""
    df = points_frame(points)
    if df.empty:
        df = pd.DataFrame(columns=["bucket", "prefix_cache_hit_rate", "external_prefix_cache_hit_rate"])
    long = df.melt(id_vars=["bucket"], value_vars=["prefix_cache_hit_rate", "external_prefix_cache_hit_rate"],
                   var_name="cache", value_name="hit_rate").dropna(subset=["hit_rate"])
    long["cache"] = long["cache"].map({"prefix_cache_hit_rate": "vLLM prefix cache (device)",
                                       "external_prefix_cache_hit_rate": "KV connector (LMCache)"})
    return (alt.Chart(long, title="Prefix-cache hit rate (share of prompt tokens served from cache)")
            .mark_line(point=True)
            .encode(x=alt.X("bucket:T", title="time (UTC)"),
                    y=alt.Y("hit_rate:Q", title="hit rate", axis=alt.Axis(format="%"),
                            scale=alt.Scale(domain=[0, 1])),
                    color=alt.Color("cache:N", title=None, legend=alt.Legend(orient="bottom")),
                    tooltip=[alt.Tooltip("bucket:T"), "cache:N", alt.Tooltip("hit_rate:Q", format=".1%")])
            .properties(height=260))


def ttft_chart(points: Sequence[Point], slo_s: float | None = None) -> alt.Chart:
    """TTFT p50 and p99 per time bucket (Prometheus histogram_quantile on each bucket's
    increases). A p99 whose rank lands in +Inf is drawn as a hollow red point."""
    df = points_frame(points)
    if df.empty:
        df = pd.DataFrame(columns=["bucket", "ttft_p50_s", "ttft_p99_s", "ttft_p99_in_inf"])
    long = df.melt(id_vars=["bucket", "ttft_p99_in_inf"], value_vars=["ttft_p50_s", "ttft_p99_s"],
                   var_name="quantile", value_name="seconds").dropna(subset=["seconds"])
    long["quantile"] = long["quantile"].map({"ttft_p50_s": "p50", "ttft_p99_s": "p99"})
    base = alt.Chart(long, title="Time to first token").encode(
        x=alt.X("bucket:T", title="time (UTC)"),
        y=alt.Y("seconds:Q", title="seconds"),
        color=alt.Color("quantile:N", title=None, legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("bucket:T"), "quantile:N", alt.Tooltip("seconds:Q", format=".3f")])
    layers = [base.mark_line(point=True)]
    inf = long[(long["quantile"] == "p99") & long["ttft_p99_in_inf"].astype(bool)]
    if not inf.empty:
        layers.append(alt.Chart(inf).mark_point(shape="triangle-up", size=120, color="red", filled=False)
                      .encode(x="bucket:T", y="seconds:Q"))
    if slo_s is not None:
        layers.append(alt.Chart(pd.DataFrame({"slo": [slo_s]})).mark_rule(strokeDash=[6, 4], color="gray")
                      .encode(y="slo:Q"))
    return alt.layer(*layers).properties(height=260)
