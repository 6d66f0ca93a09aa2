"""The local stack's errors: StackError (a KvplanError, so `kvplan stack` ends with its
message) and StackStartError, which carries the failed servers' log tails."""

from __future__ import annotations

from collections.abc import Mapping

from ...models.core.errors import KvplanError

LOG_TAIL_LINES = 60


class StackError(KvplanError):
    """A stack operation failed (a port taken, a server that did not start, no Prometheus
    binary): an error the user can act on, so ``kvplan stack`` ends with its message."""


class StackStartError(StackError):
    """A server died or did not become healthy in time; the message carries its log tail."""

    def __init__(self, message: str, logs: Mapping[str, str] | None = None):
        self.logs = dict(logs or {})
        text = message
        for name, tail in self.logs.items():
            text += f"\n\n----- last {LOG_TAIL_LINES} lines of {name}'s log -----\n{tail}"
        super().__init__(text, source="kvplan stack")
