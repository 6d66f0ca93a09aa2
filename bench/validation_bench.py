"""The savings model against a measured A/B on the real local stack, scenario by scenario:
predicted vs measured saved engine time, the error, the stated tolerance, and the repeat-to-repeat
noise (kvplan.deploy.local.recorders.ab: interleaved segments, engine time = wall time of each side's segments
with the servers at real-time priority; the worker processes' CPU seconds beside it). A scenario
that misses runs once more with new prompts (row ``Nb``); CI fails on a miss that repeats. CPU
stack, tiny model: CPU-scale seconds.

    .venv/bin/python bench/validation_bench.py [--run-dir DIR] [--repeat 3] [--json FILE]

Without --run-dir every repeat starts a fresh stack (empty caches, as CI runs the test) and stops
it; --run-dir reuses a running stack for every repeat (`python -m kvplan.deploy.local.stack up --run-dir
DIR --vllm 1 --plain 1 --nocache 1 --no-prometheus`: later repeats then run with full KV caches
and a full LMCache L1). On a shared machine run it under the stack lock:
`flock /tmp/kvplan-stack.lock .venv/bin/python ...`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from kvplan.deploy.local import stack as stk
from kvplan.deploy.local.recorders.ab import MEASURED_ON, validate_on_stack
from kvplan.sql.db import Database

ROOT = Path(__file__).resolve().parents[1]
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="append every validation as a JSON line to this file")
    args = ap.parse_args()
    own = args.run_dir is None
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="kvplan-validation-"))
    st = None if own else stk.Stack.load(run_dir)
    rows: dict[str, list] = {}
    sink = open(args.json, "a") if args.json else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            db = Database(Path(tmp) / "ab.duckdb")
            db.migrate()
            print(f"measured on: {MEASURED_ON}")
            print(f"{'scenario':<14} {'rep':>3} {'predicted s':>12} {'measured s':>11} {'off prefill s':>14} "
                  f"{'error':>8} {'rule':<28} {'ok':<5} {'CPU saved s':>12}")
            for rep in range(args.repeat):
                seed = int(time.time() * 1000) % 10**9
                if own:
                    st = stk.up(run_dir / f"stack-{rep}", n_vllm=1, n_vllm_plain=1, n_vllm_nocache=1,
                                prometheus=False)
                try:
                    vs = validate_on_stack(db, off_server=st.server("vllm-nocache-0"), on_server=st.server("vllm-0"),
                                           lmcache_server=st.lmcache(), replicas=[st.server("vllm-plain-0")],
                                           model_name=st.model_name, seed=seed, repeat=rep)
                finally:
                    if own:
                        stk.down(run_dir / f"stack-{rep}")
                for first in vs:
                    rows.setdefault(first.scenario, []).append(first)
                    for v, label in ((first, f"{rep}"), (first.second_run, f"{rep}b")):
                        if v is None:
                            continue
                        t = v.tolerance
                        print(f"{v.scenario:<14} {label:>3} {v.predicted_saved_s:>+12.3f} {v.measured_saved_s:>+11.3f} "
                              f"{v.off_prefill_s:>14.3f} {t.relative:>8.1%} {t.rule:<28} {t.ok!s:<5} "
                              f"{v.cross_check['worker_cpu_saved_s']:>+12.3f}", flush=True)
                    if sink:
                        sink.write(json.dumps({**first.to_dict(), "rep": rep, "seed": seed}, default=str) + "\n")
                        sink.flush()
            print("\nper scenario over the repeats (noise = spread of the measured saving, "
                  "share of cache-off prefill):")
            for name, vs in rows.items():
                meas = [v.measured_saved_s / v.off_prefill_s for v in vs]
                err = [v.tolerance.relative for v in vs]
                noise = statistics.pstdev(meas) if len(meas) > 1 else float("nan")
                print(f"  {name:<14} measured/off {statistics.fmean(meas):+.1%} (sd {noise:.1%}), "
                      f"errors {', '.join(f'{e:.1%}' for e in err)}, "
                      f"within tolerance {sum(v.tolerance.ok for v in vs)}/{len(vs)} first runs, "
                      f"held {sum(v.held for v in vs)}/{len(vs)} (a miss counts when row Nb misses too)")
    finally:
        if sink:
            sink.close()
    return 0


if __name__ == "__main__":
    from results import record

    raise SystemExit(record("validation", main))
