"""The article's question at GPU scale, on paper: 10 private caches against one shared pool on the
Mooncake FAST'25 conversation trace (12,031 requests of one hour of Kimi traffic, 512-token
blocks; shared/data/mooncake/README.md), in hit rate, prefill GPU-hours and TTFT.

Nothing here is measured: the trace is real, the costs are a LABELLED PLANNING PRESET.

* Model: a 70B Llama (80 layers, 8 KV heads of 128, bf16 KV: 327,680 bytes per token; a
  512-token block 160 MiB) on tensor-parallel-4 H100 replicas (one engine = 4 GPUs).
* Prefill cost: NVIDIA's published TensorRT-LLM first-token latencies for LLaMA 70B on H100 FP8,
  TP 4, batch 1: 26 ms at 128 input tokens, 109 ms at 2,048 (TensorRT-LLM
  ``docs/source/performance.md``, "Low Latency", data from v0.5; commit
  138f96d45f90b9667426f7c47297d8c06bafac73). Two points give fixed = 20.5 ms and 43.2 us per
  computed token per replica (23,100 tokens/s). Linear: attention grows with the context and the
  trace averages 12,000 input tokens, so real prefills are longer (these TTFTs are a floor).
* Loading hit tokens: the KV bytes over four H100s' host-to-device links (25 GB/s each, the
  H100 preset's figure): 3.3 us per token, off the engine. Decode step 25 ms (assumed); output
  lengths are the trace's.
* Routing of the private caches: round-robin, random (seed 0) and prefix affinity
  (``kvplan.models.cache.pools.route``), each rank one engine; the shared pool on the same 10
  engines, requests round-robin.

Next to the FAST'25 paper's global-vs-local figures (Mooncake: "up to 2.36x the cache hit rate"
and "up to 48 % less prefill computation time" for the global cache against local caches). The
paper's local baseline sends each request to one prefill instance whose own cache it can use;
which dispatch it used is not restated here (the paper was not at hand): the table prints each
routing so the closest can be read off, and models/README.md says which it is.

    .venv/bin/python bench/mooncake_topology.py [--trace PATH] [--ranks 10] [--per-rank-gb 1000 ...]

**At a fleet's size** (``--requests 1000000``): the trace repeated with fresh block ids, each copy
an hour after the last, to that many requests (1 M requests: 23 M block references; synthetic,
the real trace's shape), and each set-up (the shared pool with today's replay, each routing's
private caches) replayed with its TTFTs in a process of its own: wall and CPU seconds and peak RSS
(``ru_maxrss``; the trace alone is printed too), for this tree and for the models/ of
``--old-ref`` (default: where this branch left main; ``--old-ref none`` skips it), side by side.
Their figures must be identical (exit 1 if not).

    .venv/bin/python bench/mooncake_topology.py --requests 1000000 [--per-rank-gb 1000] [--old-ref REF]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from kvplan.models.cache import alternatives as alt
from kvplan.models.cache import latency as lat
from kvplan.models.cache.sim import GB, Trace, capacity_chunks
from kvplan.models.core.vocabulary import Routing

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "data" / "mooncake" / "conversation_trace.jsonl"
BLOCK = 512
KV_BYTES_PER_TOKEN = 2 * 80 * 8 * 128 * 2
"""K and V x 80 layers x 8 KV heads x 128 x 2 bytes (bf16): 327,680."""
GPUS_PER_ENGINE = 4
FIXED_S = 0.026 - 128 * (0.109 - 0.026) / (2048 - 128)
PER_TOKEN_S = (0.109 - 0.026) / (2048 - 128)
LOAD_S_PER_TOKEN = KV_BYTES_PER_TOKEN / (GPUS_PER_ENGINE * 25e9)
DECODE_STEP_S = 0.025
PRESET = lat.LatencyModel(fixed=FIXED_S, per_token=PER_TOKEN_S, load_s_per_hit_token=LOAD_S_PER_TOKEN,
                          decode_step_s=DECODE_STEP_S, max_batch_tokens=8192,
                          source="planning preset: TensorRT-LLM H100 FP8 LLaMA 70B TP4 first-token latency")
PAPER = {"hit_rate_ratio": 2.36, "prefill_time_saved": 0.48}


def load(path: Path) -> tuple[Trace, np.ndarray]:
    """The Mooncake trace as a replay (full 512-token blocks) and each request's output length."""
    ids, offsets, seq, ts, out = [], [0], [], [], []
    with open(path) as fh:
        for line in fh:
            if line.strip():
                r = json.loads(line)
                full = r["input_length"] // BLOCK
                ids.extend(r["hash_ids"][:full])
                offsets.append(len(ids))
                seq.append(r["input_length"])
                ts.append(r["timestamp"] / 1000.0)
                out.append(r.get("output_length", 1))
    n = len(seq)
    tr = Trace(np.asarray(ids, np.int64), np.asarray(offsets, np.int64), np.asarray(seq, np.int64),
               np.full(n, BLOCK, np.int64), ts=np.asarray(ts, float), instance=np.zeros(n, np.int64))
    return tr, np.asarray(out, np.int64)


