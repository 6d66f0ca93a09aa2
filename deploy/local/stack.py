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
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from kvplan.models.core.errors import KvplanError

HERE = Path(__file__).resolve().parent
INSTALL_SCRIPT = HERE / "install_stack.sh"
REQUIREMENTS = HERE / "requirements-stack.txt"
BUILD_MODEL = HERE / "build_model.py"
MODEL_NAME = "tiny-llama"
STACK_JSON = "stack.json"
KVPLAN_TOML = "kvplan.toml"
LOG_TAIL_LINES = 60
STACK_ID_ENV = "KVPLAN_STACK_ID"

# Default health deadlines (seconds). vLLM compiles at startup: 30-90 s alone on
# 2 cores, several servers started together share those cores.
VLLM_START_TIMEOUT = float(os.environ.get("KVPLAN_STACK_START_TIMEOUT", "900"))
AUX_START_TIMEOUT = 180.0


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


def _log(msg: str) -> None:
    print(f"[stack] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- data


@dataclass
class Server:
    name: str
    kind: str  # 'vllm' | 'lmcache' | 'prometheus'
    base_url: str
    metrics_url: str
    pid: int | None
    log_path: str
    port: int
    connector: bool = False
    health_url: str = ""
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # overrides on top of os.environ
    rpc_port: int | None = None  # LMCache's ZMQ port (vLLM's connector talks to it)
    started_at: float | None = None  # unix time of the last start
    ready_s: float | None = None  # seconds from start to healthy

    @property
    def openai_url(self) -> str:
        return self.base_url + "/v1"


@dataclass
class Stack:
    run_dir: str
    model_name: str
    model_path: str
    servers: list[Server]
    prometheus_url: str | None
    stack_id: str = ""
    scrape_interval: str = "2s"
    created_at: float | None = None
    stopped_at: float | None = None

    def vllm(self) -> list[Server]:
        return [s for s in self.servers if s.kind == "vllm"]

    def lmcache(self) -> Server | None:
        return next((s for s in self.servers if s.kind == "lmcache"), None)

    def prometheus(self) -> Server | None:
        return next((s for s in self.servers if s.kind == "prometheus"), None)

    def server(self, name: str) -> Server:
        for s in self.servers:
            if s.name == name:
                return s
        raise KeyError(f"no server named {name!r} in this stack ({[s.name for s in self.servers]})")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Stack:
        d = dict(d)
        d["servers"] = [Server(**s) for s in d.get("servers", [])]
        return cls(**d)

    @classmethod
    def from_json(cls, text: str | bytes | Mapping[str, Any]) -> Stack:
        if isinstance(text, Mapping):
            return cls.from_dict(text)
        return cls.from_dict(json.loads(text))

    @classmethod
    def load(cls, run_dir: str | os.PathLike[str]) -> Stack:
        return cls.from_json((Path(run_dir) / STACK_JSON).read_text())

    def save(self) -> Path:
        path = Path(self.run_dir) / STACK_JSON
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(self.to_json())
        tmp.replace(path)
        return path


# --------------------------------------------------------------- install / model


def stack_home() -> Path:
    return Path(os.environ.get("KVPLAN_STACK_HOME") or Path.home() / ".cache" / "kvplan" / "stack")


def stack_venv() -> Path:
    env = os.environ.get("KVPLAN_STACK_VENV")
    if env:
        return Path(env)
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    return Path.home() / ".cache" / "kvplan" / f"stack-venv-{digest}"


def stack_python() -> Path:
    return stack_venv() / "bin" / "python"


def model_dir() -> Path:
    return stack_home() / "models" / MODEL_NAME


def _run_visible(cmd: Sequence[str], what: str) -> None:
    """Run a setup command with its output on our stderr; raise with a tail on failure."""
    _log(f"{what}: {' '.join(map(str, cmd))}")
    proc = subprocess.run(
        list(map(str, cmd)), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env=_clean_env(),
    )
    for line in proc.stdout.splitlines():
        if "is neither a file nor a directory" not in line:
            print(line, file=sys.stderr)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-LOG_TAIL_LINES:])
        raise StackError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def ensure_installed() -> Path:
    """Install the stack venv if needed (deploy/local/install_stack.sh); return its python."""
    venv = stack_venv()
    if not (venv / ".kvplan-ok").exists():
        t0 = time.monotonic()
        _run_visible(["bash", str(INSTALL_SCRIPT)], "installing the stack venv")
        _log(f"stack venv installed in {time.monotonic() - t0:.0f} s: {venv}")
    py = stack_python()
    if not py.exists():
        raise StackError(f"stack python missing after install: {py}")
    return py


