"""Prompts: a request log's predicted prefix-cache hit rate as vLLM would serve it, the
cache-busters (with one example prompt, the divergent line highlighted), the hit rate at other
block sizes, and the hit rate and dollars if fixed. Reads ``kvplan.app.views.prompts.prompts_check``, the same as
``kvplan prompts check``. The log and its text stay in this session's memory: nothing is stored."""

import os
import tempfile
from html import escape
from pathlib import Path

import pandas as pd
import streamlit as st

from kvplan.app import state
from kvplan.app.charts_prompts import miss_reason_chart
from kvplan.app.data.traces import trace_deployments
from kvplan.app.report import fmt
from kvplan.app.views.prompts import block_geometry, prompts_check
from kvplan.collectors.demo import PROMPTS_DEPLOYMENT, demo_prompts
from kvplan.models.core.errors import KvplanError
from kvplan.models.core.vocabulary import NoteKind

st.title("Prompts: cacheability of a request log")
state.through_navigation()  # a deep link opened first still runs inside the navigation (as every page)
st.caption("OpenAI chat / completions request bodies or Batch API input, one JSON object a line (plain or gzip), "
           "or a Bailian / Mooncake trace. Rendered with the model's own tokenizer and chat template, hashed as vLLM "
           "hashes its blocks, served one request at a time in arrival order.")

CHECK_PENDING = "prompts_check_pending"
DEMO_OPENED = "prompts_demo_opened"
DEMO_LOG = "ts-top"
"""The recorded log the demo's page opens on (a timestamp at the top of the system prompt: a finding)."""
KEEP_REQUESTS = 5000
"""Requests listed one by one (the first ones; the reasons' counts cover every request)."""


def _request_check() -> None:
    """The Check button's callback: it runs before the page does, so the request survives the
    rerun ``state.through_navigation`` makes when the first run of the server is this page
    (a button's own value is True for one run only)."""
    st.session_state[CHECK_PENDING] = True


db_path = Path(state.settings().db)  # the check needs no database; a deployment adds its settings and prices
deps = [d["deployment"] for d in state.deployments(str(db_path))] if db_path.exists() else []
try:  # the demo's request logs, recorded on the CPU stack with what vLLM reported for each
    demo: dict | None = demo_prompts()
except KvplanError:
    demo = None
demo_runs = {r["name"]: r for r in demo["runs"]} if demo else {}
if demo_runs and db_path.exists() and not st.session_state.get(DEMO_OPENED) \
        and "prompts_result" not in st.session_state and PROMPTS_DEPLOYMENT in state.view(trace_deployments):
    # the dashboard runs on the demo: the page opens on one of its recorded logs, checked
    st.session_state[DEMO_OPENED] = True
    st.session_state["prompts_demo"] = DEMO_LOG if DEMO_LOG in demo_runs else next(iter(demo_runs))
    st.session_state[CHECK_PENDING] = True
with st.form("prompts_check"):
    pick = st.selectbox("A recorded demo log (its tokenizer, template and engine settings come with it)",
                        ["(none)"] + list(demo_runs), key="prompts_demo") if demo_runs else "(none)"
    up = st.file_uploader("Request log", type=["jsonl", "gz", "json"], key="prompts_upload")
    path = st.text_input("... or a file on the dashboard's machine", key="prompts_path")
    c = st.columns(2)
    tokenizer = c[0].text_input("Tokenizer (a local directory or a model id in the local HF cache)",
                                value=os.environ.get("KVPLAN_TOKENIZER", ""), key="prompts_tokenizer")
    template = c[1].text_input("Chat template file (optional, vLLM's --chat-template)", key="prompts_template")
    c3 = st.columns(3)
    dep = c3[0].selectbox("Deployment (block size, capacity, prices)", ["(none: planning preset)"] + deps,
                         key="prompts_deployment")
    bs = c3[1].number_input("Block size (0: the deployment's, else 16)", min_value=0, max_value=1_000_000, value=0,
                           key="prompts_block_size")
    gb = c3[2].number_input("GPU blocks (0: the deployment's, else unlimited)", min_value=0, max_value=2**40, value=0,
                           key="prompts_gpu_blocks")
    st.form_submit_button("Check", type="primary", on_click=_request_check)