def row(name: str, tr: Trace, a: alt.Alternative, out: np.ndarray, slo: float, seconds: float) -> dict:
    p = alt.predict(tr, a, PRESET, slo_s=slo, seconds=seconds, output_tokens=out)
    prefill = PRESET.prefill_s(tr.seq_len, a.hits, tr.full_chunk_tokens)
    return {"set-up": name, "hit_rate": p.hit_rate, "prefill_gpu_hours": float(prefill.sum()) * GPUS_PER_ENGINE / 3600,
            "ttft_mean_s": p.summary.ttft_mean_s, "ttft_p50_s": p.summary.ttft_p50_s,
            "ttft_p99_s": p.summary.ttft_p99_s, "within_slo": p.summary.within_slo}


def scaled(path: Path, n: int) -> tuple[Trace, np.ndarray]:
    """The trace repeated to ``n`` requests: fresh block ids per copy, each copy one hour (the
    trace's span, rounded up to whole hours) after the one before."""
    one, out = load(path)
    ts = np.asarray(one.ts)
    copies = -(-n // one.requests)
    shift = max(1.0, np.ceil((ts[-1] - ts[0]) / 3600.0)) * 3600.0
    off = int(one.chunk_ids.max()) + 1 if one.references else 0
    lengths = np.tile(np.diff(one.offsets), copies)[:n]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    keys = np.empty(int(offsets[-1]), np.int64)
    for c in range(copies):  # one copy at a time: no whole-trace temporaries
        lo = c * one.references
        part = one.chunk_ids[:max(0, min(one.references, len(keys) - lo))]
        keys[lo:lo + len(part)] = part + c * off
    tile = np.arange(n) % one.requests
    return (Trace(keys, offsets, one.seq_len[tile], np.full(n, BLOCK, np.int64),
                  ts=ts[tile] + (np.arange(n) // one.requests) * shift, instance=np.zeros(n, np.int64)),
            out[tile])


SET_UP = textwrap.dedent("""
    import json, os, resource, sys, time
    old = sys.argv[1]
    if old:  # the old tree's models/ instead of this tree's editable install
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
        sys.path.insert(0, old)
    import numpy as np
    from kvplan.models.cache import alternatives as alt
    from kvplan.models.cache import latency as lat
    from kvplan.models.cache.sim import Trace
    npz, name, ranks, total, slo, preset = sys.argv[2:8]
    ranks, total, slo, preset = int(ranks), int(total), float(slo), json.loads(preset)
    gpus = preset.pop("gpus_per_engine")
    m = lat.LatencyModel(**preset)
    z = np.load(npz)
    tr = Trace(z["chunk_ids"], z["offsets"], z["seq_len"], z["chunk_size"], ts=z["ts"], instance=z["instance"])
    out = z["out"]
    del z
    def rss_mib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20
    base, load0 = rss_mib(), os.getloadavg()[0]
    seconds = float(tr.ts[-1] - tr.ts[0])
    t0, c0 = time.perf_counter(), time.process_time()
    if name == "shared":
        today = alt.today(tr, instances=1, engines=ranks, capacity_chunks=total)
        a = alt.shared(tr, today, total)
    else:
        a = alt.private(tr, ranks, name, total)
    t1, c1 = time.perf_counter(), time.process_time()
    p = alt.predict(tr, a, m, slo_s=slo, seconds=seconds, output_tokens=out)
    prefill = m.prefill_s(tr.seq_len, p.alternative.hits, tr.full_chunk_tokens)
    t2, c2 = time.perf_counter(), time.process_time()
    print(json.dumps({
        "hits_s": t1 - t0, "ttft_s": t2 - t1, "wall_s": t2 - t0, "cpu_s": c2 - c0,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "trace_mib": base,
        "load": [load0, os.getloadavg()[0]],
        "figures": {"hit_rate": p.hit_rate, "hit_tokens": int(p.alternative.hits.sum()),
                    "prefill_gpu_hours": float(prefill.sum()) * gpus / 3600,
                    "ttft_mean_s": p.summary.ttft_mean_s, "ttft_p50_s": p.summary.ttft_p50_s,
                    "ttft_p99_s": p.summary.ttft_p99_s, "within_slo": p.summary.within_slo}}))
""")


def old_tree(ref: str, into: Path) -> Path | None:
    """This repository's models/ at ``ref`` under ``into/kvplan`` (``git archive``; no worktree)."""
    if ref in ("", "none"):
        return None
    if ref == "merge-base":
        got = subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], capture_output=True, text=True)
        if got.returncode:
            print("--old-ref: no merge base with main here; the old side is skipped", file=sys.stderr)
            return None
        ref = got.stdout.strip()
    (into / "kvplan").mkdir(parents=True)
    arc = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "models"], capture_output=True)
    if arc.returncode:
        raise SystemExit(f"--old-ref {ref!r}: {arc.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(into / "kvplan")], input=arc.stdout, check=True)
    return into


def at_scale(args: argparse.Namespace) -> int:
    """The ``--requests`` run (module doc)."""
    bpc = KV_BYTES_PER_TOKEN * BLOCK
    preset = {k: getattr(PRESET, k) for k in ("fixed", "per_token", "load_s_per_hit_token", "decode_step_s",
                                              "max_batch_tokens", "source")} | {"gpus_per_engine": GPUS_PER_ENGINE}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        tr, out = scaled(args.trace, args.requests)
        build_s = time.perf_counter() - t0
        npz = Path(tmp) / "trace.npz"
        np.savez(npz, chunk_ids=tr.chunk_ids, offsets=tr.offsets, seq_len=tr.seq_len, chunk_size=tr.chunk_size,
                 ts=tr.ts, instance=tr.instance, out=out)
        old = old_tree(args.old_ref, Path(tmp) / "old")
        print(f"{tr.requests:,} requests ({tr.references:,} block references) from the Mooncake conversation "
              f"trace, fresh block ids per copy, copies an hour apart; built in {build_s:.1f} s; "
              f"{args.ranks} engines; old side: {args.old_ref if old else 'skipped'}")
        del tr, out
        same = True
        for per_rank in args.per_rank_gb:
            total = capacity_chunks(per_rank * GB, bpc) * args.ranks
            print(f"\n{per_rank:g} GB per rank ({total // args.ranks:,} blocks each, the pool {total:,})")
            print(f"  {'set-up':<28} {'side':<4} {'wall s':>7} {'hits s':>7} {'TTFT s':>7} {'CPU s':>7} "
                  f"{'peak RSS':>9} {'trace':>7} {'load':>9}  hit rate / TTFT mean / p99")
            for name in ["shared", *[r.value for r in Routing]]:
                runs = {}
                for side, tree in (("new", ""), ("old", str(old) if old else None)):
                    if tree is None:
                        continue
                    res = subprocess.run([sys.executable, "-c", SET_UP, tree, str(npz), name, str(args.ranks),
                                          str(total), str(args.slo_s), json.dumps(preset)],
                                         capture_output=True, text=True, env=os.environ | {"PYTHONHASHSEED": "0"})
                    if res.returncode:
                        raise SystemExit(f"{side} {name}: {res.stderr.strip()[-2000:]}")
                    r = runs[side] = json.loads(res.stdout.strip().splitlines()[-1])
                    f = r["figures"]
                    label = "one shared pool (+ today)" if name == "shared" else f"{args.ranks} private, " + \
                        name.replace("_", " ")
                    print(f"  {label:<28} {side:<4} {r['wall_s']:>7.1f} {r['hits_s']:>7.1f} {r['ttft_s']:>7.1f} "
                          f"{r['cpu_s']:>7.1f} {r['peak_mib']:>5,.0f} MiB {r['trace_mib']:>3,.0f} MiB "
                          f"{r['load'][0]:>4.1f}-{r['load'][1]:<4.1f} {f['hit_rate']:.4%} / "
                          f"{f['ttft_mean_s']:.4f} s / {f['ttft_p99_s']:.3f} s", flush=True)
                if "old" in runs:
                    equal = runs["old"]["figures"] == runs["new"]["figures"]
                    same &= equal
                    print(f"  {'':<28} {'':<4} figures {'identical' if equal else 'DIFFER'}; old / new: wall "
                          f"{runs['old']['wall_s'] / runs['new']['wall_s']:.1f}x, peak RSS "
                          f"{runs['old']['peak_mib'] / runs['new']['peak_mib']:.1f}x")
    print(f"\nfigures identical old / new: {same if old else 'not compared'}")
    return 0 if same else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--ranks", type=int, default=10)
    ap.add_argument("--per-rank-gb", type=float, nargs="+", default=None,
                    help="cache per rank (the shared pool holds ranks x this); 1e6 = unbounded here "
                         "(default 100 1000 1e6; with --requests, 1000)")
    ap.add_argument("--slo-s", type=float, default=2.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--requests", type=int, default=0,
                    help="the run at a fleet's size: this many requests, each set-up in its own process")
    ap.add_argument("--old-ref", default="merge-base",
                    help="with --requests: the git ref whose models/ runs beside this tree (none: skip it)")
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"{args.trace}: not found (shared/data/mooncake/)", file=sys.stderr)
        return 2
    if not 1 <= args.ranks <= 64:
        print("--ranks: 1..64", file=sys.stderr)
        return 2
    if args.requests < 0:
        print("--requests: at least 1 (0: the trace as it is)", file=sys.stderr)
        return 2
    if args.per_rank_gb is None:
        args.per_rank_gb = [1000.0] if args.requests else [100.0, 1000.0, 1e6]
    if args.requests:
        return at_scale(args)
    t0 = time.perf_counter()
    tr, out = load(args.trace)
    seconds = float(tr.ts[-1] - tr.ts[0])
    bpc = KV_BYTES_PER_TOKEN * BLOCK
    print(f"Mooncake conversation trace: {tr.requests:,} requests over {seconds / 60:.0f} min, "
          f"{int(tr.seq_len.sum()):,} prompt tokens; {args.ranks} engines of {GPUS_PER_ENGINE} H100 "
          f"(PLANNING PRESET: {PRESET.source}; prefill {1 / PER_TOKEN_S:,.0f} tok/s + {FIXED_S * 1e3:.1f} ms "
          "per request per replica)")
    results = []
    for per_rank in args.per_rank_gb:
        each = capacity_chunks(per_rank * GB, bpc)
        total = each * args.ranks
        today = alt.today(tr, instances=1, engines=args.ranks, capacity_chunks=total)
        rows = [row("one shared pool", tr, alt.shared(tr, today, total), out, args.slo_s, seconds)]
        rows += [row(f"{args.ranks} private, {r.replace('_', ' ')}", tr, alt.private(tr, args.ranks, r, total), out,
                     args.slo_s, seconds) for r in Routing]
        shared_row = rows[0]
        for r in rows[1:]:
            r["shared_hit_rate_ratio"] = shared_row["hit_rate"] / r["hit_rate"] if r["hit_rate"] else None
            r["prefill_time_saved_by_shared"] = 1 - shared_row["prefill_gpu_hours"] / r["prefill_gpu_hours"]
        label = "unbounded" if per_rank >= 1e5 else f"{per_rank:g} GB per rank ({each:,} blocks)"
        results.append({"per_rank_gb": per_rank, "label": label, "rows": rows})
        print(f"\n{label}: the shared pool holds {args.ranks} x that")
        print(f"  {'set-up':<28} {'hit rate':>8} {'prefill GPU-h':>13} {'TTFT mean':>9} {'p99':>7} "
              f"{'shared/this hit':>15} {'prefill saved':>13}")
        for r in rows:
            ratio = f"{r['shared_hit_rate_ratio']:.2f}x" if r.get("shared_hit_rate_ratio") else ""
            saved = f"{r['prefill_time_saved_by_shared']:.0%}" if "prefill_time_saved_by_shared" in r else ""
            print(f"  {r['set-up']:<28} {r['hit_rate']:>8.1%} {r['prefill_gpu_hours']:>13.2f} "
                  f"{r['ttft_mean_s']:>8.3f}s {r['ttft_p99_s']:>6.2f}s {ratio:>15} {saved:>13}")
    print(f"\nFAST'25 Mooncake paper, global vs local cache: up to {PAPER['hit_rate_ratio']}x the hit rate, up to "
          f"{PAPER['prefill_time_saved']:.0%} less prefill time. ({time.perf_counter() - t0:.0f} s)")
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    from results import record

    raise SystemExit(record("topology", main))
