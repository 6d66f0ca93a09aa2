"""``kvplan dashboard``: the Streamlit app on the DuckDB file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import ConfigOpt, DbOpt, err, fail, out, settings


def dashboard(
    db: DbOpt = None, config: ConfigOpt = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to serve on.")] = 8501,
    headless: Annotated[bool, typer.Option(help="Do not open a browser.")] = False,
    address: Annotated[str, typer.Option(help="Address to listen on: 127.0.0.1 (this machine only) unless you put "
                                              "it behind a login (--auth-secrets or a proxy), e.g. 0.0.0.0.")
                       ] = "127.0.0.1",
    auth_secrets: Annotated[Path | None, typer.Option(
        envvar="KVPLAN_DASHBOARD_AUTH_SECRETS",
        help="Streamlit secrets file with an [auth] table (OpenID Connect): every page asks for a login.")] = None,
    insecure_no_login: Annotated[bool, typer.Option(
        "--insecure-no-login", help="Serve a non-loopback --address without --auth-secrets (only behind a "
        "proxy that does the login: anyone who reaches the port can edit the price book).")] = False,
) -> None:
    """Open the Streamlit dashboard on the DuckDB file."""
    import os
    import threading
    import webbrowser

    from ..auth import ENV, check_auth_secrets

    s = settings(config, db)
    secrets_file = check_auth_secrets(auth_secrets) if auth_secrets else None
    if not secrets_file and not is_loopback(address):
        if not insecure_no_login:
            fail(f"--address {address} serves the dashboard, editable price book and deployment facts included, to "
                 "the network with no login: give --auth-secrets (OpenID Connect), or put it behind a proxy that "
                 "does the login and pass --insecure-no-login")
        err.print(f"[bold red]warning:[/bold red] --address {address} without --auth-secrets: anyone who reaches "
                  f"port {port} can read every figure and edit the price book (--insecure-no-login)", highlight=False)
    env = dict(os.environ, KVPLAN_DB=str(Path(s.db).resolve()), **{ENV: "1" if secrets_file else "0"})
    if config:
        env["KVPLAN_CONFIG"] = str(config.resolve())
    from ..launch import streamlit_command

    # app/launch.py: headless, minimal toolbar, no outbound call; listening on --address only.
    # kvplan opens the browser itself once the server answers.
    if not 1 <= port <= 65535:
        raise typer.BadParameter(f"--port {port}: must be from 1 to 65535")
    cmd = streamlit_command(port, address=address,
                            extra={"secrets.files": str(secrets_file)} if secrets_file else None)
    url = f"http://{'localhost' if address in ('127.0.0.1', '0.0.0.0', '::') else address}:{port}"
    out.print(f"kvplan dashboard on {url} (database {s.db}); Ctrl+C stops it")
    if not headless:
        threading.Thread(target=_open_when_up, args=(url, webbrowser.open), daemon=True).start()
    raise typer.Exit(serve(cmd, env))


LOOPBACK = ("127.0.0.1", "::1", "localhost")


def is_loopback(address: str) -> bool:
    """True for an address only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    if address.strip("[]") in LOOPBACK:
        return True
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def serve(cmd: list[str], env: dict[str, str]) -> int:
    """Run Streamlit as a child and wait for it; SIGTERM, SIGHUP or Ctrl+C to ``kvplan dashboard``
    stops the child too (it used to outlive a SIGTERM to its parent). Returns its exit code."""
    import signal
    import subprocess

    child = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)

    def stop(signum, _frame) -> None:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        raise SystemExit(128 + signum)

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        return child.wait()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if child.poll() is None:
            child.terminate()
            child.wait(timeout=10)


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
