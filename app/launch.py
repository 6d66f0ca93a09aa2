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

import os
import socket
import subprocess
import sys
import time
import urllib.request
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


class DashboardDidNotStart(RuntimeError):
    """``streamlit run`` exited or did not answer its health check in time; the message holds its log."""


def start_dashboard(db: Path, log_path: Path, *, env: dict[str, str] | None = None,
                    extra: dict[str, str] | None = None, timeout_s: float = 120.0
                    ) -> tuple[subprocess.Popen[bytes], str]:
    """(process, base URL) of ``streamlit run app/streamlit_app.py`` on ``db`` (``KVPLAN_DB``),
    on a free port of 127.0.0.1, once it answers its health check; its output goes to
    ``log_path``. ``env``: more environment; ``extra``: more Streamlit options. Raises
    :class:`DashboardDidNotStart` with the log when it exits or ``timeout_s`` passes first."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run_env = dict(os.environ, KVPLAN_DB=str(db), PYTHONUNBUFFERED="1", **(env or {}))
    cmd = streamlit_command(port, address="127.0.0.1", extra=extra)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=SCRIPT.parents[1], env=run_env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return proc, url
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise DashboardDidNotStart(f"streamlit did not start (exit {proc.poll()}); its log:\n"
                                       f"{log_path.read_text()}")
        time.sleep(0.5)


def stop_dashboard(proc: subprocess.Popen[bytes]) -> None:
    """Stop a :func:`start_dashboard` process (killed if it has not exited within 20 s)."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
