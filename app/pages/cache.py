"""Cache: hit rate by tier (window and over time), cached tokens by tier, LMCache L1 usage,
and what can and cannot be said request-weighted."""

import pandas as pd
import streamlit as st

from kvplan.app import charts, state
from kvplan.app.report import fmt
from kvplan.app.views.cache import REQUEST_WEIGHTED_NOTE, cache_view
from kvplan.models.metrics.catalog import KV_USAGE, LM_L1_USAGE

st.title("Cache")
sel = state.selection()
if sel is not None:
    v = state.view(cache_view, sel.deployment, sel.t_from, sel.t_to, sel.step_s, sel.model_name)
    s = v.window.stats
    state.caption(sel, v.window.source_note)
    tl = state.timeline(sel, v.step_s)

    st.subheader("Hit rate by tier (token-weighted)")
    cols = [c for _ in range(0, len(v.tiers), 3) for c in st.columns(3)][:len(v.tiers)]
    for col, t in zip(cols, v.tiers, strict=True):
        col.metric(t.label, fmt.pct(t.hit_rate),
                   help=f"{fmt.number(t.hits, none='not reported')} hit tokens / "
                        f"{fmt.number(t.queries, none='not reported')} looked-up tokens over the window.")
    st.caption("Each tier's summed hit tokens / its summed looked-up tokens over the window (never a mean of "
               "per-interval ratios). 'not reported' = these servers do not expose the metric.")
    if s.prefix_cache_hit_rate_lifetime is not None:
        st.metric("vLLM V0 prefix-cache block hit rate, LIFETIME (since each engine started)",
                  fmt.pct(s.prefix_cache_hit_rate_lifetime),
                  help="vllm:gpu_prefix_cache_hit_rate: a gauge of the whole engine life, not this window's rate.")
    if s.prefix_cache_block_hit_rate is not None:
        st.metric("vLLM V1 0.7-0.8 prefix-cache hit rate in BLOCKS", fmt.pct(s.prefix_cache_block_hit_rate),
                  help="vllm:gpu_prefix_cache_hits / queries count blocks in these releases: no token figure.")
    for note in s.notes:
        st.caption(note)
    state.chart(charts.tier_hit_rate_chart(v.tier_points, tl=tl))

    st.subheader("Cached prompt tokens by tier")
    cached = sum(s.cached_tokens_by_tier.values())
    if s.cached_tokens_by_tier:
        st.dataframe(pd.DataFrame(
            [{"tier (source)": k, "tokens": fmt.number(t), "share of cached": fmt.pct(t / cached if cached else None)}
             for k, t in sorted(s.cached_tokens_by_tier.items())]), hide_index=True)
        state.chart(charts.cached_tokens_chart(v.cached_points, tl=tl))
    else:
        st.info("vllm:prompt_tokens_cached_by_source_total is not reported by this vLLM version.")
    if s.prompt_tokens_by_source:
        st.caption("Every prompt token by where it came from (vllm:prompt_tokens_by_source_total): " + ", ".join(
            f"{k} {fmt.number(t)}" for k, t in sorted(s.prompt_tokens_by_source.items())))

    st.subheader("LMCache L1 usage")
    l1 = [g for g in v.gauge_points if g["name"] == LM_L1_USAGE]
    if l1:
        last = {g["series"]: g["last"] for g in l1}
        st.metric("L1 usage (latest, highest server)", fmt.pct(max(last.values())),
                  help="lmcache_mp_l1_usage_ratio: L1 used / total, last sample of the window.")
        state.chart(charts.gauge_chart(l1, "LMCache L1 usage (lmcache_mp_l1_usage_ratio), per server", tl=tl))
    else:
        st.info("No LMCache multi-process server reports lmcache_mp_l1_usage_ratio in this window.")
    kv = [g for g in v.gauge_points if g["name"] == KV_USAGE]
    if kv:
        state.chart(charts.gauge_chart(kv, "vLLM KV-cache usage (vllm:kv_cache_usage_perc), per engine", tl=tl))

    st.subheader("Request-weighted")
    st.info(REQUEST_WEIGHTED_NOTE)
    if v.runs:
        st.dataframe(pd.DataFrame([{
            "run": f"#{r['run_id']} {r['label']}", "measured on": r["measured_on"],
            "requests with cached tokens": fmt.pct(r["requests_with_cache_share"], "not recorded"),
            "cached / prompt tokens": fmt.pct(r["cached_token_share"], "not recorded")} for r in v.runs]),
            hide_index=True)
    else:
        st.caption("No workload runs yet: `kvplan pilot --deployment NAME --server URL --model M` records them.")
