"""How ``kvplan dashboard`` (and the browser tests) start Streamlit: one command line, so
the options the user gets are the ones the tests check.

* ``server.headless``: never stop at Streamlit's first-run e-mail prompt;
* ``client.toolbarMode = minimal``: no "Deploy" button and no developer menu entries
  (kvplan is not deployed to Streamlit's cloud);
* ``browser.gatherUsageStats = false``: no telemetry;
* ``logger.hideWelcomeMessage = true``: no welcome message, whose "External URL" line makes a
  headless server on 0.0.0.0 call checkip.amazonaws.com at every start: kvplan makes no
  outbound call (tests/test_hardening.py checks it under strace). ``kvplan dashboard`` adds
  ``server.address`` (127.0.0.1 unless ``--address``).
"""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("streamlit_app.py")

STREAMLIT_OPTIONS = {
    "server.headless": "true",
    "client.toolbarMode": "minimal",
    "browser.gatherUsageStats": "false",
    "logger.hideWelcomeMessage": "true",
}


def streamlit_command(port: int, *, address: str | None = None, extra: dict[str, str] | None = None) -> list[str]:
    """``python -m streamlit run app/streamlit_app.py`` with kvplan's options."""
    opts = dict(STREAMLIT_OPTIONS, **{"server.port": str(port)})
    if address:
        opts["server.address"] = address
    opts.update(extra or {})
    cmd = [sys.executable, "-m", "streamlit", "run", str(SCRIPT)]
    for k, v in opts.items():
        cmd += [f"--{k}", v]
    return cmd
