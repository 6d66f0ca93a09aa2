"""The buy-vs-reuse plan of a window, priced from the deployment's history: the central use
case, shared by the CLI (``kvplan plan``), every page, the what-if's dollars and the report.

* ``window_measurement`` -- the prefill measurement of a loaded window (the history's cost
  model, the fleet by ``kvplan.app.data.store.fleet``: the one GPU-count rule);
* ``plan_window`` -- the plan of a loaded window (``kvplan.models.decision.plan``);
* ``plan_range`` -- ``kvplan plan``: the same for [t_from, t_to], loading the window (and the
  history, unless given).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from ...models.cache.alternatives import TopologyFinding
from ...models.capacity.growth import MIN_TREND_DAYS, measured_growth
from ...models.core.vocabulary import NoteKind
from ...models.decision.plan import PlanResult
from ...models.decision.plan import plan as run_plan
from ...models.decision.verdict import PlanInputs
from ...models.inputs.planning import PlanningInputs
from ...models.inputs.pricebook import PriceBook
from ...models.prefill.measurement import PrefillMeasurement
from ...models.prefill.table import IntervalTable
from ...sql.db import Source
from .history import History, load_history
from .store import DeploymentSettings, Facts, Prices, deployments_with_data
from .sweeps import SweepPair, latest_sweep_pair
from .window import Window, check_model, daily_requests, engines_in_window, load_window, peak_running_per_engine


@dataclass(frozen=True)
class Fleet:
    """How many GPUs serve a deployment, and which setting said so."""

    gpus: int
    gpus_per_engine: int
    origin: str


def fleet(engines_seen: int, *, configured_gpus: int | None = None, gpus_per_engine: int = 1,
          override: int | None = None, config_key: str = "deployments.N.gpus") -> Fleet:
    """The one rule for a deployment's GPU count, used by the CLI, the pages, the report and
    the nightly job: a one-off ``override`` (``kvplan plan --gpus``), else the config's
    ``deployments[].gpus``, else the vLLM engines seen in the window x GPUs per engine."""
    if override is not None:
        return Fleet(override, gpus_per_engine, "given on the command line (--gpus)")
    if configured_gpus is not None:
        return Fleet(configured_gpus, gpus_per_engine, f"config {config_key}")
    return Fleet(max(engines_seen, 1) * gpus_per_engine, gpus_per_engine,
                 f"vLLM engines seen in the window ({engines_seen}) x {gpus_per_engine} GPU(s) per engine")


@dataclass(frozen=True)
class PlannedWindow:
    plan: PlanResult
    prices: Prices
    fleet: Fleet
    facts: Facts
    sweep: SweepPair | None = None
    """The newest load-sweep pair the plan was sized from (None: the queueing fallback)."""


def history_for(source: Source, win: Window, cfg: DeploymentSettings = DeploymentSettings()) -> History:
    """The history a window's plan is priced with: the look-back ending at the window's end."""
    return load_history(source, win.deployment, win.t_to, t_from=win.t_from, model_name=win.model_name, cfg=cfg)


@dataclass(frozen=True)
class PlanReads:
    """What a window's plan reads beyond its window and history (``plan_reads``; the report's
    month loader reads the same through one pass over the data rooms)."""

    engines: int
    """vLLM engines with data in the window."""
    table: IntervalTable
    """The window's prefill intervals (the history's own when it spans the window)."""
    sweep: SweepPair | None
    """The newest load-sweep pair (None: the queueing fallback)."""
    running: float | None
    """The most requests one engine ran at once (None: the gauge is not reported)."""
    daily: list[tuple[float, float]] | None = None
    """(day, requests) of the whole days for the measured growth trend; None: not asked for, or
    no data before the window's end."""


def plan_reads(source: Source, win: Window, history: History, planning: PlanningInputs | None = None) -> PlanReads:
    """``PlanReads`` of a loaded window (``planning``: the planning inputs the plan will use, for
    whether it reads the daily requests of the growth trend)."""
    table = history.table_of(source, win.t_from, win.t_to)
    pl = planning or history.prices.planning
    daily = None
    if pl.growth_source == "measured_trend":
        first = next((d["first_ts"] for d in deployments_with_data(source) if d["deployment"] == win.deployment),
                     None)
        daily = daily_requests(source, win.deployment, first, win.t_to, win.model_name) if first else None
    return PlanReads(engines_in_window(source, win.deployment, win.t_from, win.t_to), table,
                     latest_sweep_pair(source, win.deployment),
                     peak_running_per_engine(source, win.deployment, win.t_from, win.t_to, win.model_name), daily)