if st.session_state.pop(CHECK_PENDING, False):
    tmp = None
    try:
        run = demo_runs.get(pick)
        if run is not None and demo is not None:
            up, path, tokenizer, template = None, str(run["file"]), str(demo["tokenizer"]), str(demo["chat_template"])
            bs, gb = run["block_size"], run["gpu_blocks"] or 0
        st.session_state["prompts_demo_run"] = run
        if up is not None:
            fd, tmp = tempfile.mkstemp(suffix=".jsonl.gz" if up.name.endswith(".gz") else ".jsonl")
            with os.fdopen(fd, "wb") as fh:
                fh.write(up.getvalue())
            files = [Path(tmp)]
        elif path.strip():
            files = [Path(path.strip())]
        else:
            raise KvplanError("upload a request log or give a file path", source="request log")
        deployment = None if dep.startswith("(none") else dep
        with st.spinner("Rendering, hashing and predicting ..."):
            st.session_state["prompts_result"] = prompts_check(
                files, tokenizer=tokenizer.strip() or None, chat_template=Path(template) if template.strip() else None,
                block_size=int(bs) or None, gpu_blocks=int(gb) or None, deployment=deployment,
                db=state.db() if deployment else None, cfg=state.cfg(deployment or ""), with_example=True,
                keep_requests=KEEP_REQUESTS)
    except KvplanError as e:
        st.session_state.pop("prompts_result", None)
        st.error(str(e))
    finally:
        if tmp is not None:
            os.unlink(tmp)

def _where(row: dict) -> str:
    return f"{Path(row['file']).name}:{row['line']}"


def _one_request(d: dict) -> None:
    """Pick a request, see where it parted from the earlier request it shares the most with."""
    rows = d.get("per_request") or []
    if not rows:
        return
    st.subheader("One request: where it diverged")
    labels = [f"{_where(r)} · {r['miss_reason']} · {r['cached_tokens_predicted']:,} of {r['prompt_tokens']:,} cached"
              for r in rows]
    i = st.selectbox("Request" + (f" (the first {len(rows):,})" if len(rows) < d["requests"] else ""),
                     range(len(rows)), format_func=lambda k: labels[k], key="prompts_request")
    r = rows[i]
    where = (f"message {r['miss_message_index']} ({r['miss_role']})" if r["miss_message_index"] is not None
             else (f"{r['miss_role']} text after the last message" if r["miss_role"] else None))
    said = [f"**{r['miss_reason']}**: {r['missed_tokens']:,} prompt tokens computed, from block "
            f"{r['first_divergent_block']:,} (token {r['first_divergent_block'] * d['block_size']:,})"]
    if r["diverged_from"]:
        said.append(f"nearest earlier request: {Path(r['diverged_from'].rsplit(':', 1)[0]).name}:"
                    f"{r['diverged_from'].rsplit(':', 1)[1]}" + (f", parted at {where}" if where else ""))
    else:
        said.append("no earlier request shares its first line" if r["miss_reason"] == "cold" else "")
    if r["cached_tokens_measured"] is not None:
        said.append(f"vLLM measured {r['cached_tokens_measured']:,} cached tokens")
    st.markdown("; ".join(x for x in said if x) + ".")


