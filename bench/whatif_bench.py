"""The whole hit-rate curve in one pass (kvplan) against LMCache's capacity sweep, in one run:

  LMCache sweep   ``lmcache tool cache-simulator sweep``'s loop (``run_sweep``: load the
                  JSONL, then ``simulate(fast=True)`` once per capacity, LRUCacheFast), 30
                  log-spaced capacities, run from the stack venv (LMCache 0.5.6)
  kvplan          ``kvplan.collectors.traces.parse.parse_file`` (validation included) + ``kvplan.models.cache.sim.
                  lru_curve``: every capacity at once; then the same 30 capacities read off it

Same trace file for both: an LMCache lookup-hash JSONL made from the Mooncake FAST'25
conversation trace (``../shared/data/mooncake``), repeated ``--copies`` times with fresh hash
ids per copy (synthetic: the real trace's shape, more of it; the 1st copy is the real trace).
The hit tokens at every one of the 30 capacities must be identical; the time ratio is printed.

Memory: a separate process builds a ``--big``-request trace of the same construction in
numpy (no JSON) and runs the curve; its peak RSS is printed with the trace alone's.

    .venv/bin/python bench/whatif_bench.py [--copies 17] [--big 1000000] [--points 30]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from kvplan.collectors.traces.parse import parse_file
from kvplan.deploy.local import stack as stk
from kvplan.models.cache import pools, sim

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT.parent / "shared" / "data" / "mooncake" / "conversation_trace.jsonl"
BLOCK = 512
# KV of one 512-token chunk of a Llama-3-70B-shaped model (80 layers, K and V, 8 KV heads of
# 128, bf16): 320 KiB per token. A label for the GB axis only; the hit rates do not depend on it.
SHAPE = [80, 2, BLOCK, 8, 128]
BYTES_PER_CHUNK = 80 * 2 * BLOCK * 8 * 128 * 2
MIN_GIB, MAX_GIB = 1.0, 2.0**20


def load_mooncake() -> list[dict]:
    if not MOONCAKE.exists():
        sys.exit(f"no Mooncake trace at {MOONCAKE}")
    return [json.loads(x) for x in MOONCAKE.read_text().splitlines() if x.strip()]


def write_lmcache_jsonl(reqs: list[dict], copies: int, path: Path) -> int:
    """Mooncake requests as LMCache lookup-hash lines, ``copies`` times (fresh ids per copy)."""
    offset = max(max(r["hash_ids"]) for r in reqs if r["hash_ids"]) + 1
    n = 0
    with open(path, "w") as fh:
        for c in range(copies):
            for r in reqs:
                full = r["input_length"] // BLOCK
                fh.write(json.dumps({
                    "timestamp": c * 3600.0 + r["timestamp"] / 1000.0, "request_id": f"{c}-{n}",
                    "model_name": "mooncake-conversation", "chunk_size": BLOCK,
                    "seq_len": r["input_length"], "dtypes": ["bfloat16"], "shapes": [SHAPE],
                    "chunk_hashes": [hex(h + c * offset) for h in r["hash_ids"][:full]]}) + "\n")
                n += 1
    return n


LMCACHE_SWEEP = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from lmcache.tools.cache_simulator.plot_hit_rate import capacity_range_bytes
    from lmcache.tools.cache_simulator.simulator import (compute_kv_bytes_per_chunk,
                                                         load_lookup_events, simulate)
    path, lo, hi, points = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    t0 = time.perf_counter()
    events = load_lookup_events([Path(path)])
    t1 = time.perf_counter()
    bpc = compute_kv_bytes_per_chunk(events[0])
    out = []
    for cap in capacity_range_bytes(lo, hi, points):
        r = simulate(events, cap, bpc, fast=True)
        out.append({"capacity_bytes": cap, "hit_tokens": r["total_hit_tokens"],
                    "total_tokens": r["total_tokens"], "capacity_chunks": r["cache_capacity_chunks"]})
    t2 = time.perf_counter()
    print(json.dumps({"load_s": t1 - t0, "simulate_s": t2 - t1, "points": out, "bpc": bpc}))
""")


def lmcache_sweep(path: Path, points: int) -> dict:
    py = stk.stack_python()
    if not py.exists():
        sys.exit(f"no stack venv at {py}: run `make stack` (deploy/local/install_stack.sh) first")
    t0 = time.perf_counter()
    res = subprocess.run([str(py), "-c", LMCACHE_SWEEP, str(path), str(MIN_GIB), str(MAX_GIB), str(points)],
                         capture_output=True, text=True, check=True)
    d = json.loads(res.stdout.strip().splitlines()[-1])
    d["wall_s"] = time.perf_counter() - t0
    return d


BUILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    reqs = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
    n = int(sys.argv[2])
    ids, lens, seq = [], [], []
    for r in reqs:
        full = r["input_length"] // 512
        ids.append(np.asarray(r["hash_ids"][:full], dtype=np.int64)); lens.append(full)
        seq.append(r["input_length"])
    one = np.concatenate(ids); lens = np.asarray(lens); seq = np.asarray(seq)
    copies = -(-n // len(reqs)); off = int(one.max()) + 1
    keys = np.concatenate([one + c * off for c in range(copies)])
    L = np.tile(lens, copies)[:n]
    offsets = np.zeros(n + 1, dtype=np.int64); np.cumsum(L, out=offsets[1:])
    np.savez(sys.argv[3], chunk_ids=keys[:offsets[-1]], offsets=offsets,
             seq_len=np.tile(seq, copies)[:n].astype(np.int64),
             chunk_size=np.full(n, 512, dtype=np.int64))
""")

BIG = textwrap.dedent("""
    import json, resource, sys, time
    import numpy as np
    from kvplan.models.cache import sim
    z = np.load(sys.argv[1])
    trace = sim.Trace(z["chunk_ids"], z["offsets"], z["seq_len"], z["chunk_size"])
    del z
    def rss_mib():  # resident now, not the peak so far
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20
    base = rss_mib()
    t0 = time.perf_counter()
    curve = sim.lru_curve(trace)
    t1 = time.perf_counter()
    print(json.dumps({"requests": trace.requests, "references": trace.references,
                      "unique_chunks": curve.unique_chunks, "seconds": t1 - t0,
                      "rss_before_mib": base,
                      "rss_peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "trace_array_mib": (trace.chunk_ids.nbytes + trace.offsets.nbytes
                                          + trace.seq_len.nbytes + trace.chunk_size.nbytes) / 2**20,
                      "infinite_hit_rate": curve.infinite_hit_rate}))
