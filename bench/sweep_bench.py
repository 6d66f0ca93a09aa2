"""Load sweep on the real local stack: throughput, TTFT p50/p99 and TPOT p99 per offered load
with KV reuse off (``vllm-nocache-0``) and on (``vllm-0``: vLLM prefix cache + LMCache), both
goodputs at the derived SLOs, and the check run at a load between them
(``kvplan.deploy.local.recorders.sweep_check``). CPU stack, tiny random model: CPU-scale figures, not GPU ones.

    .venv/bin/python bench/sweep_bench.py [--run-dir DIR] [--repeat 1] [--json FILE]

Without --run-dir it starts a stack (LMCache, ``vllm-0``, ``vllm-nocache-0``, no Prometheus) and
stops it after; --run-dir reuses a running one (`python -m kvplan.deploy.local.stack up --run-dir DIR
--vllm 1 --nocache 1 --no-prometheus`). On a shared machine run it under the stack lock:
`flock /tmp/kvplan-stack.lock .venv/bin/python bench/sweep_bench.py`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from kvplan.deploy.local import stack as stk
from kvplan.deploy.local.recorders.sweep_check import table, validate_sweep_on_stack
from kvplan.sql.db import Database

ROOT = Path(__file__).resolve().parents[1]
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", help="append every repeat's figures as a JSON line to this file")
    args = ap.parse_args()
    own = args.run_dir is None
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="kvplan-sweep-"))
    st = stk.up(run_dir, n_vllm=1, n_vllm_nocache=1, prometheus=False) if own else stk.Stack.load(run_dir)
    ok = True
    try:
        with tempfile.TemporaryDirectory() as tmp:
            db = Database(Path(tmp) / "sweep.duckdb")
            db.migrate()
            for rep in range(args.repeat):
                seed = int(time.time() * 1000) % 10**9
                t0 = time.monotonic()
                v = validate_sweep_on_stack(db, off_server=st.server("vllm-nocache-0"), on_server=st.server("vllm-0"),
                                            lmcache_server=st.lmcache(), model_name=st.model_name, seed=seed)
                print(f"\n== repeat {rep} (seed {seed}, {time.monotonic() - t0:.0f} s)\n{table(v)}", flush=True)
                ok &= v.separated and v.off_misses and v.on_meets
                if args.json:
                    g = v.goodput
                    with open(args.json, "a") as f:
                        f.write(json.dumps({
                            "seed": seed, "ttft_slo_s": v.ttft_slo_s, "tpot_slo_s": v.tpot_slo_s,
                            "off": [p.__dict__ for p in v.off.points], "on": [p.__dict__ for p in v.on.points],
                            "goodput_off_rps": g.goodput.without_reuse_rps, "goodput_on_rps": g.goodput.with_reuse_rps,
                            "limited_by": [g.off.limited_by, g.on.limited_by], "check_rps": v.check_rps,
                            "check_off": v.check_off.__dict__, "check_on": v.check_on.__dict__,
                            "off_misses": v.off_misses, "on_meets": v.on_meets}) + "\n")
    finally:
        if own:
            stk.down(run_dir)
    return 0 if ok else 1


if __name__ == "__main__":
    from results import record

    raise SystemExit(record("sweep", main))
