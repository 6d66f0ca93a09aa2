"""Collection: targets, last scrape, errors, the collector daemon's runs and the gaps."""

from datetime import datetime

import pandas as pd
import streamlit as st

from kvplan.app import state
from kvplan.app.views.collection import collection_view


def ts(v: datetime | None) -> str:
    return "" if v is None else f"{v:%Y-%m-%d %H:%M:%S}"


st.title("Collection")
sel = state.selection()
if sel is not None:
    v = state.view(collection_view, sel.deployment, sel.t_from, sel.t_to)
    state.caption(sel)
    c = st.columns(4)
    c[0].metric("Targets", len(v.targets))
    c[1].metric("Scrapes", f"{sum(t['scrapes'] for t in v.targets):,}")
    c[2].metric("Failed scrapes", f"{sum(t['failed'] for t in v.targets):,}")
    c[3].metric("Days rolled up", v.rolled_days,
                help="UTC days of the time range the nightly job has summed into daily_rollups: long ranges read "
                     "them instead of raw samples.")

    st.subheader("Targets")
    st.dataframe(pd.DataFrame([{"target": t["target"], "kind": t["kind"], "url": t["url"] or "(imported)",
                                "last scrape (UTC)": ts(t["last_scrape"]), "scrapes": t["scrapes"],
                                "failed": t["failed"], "last error": t["last_error"] or ""} for t in v.targets]),
                 hide_index=True)

    st.subheader("Recent errors")
    if v.recent_errors:
        st.dataframe(pd.DataFrame([{"time (UTC)": ts(e["ts"]), "target": e["target"], "error": e["error"],
                                    "source": e["source"]} for e in v.recent_errors]), hide_index=True)
    else:
        st.success("No failed scrapes.")

    st.subheader("Scheduler runs and gaps")
    if v.scheduler_runs:
        st.dataframe(pd.DataFrame([{"job": r["job"], "day": str(r["day"] or ""), "started (UTC)": ts(r["started_at"]),
                                    "status": r["status"], "rows": r["n_rows"], "errors": r["n_errors"],
                                    "duration s": r["duration_s"], "message": r["message"] or ""}
                                   for r in v.scheduler_runs]), hide_index=True)
    else:
        st.caption("No collector runs recorded yet (`kvplan collect --daemon` records them).")
    st.markdown("**Gaps in the time range** (no data; never filled with zeros)")
    if v.gaps:
        st.dataframe(pd.DataFrame([{"target": g["target"] or "(whole deployment)", "from (UTC)": ts(g["t_from"]),
                                    "to (UTC)": ts(g["t_to"]), "reason": g["reason"]} for g in v.gaps]),
                     hide_index=True)
    else:
        st.caption("No Prometheus ingestion gaps in the time range.")
    st.markdown("**Failed scrapes in the time range**")
    if v.failed_scrapes:
        st.dataframe(pd.DataFrame([{"time (UTC)": ts(f["ts"]), "target": f["target"], "error": f["error"]}
                                   for f in v.failed_scrapes]), hide_index=True)
    else:
        st.caption("None.")
