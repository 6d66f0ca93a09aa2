"""Latency: TTFT p50/p99 with the bucket each lies in, SLO attainment, queue time, prefill
against decode, and decode speed: TPOT and inter-token latency p50/p99 with the TPOT SLO."""

import pandas as pd
import streamlit as st

from kvplan.app import charts, state
from kvplan.app.report import fmt
from kvplan.app.views.latency import latency_view

st.title("Latency")
sel = state.selection()
if sel is not None:
    v = state.view(latency_view, sel.deployment, sel.t_from, sel.t_to, sel.step_s, sel.model_name,
                     prices=state.cfg(sel.deployment).prices)
    q, slo = v.quantiles, v.slo
    state.caption(sel, v.window.source_note)
    tl = state.timeline(sel, v.step_s)
    for w in v.warnings:
        st.warning(w)

    c = st.columns(4)
    c[0].metric("TTFT p50", fmt.quantile(q["TTFT p50"]), help=fmt.bucket(q["TTFT p50"]))
    c[1].metric("TTFT p99", fmt.quantile(q["TTFT p99"]), help=fmt.bucket(q["TTFT p99"]))
    c[2].metric("SLO attainment", fmt.pct(slo.share, "no requests"),
                help="Requests with TTFT at or under the SLO bound / all requests (histogram buckets).")
    c[3].metric("SLO bound used", "n/a" if slo.bound_s is None else f"{slo.bound_s:g} s")
    if slo.snapped:
        st.info(f"{slo.note}: the share is exact only at a bucket bound. Change the target on the "
                "Cost & decision page.")
    elif slo.bound_s is not None:
        st.caption(slo.note)
    state.chart(charts.quantile_band_chart(
        v.points, "TTFT", "Time to first token: p50 and p99, shaded between the bounds of the bucket each lies in",
        slo.target_s, tl=tl))

    st.subheader("Queue time")
    c3 = st.columns(3)
    c3[0].metric("Queue p50", fmt.quantile(q["queue p50"]), help=fmt.bucket(q["queue p50"]))
    c3[1].metric("Queue p99", fmt.quantile(q["queue p99"]), help=fmt.bucket(q["queue p99"]))
    c3[2].metric("Queue mean", fmt.secs(v.means["queue"], "not reported"))
    state.chart(charts.quantile_band_chart(v.points, "queue", "Time waiting in the queue "
                                           "(vllm:request_queue_time_seconds)", tl=tl))

    st.subheader("Prefill against decode")
    c = st.columns(4)
    c[0].metric("Prefill p50", fmt.quantile(q["prefill p50"]), help=fmt.bucket(q["prefill p50"]))
    c[1].metric("Prefill mean", fmt.secs(v.means["prefill"], "not reported"))
    c[2].metric("Decode p50", fmt.quantile(q["decode p50"]), help=fmt.bucket(q["decode p50"]))
    c[3].metric("Decode mean", fmt.secs(v.means["decode"], "not reported"))
    state.chart(charts.phases_chart(v.points, tl=tl))

    st.subheader("Decode speed: time per output token and inter-token latency")
    if q["TPOT p50"] is None and q["ITL p50"] is None:
        st.info("Not reported: these servers expose neither vllm:request_time_per_output_token_seconds (TPOT) "
                "nor vllm:inter_token_latency_seconds (ITL) in this window.")
    else:
        tq, ts = q["TPOT p99"], v.tpot_slo
        c = st.columns(4)
        c[0].metric("TPOT p50", fmt.reported_quantile(q["TPOT p50"]), help=fmt.bucket(q["TPOT p50"]))
        c[1].metric("TPOT p99", fmt.reported_quantile(tq), help=fmt.bucket(tq),
                    delta=None if tq is None or tq.value is None else f"{tq.value - ts.target_s:+.3f} s vs "
                    f"{ts.target_s:g} s SLO", delta_color="inverse")
        c[2].metric("TPOT SLO attainment", fmt.pct(ts.share, "not reported" if ts.bound_s is None else "no requests"),
                    help="Requests whose time per output token was at or under the TPOT SLO bound / all requests.")
        c[3].metric("TPOT SLO bound used", "n/a" if ts.bound_s is None else f"{ts.bound_s:g} s")
        c = st.columns(4)
        c[0].metric("ITL p50", fmt.reported_quantile(q["ITL p50"]), help=fmt.bucket(q["ITL p50"]))
        c[1].metric("ITL p99", fmt.reported_quantile(q["ITL p99"]), help=fmt.bucket(q["ITL p99"]))
        c[2].metric("TPOT mean", fmt.secs(v.means["TPOT"], "not reported"))
        c[3].metric("ITL mean", fmt.secs(v.means["ITL"], "not reported"))
        if ts.bound_s is not None:
            st.caption(f"TPOT SLO: {ts.note}. TPOT is one value per request (decode time / (output tokens - 1)); "
                       "ITL is one value per generated token, so its p99 shows single stalled steps that a "
                       "request's average hides.")
        state.chart(charts.quantile_band_chart(
            v.points, "TPOT", "Time per output token (vllm:request_time_per_output_token_seconds): p50 and p99, "
            "shaded between the bounds of the bucket each lies in", ts.target_s, tl=tl))
        state.chart(charts.quantile_band_chart(
            v.points, "ITL", "Inter-token latency (vllm:inter_token_latency_seconds): p50 and p99, shaded between "
            "the bounds of the bucket each lies in", tl=tl))

    st.dataframe(pd.DataFrame([{"quantile": k, "value": fmt.quantile(x, "not reported"), "lies in": fmt.bucket(x)}
                               for k, x in q.items()]), hide_index=True)
    st.caption("A histogram quantile is Prometheus's histogram_quantile: linear inside the bucket its rank falls "
               "in, so it is only as precise as that bucket. A rank in +Inf has no upper bound.")
