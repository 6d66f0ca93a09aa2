"""What-if: hit rate against cache capacity from a stored trace (exact at every capacity),
the configured size marked, one shared pool against per-GPU caches, and the capacity that
pays best; today's topology from the data against what it measured, and TTFT for today and
every alternative (against capacity, with the SLO). Follows the sidebar's time range. Reads
``kvplan.app.views.whatif.whatif``."""

from datetime import datetime

import pandas as pd
import streamlit as st

from kvplan.app import charts_whatif, state
from kvplan.app.data.traces import trace_deployments, traces_of
from kvplan.app.report import fmt
from kvplan.app.views.whatif import WhatIf, WhatIfQuery, month_whatif, whatif

NOT_CALIBRATED = "- (not calibrated)"

st.title("What-if: cache size and topology")
state.through_navigation()


@st.cache_data(ttl=60, show_spinner="Replaying the trace once for every capacity and topology ...")
def compute(path: str, deployment: str, trace: str, ranks: int, configured_gb: float | None,
            bytes_per_chunk: int | None, seconds_per_token: float | None, tokens_per_month: float | None,
            t_from: datetime | None, t_to: datetime | None) -> WhatIf:
    with state.db().snapshot() as src:  # one connection, one view of the data
        return whatif(src, deployment, WhatIfQuery(
            trace=trace, ranks=ranks, configured_gb=configured_gb, bytes_per_chunk=bytes_per_chunk,
            seconds_per_cached_token=seconds_per_token, tokens_per_month=tokens_per_month, t_from=t_from, t_to=t_to),
            cfg=state.cfg(deployment))


@st.cache_data(ttl=60, show_spinner="Replaying the month's trace once for every capacity and topology ...")
def compute_month(path: str, deployment: str, month: str, ranks: int, configured_gb: float | None,
                  bytes_per_chunk: int | None, seconds_per_token: float | None) -> WhatIf:
    """The report's what-if of ``month`` (``month_whatif``: the same call, the same numbers)."""
    with state.db().snapshot() as src:
        return month_whatif(src, deployment, month, WhatIfQuery(
            ranks=ranks, configured_gb=configured_gb, bytes_per_chunk=bytes_per_chunk,
            seconds_per_cached_token=seconds_per_token), cfg=state.cfg(deployment))