def ensure_model() -> Path:
    """Build the tiny random Llama (deploy/local/build_model.py) if needed; return its dir."""
    out = model_dir()
    if not (out / ".kvplan-ok").exists():
        py = ensure_installed()
        _run_visible([str(py), str(BUILD_MODEL), "--out", str(out)], "building the tiny model")
    return out


# ----------------------------------------------------------------- processes


def _clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
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


def _spawn(server: Server, stack_id: str) -> None:
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
            env=_clean_env({**server.env, STACK_ID_ENV: stack_id}),
            cwd=str(log_path.parent),
        )
    _CHILDREN[proc.pid] = proc
    server.pid = proc.pid
    server.started_at = time.time()
    server.ready_s = None
    _log(f"started {server.name} (pid {proc.pid}, port {server.port}) -> {log_path}")


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


def _alive(server: Server, stack_id: str) -> bool:
    if not server.pid:
        return False
    proc = _CHILDREN.get(server.pid)
    if proc is not None:
        return proc.poll() is None
    return bool(_members(server, stack_id))


def _exit_code(server: Server) -> int | None:
    proc = _CHILDREN.get(server.pid or -1)
    return proc.poll() if proc is not None else None


def _stop(servers: Iterable[Server], stack_id: str, grace_s: float = 30.0) -> list[str]:
    """SIGTERM the process groups, wait, SIGKILL what is left. Returns names stopped."""
    servers = [s for s in servers if s.pid]
    stopped = []
    for s in servers:
        if s.pid and _members(s, stack_id):
            try:
                os.killpg(s.pid, signal.SIGTERM)
                stopped.append(s.name)
                _log(f"SIGTERM {s.name} (process group {s.pid})")
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
            _log(f"SIGKILL {s.name} (process group {s.pid}): still running after {grace_s:.0f} s")
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


def _wait_healthy(servers: Sequence[Server], stack_id: str, timeout_s: float) -> None:
    pending = {s.name: s for s in servers}
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=3.0, trust_env=False) as client:
        while pending:
            for name, s in list(pending.items()):
                if not _alive(s, stack_id):
                    code = _exit_code(s)
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
                    _log(f"{name} healthy after {s.ready_s:.1f} s ({s.health_url})")
                    del pending[name]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise StackStartError(
                    f"not healthy within {timeout_s:.0f} s: {', '.join(pending)}",
                    {n: log_tail(s.log_path) for n, s in pending.items()},
                )
            time.sleep(0.5)


# --------------------------------------------------------------- server specs


QUIET_DIR = HERE / "quiet"
"""sitecustomize.py that turns vLLM's one-second busy-wait after every message into 1 ms sleeps
(see its docstring): a worker's CPU seconds are then the work it did."""
OMP_BIND = "0"
"""VLLM_CPU_OMP_THREADS_BIND of every vLLM server: one compute thread, on core 0. vLLM's 'auto'
gives a connected server two threads and a plain one one, so the same prompt costs different
CPU time and wall time on the two sides of an A/B."""


