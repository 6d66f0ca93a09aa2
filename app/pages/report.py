"""Report: the capacity report of one month, previewed here and downloadable as PDF or HTML
(the same document `kvplan report` writes)."""

import base64

import streamlit as st

from kvplan.app import report, state
from kvplan.app.data.store import data_months

st.title("Report")
sel = state.selection()
if sel is not None:
    db = state.db()
    months = state.view(data_months, sel.deployment)
    month = st.selectbox("Month (UTC)", months, key="report_month",
                         help="The report covers this whole calendar month (its charts span the data inside it); "
                              "the sidebar's time range does not apply. The model selector does.")
    with st.spinner("Building the report..."):
        html, numbers = state.report(str(db.path), sel.deployment, month, sel.model_name,
                                     state.report_version(sel.deployment))
    st.caption(f"{sel.deployment} · {sel.model_name or 'all models'} · {month} · the same report as "
               f"`kvplan report --deployment {sel.deployment} --month {month} -o report.pdf`")
    cols = st.columns(3) + st.columns(3)
    for col, (label, value) in zip(cols, numbers.items(), strict=False):  # six places at most
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
