"""Optional login for the dashboard: Streamlit's built-in OpenID Connect (``st.login``).

``kvplan dashboard --auth-secrets PATH`` hands Streamlit a secrets file whose ``[auth]``
table names the identity provider (any OIDC provider: Keycloak, Dex, Google, Entra ID, Okta):

    [auth]
    redirect_uri = "https://kvplan.example.com/oauth2callback"
    cookie_secret = "a long random string"
    client_id = "kvplan"
    client_secret = "..."
    server_metadata_url = "https://idp.example.com/.well-known/openid-configuration"

and sets ``KVPLAN_DASHBOARD_AUTH=1``, so every page first asks for a login. Without it the
dashboard has no login and listens on 127.0.0.1 only (``--address`` changes that).
The file is a secret: it never goes into kvplan.toml and is never printed.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from ..models.core.errors import KvplanError

ENV = "KVPLAN_DASHBOARD_AUTH"
REQUIRED = ("redirect_uri", "cookie_secret", "client_id", "client_secret", "server_metadata_url")


def check_auth_secrets(path: Path) -> Path:
    """The secrets file exists, is TOML and has every ``[auth]`` key Streamlit needs."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise KvplanError(f"cannot read it: {e.strerror or e}", source=f"--auth-secrets {path}") from None
    except tomllib.TOMLDecodeError as e:
        raise KvplanError(f"not valid TOML: {e}", source=f"--auth-secrets {path}") from None
    auth = data.get("auth")
    missing = [k for k in REQUIRED if not (isinstance(auth, dict) and auth.get(k))]
    if missing or not isinstance(auth, dict):
        raise KvplanError(f"[auth] needs {', '.join(missing)} (Streamlit's OpenID Connect login)",
                          source=f"--auth-secrets {path}")
    if not str(auth["redirect_uri"]).endswith("/oauth2callback"):
        raise KvplanError("[auth] redirect_uri must end in /oauth2callback, e.g. "
                          "https://kvplan.example.com/oauth2callback", source=f"--auth-secrets {path}")
    return path.resolve()


def require_login() -> None:
    """On every page run: with ``KVPLAN_DASHBOARD_AUTH=1``, show only a login button until the
    user has logged in at the identity provider; then a logout button in the sidebar."""
    if os.environ.get(ENV) != "1":
        return
    import streamlit as st

    if not st.user.is_logged_in:
        st.title("kvplan")
        st.write("Log in with your organisation's account to see the dashboard.")
        if st.button("Log in", type="primary"):
            st.login()
        st.stop()
    with st.sidebar:
        st.caption(f"Logged in as {st.user.get('email') or st.user.get('name') or st.user.get('sub')}")
        if st.button("Log out"):
            st.logout()
