"""A plan at the fleet sizes the CLI and the config allow (1 .. 100,000 GPUs), and the queueing
primitive behind its time, before and after the vectorised Erlang B:

  recursion   Erlang B by its recursion over every server (what ``erlang_c`` did before),
              inside the same bisection ``max_arrival_rate`` runs (80 steps)
  kvplan      ``kvplan.models.capacity.queueing.max_arrival_rate`` (exact recursion up to 400
              servers, the Poisson form over the terms near the load above)

Both give the same rate (printed); the ratio is printed side by side. Then whole plans
(``kvplan.models.decision.plan.plan``: savings, capacity, horizon, benefit, verdict, 200 flip
draws, tornado) on the one-day test window of tests/test_model_decision.py at each fleet size.

    .venv/bin/python bench/plan_bench.py [--sizes 8,1000,10000,100000]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def old_max_rate(servers: int, s: float, slo: float, q: float) -> float:
    def ttft(lam: float) -> float:
        a = lam * s
        if lam <= 0:
            return s
        if a >= servers:
            return math.inf
        b = 1.0
        for k in range(1, servers + 1):
            b = a * b / (k + a * b)
        c = servers * b / (servers - a * (1.0 - b))
        return s if c <= 1.0 - q else s + math.log(c / (1.0 - q)) / (servers / s - lam)

    lo, hi = 0.0, servers / s
    for _ in range(80):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if ttft(mid) <= slo else (lo, mid)
    return lo


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="8,1000,10000,100000")
    sizes = [int(x) for x in ap.parse_args().sizes.split(",")]

    from kvplan.models.capacity.queueing import max_arrival_rate
    from kvplan.models.decision.plan import plan
    from kvplan.models.decision.verdict import PlanInputs
    from kvplan.models.inputs.planning import PlanningInputs
    from kvplan.models.inputs.pricebook import PriceBook
    from kvplan.models.prefill.measurement import PrefillMeasurement

    def window(num_gpus: int) -> PrefillMeasurement:  # a day at 80 % hits, 10,000-token prompts
        total = 86_400 * 10 * 10_000
        return PrefillMeasurement(window_seconds=86_400, requests=86_400 * 10, prompt_tokens=total,
                                  cached_prompt_tokens=total * 0.8, num_gpus=num_gpus, model_params=1e9,
                                  gpu_peak_flops=1e14, assumed_prefill_mfu=0.5)

    print(f"{'servers':>8} {'recursion s':>12} {'kvplan s':>10} {'ratio':>8}  max rate (both)")
    for c in sizes:
        t0 = time.perf_counter()
        old = old_max_rate(c, 0.4, 2.0, 0.99) if c <= 20_000 else None
        t1 = time.perf_counter()
        new = max_arrival_rate(c, 0.4, 2.0, 0.99)
        t2 = time.perf_counter()
        if old is None:  # the old loop at 100,000 servers takes minutes: not run
            print(f"{c:>8} {'(skipped)':>12} {t2 - t1:>10.4f} {'':>8}  {new:.6g}")
            continue
        print(f"{c:>8} {t1 - t0:>12.4f} {t2 - t1:>10.4f} {(t1 - t0) / (t2 - t1):>7.0f}x  {old:.9g} / {new:.9g}")
    print(f"\n{'GPUs':>8} {'plan s':>8}  verdict")
    for n in sizes:
        t0 = time.perf_counter()
        r = plan(PlanInputs(window(num_gpus=n), PriceBook(pricing_mode="cloud", usd_per_gpu_hour=2.5),
                            PlanningInputs(growth_rate_per_month=0.05)))
        print(f"{n:>8} {time.perf_counter() - t0:>8.2f}  {r.decision.kind}")


if __name__ == "__main__":
    from results import record

    raise SystemExit(record("plan", main))