def _vllm_server(name: str, port: int, *, py: Path, model_path: Path, model_name: str, run_dir: Path,
                 lmcache_rpc_port: int | None, kv_space_gib: int, max_model_len: int,
                 extra_args: Sequence[str], omp_bind: str | None = OMP_BIND,
                 quiet: bool = True) -> Server:
    base = f"http://127.0.0.1:{port}"
    cmd = [
        str(py), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_path), "--served-model-name", model_name,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(max_model_len),
        "--dtype", "bfloat16",
        "--disable-hybrid-kv-cache-manager",
        # usage.prompt_tokens_details.cached_tokens in every response: the workload driver
        # records it per request (the request-weighted hit share of a run)
        "--enable-prompt-tokens-details",
    ]
    if "--no-enable-prefix-caching" not in extra_args:
        cmd.append("--enable-prefix-caching")
    if lmcache_rpc_port is not None:
        cmd += ["--kv-transfer-config", json.dumps({
            "kv_connector": "LMCacheMPConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"lmcache.mp.port": lmcache_rpc_port},
        })]
    cmd += list(extra_args)
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(kv_space_gib),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "LMCACHE_DISABLE_BANNER": "1",
        # vLLM otherwise picks the machine's interface address (a UDP "connect" to
        # 8.8.8.8 in get_ip()) for its internal message queues / torch.distributed
        # init: keep every socket of the stack on loopback.
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_LOOPBACK_IP": "127.0.0.1",
    }
    if omp_bind is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = omp_bind
    if quiet:
        env["PYTHONPATH"] = str(QUIET_DIR)
    return Server(
        name=name, kind="vllm", base_url=base, metrics_url=base + "/metrics", pid=None,
        log_path=str(run_dir / "logs" / f"{name}.log"), port=port,
        connector=lmcache_rpc_port is not None, health_url=base + "/health", cmd=cmd, env=env,
    )


LOOKUP_HASH_LOG_DIR = "lookup-hash-logs"
"""Under the run dir: LMCache's lookup-hash JSONL logs (`kvplan import-trace`, the what-if)."""


def _lmcache_server(http_port: int, rpc_port: int, *, py: Path, run_dir: Path,
                    l1_size_gb: float = 1, lookup_hash_log: bool = True) -> Server:
    base = f"http://127.0.0.1:{http_port}"
    lmcache_bin = py.parent / "lmcache"
    cmd = [
        str(lmcache_bin), "server",
        "--host", "127.0.0.1",
        "--port", str(rpc_port), "--http-port", str(http_port),
        "--l1-size-gb", f"{l1_size_gb:g}", "--eviction-policy", "LRU",
        "--supported-transfer-mode", "auto",
    ]
    if lookup_hash_log:  # one JSONL line per lookup: the trace `kvplan import-trace` reads
        cmd += ["--lookup-hash-log-dir", str(run_dir / LOOKUP_HASH_LOG_DIR)]
    return Server(
        name="lmcache", kind="lmcache", base_url=base, metrics_url=base + "/metrics", pid=None,
        log_path=str(run_dir / "logs" / "lmcache.log"), port=http_port, connector=False,
        health_url=base + "/metrics", cmd=cmd, env={"LMCACHE_DISABLE_BANNER": "1"},
        rpc_port=rpc_port,
    )


def prometheus_binary() -> str:
    exe = os.environ.get("KVPLAN_PROMETHEUS_BIN") or shutil.which("prometheus") or "/usr/bin/prometheus"
    if not Path(exe).exists():
        raise StackError(f"prometheus binary not found ({exe}); install Debian's package `prometheus`")
    return exe


def _prometheus_server(port: int, *, run_dir: Path) -> Server:
    base = f"http://127.0.0.1:{port}"
    cmd = [
        prometheus_binary(),
        f"--config.file={run_dir / 'prometheus.yml'}",
        f"--storage.tsdb.path={run_dir / 'prometheus-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=100y",
        "--web.enable-lifecycle",
        "--web.enable-admin-api",
    ]
    return Server(
        name="prometheus", kind="prometheus", base_url=base, metrics_url=base + "/metrics",
        pid=None, log_path=str(run_dir / "logs" / "prometheus.log"), port=port,
        health_url=base + "/-/ready", cmd=cmd,
    )


