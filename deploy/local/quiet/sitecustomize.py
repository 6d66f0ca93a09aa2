"""Loaded at start-up by the local stack's vLLM processes (``PYTHONPATH`` points here).

vLLM's shared-memory message queue (``shm_broadcast.SpinCondition.wait``) busy-polls with
``sched_yield`` for one second after every read before it blocks on a ZeroMQ notification.
On a GPU host that is one spinning host thread; on the CPU stack it runs on the core the model
runs on, so a worker's CPU time is about its wall time while requests flow (plus one second
after each), not the work it did, and idle-spinning servers slow the busy one. Here the
busy-wait sleeps ``KVPLAN_SPIN_SLEEP_S`` (default 1 ms) instead of yielding: the same one-second
window and the same blocking wait after it (setting the window to 0 loses wake-ups: vLLM's
notification socket drops some), at about 1 % of a core instead of 100 %. A worker's CPU
seconds are then the work it did, which ``kvplan.deploy.local.recorders.ab`` measures as engine time. Each step
may start up to 1 ms later; nothing else in vLLM changes.
"""


from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time

TARGET = "vllm.distributed.device_communicators.shm_broadcast"


SLEEP_S = float(os.environ.get("KVPLAN_SPIN_SLEEP_S", "0.001"))


def _patch(module) -> None:
    cls = getattr(module, "SpinCondition", None)
    if cls is None or getattr(cls, "_kvplan_quiet", False):
        return
    original = cls.wait

    def wait(self, timeout_ms=None):
        if self.is_reader and time.monotonic() <= self.last_read + self.busy_loop_s:
            time.sleep(SLEEP_S)
            return
        original(self, timeout_ms)

    cls.wait = wait
    cls._kvplan_quiet = True


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())
