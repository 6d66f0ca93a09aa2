"""Runs: workload-driver runs side by side (the articles' table: total time, TTFT p50, tok/s
per user, aggregate throughput, with ratios), each with what it was measured on."""

import pandas as pd
import streamlit as st

from kvplan.app import state
from kvplan.app.report import fmt
from kvplan.app.views.runs import runs_view
from kvplan.models.metrics.runs import CPU_NOTE, compare_runs

st.title("Runs")
sel = state.selection()
if sel is not None:
    v = state.view(runs_view, sel.deployment)
    state.caption(sel, "runs are not filtered by the time range")
    if not v.runs:
        st.info("No workload runs for this deployment. Record a pair on the same servers, e.g.\n\n"
                "`kvplan pilot --deployment NAME --server URL --model M --scenario unique --measured-on '8x H100'`"
                "\n\n`kvplan pilot --deployment NAME --server URL --model M --scenario shared_prefix "
                "--measured-on '8x H100'`")
    else:
        st.dataframe(pd.DataFrame([{
            "run": r["run_id"], "label": r["label"], "scenario": r["scenario"],
            "requests with cached tokens": fmt.pct(r["requests_with_cache_share"], "not recorded"),
            "cached / prompt tokens": fmt.pct(r["cached_token_share"], "not recorded"), "routing": r["routing"],
            "started (UTC)": f"{r['started_at']:%Y-%m-%d %H:%M:%S}", "measured on": r["measured_on"],
            "requests": r["requests"], "failed": r["failed"], "total time": fmt.secs(r["wall_s"]),
            "TTFT p50": fmt.secs(r["ttft_p50_s"]), "TTFT p99": fmt.secs(r["ttft_p99_s"]),
            "tok/s p50 per user": fmt.number(r["tokens_per_s_p50"]),
            "aggregate tok/s": fmt.number(r["aggregate_tokens_per_s"])}
            for r in v.runs]), hide_index=True)
        st.caption("Requests with cached tokens: the share of a run's requests whose response reported at least one "
                   "cached prompt token (usage.prompt_tokens_details.cached_tokens; vLLM reports it with "
                   "--enable-prompt-tokens-details) -- the request-weighted hit rate the server metrics cannot give. "
                   "'not recorded': the server did not report it.")

        pair = v.default_pair()
        if pair is None:
            st.caption("One run only: record a second one to compare.")
        else:
            names = {f"#{r['run_id']} {r['label']} ({r['scenario']})": r for r in v.runs}
            keys = list(names)
            c = st.columns(2)
            a = names[c[0].selectbox("Baseline", keys, index=v.runs.index(pair[0]), key="run_a")]
            b = names[c[1].selectbox("Compared run", keys, index=v.runs.index(pair[1]), key="run_b")]
            rows = compare_runs(a, b)
            cols = st.columns(4)
            headline = ("total time", "TTFT p50", "tok/s p50 per user", "aggregate throughput")
            for col, r in zip(cols, [r for r in rows if r["metric"] in headline], strict=True):
                col.metric(r["metric"], fmt.change(r["factor"], r["better"], r["metric"] == "total time"),
                           help=f"{fmt.number(r['baseline'], r['unit'])} → {fmt.number(r['candidate'], r['unit'])}")
            st.dataframe(pd.DataFrame([{
                "metric": r["metric"], a["label"]: fmt.number(r["baseline"], r["unit"]),
                b["label"]: fmt.number(r["candidate"], r["unit"]),
                "change": fmt.change(r["factor"], r["better"], r["metric"] == "total time")}
                for r in rows]), hide_index=True)
            st.caption(f"Baseline measured on: {a['measured_on']} · compared run measured on: {b['measured_on']}. "
                       "Client-side times from the workload driver (TTFT exact from per-request times).")
            if a["measured_on"] != b["measured_on"]:
                st.warning("The two runs were measured on different set-ups: the ratios mix hardware and reuse.")
        if any(r["cpu_scale"] for r in v.runs):
            st.warning(CPU_NOTE)
