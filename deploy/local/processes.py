"""The stack's processes: spawning each server in its own process group (tagged with the
stack's id), finding a group's live members in /proc, stopping groups (SIGTERM, then SIGKILL),
free ports and log tails."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from .errors import LOG_TAIL_LINES
from .records import Server

STACK_ID_ENV = "KVPLAN_STACK_ID"


def log_line(msg: str) -> None:
    print(f"[stack] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------- processes


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # The caller may run inside another venv (kvplan's): never leak it into the stack.
    for k in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"):
        env.pop(k, None)
    if extra:
        env.update(extra)
    return env


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (bound to port 0, then released)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


_CHILDREN: dict[int, subprocess.Popen] = {}  # processes this interpreter started (to reap them)


def spawn_server(server: Server, stack_id: str) -> None:
    log_path = Path(server.log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"\n===== kvplan stack: starting {server.name} at {time.ctime()}: "
                  f"{' '.join(server.cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            server.cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=clean_env({**server.env, STACK_ID_ENV: stack_id}),
            cwd=str(log_path.parent),
        )
    _CHILDREN[proc.pid] = proc
    server.pid = proc.pid
    server.started_at = time.time()
    server.ready_s = None
    log_line(f"started {server.name} (pid {proc.pid}, port {server.port}) -> {log_path}")


def _proc_pgrp(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces/parens: the fields after the last ')' are fixed.
    rest = stat[stat.rfind(")") + 2:].split()
    # rest[0]=state, rest[1]=ppid, rest[2]=pgrp
    if rest and rest[0] == "Z":
        return None  # zombies count as gone
    return int(rest[2])


def _group_members(pgid: int, stack_id: str, cwd: str | None = None) -> list[int]:
    """Live processes of process group `pgid` that belong to this stack.

    A process belongs if its environment carries this stack's id, or if its
    working directory is the server's (`cwd`, the run's logs dir): vLLM's engine
    and worker processes rename themselves with setproctitle, which overwrites
    the memory /proc/PID/environ shows, so only the cwd identifies them.
    """
    if not Path("/proc").is_dir():  # not Linux: trust the recorded group
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except OSError:
            return []
    token = f"{STACK_ID_ENV}={stack_id}".encode()
    want_cwd = os.path.realpath(cwd) if cwd else None
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if _proc_pgrp(pid) != pgid:
            continue
        try:
            if want_cwd and os.readlink(f"/proc/{pid}/cwd") == want_cwd:
                members.append(pid)
                continue
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if token in environ.split(b"\0"):
            members.append(pid)
    return members


def _members(server: Server, stack_id: str) -> list[int]:
    if not server.pid:
        return []
    return _group_members(server.pid, stack_id, str(Path(server.log_path).parent))


def _reap() -> None:
    for pid, proc in list(_CHILDREN.items()):
        if proc.poll() is not None:
            _CHILDREN.pop(pid, None)


def is_alive(server: Server, stack_id: str) -> bool:
    if not server.pid:
        return False
    proc = _CHILDREN.get(server.pid)
    if proc is not None:
        return proc.poll() is None
    return bool(_members(server, stack_id))


def exit_code(server: Server) -> int | None:
    proc = _CHILDREN.get(server.pid or -1)
    return proc.poll() if proc is not None else None


def stop_servers(servers: Iterable[Server], stack_id: str, grace_s: float = 30.0) -> list[str]:
    """SIGTERM the process groups, wait, SIGKILL what is left. Returns names stopped."""
    servers = [s for s in servers if s.pid]
    stopped = []
    for s in servers:
        if s.pid and _members(s, stack_id):
            try:
                os.killpg(s.pid, signal.SIGTERM)
                stopped.append(s.name)
                log_line(f"SIGTERM {s.name} (process group {s.pid})")
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap()
        if not any(_members(s, stack_id) for s in servers):
            break
        time.sleep(0.2)
    for s in servers:
        if s.pid and _members(s, stack_id):
            log_line(f"SIGKILL {s.name} (process group {s.pid}): still running after {grace_s:.0f} s")
            try:
                os.killpg(s.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_members(s, stack_id) for s in servers):
        time.sleep(0.1)
    _reap()
    for s in servers:
        s.pid = None
    return stopped


def log_tail(path: str | os.PathLike[str], lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read()
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])
