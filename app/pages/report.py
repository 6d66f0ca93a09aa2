"""Report: the capacity report of one month, previewed here and downloadable as PDF or HTML
(the same document `kvplan report` writes)."""

import base64

import streamlit as st

from app import report, state
from app.data.store import data_months
from app.report import fmt


@st.cache_data(show_spinner="Building the report...", max_entries=8)
def build(path: str, deployment: str, month: str, model: str | None, version: tuple) -> tuple[str, dict]:
    """(HTML, headline numbers) of one report; ``version`` changes when its data does."""
    d = report.build(state.db(), deployment, month, model=model, cfg=state.cfg(deployment))  # one snapshot
    s, p = d.overview.window.stats, d.overview.plan
    numbers = {"Decision": p.decision.kind, "Monthly benefit": fmt.usd(p.monthly_benefit_usd),
               "Prefix-cache hit rate": fmt.pct(s.prefix_cache_hit_rate), "TTFT p50": fmt.quantile(s.ttft_p50),
               "TTFT p99": fmt.quantile(s.ttft_p99), "Requests": fmt.count(s.requests)}
    return report.render_html(d), numbers


st.title("Report")
sel = state.selection()
if sel is not None:
    db = state.db()
    months = state.view(data_months, sel.deployment)
    month = st.selectbox("Month (UTC)", months, key="report_month",
                         help="The report covers this calendar month, clipped to the data inside it; the sidebar's "
                              "time range does not apply. The model selector does.")
    version = (db.data_version(), state.cfg(sel.deployment))  # any write (scrapes, price book, runs)
    html, numbers = build(str(db.path), sel.deployment, month, sel.model, version)
    st.caption(f"{sel.deployment} · {sel.model or 'all models'} · {month} · the same report as "
               f"`kvplan report --deployment {sel.deployment} --month {month} -o report.pdf`")
    cols = st.columns(3) + st.columns(3)
    for col, (label, value) in zip(cols, numbers.items()):
        col.metric(label, value)
    name = f"kvplan-{sel.deployment}-{month}"
    c = st.columns(2)
    c[0].download_button("Download PDF", data=lambda: report.render_pdf(html), file_name=f"{name}.pdf",
                         mime="application/pdf", key="download_pdf", on_click="ignore", type="primary")
    c[1].download_button("Download HTML", data=html, file_name=f"{name}.html", mime="text/html",
                         key="download_html", on_click="ignore")
    st.subheader("Preview")
    # a data: URL gives the preview its own opaque origin: no access to the app's page
    st.iframe("data:text/html;base64," + base64.b64encode(html.encode()).decode(), height=900)