d = st.session_state.get("prompts_result")
if d:
    m = st.columns(4)
    m[0].metric("Predicted hit rate", fmt.pct(d["hit_rate_predicted"]),
                help=f"{d['cached_tokens_predicted']:,} of {d['prompt_tokens']:,} prompt tokens, {d['requests']:,} "
                     f"requests; block size {d['block_size']}, "
                     + (f"{d['gpu_blocks']:,} GPU blocks" if d["gpu_blocks"] else "unlimited cache"))
    m[1].metric("Unlimited cache", fmt.pct(d["hit_rate_unlimited"]))
    m[2].metric("Every finding fixed", fmt.pct(d["hit_rate_if_fixed"]))
    p = d["pricing"]
    usd = p["extra_usd_per_month_if_fixed"]
    m[3].metric("Worth, if fixed", f"${usd:,.0f}/month" if usd is not None else
                (f"${p['extra_usd_per_1m_prompt_tokens_if_fixed']:,.4f} per 1M tokens"
                 if p["extra_usd_per_1m_prompt_tokens_if_fixed"] is not None else "-"), help=p["source"])
    st.caption(f"Priced with: {p['source']}")
    run = st.session_state.get("prompts_demo_run")
    if run is not None and demo is not None and run["measured_hit_rate"] is not None:
        st.info(f"Recorded demo log {run['name']!r}: vLLM measured {fmt.pct(run['measured_hit_rate'])} "
                f"(its /metrics prefix-cache hits / queries) on these {run['requests']} requests. {demo['label']}.")
    st.subheader("Why the missed tokens missed")
    st.dataframe(pd.DataFrame([{"cause": k, "tokens": v} for k, v in d["missed_by_cause"].items()]), hide_index=True)
    if d.get("miss_reasons"):
        state.chart(miss_reason_chart(d["miss_reasons"]))
    _one_request(d)
    st.subheader("Cache-busters")
    if not d["findings"]:
        st.success("No cache-buster found: requests that share content share their prefix.")
    else:
        st.dataframe(pd.DataFrame([{
            "kind": f["kind"], "where": (f"message {f['message_index']} ({f['role']}), as history" if f.get("change")
                                         else f"template, before message {f['message_index']}" if f["template"]
                                         else f"message {f['message_index']} ({f['role']}), line {f['line']}"),
            "shape": f["example"], "requests": f["requests_affected"], "tokens lost": f["tokens_lost"],
            "hit rate if fixed": fmt.pct(f["hit_rate_if_fixed"]), "fix": f["fix"],
            "why below today": f.get("below_today") or ""} for f in d["findings"]]),
            hide_index=True)
        for f in d["findings"]:
            if f.get("remedies"):  # history the template rewrites: what changed, and each remedy's rate
                st.markdown(f"**{f['kind']}** at message {f['message_index']} ({f['role']}): {f['change']}. "
                            + "; ".join(f"{fmt.pct(r['hit_rate_if_fixed'])} if {r['how']}" for r in f["remedies"])
                            + ".")
        ex = d.get("example_prompt")
        if ex:
            st.subheader("One request it broke, the divergent line highlighted")
            text, s0, s1 = ex["text"], ex["start"], ex["end"]
            lo, hi = max(0, s0 - 800), min(len(text), s1 + 800)
            st.markdown('<pre style="white-space: pre-wrap">' + ("..." if lo else "") + escape(text[lo:s0])
                        + "<mark>" + escape(text[s0:s1]) + "</mark>" + escape(text[s1:hi])
                        + ("..." if hi < len(text) else "") + "</pre>", unsafe_allow_html=True)
            st.caption("Shown in this session only; kvplan stores no prompt text.")
    geo = block_geometry(d)
    if geo is not None:
        st.subheader("Hit rate at other block sizes")
        state.chart(geo.chart)
        st.dataframe(pd.DataFrame(geo.rows), hide_index=True,
                     column_config={"hit rate": st.column_config.NumberColumn(format="percent"),
                                    "hit rate, unlimited cache": st.column_config.NumberColumn(format="percent")})
        st.caption(geo.caption)
    for n in d["notes"]:
        st.caption(NoteKind.NOTE.of(n))
