"""kvplan dashboard entry point: `kvplan dashboard` runs `streamlit run` on this file.

Pages are thin: they read the shared selectors, call one function of ``app.service``
(which reads DuckDB and calls ``models``) and render what comes back. Any error reaching
this file is shown as ``st.error`` with its cause, never as a traceback.
"""

import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # streamlit puts app/ first on sys.path, not the repo root
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

PAGES = Path(__file__).parent / "pages"
log = logging.getLogger("kvplan.dashboard")

st.set_page_config(page_title="kvplan", page_icon=":material/calculate:", layout="wide")
from app.auth import require_login  # noqa: E402

require_login()  # kvplan dashboard --auth-secrets: OpenID Connect login before any page
pages = [st.Page(str(PAGES / "overview.py"), title="Overview", icon=":material/dashboard:", default=True),
         st.Page(str(PAGES / "cache.py"), title="Cache", icon=":material/database:", url_path="cache"),
         st.Page(str(PAGES / "latency.py"), title="Latency", icon=":material/timer:", url_path="latency"),
         st.Page(str(PAGES / "cost.py"), title="Cost & decision", icon=":material/payments:", url_path="cost"),
         st.Page(str(PAGES / "runs.py"), title="Runs", icon=":material/sprint:", url_path="runs"),
         st.Page(str(PAGES / "collection.py"), title="Collection", icon=":material/sensors:", url_path="collection"),
         st.Page(str(PAGES / "report.py"), title="Report", icon=":material/description:", url_path="report")]
try:
    st.navigation(pages).run()
except Exception as e:  # ScriptControlException (rerun/stop) is a BaseException: not caught
    log.exception("page failed")
    st.error(f"{type(e).__name__}: {e}")
