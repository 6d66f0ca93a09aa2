"""The processes of an A/B on the local stack, read from /proc: a server's process tree, its
vLLM worker processes and their CPU seconds, and ``priority`` (the servers under test at
real-time priority for the duration)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


# ---- processes ----------------------------------------------------------------------------------
def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for e in os.scandir("/proc"):
        if not e.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{e.name}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(e.name))
    return kids


def process_tree(pid: int) -> list[int]:
    """``pid`` and every descendant."""
    kids, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def comm_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def worker_pids(server_pid: int) -> list[int]:
    """The vLLM worker processes (``VLLM::Worker``) under a server's process."""
    return [p for p in process_tree(server_pid) if "Worker" in comm_of(p)]


def cpu_seconds(pids: Sequence[int]) -> float:
    """utime + stime of the processes (all their threads), seconds."""
    tck = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in pids:
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        f = stat[stat.rfind(")") + 2:].split()
        total += (int(f[11]) + int(f[12])) / tck
    return total


def threads_of(pids: Sequence[int]) -> list[int]:
    out = []
    for p in pids:
        try:
            out += [int(t) for t in os.listdir(f"/proc/{p}/task")]
        except OSError:
            pass
    return out


@contextmanager
def priority(realtime: Sequence[int], high: Sequence[int] = ()) -> Iterator[str]:
    """For the duration: every thread of the process trees of ``realtime`` (the vLLM servers)
    and ``high`` (LMCache: its stores and lookups hold up the engine, so its latency must not
    depend on what else the machine runs) at ``SCHED_FIFO`` priority 10, this process (the
    driver: its delays would show in the wall time) at ``SCHED_FIFO`` 5; normal scheduling
    restored after. None of them busy-waits (vLLM: ``QUIET_DIR``; LMCache idles at ~1 % of a
    core), so real-time threads give the core back whenever they wait. Yields the level
    reached: ``realtime``, ``nice -20`` (real-time not permitted) or ``normal``."""
    servers = threads_of([p for pid in list(realtime) + list(high) for p in process_tree(pid)])
    driver = threads_of([os.getpid()])
    hi: list[int] = []
    level = "realtime"
    try:
        for threads, prio in ((servers, 10), (driver, 5)):
            for t in threads:
                try:
                    os.sched_setscheduler(t, os.SCHED_FIFO, os.sched_param(prio))
                except PermissionError:
                    level = "nice -20"
                    break
                except OSError:
                    pass
        for t in (servers + driver if level != "realtime" else []) + hi:
            try:
                os.setpriority(os.PRIO_PROCESS, t, -20)
            except PermissionError:
                if level != "realtime":
                    level = "normal"
                break
            except OSError:
                pass
        yield level
    finally:
        for t in servers + driver + hi:
            try:
                os.sched_setscheduler(t, os.SCHED_OTHER, os.sched_param(0))
                os.setpriority(os.PRIO_PROCESS, t, 0)
            except OSError:
                pass
