"""``kvplan dashboard``: the Streamlit app on the DuckDB file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.cli.common import ConfigOpt, DbOpt, out, settings


def dashboard(
    db: DbOpt = None, config: ConfigOpt = None,
    port: Annotated[int, typer.Option(help="Port to serve on.")] = 8501,
    headless: Annotated[bool, typer.Option(help="Do not open a browser.")] = False,
) -> None:
    """Open the Streamlit dashboard on the DuckDB file."""
    import os
    import subprocess
    import threading
    import webbrowser

    s = settings(config, db)
    env = dict(os.environ, KVPLAN_DB=str(Path(s.db).resolve()))
    if config:
        env["KVPLAN_CONFIG"] = str(config.resolve())
    from app.launch import streamlit_command

    # Streamlit always runs headless (otherwise its first start on a machine stops to ask for
    # an e-mail address on stdin) with the minimal toolbar (no Deploy button): app/launch.py.
    # kvplan opens the browser itself once the server answers.
    cmd = streamlit_command(port)
    url = f"http://localhost:{port}"
    out.print(f"kvplan dashboard on {url} (database {s.db}); Ctrl+C stops it")
    if not headless:
        threading.Thread(target=_open_when_up, args=(url, webbrowser.open), daemon=True).start()
    raise typer.Exit(subprocess.call(cmd, env=env, stdin=subprocess.DEVNULL))


def _open_when_up(url: str, opener, timeout_s: float = 60.0) -> bool:
    """Open ``url`` in a browser once Streamlit's health endpoint answers."""
    import time

    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/_stcore/health", timeout=1).status_code == 200:
                opener(url)
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False
