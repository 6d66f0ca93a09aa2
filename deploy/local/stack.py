"""Start and stop a real local vLLM (CPU) + LMCache + Prometheus stack.

Stdlib + httpx only, importable from the kvplan venv as ``kvplan.deploy.local.stack``.
The serving processes run from their own venv (see ``install_stack.sh``) and
serve the tiny random Llama built by ``build_model.py``. The recipe and its traps (start
order, the flags that matter on CPU, engine time from the worker's CPU seconds) are in
deploy/README.md ("Try it live").

    python -m kvplan.deploy.local.stack up --run-dir DIR [--vllm 2] [--plain 0]
    python -m kvplan.deploy.local.stack status --run-dir DIR
    python -m kvplan.deploy.local.stack down --run-dir DIR

``up`` writes ``DIR/stack.json`` (what runs where, pids) and ``DIR/kvplan.toml``
(a kvplan deployment config pointing at every /metrics endpoint and at the
stack's Prometheus). Every process runs in its own process group with its
output in ``DIR/logs/<name>.log``; ``down`` stops exactly those groups.

The parts live beside this module: records.py (Server, Stack: stack.json), install.py (the
stack venv and tiny model), server_specs.py (each server's command line), processes.py
(process groups), health.py (start deadlines), configs.py (prometheus.yml, kvplan.toml) and
errors.py. This module holds the public API (up, down, restart, status) and the CLI; the
names tests, recorders and benches reach as ``stack.X`` are re-exported here (__all__).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from .configs import KVPLAN_TOML, kvplan_config, prometheus_config
from .errors import StackError, StackStartError
from .health import AUX_START_TIMEOUT, VLLM_START_TIMEOUT, wait_healthy
from .install import MODEL_NAME, ensure_installed, ensure_model, stack_home, stack_python, stack_venv
from .processes import free_ports, is_alive, log_line, log_tail, spawn_server, stop_servers
from .records import STACK_JSON, Server, Stack
from .server_specs import (
    LOOKUP_HASH_LOG_DIR,
    SPREAD,
    lmcache_server,
    prometheus_server,
    spread_cores,
    vllm_server,
)

__all__ = [
    "AUX_START_TIMEOUT", "KVPLAN_TOML", "LOOKUP_HASH_LOG_DIR", "MODEL_NAME", "STACK_JSON", "VLLM_START_TIMEOUT",
    "Server", "Stack", "StackError", "StackStartError", "lmcache_server", "spawn_server", "vllm_server",
    "wait_healthy", "down", "ensure_installed", "ensure_model", "free_ports", "log_tail", "restart",
    "stack_home", "stack_python", "stack_venv", "status", "up",
]


# ------------------------------------------------------------------- public API


def _existing_live_stack(run_dir: Path) -> Stack | None:
    if not (run_dir / STACK_JSON).exists():
        return None
    try:
        st = Stack.load(run_dir)
    except (ValueError, TypeError, OSError):
        return None
    if any(is_alive(s, st.stack_id) for s in st.servers):
        return st
    return None


def up(
    run_dir: str | os.PathLike[str],
    *,
    n_vllm: int = 2,
    n_vllm_plain: int = 0,
    n_vllm_nocache: int = 0,
    lmcache: bool = True,
    prometheus: bool = True,
    scrape_interval: str = "2s",
    kv_space_gib: int = 1,
    max_model_len: int = 4096,
    vllm_extra_args: Sequence[str] = (),
    start_timeout_s: float | None = None,
    l1_size_gb: float = 1,
    lookup_hash_log: bool = True,
    omp_bind: str | None = SPREAD,
    quiet: bool = True,
) -> Stack:
    """Start LMCache, n_vllm connected + n_vllm_plain plain vLLM servers and Prometheus.

    ``n_vllm_nocache`` more vLLM servers run with no reuse at all (no connector,
    ``--no-enable-prefix-caching``): the cache-off side of an A/B.

    ``omp_bind`` (``VLLM_CPU_OMP_THREADS_BIND``; default ``SPREAD``: one thread per server, the
    servers spread over the cores this process may use, ``spread_cores``; a core list such as
    "0" pins every server there; None = vLLM's auto) and ``quiet`` (``QUIET_DIR``: no busy-wait)
    make engine time comparable across servers.

    Connected vLLM servers (LMCacheMPConnector) start together once LMCache
    answers; plain ones (vLLM's own prefix cache only) and Prometheus start at
    once. Raises StackStartError (with log tails) after stopping everything it
    started if a process dies or is not healthy before the deadline.

    LMCache gets an L1 of ``l1_size_gb`` GiB and, unless ``lookup_hash_log`` is false, logs
    every lookup's chunk hashes under ``run_dir/lookup-hash-logs``.
    """
    run = Path(run_dir).resolve()
    run.mkdir(parents=True, exist_ok=True)
    live = _existing_live_stack(run)
    if live is not None:
        raise StackError(f"a stack is already running in {run}; run `down` first")
    if n_vllm and not lmcache:
        raise StackError("connected vLLM servers (n_vllm) need lmcache=True; use n_vllm_plain")
    timeout = start_timeout_s or VLLM_START_TIMEOUT

    py = ensure_installed()
    model_path = ensure_model()
    t0 = time.monotonic()

    ports = iter(free_ports(n_vllm + n_vllm_plain + n_vllm_nocache + 3))
    stack = Stack(
        run_dir=str(run), model_name=MODEL_NAME, model_path=str(model_path), servers=[],
        prometheus_url=None, stack_id=uuid.uuid4().hex, scrape_interval=scrape_interval,
        created_at=time.time(),
    )
    lm = None
    if lmcache:
        lm = lmcache_server(next(ports), next(ports), py=py, run_dir=run, l1_size_gb=l1_size_gb,
                             lookup_hash_log=lookup_hash_log)
        stack.servers.append(lm)
    common: dict[str, Any] = dict(py=py, model_path=model_path, model_name=MODEL_NAME, run_dir=run,
                                  kv_space_gib=kv_space_gib, max_model_len=max_model_len,
                                  extra_args=tuple(vllm_extra_args), quiet=quiet)
    names = ([f"vllm-{i}" for i in range(n_vllm)] + [f"vllm-plain-{i}" for i in range(n_vllm_plain)]
             + [f"vllm-nocache-{i}" for i in range(n_vllm_nocache)])
    binds: dict[str, str | None] = (dict(spread_cores(names, sorted(os.sched_getaffinity(0))))
                                    if omp_bind == SPREAD else dict.fromkeys(names, omp_bind))
    connected = [
        vllm_server(n, next(ports), lmcache_rpc_port=lm.rpc_port, omp_bind=binds[n], **common)  # type: ignore[union-attr]
        for n in names if n.startswith("vllm-") and not n.startswith(("vllm-plain-", "vllm-nocache-"))
    ]
    plain = [
        vllm_server(n, next(ports), lmcache_rpc_port=None, omp_bind=binds[n], **common)
        for n in names if n.startswith("vllm-plain-")
    ]
    nocache_args = tuple(vllm_extra_args) + ("--no-enable-prefix-caching",)
    plain += [
        vllm_server(n, next(ports), lmcache_rpc_port=None, omp_bind=binds[n], **{**common, "extra_args": nocache_args})
        for n in names if n.startswith("vllm-nocache-")
    ]
    stack.servers += connected + plain
    prom = None
    if prometheus:
        prom = prometheus_server(next(ports), run_dir=run)
        stack.servers.append(prom)
        stack.prometheus_url = prom.base_url
        (run / "prometheus.yml").write_text(prometheus_config(stack))

    try:
        first = [s for s in (lm, prom) if s is not None] + plain
        for s in first:
            spawn_server(s, stack.stack_id)
            stack.save()  # save after every spawn: `down` can always clean up
        if lm is not None:
            wait_healthy([lm], stack.stack_id, AUX_START_TIMEOUT)
        for s in connected:
            spawn_server(s, stack.stack_id)
            stack.save()
        wait_healthy([s for s in stack.servers if s.ready_s is None], stack.stack_id, timeout)
    except BaseException:
        log_line("startup failed: stopping what was started")
        stop_servers(stack.servers, stack.stack_id)
        stack.stopped_at = time.time()
        stack.save()
        raise
    stack.save()
    (run / KVPLAN_TOML).write_text(kvplan_config(stack))
    log_line(f"stack up in {time.monotonic() - t0:.1f} s: {run / STACK_JSON}")
    return stack


def down(run_dir: str | os.PathLike[str]) -> list[str]:
    """Stop exactly the process groups recorded in run_dir/stack.json. Idempotent."""
    run = Path(run_dir)
    if not (run / STACK_JSON).exists():
        return []
    stack = Stack.load(run)
    order = stack.vllm() + [s for s in stack.servers if s.kind != "vllm"]
    stopped = stop_servers(order, stack.stack_id)
    if stopped or stack.stopped_at is None:
        stack.stopped_at = time.time()
    stack.save()
    return stopped


def restart(stack: Stack, server_name: str, *, timeout_s: float | None = None) -> Server:
    """Stop one vLLM server and start it again on the same port; wait until healthy."""
    s = stack.server(server_name)
    if s.kind != "vllm":
        raise StackError(f"restart is for vLLM servers; {server_name} is {s.kind}")
    stop_servers([s], stack.stack_id)
    stack.save()
    # The port must be free again before the new process binds it.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", s.port))
                break
            except OSError:
                time.sleep(0.3)
    spawn_server(s, stack.stack_id)
    stack.save()
    try:
        wait_healthy([s], stack.stack_id, timeout_s or VLLM_START_TIMEOUT)
    except BaseException:
        stop_servers([s], stack.stack_id)
        stack.save()
        raise
    stack.save()
    return s


def status(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Per server: name, kind, pid, alive, healthy, urls."""
    stack = Stack.load(run_dir)
    rows = []
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        for s in stack.servers:
            alive = is_alive(s, stack.stack_id)
            healthy = False
            if alive:
                try:
                    healthy = client.get(s.health_url).status_code == 200
                except httpx.HTTPError:
                    healthy = False
            rows.append(dict(name=s.name, kind=s.kind, pid=s.pid, port=s.port, alive=alive,
                             healthy=healthy, connector=s.connector, base_url=s.base_url,
                             metrics_url=s.metrics_url, ready_s=s.ready_s, log=s.log_path))
    return rows


# ------------------------------------------------------------------------ CLI


def _main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvplan.deploy.local.stack", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    default_run = str(stack_home() / "run")
    p_up = sub.add_parser("up", help="install if needed, start the stack, print stack.json")
    p_up.add_argument("--run-dir", default=default_run)
    p_up.add_argument("--vllm", type=int, default=2, help="vLLM servers with the LMCache connector")
    p_up.add_argument("--plain", type=int, default=0, help="vLLM servers without connector")
    p_up.add_argument("--nocache", type=int, default=0, help="vLLM servers with no reuse at all (prefix caching off)")
    p_up.add_argument("--no-lmcache", action="store_true")
    p_up.add_argument("--no-prometheus", action="store_true")
    p_up.add_argument("--scrape-interval", default="2s")
    p_up.add_argument("--kv-space-gib", type=int, default=1)
    p_up.add_argument("--max-model-len", type=int, default=4096)
    p_up.add_argument("--l1-size-gb", type=float, default=1, help="LMCache L1 size, GiB")
    p_up.add_argument("--no-lookup-hash-log", action="store_true",
                      help="do not log LMCache lookups to RUN_DIR/lookup-hash-logs")
    p_up.add_argument("--vllm-arg", action="append", default=[],
                      help="extra vLLM argument (repeat), e.g. --vllm-arg=--data-parallel-size --vllm-arg=2")
    for name, help_ in (("down", "stop the servers recorded in stack.json"),
                        ("status", "show the servers and whether they answer")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--run-dir", default=default_run)
    p_rs = sub.add_parser("restart", help="restart one vLLM server on its port")
    p_rs.add_argument("--run-dir", default=default_run)
    p_rs.add_argument("name")
    sub.add_parser("install", help="install the stack venv and build the model; print their paths")
    args = ap.parse_args(argv)

    if args.cmd == "install":
        print(ensure_installed())
        print(ensure_model())
        return 0
    if args.cmd == "up":
        try:
            st = up(args.run_dir, n_vllm=args.vllm, n_vllm_plain=args.plain, n_vllm_nocache=args.nocache,
                    lmcache=not args.no_lmcache, prometheus=not args.no_prometheus,
                    scrape_interval=args.scrape_interval, kv_space_gib=args.kv_space_gib,
                    max_model_len=args.max_model_len, vllm_extra_args=args.vllm_arg,
                    l1_size_gb=args.l1_size_gb, lookup_hash_log=not args.no_lookup_hash_log)
        except StackError as exc:
            print(f"stack failed to start: {exc}", file=sys.stderr)
            return 1
        print(st.to_json())
        return 0
    if args.cmd == "down":
        stopped = down(args.run_dir)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    if args.cmd == "restart":
        st = Stack.load(args.run_dir)
        s = restart(st, args.name)
        print(f"{s.name} restarted: pid {s.pid}, healthy after {s.ready_s} s")
        return 0
    if args.cmd == "status":
        if not (Path(args.run_dir) / STACK_JSON).exists():
            print(f"no stack in {args.run_dir}")
            return 1
        rows = status(args.run_dir)
        for r in rows:
            state = "healthy" if r["healthy"] else ("running" if r["alive"] else "stopped")
            print(f"{r['name']:<16} {r['kind']:<10} pid={r['pid']!s:<8} {state:<8} {r['base_url']}")
        return 0 if all(r["healthy"] for r in rows) else 1
    return 2


if __name__ == "__main__":
    sys.exit(_main())
