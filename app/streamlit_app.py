"""kvplan dashboard entry point: `kvplan dashboard` runs `streamlit run` on this file.

Pages are thin: they read the shared selectors, call one function of ``kvplan.app.views`` (which
reads DuckDB through ``kvplan.app.data`` and computes through ``models``) and render what comes
back. A ``KvplanError`` (an input the user can fix) reaching this file is shown as
``st.error`` naming the input; anything else is a bug: its traceback goes to the log and the
page says so, never showing the traceback.
"""

import logging
from pathlib import Path

import streamlit as st

from kvplan.models.core.errors import KvplanError

PAGES = Path(__file__).parent / "pages"
log = logging.getLogger("kvplan.dashboard")

# set_page_config must run before any other Streamlit call, and importing state makes them
st.set_page_config(page_title="kvplan", page_icon=":material/calculate:", layout="wide")
from kvplan.app import state  # noqa: E402
from kvplan.app.auth import require_login  # noqa: E402

require_login()  # kvplan dashboard --auth-secrets: OpenID Connect login before any page
pages = [st.Page(str(PAGES / "overview.py"), title="Overview", icon=":material/dashboard:", default=True),
         st.Page(str(PAGES / "cache.py"), title="Cache", icon=":material/database:", url_path="cache"),
         st.Page(str(PAGES / "latency.py"), title="Latency", icon=":material/timer:", url_path="latency"),
         st.Page(str(PAGES / "cost.py"), title="Cost & decision", icon=":material/payments:", url_path="cost"),
         st.Page(str(PAGES / "runs.py"), title="Runs", icon=":material/sprint:", url_path="runs"),
         st.Page(str(PAGES / "whatif.py"), title="What-if", icon=":material/tune:", url_path="whatif"),
         st.Page(str(PAGES / "prompts.py"), title="Prompts", icon=":material/short_text:", url_path="prompts"),
         st.Page(str(PAGES / "collection.py"), title="Collection", icon=":material/sensors:", url_path="collection"),
         st.Page(str(PAGES / "report.py"), title="Report", icon=":material/description:", url_path="report")]
try:
    state.prewarm_reports()
    st.navigation(pages).run()
except KvplanError as e:
    st.error(str(e))
except Exception as e:  # ScriptControlException (rerun/stop) is a BaseException: not caught
    log.exception("page failed")
    st.error(f"kvplan hit a bug on this page ({type(e).__name__}); the traceback is in the dashboard's log.")
