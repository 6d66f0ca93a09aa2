"""Overview: the window's hit rates and TTFT quantiles, and how they moved."""

import streamlit as st

from app import charts, service, state


def fmt_pct(v):
    return "not reported" if v is None else f"{v:.1%}"


def fmt_s(v, q=None):
    if v is None:
        return "no requests"
    s = f"{v * 1000:.0f} ms" if v < 10 else f"{v:.1f} s"
    return s + (" (≥, in +Inf bucket)" if q is not None and q.in_inf else "")


st.title("Overview")
sel = state.selection()
if sel is not None:
    db = state.db()
    st.caption(f"{sel.deployment} · {sel.model or 'all models'} · "
               f"{sel.t_from:%Y-%m-%d %H:%M} .. {sel.t_to:%Y-%m-%d %H:%M} UTC")
    s = service.stats(db, sel.deployment, sel.t_from, sel.t_to, sel.model)
    c = st.columns(5)
    c[0].metric("Prefix-cache hit rate", fmt_pct(s.prefix_cache_hit_rate),
                help="vLLM's own cache: prompt tokens found cached / prompt tokens looked up, summed over the window.")
    c[1].metric("LMCache hit rate (external)", fmt_pct(s.external_prefix_cache_hit_rate),
                help="The KV connector's (LMCache) hits / its queries, in tokens, as vLLM counts them.")
    c[2].metric("TTFT p50", fmt_s(s.ttft_p50_s, s.ttft_p50),
                help="Median time to first token, interpolated inside its histogram bucket (Prometheus histogram_quantile).")
    c[3].metric("TTFT p99", fmt_s(s.ttft_p99_s, s.ttft_p99),
                help="99th percentile time to first token; see the bucket it lies in below.")
    c[4].metric("Requests", "0" if not s.requests else f"{s.requests:,.0f}")
    if s.ttft_p99 is not None and s.ttft_p99.value is not None:
        q = s.ttft_p99
        upper = "no upper bound (+Inf bucket)" if q.in_inf else f"{q.upper:g} s"
        msg = f"p99 lies between {q.lower:g} s and {upper}: a histogram quantile is only as precise as its bucket."
        (st.warning if q.in_inf else st.caption)(msg)
    points = service.timeseries(db, sel.deployment, sel.t_from, sel.t_to, sel.step_s, sel.model)
    st.altair_chart(charts.hit_rate_chart(points), use_container_width=True)
    st.altair_chart(charts.ttft_chart(points), use_container_width=True)