def trace_months(traces: list[dict]) -> list[str]:
    """The UTC months ('YYYY-MM') the traces with unix times have requests in, newest first."""
    from kvplan.models.core.timeutil import from_epoch_s

    months: set[str] = set()
    for t in traces:
        if t["first_ts"] is None or t["last_ts"] is None or t["last_ts"] < 1e8:
            continue
        m = from_epoch_s(t["first_ts"]).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        while m <= from_epoch_s(t["last_ts"]):
            months.add(f"{m:%Y-%m}")
            m = m.replace(year=m.year + m.month // 12, month=m.month % 12 + 1)
    return sorted(months, reverse=True)


def window(info: dict) -> tuple[datetime | None, datetime | None]:
    """The sidebar's time range over the trace (it ends at the trace's last request); the whole
    trace for "all data" and for traces whose times are not unix times (Mooncake)."""
    from kvplan.models.core.timeutil import from_epoch_s

    span = state.RANGES[st.sidebar.selectbox("Time range", list(state.RANGES), key="range")]
    first, last = info["first_ts"], info["last_ts"]
    if span is None or first is None or first < 1e8:
        return None, None
    return from_epoch_s(max(first, last - span.total_seconds()) - 1.0), from_epoch_s(last + 10.0)


def topology_section(d: WhatIf) -> None:
    """Today's topology from the data against what it measured; TTFT for every alternative."""
    tw = d.topology
    if tw is None:
        return
    t = tw.today
    st.subheader("Today's topology, from the data")
    m = st.columns(4)
    m[0].metric("Cache instances", t.instances, help=", ".join(t.instance_names))
    m[1].metric("Engines", t.engines, help=t.engine_routing)
    m[2].metric("Hit rate, replayed", fmt.pct(t.hit_rate_predicted), help=t.hit_rate_definition)
    m[3].metric("Hit rate, LMCache measured", fmt.pct(t.hit_rate_measured),
                help="lmcache_mp_lookup_hit_tokens / lookup_requested_tokens over the same span")
    cal = t.ttft_calibration
    ratio = "measured / predicted (carried into every set-up)"
    st.dataframe(pd.DataFrame([
        {"TTFT": "mean", "measured": fmt.ttft_s(t.ttft_mean_s_measured),
         "predicted": fmt.ttft_s(t.ttft_mean_s_predicted),
         ratio: fmt.calibration_ratio(cal.mean if cal else None, NOT_CALIBRATED)},
        {"TTFT": "p50", "measured": fmt.ttft_s(t.ttft_p50_s_measured),
         "predicted": fmt.ttft_s(t.ttft_p50_s_predicted),
         ratio: fmt.calibration_ratio(cal.p50 if cal else None, NOT_CALIBRATED)},
        {"TTFT": "p99", "measured": fmt.ttft_s(t.ttft_p99_s_measured),
         "predicted": fmt.ttft_s(t.ttft_p99_s_predicted),
         ratio: fmt.calibration_ratio(cal.p99 if cal else None, NOT_CALIBRATED)},
        {"TTFT": "p99 as the histogram reads it", "measured": fmt.ttft_s(t.ttft_p99_s_measured),
         "predicted": fmt.ttft_s(t.ttft_p99_s_predicted_as_histogram), ratio: ""}]), hide_index=True)
    st.caption("How far to trust the alternatives: today predicted from the same model, against the TTFT "
               f"histogram over the same span ({t.requests:,} requests in the trace, "
               f"{t.requests_measured or 0:,.0f} in the histogram). Capacity per instance: "
               f"{t.capacity_source or 'unbounded'}.")
    if not tw.latency:
        return
    state.chart(charts_whatif.today_chart(d))
    slo = tw.slo.ttft_p99_s
    st.subheader(f"TTFT: today against the alternatives (p99 SLO {slo:g} s)")
    st.dataframe(pd.DataFrame([{
        "set-up": charts_whatif.SETUP_LABELS.get(r.topology, r.topology)
        + (f", {r.ranks} private caches, {r.routing.replace('_', ' ')}" if r.routing else ""),
        "capacity": (f"{r.capacity_gb:,.3f} GB" if r.capacity_gb is not None
                     else f"{r.capacity_chunks:,} chunks"),
        "hit rate": fmt.pct(r.hit_rate), **dict(zip(fmt.TTFT_SIDE_BY_SIDE, fmt.ttft_side_by_side(r), strict=True)),
        "holds the SLO": "yes" if r.holds_slo else "no",
        "goodput (req/s)": f"{r.goodput_rps:.3g}" if r.goodput_rps is not None else "-"}
        for r in tw.latency]), hide_index=True)
    st.caption("TTFT mean, p50 and p99: the replay's prediction (raw) times today's measured / predicted for "
               "the same statistic (above), with the interval of 80 % of a block bootstrap over today's span: how "
               "steady today's error was, not what a set-up-specific effect (a cache server slower under more "
               "engines) adds. Goodput counts the raw predictions. " + " ".join(cal.notes if cal else ()))
    state.chart(charts_whatif.ttft_capacity_chart(d))
    e = tw.engines_needed
    if e:
        def k(v) -> str:
            return str(v) if v is not None else f"more than {e.searched_up_to}"
        st.caption(f"Engines that hold the SLO on this traffic: today's caches {k(e.today)}, one shared pool "
                   f"{k(e.shared)} (today {e.engines_today}; {e.rule}). The prediction runs the "
                   "deployment's fitted prefill cost model over the trace's arrivals: see models/README.md for "
                   "what it leaves out and how it was checked.")


db = state.db()
path = str(db.path)
deps = trace_deployments(db) if db.path.exists() else []
if not deps:
    st.info("No request trace yet. Start LMCache with `--lookup-hash-log-dir DIR` and import its "
            "logs, or import a Mooncake-format trace:\n\n"
            "`kvplan import-trace --deployment NAME DIR`")
    st.stop()

sb = st.sidebar
current = st.session_state.get("deployment")
dep = sb.selectbox("Deployment (with a trace)", deps,
                   index=deps.index(current) if current in deps else 0, key="whatif_deployment")
traces = traces_of(db, dep)
names = [t["name"] for t in traces]
name = sb.selectbox("Trace", names, key="whatif_trace")
info = next(t for t in traces if t["name"] == name)
c = st.columns(4)
ranks = c[0].number_input("Private caches (GPUs)", 1, 1024, 8, key="whatif_ranks")
configured = c[1].number_input("Configured size (GB, 0 = price book)", 0.0, 1e7, 0.0,
                               key="whatif_configured", format="%.3f")
bpc = None
if not info["bytes_per_chunk"]:
    bpc = c[2].number_input("KV bytes per chunk (the trace has none)", 0, 10**12, 0,
                            key="whatif_bpc") or None
spt = c[3].number_input("GPU-seconds per cached token (0 = from metrics)", 0.0, 10.0, 0.0,
                        key="whatif_spt", format="%.6f") or None

month = sb.selectbox("Month (as the report)", ["-", *trace_months(traces)], key="whatif_month",
                     help="A UTC month: the newest trace with a request in it and the month's metrics, the "
                          "same what-if as the capacity report of that month (the trace and range above are "
                          "then not used).")
if month != "-":
    d = compute_month(path, dep, month, int(ranks), configured or None, bpc, spt)
else:
    t_from, t_to = window(info)
    d = compute(path, dep, name, int(ranks), configured or None, bpc, spt, None, t_from, t_to)  # KvplanError

t = d.trace
st.caption(f"{dep} · trace {t.name!r} ({t.format}) · {t.requests:,} requests · "
           f"{t.chunk_references:,} chunk references · {t.unique_chunks:,} distinct chunks of "
           f"{t.chunk_tokens} tokens · " + (f"{t.bytes_per_chunk:,} bytes per chunk ({t.bytes_source})"
                                             if t.bytes_per_chunk else "bytes per chunk unknown"))
m = st.columns(4)
m[0].metric("Infinite-capacity hit rate", fmt.pct(d.infinite_hit_rate),
            help="Every chunk kept forever: the ceiling any cache size can reach on this trace.")
sat = d.saturation
m[1].metric("Reached at", f"{sat.capacity_gb:,.3f} GB" if sat.capacity_gb is not None
            else f"{sat.capacity_tokens:,} tokens")
if d.configured:
    m[2].metric(f"At the configured {d.configured.capacity_gb:g} GB", fmt.pct(d.configured.hit_rate))
if d.dollars:
    b = d.dollars.best
    m[3].metric("Best capacity", f"{b.capacity_gb:,.3f} GB",
                help=f"net {fmt.usd(b.net_usd_per_month)}/month: every GB past it costs more than the "
                     "prefill time it saves")
state.chart(charts_whatif.curve_chart(d))
topology_section(d)

s = d.shared_vs_private
st.subheader(f"One shared pool or {s.ranks} private caches?")
cap = f"{s.capacity_gb:,.3f} GB" if s.capacity_gb is not None else f"{s.capacity_tokens:,} tokens"
st.dataframe(pd.DataFrame(
    [{"set-up": f"one shared pool of {cap}", "hit rate": fmt.pct(s.shared_hit_rate),
      "with infinite capacity": fmt.pct(s.shared_infinite_hit_rate)}]
    + [{"set-up": f"{s.ranks} private caches, {charts_whatif.ROUTING_LABELS[p.routing].split(', ')[1]}",
        "hit rate": fmt.pct(p.hit_rate), "with infinite capacity": fmt.pct(p.infinite_hit_rate)}
       for p in s.private]), hide_index=True)
st.caption("Private caches each hold 1/N of the total. Routing: round-robin, random (seed "
           f"{s.seed}), prefix affinity (the rank that served the deepest seen prefix when it covers "
           "at least half of the request, else round-robin). The traces carry no session ids.")
if s.points:
    state.chart(charts_whatif.topology_chart(d))

st.subheader("In dollars")
if d.dollars:
    dl = d.dollars
    st.markdown(f"Saved prefill GPU time at {dl.seconds_per_cached_token:.3g} GPU-s per cached token "
                f"({dl.seconds_per_cached_token_source}), {dl.requested_tokens_per_month:,.0f} prompt "
                f"tokens / month ({dl.requested_tokens_per_month_source}), "
                f"\\${dl.usd_per_gpu_hour:,.2f} per GPU-hour, minus cache memory at "
                f"\\${dl.usd_per_gb_month:,.2f} per GB-month (price book).")
    state.chart(charts_whatif.value_chart(d))
    if dl.break_even:
        st.caption(f"Past {dl.break_even.capacity_gb:,.3f} GB the cache as a whole costs more than it saves.")
else:
    st.info(d.dollars_left_out or "No dollars for this trace.")
for n in d.other_notes:
    st.caption(n)
