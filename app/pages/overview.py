"""Overview: what reuse is worth this month (the plan over the selected window), the hit
rate, TTFT p50/p99 against the SLO, and the decision."""

import streamlit as st

from kvplan.app import charts, state
from kvplan.app.report import fmt
from kvplan.app.views.overview import overview
from kvplan.models.core.vocabulary import Tier
from kvplan.models.metrics.spans import chart_step

st.title("Overview")
sel = state.selection()
if sel is not None:
    ov = state.view(overview, sel.deployment, sel.t_from, sel.t_to, sel.model_name, sel.step_s,
                    cfg=state.cfg(sel.deployment))
    s, p, slo = ov.window.stats, ov.plan, ov.slo
    state.caption(sel, ov.window.source_note)
    state.badge(p.decision)
    state.tier_decisions(p)

    c = st.columns(4)
    c[0].metric("Monthly benefit", fmt.usd(p.monthly_benefit_usd),
                help="GPU-hours no longer spent on prefill + throughput + purchase deferred - cache overhead, "
                     "per month, from this window scaled to 30.44 days (Cost & decision page).")
    c[1].metric("Benefit band", fmt.usd_band(p.monthly_benefit_low_usd, p.monthly_benefit_high_usd),
                help="Low and high ends: the spread of the prefill-cost estimators and the sampling error.")
    c[2].metric("Hit rate (all tiers)", fmt.pct(p.hit_rate),
                help="Prompt tokens served from any cache tier / all prompt tokens (what the plan prices).")
    c[3].metric("GPUs", f"{ov.gpus}", help=f"GPUs serving the deployment: {ov.gpus_origin}.")

    state.prefill_summary(p)

    c5 = st.columns(5)
    c5[0].metric("Prefix-cache hit rate", fmt.pct(s.prefix_cache_hit_rate),
                help="vLLM's own cache: prompt tokens found cached / prompt tokens looked up, summed over the window.")
    c5[1].metric("LMCache hit rate (external)", fmt.pct(s.external_prefix_cache_hit_rate),
                help="The KV connector's (LMCache) hits / its queries, in tokens, as vLLM counts them.")
    target = slo.target_s
    delta = None if s.ttft_p99_s is None else f"{s.ttft_p99_s - target:+.3f} s vs {target:g} s SLO"
    c5[2].metric("TTFT p50", fmt.quantile(s.ttft_p50),
                help="Median time to first token, interpolated inside its histogram bucket (histogram_quantile).")
    c5[3].metric("TTFT p99", fmt.quantile(s.ttft_p99), delta=delta, delta_color="inverse",
                help="99th percentile time to first token against the p99 target of the planning inputs.")
    c5[4].metric("Requests", fmt.count(s.requests))
    if s.ttft_p99 is not None and s.ttft_p99.value is not None:
        q = s.ttft_p99
        upper = "no upper bound (+Inf bucket)" if q.in_inf else f"{q.upper:g} s"
        msg = f"p99 lies between {q.lower:g} s and {upper}: a histogram quantile is only as precise as its bucket."
        (st.warning if q.in_inf else st.caption)(msg)
    if slo.share is not None:
        st.caption(f"SLO attainment: {fmt.pct(slo.share)} of requests had TTFT ≤ {slo.bound_s:g} s ({slo.note}).")

    tl = state.timeline(sel, chart_step(sel.t_from, sel.t_to, sel.step_s))
    state.chart(charts.tier_hit_rate_chart([r for r in ov.tier_points if r["key"] in (Tier.DEVICE, "external")], tl=tl))
    state.chart(charts.quantile_band_chart(ov.latency_points, "TTFT", "Time to first token (p50, p99, bucket bands)",
                                           target, tl=tl))