def window_measurement(source: Source, win: Window, history: History, *,
                       gpus: int | None = None) -> tuple[PrefillMeasurement, Fleet]:
    """The prefill model's input for a loaded window (the covered span priced with the history's
    cost model, the latest measured A/B) and the fleet by ``kvplan.app.data.store.fleet``: what
    the plan and the what-if's dollars both price."""
    table = history.table_of(source, win.t_from, win.t_to)
    return window_measurement_of(win, history, engines_in_window(source, win.deployment, win.t_from, win.t_to),
                                 table, gpus=gpus)


def window_measurement_of(win: Window, history: History, engines: int, table: IntervalTable, *,
                          gpus: int | None = None) -> tuple[PrefillMeasurement, Fleet]:
    """``window_measurement`` from what it reads (the window's engines and prefill intervals)."""
    cfg, facts = history.cfg, history.facts
    fl = fleet(engines, configured_gpus=cfg.configured_gpus, gpus_per_engine=facts.facts.gpus_per_engine,
               override=gpus, config_key=cfg.config_key)
    m = history.measurement_on(table, win.t_from, win.t_to, stats=win.stats, num_gpus=max(fl.gpus, 1))
    return m, fl


def plan_window(source: Source, win: Window, history: History, *, pricebook: PriceBook | None = None,
                planning: PlanningInputs | None = None, gpus: int | None = None,
                topology: TopologyFinding | None = None) -> PlannedWindow:
    """The buy-vs-reuse plan of a loaded window: the history's prices (saved, config or
    defaults) unless given, the fleet by ``kvplan.app.data.store.fleet``. CLI, pages and report
    all call this (the report through ``plan_of`` on its month's reads)."""
    return plan_of(win, history, plan_reads(source, win, history, planning), pricebook=pricebook,
                   planning=planning, gpus=gpus, topology=topology)


def plan_of(win: Window, history: History, reads: PlanReads, *, pricebook: PriceBook | None = None,
            planning: PlanningInputs | None = None, gpus: int | None = None,
            topology: TopologyFinding | None = None) -> PlannedWindow:
    """``plan_window`` from what it reads: no read here."""
    prices, facts = history.prices, history.facts
    pb, pl = pricebook or prices.pricebook, planning or prices.planning
    pl, growth = _growth(pl, reads.daily)
    m, fl = window_measurement_of(win, history, reads.engines, reads.table, gpus=gpus)
    extra = (f"price book: {prices.origin if pricebook is None else 'given'}", f"window {win.source_note}",
             f"GPUs: {fl.gpus}, {fl.origin}", f"deployment facts: {facts.origin}", f"growth: {growth}",
             *(NoteKind.NOTE.of(n) for n in win.stats.notes))
    pair = reads.sweep
    goodput = pair.goodput(pl.ttft_p99_slo_seconds, pl.tpot_p99_slo_seconds).goodput if pair is not None else None
    peak = m.window.peak_hour_requests_per_s if m.window is not None else None
    result = run_plan(PlanInputs(measurement=m, pricebook=pb, planning=pl, facts=facts.facts,
                                 goodput=goodput, peak_hour_requests_per_s=peak,
                                 concurrency_per_replica=reads.running, topology=topology),
                      label=f"{win.deployment} {win.t_from:%Y-%m-%d %H:%M}..{win.t_to:%Y-%m-%d %H:%M} UTC",
                      extra_assumptions=extra)
    return PlannedWindow(result, prices, fl, facts, pair)


def _growth(pl: PlanningInputs, daily: list[tuple[float, float]] | None) -> tuple[PlanningInputs, str]:
    """The planning inputs with the measured growth trend when ``growth_source`` asks for it
    (and the data holds one), and a note saying which growth the plan used."""
    typed = f"{pl.growth_rate_per_month:+.1%}/month from the planning inputs"
    if pl.growth_source != "measured_trend":
        return pl, typed
    trend = measured_growth(daily) if daily is not None else None
    if trend is None:
        return pl, f"{typed} (no measured trend: it needs {MIN_TREND_DAYS} whole days with requests)"
    return replace(pl, growth_rate_per_month=trend.rate_per_month), trend.note


def plan_range(source: Source, deployment: str, t_from: datetime, t_to: datetime, model_name: str | None = None, *,
               cfg: DeploymentSettings = DeploymentSettings(), gpus: int | None = None,
               topology: TopologyFinding | None = None, history: History | None = None) -> PlanResult:
    """``kvplan plan``: the plan of [t_from, t_to] read as the pages read it (with the TTFT
    what-if's ``topology`` finding when given), priced with ``history`` (loaded for the window
    when not given)."""
    check_model(source, deployment, model_name)
    win = load_window(source, deployment, t_from, t_to, model_name)
    return plan_window(source, win, history or history_for(source, win, cfg), gpus=gpus, topology=topology).plan
