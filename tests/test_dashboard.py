"""The dashboard process: loopback unless configured, no outbound call at start, OIDC login."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kvplan.app.cli import app
from tests.hostile import PASSWORD, runner
from tests.waiting import wait_until


# -- hostile or careless inputs --------------------------------------------------------------
def test_dashboard_flags_bind_loopback_and_make_no_outbound_call(monkeypatch, tmp_path):
    from kvplan.app.cli import dashboard as dash

    seen = {}
    monkeypatch.setattr(dash, "serve", lambda cmd, env: seen.setdefault("cmd", cmd) and 0)
    r = runner.invoke(app, ["dashboard", "--headless", "--port", "8599", "--db", str(tmp_path / "k.duckdb")])
    assert r.exit_code == 0, r.output
    cmd = seen["cmd"]
    flags = dict(zip(cmd[cmd.index("run") + 2::2], cmd[cmd.index("run") + 3::2], strict=False))
    assert flags["--server.address"] == "127.0.0.1" and flags["--server.port"] == "8599"
    assert flags["--browser.gatherUsageStats"] == "false" and flags["--server.headless"] == "true"
    assert flags["--logger.hideWelcomeMessage"] == "true"          # no external-IP lookup
    seen.clear()
    r = runner.invoke(app, ["dashboard", "--headless", "--address", "0.0.0.0", "--insecure-no-login",
                            "--db", str(tmp_path / "k.duckdb")])
    assert r.exit_code == 0 and seen["cmd"][seen["cmd"].index("--server.address") + 1] == "0.0.0.0"


@pytest.mark.browser
def test_dashboard_listens_on_loopback_only_and_connects_nowhere(tmp_path):
    """A real start under strace: the only listening socket is 127.0.0.1:PORT and every
    outbound connect() goes to loopback (or a local unix socket)."""
    import os
    import re
    import shutil
    import socket
    import subprocess
    import sys

    import httpx

    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (make sysdeps installs it)")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    trace = tmp_path / "trace"
    env = dict(os.environ, KVPLAN_DB=str(tmp_path / "k.duckdb"))
    proc = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace), sys.executable, "-m",
                             "kvplan.app.cli", "dashboard", "--headless", "--port", str(port),
                             "--db", str(tmp_path / "k.duckdb")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            cwd=Path(__file__).resolve().parents[1], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        else:
            pytest.fail("the dashboard did not answer in 60 s")
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200
        # what it does at start is done once the trace stops growing (no connect() for 2 s)
        quiet = {"size": -1, "since": time.monotonic()}

        def settled() -> bool:
            size = trace.stat().st_size
            if size != quiet["size"]:
                quiet.update(size=size, since=time.monotonic())
            return time.monotonic() - quiet["since"] >= 2.0

        wait_until(settled, "the dashboard's start to settle (strace's log unchanged for 2 s)", every_s=0.2)
        listening = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
        mine = [line.split()[3] for line in listening.splitlines() if line.split()[3].endswith(f":{port}")]
        assert mine == [f"127.0.0.1:{port}"], mine
    finally:
        import signal

        os.killpg(proc.pid, signal.SIGTERM)          # strace, kvplan and Streamlit: this test's group
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(20)
    outbound = [line for line in trace.read_text().splitlines() if "sin_addr" in line or "sin6_addr" in line]
    foreign = [line for line in outbound if not re.search(r'inet_addr\("127\.|inet_pton\(AF_INET6, "::1"', line)]
    assert foreign == [], foreign


@pytest.mark.browser
def test_dashboard_oidc_login_in_the_browser(db, tmp_path):
    """Streamlit's OpenID Connect login against a real local provider (oidc-provider-mock),
    driven in Chromium: nothing but a login button before, the pages after."""
    import os
    import signal
    import socket
    import subprocess
    import sys

    import httpx
    from oidc_provider_mock import run_server_in_thread
    from playwright.sync_api import sync_playwright

    from tests.recorded import import_case

    import_case(db, "restart", deployment="d")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with run_server_in_thread() as idp:
        secrets = tmp_path / "secrets.toml"
        secrets.write_text(f'[auth]\nredirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
                           f'cookie_secret = "{"c" * 48}"\nclient_id = "kvplan"\nclient_secret = "{PASSWORD}"\n'
                           f'server_metadata_url = "http://127.0.0.1:{idp.server_port}/.well-known/openid-configuration"\n')
        log = open(tmp_path / "streamlit.log", "w")
        proc = subprocess.Popen([sys.executable, "-m", "kvplan.app.cli", "dashboard", "--headless", "--port", str(port),
                                 "--auth-secrets", str(secrets), "--db", str(db.path)],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=Path(__file__).resolve().parents[1])
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"{url}/_stcore/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.3)
            else:
                pytest.fail("the dashboard did not start:\n" + (tmp_path / "streamlit.log").read_text())
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
                pg = browser.new_page()
                pg.set_default_timeout(60_000)
                pg.goto(url)
                pg.get_by_role("button", name="Log in").wait_for()
                assert pg.locator("[data-testid='stMetric']").count() == 0          # no data before the login
                pg.get_by_role("button", name="Log in").click()
                pg.wait_for_url(f"http://127.0.0.1:{idp.server_port}/**")           # at the identity provider
                pg.fill("input[name=sub]", "alice@example.com")
                pg.get_by_role("button", name="Authorize").click()
                pg.wait_for_url(f"{url}/**")
                pg.wait_for_selector("[data-testid='stMetric']")                    # the overview, logged in
                assert "alice@example.com" in pg.locator("[data-testid='stSidebar']").inner_text()
                other = browser.new_page()                                           # another browser session
                other.goto(url)
                other.get_by_role("button", name="Log in").wait_for()
                assert other.locator("[data-testid='stMetric']").count() == 0
                browser.close()
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(20)
            log.close()
    assert PASSWORD not in (tmp_path / "streamlit.log").read_text()


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "10.0.0.5", "[::ffff:10.0.0.5]"])
def test_a_network_address_without_a_login_is_refused(monkeypatch, tmp_path, address):
    # --address 0.0.0.0 without --auth-secrets served the editable forms to the network with no word
    from kvplan.app.cli import dashboard as dash

    monkeypatch.setattr(dash, "serve", lambda cmd, env: pytest.fail("started without a login"))
    r = runner.invoke(app, ["dashboard", "--headless", "--address", address, "--db", str(tmp_path / "k.duckdb")])
    assert r.exit_code == 2, r.output
    assert "no login" in r.output and "--auth-secrets" in r.output and "--insecure-no-login" in r.output


def test_insecure_no_login_starts_with_a_loud_warning_and_loopback_needs_nothing(monkeypatch, tmp_path):
    from kvplan.app.cli import dashboard as dash

    monkeypatch.setattr(dash, "serve", lambda cmd, env: 0)
    r = runner.invoke(app, ["dashboard", "--headless", "--address", "0.0.0.0", "--insecure-no-login",
                            "--db", str(tmp_path / "k.duckdb")])
    assert r.exit_code == 0 and "warning:" in r.output and "edit the price book" in r.output
    for address in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        r = runner.invoke(app, ["dashboard", "--headless", "--address", address, "--db", str(tmp_path / "k.duckdb")])
        assert r.exit_code == 0 and "warning:" not in r.output, (address, r.output)


@pytest.mark.timeout(120)
def test_sigterm_to_kvplan_dashboard_stops_its_streamlit_child(tmp_path):
    # SIGTERM to `kvplan dashboard` left its Streamlit child running (still serving the port)
    import os
    import signal
    import socket
    import subprocess
    import sys

    import httpx

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = subprocess.Popen([sys.executable, "-m", "kvplan.app.cli", "dashboard", "--headless", "--port", str(port),
                             "--db", str(tmp_path / "k.duckdb")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail("the dashboard did not answer in 90 s")
        children = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
        assert children, "no Streamlit child"
        os.kill(proc.pid, signal.SIGTERM)  # the parent only, as a service manager sends it
        proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(map(_alive, children)):
            time.sleep(0.2)
        assert not any(map(_alive, children)), "the Streamlit child outlived its parent"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the session this test started, whatever is left of it
        except ProcessLookupError:
            pass


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False
