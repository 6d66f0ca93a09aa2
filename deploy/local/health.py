"""Waiting for a stack's servers to answer their health URL, with the start deadlines;
a server that exits or misses the deadline raises StackStartError with its log tail."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import httpx

from .errors import StackStartError
from .processes import exit_code, is_alive, log_line, log_tail
from .records import Server

# Default health deadlines (seconds). vLLM compiles at startup: 30-90 s alone on
# 2 cores, several servers started together share those cores.
VLLM_START_TIMEOUT = float(os.environ.get("KVPLAN_STACK_START_TIMEOUT", "900"))
AUX_START_TIMEOUT = 180.0


def wait_healthy(servers: Sequence[Server], stack_id: str, timeout_s: float) -> None:
    pending = {s.name: s for s in servers}
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=3.0, trust_env=False) as client:
        while pending:
            for name, s in list(pending.items()):
                if not is_alive(s, stack_id):
                    code = exit_code(s)
                    raise StackStartError(
                        f"{name} ({s.kind}, port {s.port}) exited during startup"
                        + (f" with code {code}" if code is not None else ""),
                        {name: log_tail(s.log_path)},
                    )
                try:
                    r = client.get(s.health_url)
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                if ok:
                    s.ready_s = round(time.time() - (s.started_at or time.time()), 1)
                    log_line(f"{name} healthy after {s.ready_s:.1f} s ({s.health_url})")
                    del pending[name]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise StackStartError(
                    f"not healthy within {timeout_s:.0f} s: {', '.join(pending)}",
                    {n: log_tail(s.log_path) for n, s in pending.items()},
                )
            time.sleep(0.5)
