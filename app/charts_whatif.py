"""Altair charts of the cache what-if (``kvplan.app.views.whatif``): data in, chart out, no Streamlit.
The What-if page and the report section render the same specs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt
import pandas as pd

from ..models.core.vocabulary import Routing, Topology
from .charts import Layered

if TYPE_CHECKING:
    from .views.whatif import WhatIf

LEGEND = alt.Legend(orient="bottom", title=None, labelLimit=360, columns=4)
ROUTING_LABELS: dict[str, str] = {Topology.SHARED: "one shared pool", Routing.ROUND_ROBIN: "private, round-robin",
                  Routing.RANDOM: "private, random", Routing.PREFIX_AFFINITY: "private, prefix affinity"}


def _x(d: WhatIf) -> tuple[str, str]:
    """Capacity axis: GB when bytes per chunk are known, else tokens."""
    return ("capacity_gb", "cache capacity (GB)") if d.trace.bytes_per_chunk else \
        ("capacity_tokens", "cache capacity (tokens)")


def curve_chart(d: WhatIf) -> Layered:
    """Hit rate against capacity (log x), with the configured size and the $ optimum marked."""
    key, title = _x(d)
    df = pd.DataFrame([{"capacity": getattr(p, key), "hit_rate": p.hit_rate} for p in d.points
                       if getattr(p, key)])
    x = alt.X("capacity:Q", title=title, scale=alt.Scale(type="log"))
    line = (alt.Chart(df).mark_line(point=True, interpolate="step-after")
            .encode(x=x, y=alt.Y("hit_rate:Q", title="token hit rate", axis=alt.Axis(format="%"),
                                 scale=alt.Scale(domain=[0, 1])),
                    tooltip=[alt.Tooltip("capacity:Q", format=",.3f"),
                             alt.Tooltip("hit_rate:Q", format=".1%")]))
    layers = [line]
    ceiling = pd.DataFrame([{"hit_rate": d.infinite_hit_rate, "what": "infinite capacity"}])
    layers.append(alt.Chart(ceiling).mark_rule(strokeDash=[4, 3], color="gray")
                  .encode(y="hit_rate:Q", tooltip=["what:N", alt.Tooltip("hit_rate:Q", format=".1%")]))
    marks = []
    if d.configured and key == "capacity_gb":
        marks.append({"capacity": d.configured.capacity_gb, "what": "configured size"})
    if d.dollars and d.best_capacity_gb and key == "capacity_gb":
        marks.append({"capacity": d.best_capacity_gb, "what": "best $ / month"})
    if marks:
        layers.append(alt.Chart(pd.DataFrame(marks)).mark_rule(strokeWidth=2)
                      .encode(x="capacity:Q", color=alt.Color("what:N", legend=LEGEND),
                              tooltip=["what:N", alt.Tooltip("capacity:Q", format=",.3f")]))
    return alt.layer(*layers, title="Hit rate against cache capacity (LRU, LMCache's hit rule, "
                     "exact at every capacity)").properties(height=280)


def topology_chart(d: WhatIf) -> alt.Chart:
    """Shared pool against N private caches (each 1/N of the capacity), per routing."""
    key, title = _x(d)
    s = d.shared_vs_private
    rows = []
    for p in s.points:
        cap = p.capacity_gb if key == "capacity_gb" else p.capacity_chunks * d.trace.chunk_tokens
        rates = {Topology.SHARED: p.shared, **p.private}
        for k, label in ROUTING_LABELS.items():
            if k in rates and cap:
                rows.append({"capacity": cap, "set-up": label, "hit_rate": rates[k]})
    df = pd.DataFrame(rows, columns=["capacity", "set-up", "hit_rate"])
    return (alt.Chart(df, title=f"One shared pool against {s.ranks} private caches of 1/{s.ranks} "
                      "each (x = total capacity)")
            .mark_line(interpolate="step-after")
            .encode(x=alt.X("capacity:Q", title=title, scale=alt.Scale(type="log")),
                    y=alt.Y("hit_rate:Q", title="token hit rate", axis=alt.Axis(format="%"),
                            scale=alt.Scale(domain=[0, 1])),
                    color=alt.Color("set-up:N", legend=LEGEND),
                    tooltip=["set-up:N", alt.Tooltip("capacity:Q", format=",.3f"),
                             alt.Tooltip("hit_rate:Q", format=".1%")])
            .properties(height=260))


def value_chart(d: WhatIf) -> alt.Chart:
    """Net $ / month against capacity (saved prefill GPU time minus cache memory)."""
    points = d.dollars.points if d.dollars else ()
    df = pd.DataFrame([{"capacity": p.capacity_gb, "net": p.net_usd_per_month,
                        "saved": p.saved_usd_per_month, "memory": p.memory_usd_per_month}
                       for p in points if p.capacity_gb])
    return (alt.Chart(df, title="Net $ / month: saved prefill GPU time minus cache memory")
            .mark_line(point=True)
            .encode(x=alt.X("capacity:Q", title="cache capacity (GB)", scale=alt.Scale(type="log")),
                    y=alt.Y("net:Q", title="$ / month"),
                    tooltip=[alt.Tooltip("capacity:Q", format=",.3f"), alt.Tooltip("net:Q", format="$,.0f"),
                             alt.Tooltip("saved:Q", format="$,.0f"), alt.Tooltip("memory:Q", format="$,.0f")])
            .properties(height=220))


SETUP_LABELS: dict[str, str] = {Topology.TODAY: "today's topology", Topology.SHARED: "one shared pool"}


def ttft_capacity_chart(d: WhatIf) -> Layered:
    """Predicted TTFT p99 against total cache capacity, today's topology and one shared pool,
    with the TTFT SLO as a line and today's measured p99 as a point."""
    key, title = _x(d)
    tokens = d.trace.chunk_tokens
    tw = d.topology
    assert tw is not None, "the TTFT chart needs the what-if's topology half"
    rows = [{"capacity": (p.capacity_gb if key == "capacity_gb" else p.capacity_chunks * tokens),
             "set-up": SETUP_LABELS[p.topology], "ttft_p99_s": p.ttft_p99_s, "ttft_mean_s": p.ttft_mean_s,
             "hit_rate": p.hit_rate} for p in tw.latency_curve if p.ttft_p99_s is not None]
    df = pd.DataFrame(rows, columns=["capacity", "set-up", "ttft_p99_s", "ttft_mean_s", "hit_rate"])
    x = alt.X("capacity:Q", title=title + " (total)", scale=alt.Scale(type="log"))
    lines = (alt.Chart(df).mark_line(point=True)
             .encode(x=x, y=alt.Y("ttft_p99_s:Q", title="TTFT p99, predicted, calibrated on today (s)"),
                     color=alt.Color("set-up:N", legend=LEGEND),
                     tooltip=["set-up:N", alt.Tooltip("capacity:Q", format=",.3f"),
                              alt.Tooltip("ttft_p99_s:Q", format=".3f"), alt.Tooltip("ttft_mean_s:Q", format=".3f"),
                              alt.Tooltip("hit_rate:Q", format=".1%")]))
    slo = pd.DataFrame([{"ttft_p99_s": tw.slo.ttft_p99_s, "what": "TTFT p99 SLO"}])
    layers = [lines, alt.Chart(slo).mark_rule(strokeDash=[6, 3], color="#c0392b")
              .encode(y="ttft_p99_s:Q", tooltip=["what:N", alt.Tooltip("ttft_p99_s:Q", format=".3f")])]
    t = tw.today
    cap = t.capacity_gb_per_instance
    if t.ttft_p99_s_measured is not None and cap and key == "capacity_gb":
        pt = pd.DataFrame([{"capacity": sum(cap), "ttft_p99_s": t.ttft_p99_s_measured, "what": "today, measured"}])
        layers.append(alt.Chart(pt).mark_point(shape="diamond", size=90, filled=True, color="black")
                      .encode(x="capacity:Q", y="ttft_p99_s:Q",
                              tooltip=["what:N", alt.Tooltip("ttft_p99_s:Q", format=".3f")]))
    return alt.layer(*layers, title="TTFT p99 against cache capacity (the same requests replayed; the dashed line "
                     "is the SLO)").properties(height=280)


