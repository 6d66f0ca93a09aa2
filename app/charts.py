"""Altair chart builders: data in, chart out, no Streamlit. The dashboard and the report
render the same specs (the report through vl-convert).

Time axes: 24-hour labels in UTC or the zone the user picked (``Timeline.tz``), named on the
axis title. Vega-Lite knows only UTC and the browser's local zone, so bucket times are
turned into the zone's wall-clock time and drawn on a UTC scale (``wall_clock``); the labels
are formatted by an explicit ``labelExpr`` ('HH:MM', 'HH:MM:SS' off the minute, the date at
midnight) and never fall back to Vega's "02 PM".

Gaps: a line never bridges a stretch without data. Every time chart gets a null row for each
time bucket a series has no value in (Vega-Lite breaks lines and areas at nulls), and a grey
band over the buckets where the chart has no value at all, plus the recorded gaps (failed
scrapes, Prometheus gaps) as darker bands labelled with what failed, each with a tooltip
saying why."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import altair as alt
import pandas as pd

LEGEND = alt.Legend(orient="bottom", title=None, labelLimit=360, columns=3)
Layered = alt.LayerChart | alt.FacetChart
"""What ``alt.layer`` returns (a facet when a layer is faceted)."""

LABEL_EXPR = ("utchours(datum.value) == 0 && utcminutes(datum.value) == 0 && utcseconds(datum.value) == 0 "
              "? utcFormat(datum.value, '%d %b') : utcseconds(datum.value) != 0 "
              "? utcFormat(datum.value, '%H:%M:%S') : utcFormat(datum.value, '%H:%M')")
"""Axis labels: 24-hour 'HH:MM' ('HH:MM:SS' off the minute), the date ('01 Dec') at midnight."""

NO_DATA_COLOR = "#9e9e9e"
RECORDED_GAP_COLOR = "#37474f"


@dataclass(frozen=True)
class Gap:
    """A recorded stretch without data: [t_from, t_to] (UTC) and why."""

    t_from: datetime
    t_to: datetime
    reason: str


@dataclass(frozen=True)
class Timeline:
    """How a time chart is drawn: the zone its axis speaks (IANA name), the width of its time
    buckets and the window (to find buckets with no data), the recorded gaps to shade."""

    tz: str = "UTC"
    step_s: int | None = None
    t_from: datetime | None = None
    t_to: datetime | None = None
    gaps: tuple[Gap, ...] = ()

    @property
    def title(self) -> str:
        return f"time ({self.tz}, 24-hour)"


DEFAULT = Timeline()


def _utc(ts) -> pd.Timestamp:
    t = pd.Timestamp(ts)
    return t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")


def wall_clock(values: Any, tz: str) -> pd.Series:
    """UTC instants (naive = UTC) as the wall-clock time of ``tz``, labelled UTC so that a
    UTC scale draws them as that zone's clock."""
    s = pd.to_datetime(pd.Series(values), utc=True)
    if tz != "UTC":
        s = s.dt.tz_convert(tz).dt.tz_localize(None).dt.tz_localize("UTC")
    return s


WEEKLY_TICKS_FROM = pd.Timedelta(days=21)
"""Time axes over a window this long or longer are labelled once a week (Sundays, 00:00 UTC
or the zone's wall clock) rather than every day or two: the same scale and data with fewer
labels, each of which vl-convert measures (a month's report chart drew 14 date labels, a third
of its rendering time)."""


def time_x(tl: Timeline, field: str = "t") -> alt.X:
    weekly = (tl.t_from is not None and tl.t_to is not None
              and _utc(tl.t_to) - _utc(tl.t_from) >= WEEKLY_TICKS_FROM)
    axis = alt.Axis(labelExpr=LABEL_EXPR, labelOverlap=True, labelAngle=0,
                    tickCount=alt.TimeIntervalStep(interval="week", step=1) if weekly else alt.Undefined)
    return alt.X(f"{field}:T", title=tl.title, scale=alt.Scale(type="utc"), axis=axis)


def when_tooltip(tl: Timeline) -> alt.Tooltip:
    return alt.Tooltip("when:N", title=f"time ({tl.tz})")


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


