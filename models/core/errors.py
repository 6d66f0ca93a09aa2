"""The one error type a user can act on.

Every error kvplan expects a user to fix (a bad file line, an unreachable URL, a bad config
key, a locked database, a form value out of bounds) is a ``KvplanError``: it carries the
message and the input it names. The CLI catches it once (exit 2) and the Streamlit app once
(``st.error``). Anything else is a bug: a traceback in the log, a generic message on a page.
"""

from __future__ import annotations


class KvplanError(Exception):
    """An error a user can act on. ``str()`` is ``"<input>: <message>"``.

    ``source`` names the input: ``file.prom:12``, ``http://host:8000/metrics``, a config key
    such as ``deployments.0.targets.1.url`` or a form field such as ``growth_per_month``."""

    def __init__(self, message: str, *, source: str | None = None):
        from .redact import redact

        # every user-facing error passes the one redaction function: no token, password or
        # user:password@ survives into a message, a log, the database or a report
        message, source = redact(message), redact(source)
        self.message = message
        self.source = source
        super().__init__(f"{source}: {message}" if source else message)