""")


def big_run(n: int) -> dict:
    """Build the trace in one process (saved as .npz), run the curve in a fresh one: its
    peak RSS is the pass's, not the building's."""
    with tempfile.TemporaryDirectory() as tmp:
        npz = str(Path(tmp) / "trace.npz")
        subprocess.run([sys.executable, "-c", BUILD, str(MOONCAKE), str(n), npz], check=True)
        res = subprocess.run([sys.executable, "-c", BIG, npz, str(ROOT)],
                             capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def mooncake_curve(reqs: list[dict]) -> None:
    """The real conversation trace alone: ceiling, curve shape, shared vs 8 private caches."""
    def trace(partial: bool) -> sim.Trace:
        keep = [r["hash_ids"] if partial else r["hash_ids"][:r["input_length"] // BLOCK] for r in reqs]
        return sim.make_trace((k, r["input_length"], BLOCK) for k, r in zip(keep, reqs, strict=True))

    tr = trace(False)
    curve = sim.lru_curve(tr)
    with_partial = sim.lru_curve(trace(True)).infinite_hit_rate
    ceiling = curve.infinite_hit_tokens
    print(f"\nMooncake conversation trace ({tr.requests:,} requests, {tr.references:,} full 512-token "
          f"blocks, {curve.unique_chunks:,} distinct): infinite-capacity hit rate {curve.infinite_hit_rate:.2%} "
          f"(LMCache's rule: full blocks only; {with_partial:.2%} if the partial last block's id counts "
          f"as 512 tokens)")
    print("capacity needed for a share of that ceiling (blocks, tokens, GiB at 320 KiB/token):")
    for share in (0.25, 0.5, 0.75, 0.9, 0.99, 1.0):
        k = int(np.searchsorted(curve.cum_hit_tokens, share * ceiling, side="left"))
        blocks = int(curve.depths[k - 1]) + 1 if k > 0 else 1
        print(f"  {share:>5.0%} of the ceiling ({share * curve.infinite_hit_rate:6.2%}): {blocks:>8,} blocks "
              f"= {blocks * BLOCK:>11,} tokens = {blocks * BYTES_PER_CHUNK / 2**30:>9,.0f} GiB")
    for blocks in (1_000, 3_000, 10_000, 30_000, 100_000):
        print(f"  {blocks:>8,} blocks ({blocks * BYTES_PER_CHUNK / 2**30:>7,.0f} GiB): "
              f"{curve.hit_rate(blocks):.2%}")
    for cap in (8_000, 80_000):
        row = [f"shared {curve.hit_rate(cap):.2%}"]
        for policy in pools.ROUTINGS:
            row.append(f"{policy} {pools.topology(tr, 8, policy, shared=curve).private_hit_rate(cap):.2%}")
        print(f"  {cap:,} blocks as one pool vs 8 x {cap // 8:,}: " + ", ".join(row))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=17, help="copies of the Mooncake trace (17: ~205k requests)")
    ap.add_argument("--points", type=int, default=30)
    ap.add_argument("--big", type=int, default=1_000_000, help="requests of the memory run (0: skip)")
    args = ap.parse_args()

    reqs = load_mooncake()
    mooncake_curve(reqs)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lookup_hashes_mooncake.jsonl"
        n = write_lmcache_jsonl(reqs, args.copies, path)
        size = path.stat().st_size
        print(f"trace: {n:,} requests ({args.copies} x the Mooncake conversation trace, fresh ids per "
              f"copy), {size / 2**20:,.0f} MiB of LMCache lookup-hash JSONL")

        lm = lmcache_sweep(path, args.points)
        caps = [p["capacity_bytes"] for p in lm["points"]]
        print(f"LMCache sweep ({len(caps)} capacities): load {lm['load_s']:.1f} s + simulate "
              f"{lm['simulate_s']:.1f} s = {lm['load_s'] + lm['simulate_s']:.1f} s "
              f"(process wall {lm['wall_s']:.1f} s)")

        t0 = time.perf_counter()
        parsed = parse_file(path, "lmcache")
        keys: dict[str, int] = {}
        ids = np.fromiter((keys.setdefault(h, len(keys)) for h in parsed.hex_keys), dtype=np.int64,
                          count=len(parsed.hex_keys))
        trace = sim.Trace(ids, np.frombuffer(parsed.offsets, dtype=np.int64).copy(),
                         np.frombuffer(parsed.seq_len, dtype=np.int64).copy(),
                         np.frombuffer(parsed.chunk_size, dtype=np.int64).copy())
        t1 = time.perf_counter()
        curve = sim.lru_curve(trace)
        ours = [int(curve.hit_tokens(sim.capacity_chunks(c, parsed.bytes_per_chunk))) for c in caps]
        t2 = time.perf_counter()
        print(f"kvplan whole curve: parse+validate {t1 - t0:.1f} s + curve {t2 - t1:.2f} s = {t2 - t0:.1f} s "
              f"({curve.references:,} chunk references, {curve.unique_chunks:,} distinct)")

    theirs = [p["hit_tokens"] for p in lm["points"]]
    same = ours == theirs and all(p["total_tokens"] == curve.total_tokens for p in lm["points"])
    print(f"\n{'capacity (GiB)':>16} {'chunks':>10} {'LMCache':>9} {'kvplan':>9}")
    for p, o in zip(lm["points"], ours, strict=True):
        print(f"{p['capacity_bytes'] / 2**30:>16.3f} {p['capacity_chunks']:>10,} "
              f"{p['hit_tokens'] / p['total_tokens']:>9.4%} {o / curve.total_tokens:>9.4%}")
    print(f"\nidentical hit tokens at all {len(caps)} capacities: {same}")
    print(f"time ratio, simulation only (LMCache simulate x{len(caps)} / kvplan curve): "
          f"{lm['simulate_s'] / (t2 - t1):.0f}x")
    print(f"time ratio, end to end from the JSONL file (load + simulate): "
          f"{(lm['load_s'] + lm['simulate_s']) / (t2 - t0):.1f}x")

    if args.big:
        b = big_run(args.big)
        print(f"\nmemory, {b['requests']:,} requests (synthetic from the Mooncake trace's shape: "
              f"{b['references']:,} chunk references, {b['unique_chunks']:,} distinct): curve in "
              f"{b['seconds']:.1f} s; peak RSS {b['rss_peak_mib']:,.0f} MiB; before the pass "
              f"{b['rss_before_mib']:,.0f} MiB (interpreter + the trace, {b['trace_array_mib']:,.0f} MiB "
              f"of it in numpy): the pass adds {b['rss_peak_mib'] - b['rss_before_mib']:,.0f} MiB = "
              f"{(b['rss_peak_mib'] - b['rss_before_mib']) * 2**20 / b['references']:.0f} bytes per chunk "
              f"reference; infinite-capacity hit rate "
              f"{b['infinite_hit_rate']:.2%}")
    return 0 if same else 1


if __name__ == "__main__":
    from results import record

    raise SystemExit(record("whatif", main))
