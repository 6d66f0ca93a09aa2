"""One redaction function for every error text kvplan stores, prints or reports.

``redact(text)`` removes, wherever they appear in the text:

* ``user:password@`` (or ``user@``) inside URLs;
* the value of an ``Authorization`` header and any ``Bearer``/``Basic`` credential, also
  URL-encoded (``Basic%20dXNl...%3D``, as a server echoes a request line back);
* values of query, form or JSON parameters that name a secret (``token``, ``access_token``,
  ``password``, ``api_key``, ``secret`` ...) and of ``X-Api-Key``/``Cookie`` headers;
* every secret value kvplan was configured with (``register_secret``: the Prometheus
  bearer token and password), however the text quotes it (a server that echoes the
  request back in its error body).
"""

from __future__ import annotations

import re
import threading
from typing import overload

MASK = "<redacted>"

_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"<>]+@")
_SPACE = r"(?:\s|%(?:25)?20|\+)"  # a blank, also URL-encoded (%20, %2520) or form-encoded (+)
_AUTH_HEADER = re.compile(r"(?i)\b(proxy-)?(authorization)(\s*[:=]\s*|%(?:25)?3A" + _SPACE + r"*|['\"]\s*[:,]\s*['\"])"
                          r"([^\r\n'\"\\&]+)")
_SCHEME_CRED = re.compile(r"(?i)\b(bearer|basic|token|digest)" + _SPACE
                          + r"+(?:[A-Za-z0-9\-._~+/=]|%[0-9A-Fa-f]{2}){6,}")
# key=value (query strings, form bodies) and "key": "value" (JSON); not "key: text", which
# is how kvplan's own messages name a config key (prometheus.bearer_token: ...)
_PARAM = re.compile(r"(?i)\b((?:access_|refresh_|id_|api_|auth_|bearer_|x-api-)?(?:token|key|password|passwd|"
                    r"secret|apikey|api-key|client_secret))(\s*=\s*|['\"]\s*:\s*['\"])([^\s&'\"<>,;\\]+)")
_HEADER = re.compile(r"(?im)^(\s*(?:x-api-key|api-key|x-auth-token|private-token|cookie|set-cookie)\s*:\s*)"
                     r"([^\r\n\\]+)")

_SECRETS: set[str] = set()
_LOCK = threading.Lock()


def register_secret(value: str | None) -> None:
    """Remember a configured secret so that ``redact`` removes it from any text."""
    if value and len(value) >= 4:
        with _LOCK:
            _SECRETS.add(value)


@overload
def redact(text: str) -> str: ...
@overload
def redact(text: None) -> None: ...
@overload
def redact(text: str | None) -> str | None: ...


def redact(text: str | None) -> str | None:
    """``text`` with every credential replaced by ``<redacted>``."""
    if not text:
        return text
    with _LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for s in secrets:
        text = text.replace(s, MASK)
    text = _URL_USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    text = _AUTH_HEADER.sub(lambda m: (m.group(1) or "") + m.group(2) + m.group(3) + MASK, text)
    text = _SCHEME_CRED.sub(lambda m: m.group(1) + " " + MASK, text)
    text = _PARAM.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _HEADER.sub(lambda m: m.group(1) + MASK, text)
    return text
