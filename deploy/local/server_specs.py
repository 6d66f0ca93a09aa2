"""How each server of the local stack is started: the vLLM, LMCache and Prometheus
command lines and environments (Server records, not yet spawned)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from .errors import StackError
from .records import Server

HERE = Path(__file__).resolve().parent


# --------------------------------------------------------------- server specs


QUIET_DIR = HERE / "quiet"
"""sitecustomize.py that turns vLLM's one-second busy-wait after every message into 1 ms sleeps
(see its docstring): a worker's CPU seconds are then the work it did."""
OMP_BIND = "0"
"""VLLM_CPU_OMP_THREADS_BIND of a vLLM server started on its own (the recorders): one compute
thread, on core 0. vLLM's 'auto' gives a connected server two threads and a plain one one, so
the same prompt costs different CPU time and wall time on the two sides of an A/B."""


SPREAD = "spread"
"""``stack.up(omp_bind=SPREAD)``: bind each server as ``spread_cores`` says."""


def spread_cores(names: Sequence[str], cores: Sequence[int]) -> dict[str, str]:
    """One compute thread per vLLM server, the servers spread over ``cores`` in start order
    (``vllm-0`` on the first, ``vllm-1`` on the next, ...), so that servers that serve at the same
    time (a shared pool, a topology, a sweep beside a scrape) do not share one core while another
    idles. A cache-off server ``vllm-nocache-i`` takes the core of ``vllm-i``: it is the off side
    of the A/Bs against ``vllm-i`` and ``vllm-plain-i``, and each side of an A/B measures its engine
    time on the same core."""
    if not cores:
        raise ValueError("no core to run vLLM on")
    out: dict[str, str] = {}
    k = 0
    for n in names:
        if not n.startswith("vllm-nocache-"):
            out[n] = str(cores[k % len(cores)])
            k += 1
    for n in names:
        if n.startswith("vllm-nocache-"):
            partner = f"vllm-{n.removeprefix('vllm-nocache-')}"
            out[n] = out.get(partner, str(cores[0]))
    return out


def vllm_server(name: str, port: int, *, py: Path, model_path: Path, model_name: str, run_dir: Path,
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


def lmcache_server(http_port: int, rpc_port: int, *, py: Path, run_dir: Path,
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


def prometheus_server(port: int, *, run_dir: Path) -> Server:
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
