"""Altair charts of the cache what-if (``kvplan.app.views.whatif``): data in, chart out, no Streamlit.
The What-if page and the report section render the same specs."""

from __future__ import annotations

import altair as alt
import pandas as pd

from kvplan.app.charts import Layered

LEGEND = alt.Legend(orient="bottom", title=None, labelLimit=360, columns=4)
ROUTING_LABELS = {"shared": "one shared pool", "round_robin": "private, round-robin",
                  "random": "private, random", "prefix_affinity": "private, prefix affinity"}


def _x(d: dict) -> tuple[str, str]:
    """Capacity axis: GB when bytes per chunk are known, else tokens."""
    return ("capacity_gb", "cache capacity (GB)") if d["trace"]["bytes_per_chunk"] else \
        ("capacity_tokens", "cache capacity (tokens)")


def curve_chart(d: dict) -> Layered:
    """Hit rate against capacity (log x), with the configured size and the $ optimum marked."""
    key, title = _x(d)
    df = pd.DataFrame([{"capacity": p[key], "hit_rate": p["hit_rate"]} for p in d["points"]
                       if p[key]])
    x = alt.X("capacity:Q", title=title, scale=alt.Scale(type="log"))
    line = (alt.Chart(df).mark_line(point=True, interpolate="step-after")
            .encode(x=x, y=alt.Y("hit_rate:Q", title="token hit rate", axis=alt.Axis(format="%"),
                                 scale=alt.Scale(domain=[0, 1])),
                    tooltip=[alt.Tooltip("capacity:Q", format=",.3f"),
                             alt.Tooltip("hit_rate:Q", format=".1%")]))
    layers = [line]
    ceiling = pd.DataFrame([{"hit_rate": d["infinite_hit_rate"], "what": "infinite capacity"}])
    layers.append(alt.Chart(ceiling).mark_rule(strokeDash=[4, 3], color="gray")
                  .encode(y="hit_rate:Q", tooltip=["what:N", alt.Tooltip("hit_rate:Q", format=".1%")]))
    marks = []
    if d["configured"] and key == "capacity_gb":
        marks.append({"capacity": d["configured"]["capacity_gb"], "what": "configured size"})
    if d["dollars"] and d["best_capacity_gb"] and key == "capacity_gb":
        marks.append({"capacity": d["best_capacity_gb"], "what": "best $ / month"})
    if marks:
        layers.append(alt.Chart(pd.DataFrame(marks)).mark_rule(strokeWidth=2)
                      .encode(x="capacity:Q", color=alt.Color("what:N", legend=LEGEND),
                              tooltip=["what:N", alt.Tooltip("capacity:Q", format=",.3f")]))
    return alt.layer(*layers, title="Hit rate against cache capacity (LRU, LMCache's hit rule, "
                     "exact at every capacity)").properties(height=280)


def topology_chart(d: dict) -> alt.Chart:
    """Shared pool against N private caches (each 1/N of the capacity), per routing."""
    key, title = _x(d)
    s = d["shared_vs_private"]
    rows = []
    for p in s["points"]:
        cap = p["capacity_gb"] if key == "capacity_gb" else p["capacity_chunks"] * d["trace"]["chunk_tokens"]
        for k, label in ROUTING_LABELS.items():
            if k in p and cap:
                rows.append({"capacity": cap, "set-up": label, "hit_rate": p[k]})
    df = pd.DataFrame(rows, columns=["capacity", "set-up", "hit_rate"])
    return (alt.Chart(df, title=f"One shared pool against {s['ranks']} private caches of 1/{s['ranks']} "
                      "each (x = total capacity)")
            .mark_line(interpolate="step-after")
            .encode(x=alt.X("capacity:Q", title=title, scale=alt.Scale(type="log")),
                    y=alt.Y("hit_rate:Q", title="token hit rate", axis=alt.Axis(format="%"),
                            scale=alt.Scale(domain=[0, 1])),
                    color=alt.Color("set-up:N", legend=LEGEND),
                    tooltip=["set-up:N", alt.Tooltip("capacity:Q", format=",.3f"),
                             alt.Tooltip("hit_rate:Q", format=".1%")])
            .properties(height=260))


def value_chart(d: dict) -> alt.Chart:
    """Net $ / month against capacity (saved prefill GPU time minus cache memory)."""
    df = pd.DataFrame([{"capacity": p["capacity_gb"], "net": p["net_usd_per_month"],
                        "saved": p["saved_usd_per_month"], "memory": p["memory_usd_per_month"]}
                       for p in d["dollars"]["points"] if p["capacity_gb"]])
    return (alt.Chart(df, title="Net $ / month: saved prefill GPU time minus cache memory")
            .mark_line(point=True)
            .encode(x=alt.X("capacity:Q", title="cache capacity (GB)", scale=alt.Scale(type="log")),
                    y=alt.Y("net:Q", title="$ / month"),
                    tooltip=[alt.Tooltip("capacity:Q", format=",.3f"), alt.Tooltip("net:Q", format="$,.0f"),
                             alt.Tooltip("saved:Q", format="$,.0f"), alt.Tooltip("memory:Q", format="$,.0f")])
            .properties(height=220))
