"""Both sides of the topology A/B (``record_topology_ab``) up at once on the real local stack:
``start_sides`` (3 LMCache servers, 4 vLLM servers, one ``stack.json``), the stack's real-time
``priorities`` while requests flow, and LMCache's lookup counters read from a /metrics endpoint."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from kvplan.collectors.scrape.parse import parse_payload
from kvplan.deploy.local import stack as stk
from kvplan.deploy.local.recorders.ab import comm_of, process_tree, threads_of
from kvplan.deploy.local.recorders.topology_schedule import RANKS

COUNTERS = ("lmcache_mp_lookup_requested_tokens", "lmcache_mp_lookup_hit_tokens",
            "lmcache_mp_lookups_requests")


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
        workers = [p for p in tree if "Worker" in comm_of(p)]
        plan += [(threads_of(workers), ENGINE_PRIORITY), (threads_of([p for p in tree if p not in workers]),
                                                         SERVICE_PRIORITY)]
    plan += [(threads_of([p for pid in lmcache_pids for p in process_tree(pid)]), SERVICE_PRIORITY),
             (threads_of([os.getpid()]), DRIVER_PRIORITY)]
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


@contextmanager
def pinned(vllm_pids: list[int]) -> Iterator[str]:
    """While requests flow: each side's vLLM engine ``i`` (its worker process, every thread)
    on core ``i mod cores`` alone (``sched_setaffinity``), so the two engines of a side never
    share a core; the other processes of the stack float. Restored after. Yields what was done
    (``pinned: ...`` or why not)."""
    cores = sorted(os.sched_getaffinity(0))
    done: list[tuple[list[int], set[int]]] = []
    how = []
    try:
        for i, pid in enumerate(vllm_pids):
            core = cores[(i % RANKS) % len(cores)]
            threads = threads_of([p for p in process_tree(pid) if "Worker" in comm_of(p)])
            for t in threads:
                try:
                    before = os.sched_getaffinity(t)
                    os.sched_setaffinity(t, {core})
                    done.append(([t], before))
                except OSError:
                    pass
            how.append(f"engine {i % RANKS} -> core {core} ({len(threads)} worker threads)")
        yield "pinned: " + "; ".join(sorted(set(how))) if how else "not pinned (no worker found)"
    finally:
        for threads, before in done:
            for t in threads:
                try:
                    os.sched_setaffinity(t, before)
                except OSError:
                    pass


# ---- the stack of one side -------------------------------------------------------------------------
def lookup_counters(url: str) -> dict[str, float]:
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
            lm = stk.lmcache_server(next(ports), next(ports), py=py, run_dir=run_dir / side / name,
                                     l1_size_gb=size, lookup_hash_log=True)
            lm.name = f"{side}/{name}"
            lms.append(lm)
        uses = {f"vllm-{i}": caches[i % len(caches)] for i in range(RANKS)}
        vllms = []
        for i, name in enumerate(uses):
            v = stk.vllm_server(f"{side}/{name}", next(ports), py=py, model_path=model_path, model_name=stk.MODEL_NAME,
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
            stk.spawn_server(sv, st.stack_id)
            st.save()
        stk.wait_healthy(lms, st.stack_id, stk.AUX_START_TIMEOUT)
        for sv in vllms:
            stk.spawn_server(sv, st.stack_id)
            st.save()
        stk.wait_healthy(vllms, st.stack_id, stk.VLLM_START_TIMEOUT)
    except BaseException:
        stk.down(run_dir)
        raise
    st.save()
    return st, sides


def say(text: str) -> None:
    print(f"[topology-ab] {time.strftime('%H:%M:%S')} {text}", flush=True)


def short(name: str) -> str:
    return name.split("/", 1)[1]