def today_chart(d: WhatIf) -> alt.Chart:
    """Today measured, today predicted, one shared pool predicted (raw and calibrated on today):
    TTFT mean and p99."""
    tw = d.topology
    assert tw is not None, "the TTFT chart needs the what-if's topology half"
    t, pool = tw.today, tw.shared
    rows = []
    for what, mean, p99 in (("today, measured", t.ttft_mean_s_measured, t.ttft_p99_s_measured),
                            ("today, predicted", t.ttft_mean_s_predicted, t.ttft_p99_s_predicted),
                            ("one shared pool, predicted raw", pool and pool.ttft_mean_s_raw,
                             pool and pool.ttft_p99_s_raw),
                            ("one shared pool, calibrated on today", pool and pool.ttft_mean_s,
                             pool and pool.ttft_p99_s)):
        rows += [{"what": what, "statistic": "mean", "s": mean}, {"what": what, "statistic": "p99", "s": p99}]
    df = pd.DataFrame([r for r in rows if r["s"] is not None], columns=["what", "statistic", "s"])
    return (alt.Chart(df, title="TTFT: today (measured, predicted) against one shared pool (predicted)")
            .mark_bar()
            .encode(x=alt.X("what:N", title=None, sort=None, axis=alt.Axis(labelAngle=0, labelLimit=220)),
                    xOffset="statistic:N", y=alt.Y("s:Q", title="TTFT (s)"),
                    color=alt.Color("statistic:N", legend=LEGEND),
                    tooltip=["what:N", "statistic:N", alt.Tooltip("s:Q", format=".3f")])
            .properties(height=240))