def deployment_of(server: Server) -> str:
    """Which kvplan deployment a server belongs to in the generated config."""
    if server.kind == "lmcache" or server.connector:
        return "local"
    return "local-nocache" if server.name.startswith("vllm-nocache") else "local-plain"


def _duration_s(interval: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for u in ("ms", "s", "m", "h"):
        if interval.endswith(u):
            return float(interval[: -len(u)]) * units[u]
    return float(interval)


def prometheus_config(stack: Stack) -> str:
    """Prometheus YAML scraping every vLLM and LMCache /metrics (jobs `vllm` and `lmcache`)."""
    interval = stack.scrape_interval
    lines = [
        "# Generated by deploy/local/stack.py",
        "global:",
        f"  scrape_interval: {interval}",
        f"  scrape_timeout: {interval}",  # must not exceed the interval (default 10s would)
        f"  evaluation_interval: {interval}",
        "scrape_configs:",
    ]
    for job in ("vllm", "lmcache"):
        servers = [s for s in stack.servers if s.kind == job]
        if not servers:
            continue
        lines += [f"  - job_name: {job}", "    metrics_path: /metrics", "    static_configs:"]
        for s in servers:
            lines += [
                f"      - targets: ['127.0.0.1:{s.port}']",
                "        labels:",
                f"          server: '{s.name}'",
                f"          deployment: '{deployment_of(s)}'",
            ]
    return "\n".join(lines) + "\n"


def _toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string of printable text is a valid TOML basic string


CONFIG_KIND = {"vllm": "vllm", "lmcache": "lmcache_mp"}  # Server.kind -> kvplan target kind


def kvplan_config(stack: Stack) -> str:
    """A kvplan deployment config for this stack (TOML, collectors/config.py's schema).

    Connected vLLM servers and LMCache form deployment ``local``; plain vLLM
    servers (no connector) form ``local-plain``. Each deployment's
    ``prometheus_selector`` matches the ``deployment`` label the stack's
    Prometheus puts on its targets.
    """
    out = [f"# Generated by deploy/local/stack.py for the local stack in {stack.run_dir}",
           f"# model {stack.model_name}: {stack.model_path}", ""]
    groups: dict[str, list[Server]] = {}
    for s in stack.servers:
        if s.kind in CONFIG_KIND:
            groups.setdefault(deployment_of(s), []).append(s)
    for dep, servers in groups.items():
        out += ["[[deployments]]", f"name = {_toml_str(dep)}"]
        if stack.prometheus_url:
            out.append(f"prometheus_selector = {_toml_str(f'deployment={chr(34)}{dep}{chr(34)}')}")
        out.append("")
        for s in servers:
            out += [
                "[[deployments.targets]]",
                f"name = {_toml_str(s.name)}",
                f"kind = {_toml_str(CONFIG_KIND[s.kind])}",
                f"url = {_toml_str(s.metrics_url)}",
                "",
            ]
    if stack.prometheus_url:
        step = max(1, round(_duration_s(stack.scrape_interval) * 5))
        out += ["[prometheus]", f"url = {_toml_str(stack.prometheus_url)}", f"step = \"{step}s\"",
                f"chunk = \"{step * 360}s\"", ""]
    return "\n".join(out)


# ------------------------------------------------------------------- public API


def _existing_live_stack(run_dir: Path) -> Stack | None:
    if not (run_dir / STACK_JSON).exists():
        return None
    try:
        st = Stack.load(run_dir)
    except (ValueError, TypeError, OSError):
        return None
    if any(_alive(s, st.stack_id) for s in st.servers):
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
    omp_bind: str | None = OMP_BIND,
    quiet: bool = True,
) -> Stack:
    """Start LMCache, n_vllm connected + n_vllm_plain plain vLLM servers and Prometheus.

    ``n_vllm_nocache`` more vLLM servers run with no reuse at all (no connector,
    ``--no-enable-prefix-caching``): the cache-off side of an A/B.

    ``omp_bind`` (``VLLM_CPU_OMP_THREADS_BIND``, default one thread on core 0; None = vLLM's
    auto) and ``quiet`` (``QUIET_DIR``: no busy-wait) make engine time comparable across servers.

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
        lm = _lmcache_server(next(ports), next(ports), py=py, run_dir=run, l1_size_gb=l1_size_gb,
                             lookup_hash_log=lookup_hash_log)
        stack.servers.append(lm)
    common: dict[str, Any] = dict(py=py, model_path=model_path, model_name=MODEL_NAME, run_dir=run,
                                  kv_space_gib=kv_space_gib, max_model_len=max_model_len,
                                  extra_args=tuple(vllm_extra_args), omp_bind=omp_bind, quiet=quiet)
    connected = [
        _vllm_server(f"vllm-{i}", next(ports), lmcache_rpc_port=lm.rpc_port, **common)  # type: ignore[union-attr]
        for i in range(n_vllm)
    ]
    plain = [
        _vllm_server(f"vllm-plain-{i}", next(ports), lmcache_rpc_port=None, **common)
        for i in range(n_vllm_plain)
    ]
    nocache_args = tuple(vllm_extra_args) + ("--no-enable-prefix-caching",)
    plain += [
        _vllm_server(f"vllm-nocache-{i}", next(ports), lmcache_rpc_port=None, **{**common, "extra_args": nocache_args})
        for i in range(n_vllm_nocache)
    ]
    stack.servers += connected + plain
    prom = None
    if prometheus:
        prom = _prometheus_server(next(ports), run_dir=run)
        stack.servers.append(prom)
        stack.prometheus_url = prom.base_url
        (run / "prometheus.yml").write_text(prometheus_config(stack))

    try:
        first = [s for s in (lm, prom) if s is not None] + plain
        for s in first:
            _spawn(s, stack.stack_id)
            stack.save()  # save after every spawn: `down` can always clean up
        if lm is not None:
            _wait_healthy([lm], stack.stack_id, AUX_START_TIMEOUT)
        for s in connected:
            _spawn(s, stack.stack_id)
            stack.save()
        _wait_healthy([s for s in stack.servers if s.ready_s is None], stack.stack_id, timeout)
    except BaseException:
        _log("startup failed: stopping what was started")
        _stop(stack.servers, stack.stack_id)
        stack.stopped_at = time.time()
        stack.save()
        raise
    stack.save()
    (run / KVPLAN_TOML).write_text(kvplan_config(stack))
    _log(f"stack up in {time.monotonic() - t0:.1f} s: {run / STACK_JSON}")
    return stack


def down(run_dir: str | os.PathLike[str]) -> list[str]:
    """Stop exactly the process groups recorded in run_dir/stack.json. Idempotent."""
    run = Path(run_dir)
    if not (run / STACK_JSON).exists():
        return []
    stack = Stack.load(run)
    order = stack.vllm() + [s for s in stack.servers if s.kind != "vllm"]
    stopped = _stop(order, stack.stack_id)
    if stopped or stack.stopped_at is None:
        stack.stopped_at = time.time()
    stack.save()
    return stopped


def restart(stack: Stack, server_name: str, *, timeout_s: float | None = None) -> Server:
    """Stop one vLLM server and start it again on the same port; wait until healthy."""
    s = stack.server(server_name)
    if s.kind != "vllm":
        raise StackError(f"restart is for vLLM servers; {server_name} is {s.kind}")
    _stop([s], stack.stack_id)
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
    _spawn(s, stack.stack_id)
    stack.save()
    try:
        _wait_healthy([s], stack.stack_id, timeout_s or VLLM_START_TIMEOUT)
    except BaseException:
        _stop([s], stack.stack_id)
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
            alive = _alive(s, stack.stack_id)
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