def grid(buckets: pd.Series, tl: Timeline) -> list[pd.Timestamp]:
    """Every bucket start of the window on the phase of the data's buckets (UTC), or the
    buckets seen when the step is unknown."""
    seen = sorted({_utc(b) for b in buckets.dropna()})
    if not seen or not tl.step_s:
        return seen
    step = pd.Timedelta(seconds=tl.step_s)
    lo = _utc(tl.t_from) if tl.t_from is not None else seen[0]
    hi = _utc(tl.t_to) if tl.t_to is not None else seen[-1]
    first = seen[0] - ((seen[0] - lo) // step) * step if seen[0] > lo else seen[0]
    if first + step <= lo:  # the bucket (first, first + step] must reach into the window
        first += step
    out: list[pd.Timestamp] = []
    b = first
    while b < max(hi, seen[-1] + step) and len(out) < 20000:
        out.append(b)
        b += step
    return sorted(set(out) | set(seen))


def with_breaks(df: pd.DataFrame, series: Sequence[str], values: Sequence[str], tl: Timeline) -> pd.DataFrame:
    """``df`` plus a row with null ``values`` for every grid bucket a series has no value in,
    so that each line stops there instead of joining its neighbours."""
    if df.empty:
        return df
    g = grid(df["bucket"], tl)
    df = df.copy()
    df["bucket"] = [_utc(b) for b in df["bucket"]]
    have = df.dropna(subset=list(values), how="all")
    keys = df[list(series)].drop_duplicates().itertuples(index=False, name=None)
    extra = []
    for key in keys:
        mask = (have[list(series)] == pd.Series(key, index=list(series))).all(axis=1)
        present = set(have.loc[mask, "bucket"])
        extra += [dict(zip(series, key, strict=True), bucket=b) for b in g if b not in present]
    if extra:
        df = pd.concat([df, pd.DataFrame(extra)], ignore_index=True)
    return df.sort_values("bucket", kind="stable").reset_index(drop=True)


def no_data_spans(df: pd.DataFrame, values: Sequence[str], tl: Timeline) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """Runs of grid buckets where no series of the chart has a value: (first, last) start."""
    if df.empty or not tl.step_s:
        return []
    have = {_utc(b) for b in df.dropna(subset=list(values), how="all")["bucket"]}
    if not have:
        return []
    step = pd.Timedelta(seconds=tl.step_s)
    spans, run = [], None
    for b in grid(df["bucket"], tl):
        if b in have:
            if run:
                spans.append(run)
            run = None
        else:
            run = (run[0], b) if run else (b, b)
    if run:
        spans.append(run)
    lo, hi = min(have), max(have)
    # inside the data only: before the first / after the last value there is no line to break
    return [(a, b) for a, b in spans if a > lo and b < hi + step]


def decorate(df: pd.DataFrame, tl: Timeline) -> pd.DataFrame:
    """The plotted time ``t`` (wall clock of the zone) and its tooltip text ``when``."""
    df = df.copy()
    if df.empty:
        df["t"], df["when"] = pd.Series(dtype="datetime64[ns, UTC]"), pd.Series(dtype=str)
        return df
    df["t"] = wall_clock(df["bucket"], tl.tz).set_axis(df.index)
    df["when"] = df["t"].dt.strftime("%Y-%m-%d %H:%M:%S").str.removesuffix(":00")
    return df.drop(columns=["bucket"])


def gap_layer(df: pd.DataFrame, values: Sequence[str], tl: Timeline) -> Layered | None:
    """Light grey bands over buckets where the chart has no value, dark ones over recorded gaps
    (inside the plotted time range), each with its reason as tooltip; None when there are none."""
    step = pd.Timedelta(seconds=tl.step_s or 0)
    half = step / 2
    reason = "no value in these time buckets (no samples, or nothing to compute it from)"
    rows = [{"start": a - half, "end": b + half, "reason": reason, "kind": "no data"}
            for a, b in no_data_spans(df, values, tl)]
    if not df.empty:
        seen = [_utc(b) for b in df["bucket"].dropna()]
        lo, hi = min(seen), max(seen) + step
        for gp in tl.gaps:
            a, b = max(_utc(gp.t_from), lo), min(_utc(gp.t_to), hi)
            if b > a:
                rows.append({"start": a, "end": b, "reason": gp.reason, "kind": "recorded",
                             "label": gp.reason.split(" (")[0]})
    if not rows:
        return None
    g = pd.DataFrame(rows).reindex(columns=["start", "end", "reason", "kind", "label"])
    g["start"] = wall_clock(g["start"], tl.tz)
    g["end"] = wall_clock(g["end"], tl.tz)
    fmt_ = "%Y-%m-%d %H:%M"
    g["from"], g["to"] = g["start"].dt.strftime(fmt_), g["end"].dt.strftime(fmt_)
    bands = (alt.Chart(g).mark_rect()
             .encode(x=time_x(tl, "start"), x2=alt.X2("end:T"),
                     fill=alt.FillValue(**alt.condition(alt.datum.kind == "recorded", alt.value(RECORDED_GAP_COLOR),
                                                        alt.value(NO_DATA_COLOR))),
                     opacity=alt.OpacityValue(**alt.condition(alt.datum.kind == "recorded", alt.value(0.16),
                                                              alt.value(0.2))),
                     tooltip=[alt.Tooltip("reason:N", title="gap"), alt.Tooltip("from:N", title=f"from ({tl.tz})"),
                              alt.Tooltip("to:N", title=f"to ({tl.tz})")]))
    rec = g[g["kind"] == "recorded"]
    if rec.empty:
        return bands
    labels = (alt.Chart(rec).mark_text(align="left", baseline="top", dx=4, dy=4, fontSize=10,
                                       color=RECORDED_GAP_COLOR, limit=260)
              .encode(x=time_x(tl, "start"), y=alt.YValue(0), text=alt.Text("label:N")))
    return alt.layer(bands, labels)


def _with_gaps(layers: list, df: pd.DataFrame, values: Sequence[str], tl: Timeline) -> list:
    g = gap_layer(df, values, tl)
    return layers if g is None else [g, *layers]


def tier_hit_rate_chart(rows: Sequence[dict], title: str = "Hit rate by cache tier "
                        "(share of looked-up prompt tokens found, per time bucket)",
                        tl: Timeline = DEFAULT) -> Layered:
    """Rows: bucket, tier, hit_rate (token-weighted: each bucket's hits / its queries)."""
    raw = frame(rows, ["bucket", "tier", "hit_rate"])
    df = decorate(with_breaks(raw, ["tier"], ["hit_rate"], tl), tl)
    line = (alt.Chart(df).mark_line(point=True)
            .encode(x=time_x(tl),
                    y=alt.Y("hit_rate:Q", title="hit rate", axis=alt.Axis(format="%"),
                            scale=alt.Scale(domain=[0, 1])),
                    color=alt.Color("tier:N", legend=LEGEND),
                    tooltip=[when_tooltip(tl), alt.Tooltip("tier:N"), alt.Tooltip("hit_rate:Q", format=".1%")]))
    return alt.layer(*_with_gaps([line], raw, ["hit_rate"], tl), title=title).properties(height=260)


def cached_tokens_chart(rows: Sequence[dict], tl: Timeline = DEFAULT) -> Layered:
    """Rows: bucket, source, tokens (vllm:prompt_tokens_cached_by_source_total), stacked."""
    raw = frame(rows, ["bucket", "source", "tokens"])
    df = decorate(raw, tl)
    bars = (alt.Chart(df).mark_bar()
            .encode(x=time_x(tl), y=alt.Y("sum(tokens):Q", title="tokens", stack="zero"),
                    color=alt.Color("source:N", legend=LEGEND),
                    tooltip=[when_tooltip(tl), alt.Tooltip("source:N"), alt.Tooltip("tokens:Q", format=",.0f")]))
    return alt.layer(*_with_gaps([bars], raw, ["tokens"], tl),
                     title="Cached prompt tokens by the tier that supplied them").properties(height=220)


def gauge_chart(rows: Sequence[dict], title: str, percent: bool = True, tl: Timeline = DEFAULT) -> Layered:
    """Rows: bucket, series, mean, max. The mean per bucket as a line, the max as points."""
    raw = frame(rows, ["bucket", "series", "mean", "max"])
    df = decorate(with_breaks(raw[["bucket", "series", "mean", "max"]], ["series"], ["mean", "max"], tl), tl)
    y = alt.Axis(format="%") if percent else alt.Axis()
    base = alt.Chart(df).encode(x=time_x(tl), color=alt.Color("series:N", legend=LEGEND))
    return alt.layer(*_with_gaps([
        base.mark_line().encode(y=alt.Y("mean:Q", title="mean (line), max (points)", axis=y),
                                tooltip=[when_tooltip(tl), alt.Tooltip("series:N"), alt.Tooltip("mean:Q", format=".1%"),
                                         alt.Tooltip("max:Q", format=".1%")]),
        base.mark_point(size=20).encode(y=alt.Y("max:Q")),
    ], raw, ["mean", "max"], tl), title=title).properties(height=220)


def quantile_band_chart(rows: Sequence[dict], metric: str, title: str, slo_s: float | None = None,
                        tl: Timeline = DEFAULT) -> Layered:
    """Rows: bucket, metric, quantile, value, lower, upper, in_inf. For ``metric``: p50 and
    p99 lines, the band between the bounds of the histogram bucket each lies in, a red
    triangle where the rank landed in +Inf (the value is then only a lower bound), and the
    SLO as a dashed rule."""
    raw = frame(rows, ["bucket", "metric", "quantile", "value", "lower", "upper", "in_inf"])
    raw = raw[raw["metric"] == metric].copy()
    raw["band_top"] = raw["upper"].where(~raw["in_inf"].astype(bool) & raw["upper"].notna(), raw["lower"])
    raw["band_bottom"] = raw["lower"].fillna(0.0)
    df = decorate(with_breaks(raw, ["metric", "quantile"], ["value"], tl), tl)
    df["in_inf"] = df["in_inf"].astype("boolean").fillna(False).astype(bool)
    base = alt.Chart(df).encode(x=time_x(tl))
    layers = [
        base.mark_area(opacity=0.18).encode(y=alt.Y("band_bottom:Q", title="seconds"), y2=alt.Y2("band_top:Q"),
                                            color=alt.Color("quantile:N", legend=alt.Legend(
                                                orient="bottom", title=None, symbolOpacity=1))),
        base.mark_line(point=True).encode(
            color=alt.Color("quantile:N", legend=LEGEND),
            y=alt.Y("value:Q"), tooltip=[when_tooltip(tl), alt.Tooltip("quantile:N"),
                                         alt.Tooltip("value:Q", format=".3f"),
                                         alt.Tooltip("lower:Q", title="bucket from"),
                                         alt.Tooltip("upper:Q", title="bucket to")]),
    ]
    inf = df[df["in_inf"]]
    if not inf.empty:
        layers.append(alt.Chart(inf).mark_point(shape="triangle-up", size=140, color="red", filled=True)
                      .encode(x=time_x(tl), y=alt.Y("value:Q")))
    if slo_s is not None:
        layers.append(alt.Chart(pd.DataFrame({"slo": [slo_s], "label": [f"SLO {slo_s:g} s"]}))
                      .mark_rule(strokeDash=[6, 4], color="gray")
                      .encode(y=alt.Y("slo:Q"), tooltip=[alt.Tooltip("label:N")]))
    return alt.layer(*_with_gaps(layers, raw, ["value"], tl), title=title).properties(height=260)


def phases_chart(rows: Sequence[dict], metrics: Sequence[str] = ("prefill", "decode"),
                 tl: Timeline = DEFAULT) -> Layered:
    """Rows as for ``quantile_band_chart``: the p50 and p99 of several phases together."""
    raw = frame(rows, ["bucket", "metric", "quantile", "value"])
    raw = raw[raw["metric"].isin(list(metrics))][["bucket", "metric", "quantile", "value"]]
    df = decorate(with_breaks(raw, ["metric", "quantile"], ["value"], tl), tl)
    line = (alt.Chart(df).mark_line(point=True)
            .encode(x=time_x(tl), y=alt.Y("value:Q", title="seconds"),
                    color=alt.Color("metric:N", legend=LEGEND),
                    strokeDash=alt.StrokeDash("quantile:N", legend=LEGEND),
                    tooltip=[when_tooltip(tl), alt.Tooltip("metric:N"), alt.Tooltip("quantile:N"),
                             alt.Tooltip("value:Q", format=".3f")]))
    return alt.layer(*_with_gaps([line], raw, ["value"], tl),
                     title=" vs ".join(m.capitalize() for m in metrics) + " time per request (p50, p99)"
                     ).properties(height=240)
