"""The cache-size and topology what-if, as one frozen ``WhatIf`` (CLI, page and report read its
attributes; ``WhatIf.to_dict`` is the ``kvplan whatif --json`` contract).

Reads a stored trace (``kvplan.collectors.traces.ingest``), runs ``kvplan.models.cache.sim`` once for the shared
curve and once per routing for the private caches, and prices the curve with
``kvplan.models.cache.value``. Inputs a trace does not carry come from options or the database:

* bytes per chunk: the trace's (``shapes``/``dtypes`` or the import option), else
  ``bytes_per_chunk``;
* the configured cache size: ``configured_gb``, else the price book's ``cache_tier_gb_cpu``
  (fleet RAM given to the KV cache), else none;
* seconds of GPU prefill one cached token saves: ``seconds_per_cached_token``, else
  ``kvplan.models.prefill.savings``'s per-token estimate from the deployment's metrics over the trace's time
  span (LMCache logs carry unix times), priced with the deployment's history (the same cost model
  as the TTFT half), else the dollars are left out (``null``, with why);
* requested tokens per month: ``tokens_per_month``, else the trace's own rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import numpy as np

from ...collectors.traces.ingest import TraceInfo, load_trace
from ...collectors.traces.parse import TraceError
from ...models.cache import pools, sim, value
from ...models.cache.sim import GB, Trace
from ...models.cache.value import CapacityValue
from ...models.core.errors import KvplanError
from ...models.core.timeutil import from_epoch_s
from ...models.core.vocabulary import ROUTINGS
from ...models.inputs.pricebook import PriceBook
from ...sql.db import Database, Snapshot, Source
from ..answers import Answer
from ..data.history import History, load_history
from ..data.store import DeploymentSettings, load_pricebook
from ..data.traces import trace_span
from .whatif_topology import TopologyWhatIf, topology_span, topology_whatif

DEFAULT_RANKS = 8
DEFAULT_POINTS = 30
MAX_RANKS = 4096
"""Most private caches compared with one shared pool (the replay is linear in ranks x requests;
1,000,000,000 hung)."""
MAX_POINTS = 10_000
MAX_GB = 1e6
"""Largest cache size an option may give, GB (a petabyte)."""
MAX_SECONDS_PER_TOKEN = 1.0
MAX_TOKENS_PER_MONTH = 1e18
MAX_SEED = 2**32 - 1

HIT_RULE = ("LMCache cache-simulator: leading chunks present, then all chunks most recent; LRU; capacity = max(1, "
            "bytes // bytes_per_chunk)")
CASCADE = "exclusive LRU cascade: L2 holds what L1 evicts; a hit in L2 moves back to L1"


@dataclass(frozen=True)
class TraceSummary(Answer):
    name: str
    format: str
    model_name: str | None
    requests: int
    chunk_references: int
    unique_chunks: int
    total_tokens: int
    full_chunk_tokens: int
    """Tokens in whole chunks: LMCache's lookup_requested_tokens counter counts these (no
    partial tail), so hit tokens / full_chunk_tokens compares with its hit-rate metric."""
    chunk_tokens: int
    bytes_per_chunk: int | None
    bytes_source: str | None
    first_ts: float
    last_ts: float
    seconds: float
    instances: tuple[str, ...]
    window: tuple[str, str] | None


@dataclass(frozen=True)
class CapacityPoint(Answer):
    capacity_chunks: int
    capacity_tokens: int
    capacity_gb: float | None
    hit_rate: float


@dataclass(frozen=True)
class Saturation(Answer):
    capacity_chunks: int
    capacity_tokens: int
    capacity_gb: float | None


@dataclass(frozen=True)
class Configured(Answer):
    capacity_gb: float
    capacity_chunks: int
    capacity_tokens: int
    hit_rate: float


@dataclass(frozen=True)
class TierSplit(Answer):
    """L1 (the configured size) over an L2 that takes what L1 evicts (``kvplan.models.cache.sim.tier_split``)."""

    l1_chunks: int
    l2_chunks: int
    l1_hit_tokens: float
    l2_hit_tokens: float
    total_tokens: float
    l1_hit_rate: float
    l2_hit_rate: float
    l1_gb: float
    l2_gb: float
    cascade: str = CASCADE


@dataclass(frozen=True)
class PrivateCaches(Answer):
    routing: str
    hit_rate: float
    infinite_hit_rate: float


@dataclass(frozen=True)
class TopologyPoint(Answer):
    """One total capacity: one shared pool's hit rate and the private caches' per routing."""

    capacity_chunks: int
    capacity_gb: float | None
    shared: float
    private: dict[str, float]
    """Hit rate per routing (``models.core.vocabulary.Routing``)."""

    def to_dict(self) -> dict[str, Any]:  # the routings are keys of the point in the JSON
        return {"capacity_chunks": self.capacity_chunks, "capacity_gb": self.capacity_gb, "shared": self.shared,
                **self.private}


@dataclass(frozen=True)
class SharedVsPrivate(Answer):
    ranks: int
    capacity_chunks: int
    capacity_gb: float | None
    capacity_tokens: int
    per_rank_gb: float | None
    seed: int
    shared_hit_rate: float
    shared_infinite_hit_rate: float
    private: tuple[PrivateCaches, ...]
    points: tuple[TopologyPoint, ...]


@dataclass(frozen=True)
class Dollars(Answer):
    """Each capacity priced: saved prefill GPU time minus cache memory."""

    seconds_per_cached_token: float
    seconds_per_cached_token_source: str
    requested_tokens_per_month: float
    requested_tokens_per_month_source: str
    usd_per_gpu_hour: float
    usd_per_gb_month: float
    best: CapacityValue
    break_even: CapacityValue | None
    """Past this capacity the cache as a whole costs more than it saves."""
    saved_usd_per_month_at_infinite: float
    points: tuple[CapacityValue, ...]


@dataclass(frozen=True)
class WhatIf(Answer):
    """The what-if of one trace (module doc). ``topology``: today's topology and the TTFT half
    (``kvplan.app.views.whatif_topology``); its keys join this one's in the JSON."""

    FLATTEN = ("topology",)

    deployment: str
    trace: TraceSummary
    points: tuple[CapacityPoint, ...]
    infinite_hit_rate: float
    saturation: Saturation
    configured: Configured | None
    shared_vs_private: SharedVsPrivate
    tiers: TierSplit | None
    dollars: Dollars | None
    best_capacity_gb: float | None
    notes: tuple[str, ...]
    hit_rule: str = HIT_RULE
    topology: TopologyWhatIf | None = None

    @property
    def capacity_key(self) -> str:
        """``capacity_gb`` when bytes per chunk are known, else ``capacity_tokens``."""
        return "capacity_gb" if self.trace.bytes_per_chunk else "capacity_tokens"


def check_options(*, ranks: int, points: int, seed: int, bytes_per_chunk: int | None, capacity_gb: float | None,
                  configured_gb: float | None, l2_gb: float | None, seconds_per_cached_token: float | None,
                  tokens_per_month: float | None) -> None:
    """Every option in its range before anything runs, for every caller (the CLI's options declare
    the same bounds; the page and the report call this view directly): ``KvplanError`` naming it
    (a negative size was accepted silently, inf or nan raised a traceback, a bytes per chunk of 0
    was ignored)."""
    from ...collectors.traces.lines import MAX_BYTES_PER_CHUNK

    def bad(option: str, got: object, rule: str) -> None:
        raise KvplanError(f"must be {rule}; got {got!r}", source=option)

    whole: tuple[tuple[str, int | None, int, int], ...] = (
        ("--ranks", ranks, 1, MAX_RANKS), ("--points", points, 1, MAX_POINTS), ("--seed", seed, 0, MAX_SEED),
        ("--bytes-per-chunk", bytes_per_chunk, 1, MAX_BYTES_PER_CHUNK))
    for option, n, low, high in whole:
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not low <= n <= high):
            bad(option, n, f"a whole number from {low:,} to {high:,}")
    sizes: tuple[tuple[str, float | None, float], ...] = (
        ("--capacity-gb", capacity_gb, MAX_GB), ("--configured-gb", configured_gb, MAX_GB), ("--l2-gb", l2_gb, MAX_GB),
        ("--seconds-per-token", seconds_per_cached_token, MAX_SECONDS_PER_TOKEN),
        ("--tokens-per-month", tokens_per_month, MAX_TOKENS_PER_MONTH))
    for option, x, top in sizes:
        if x is None:
            continue
        ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and 0 < x <= top
        if not ok:
            bad(option, x, f"a finite number above 0 and at most {top:g}")


def _unix_span(t0: float, t1: float) -> bool:
    """True when [t0, t1] are unix times (a Mooncake trace starts at 0) spanning a second or more."""
    return t1 - t0 >= 1 and t0 >= 10**8


def seconds_per_token_from_metrics(source: Source, history: History, t0: float, t1: float) -> float | None:
    """``kvplan.models.prefill.savings``'s GPU-seconds per prompt token over [t0, t1] (unix), if measurable,
    from the same measurement the plan prices (``kvplan.app.data.plan.window_measurement``), with the
    history's cost model."""
    from ...models.prefill.savings import estimate_savings
    from ..data.plan import window_measurement
    from ..data.window import load_window

    if not _unix_span(t0, t1):
        return None
    a, b = from_epoch_s(t0), from_epoch_s(t1)
    try:
        m, _ = window_measurement(source, load_window(source, history.deployment, a, b), history)
        return estimate_savings(m).gpu_seconds_per_token
    except (KvplanError, ValueError):  # no metrics for that span: the what-if still runs without dollars
        return None


def whatif(source: Database | Snapshot, deployment: str, trace: str | None = None, *, model_name: str | None = None,
           ranks: int = DEFAULT_RANKS, routings: tuple[str, ...] = ROUTINGS,
           seed: int = 0, points: int = DEFAULT_POINTS, bytes_per_chunk: int | None = None,
           configured_gb: float | None = None, seconds_per_cached_token: float | None = None,
           tokens_per_month: float | None = None, capacity_gb: float | None = None,
           l2_gb: float | None = None, cfg: DeploymentSettings = DeploymentSettings(),
           t_from: datetime | None = None, t_to: datetime | None = None,
           latency: bool = True, history: History | None = None) -> WhatIf:
    """The what-if for one trace (module doc), read through ``source`` (a snapshot: one
    connection, one view of the data). ``capacity_gb`` = total capacity compared shared vs
    private (default: the configured size, else half the saturation size); ``t_from``/``t_to``
    keep the trace's requests in that window (LMCache logs: unix times) and measure the
    deployment over it; ``latency`` adds today's topology and the TTFT what-if
    (``app.views.whatif_topology``). ``history``: the deployment's history the command already
    read (``kvplan plan --topology``, the report); else it is read here, once, for the trace's
    span (its price book, cost model and overheads price both the dollars and the TTFT)."""
    check_options(ranks=ranks, points=points, seed=seed, bytes_per_chunk=bytes_per_chunk, capacity_gb=capacity_gb,
                  configured_gb=configured_gb, l2_gb=l2_gb, seconds_per_cached_token=seconds_per_cached_token,
                  tokens_per_month=tokens_per_month)
    notes: list[str] = []
    tr, info = _load(source, deployment, trace, model_name, t_from, t_to, notes)
    t0, t1 = ((float(tr.ts[0]), float(tr.ts[-1])) if tr.ts is not None and tr.requests
              else trace_span(source, info.trace_id))
    span = topology_span(tr, t_from, t_to)
    if history is None and span is not None and (latency or (seconds_per_cached_token is None
                                                             and _unix_span(t0, t1))):
        history = load_history(source, deployment, span[1], t_from=span[0], cfg=cfg, overheads=latency)
    if history is not None and latency and span is not None:
        history = history.with_overheads(source)
    cfg = history.cfg if history is not None else cfg
    prices = history.prices if history is not None else load_pricebook(source, deployment, cfg.prices)
    pb = prices.pricebook
    bpc = bytes_per_chunk or info.bytes_per_chunk
    if not bpc:
        notes.append("bytes per chunk unknown (no shapes/dtypes in the trace): capacities in "
                     "GB need --bytes-per-chunk; shown in tokens only")
    dist = sim.stack_distances(tr)
    curve = sim.lru_curve(tr, dist)
    chunk_tokens = int(np.median(tr.chunk_size)) if tr.requests else 0

    def gb(chunks) -> float | None:
        return float(chunks) * bpc / GB if bpc else None

    sat = curve.saturation_chunks
    caps = sim.log_capacities(1, sat, points)
    if configured_gb is None and pb.cache_tier_gb_cpu > 0:
        configured_gb = pb.cache_tier_gb_cpu
        notes.append(f"configured size: the price book's cache_tier_gb_cpu ({configured_gb:g} GB)")
    configured: Configured | None = None
    if configured_gb is not None and bpc:
        c = sim.capacity_chunks(configured_gb * GB, bpc)
        caps = np.unique(np.concatenate((caps, [c])))
        configured = Configured(configured_gb, c, c * chunk_tokens, float(curve.hit_rate(c)))
    rates = np.asarray(curve.hit_rate(caps))
    pts = tuple(CapacityPoint(int(c), int(c) * chunk_tokens, gb(c), float(h)) for c, h in zip(caps, rates, strict=True))

    # L1 (the configured size) over an L2 of l2_gb that takes what L1 evicts (kvplan.models.cache.sim).
    tiers = None
    if l2_gb is not None and configured is not None and configured_gb is not None and bpc:
        l2 = sim.capacity_chunks(l2_gb * GB, bpc)
        tiers = TierSplit(**sim.tier_split(tr, dist, configured.capacity_chunks, l2), l1_gb=configured_gb, l2_gb=l2_gb)
    elif l2_gb is not None:
        notes.append("L1/L2 split needs the configured (L1) size and bytes per chunk")

    svp = _shared_vs_private(tr, curve, caps, rates, ranks=ranks, routings=routings, seed=seed,
                             total_chunks=_compared_capacity(capacity_gb, bpc, configured, ranks, sat),
                             gb=gb, chunk_tokens=chunk_tokens)
    dollars, why = _dollars(source, history, curve, caps, pb, bpc, t0, t1, seconds_per_cached_token, tokens_per_month)
    best_gb = dollars.best.capacity_gb if dollars else None
    if why is not None:
        notes.append(f"dollars left out: {why}")

    topo = None
    if latency:
        topo_notes: list[str] = []
        topo = topology_whatif(source, deployment, tr, info.instances, bpc=bpc, history=history,
                               slo_s=prices.planning.ttft_p99_slo_seconds,
                               configured_gb=configured.capacity_gb if configured else configured_gb,
                               routings=routings, seed=seed, l2_gb=l2_gb, gpus_per_engine=cfg.gpus_per_engine,
                               t_from=t_from, t_to=t_to, notes=topo_notes)
        notes += topo_notes
    summary = TraceSummary(
        name=info.name, format=info.format, model_name=model_name, requests=curve.requests,
        chunk_references=curve.references, unique_chunks=curve.unique_chunks, total_tokens=curve.total_tokens,
        full_chunk_tokens=int((tr.chunk_size * np.diff(tr.offsets)).sum()), chunk_tokens=chunk_tokens,
        bytes_per_chunk=bpc, bytes_source="option" if bytes_per_chunk else info.bytes_source,
        first_ts=t0, last_ts=t1, seconds=t1 - t0, instances=tuple(info.instances),
        window=(t_from.isoformat(), t_to.isoformat()) if t_from and t_to else None)
    return WhatIf(deployment=deployment, trace=summary, points=pts, infinite_hit_rate=curve.infinite_hit_rate,
                  saturation=Saturation(sat, sat * chunk_tokens, gb(sat)), configured=configured,
                  shared_vs_private=svp, tiers=tiers, dollars=dollars, best_capacity_gb=best_gb,
                  notes=tuple(notes), topology=topo)


def _load(source: Database | Snapshot, deployment: str, trace: str | None, model_name: str | None,
          t_from: datetime | None, t_to: datetime | None, notes: list[str]) -> tuple[Trace, TraceInfo]:
    """The trace, in the window when one is given and the trace's times are unix times (read
    through ``source.read()``: a snapshot's own connection)."""
    db = cast(Database, source)  # load_trace reads through read(), which a Snapshot has too
    if t_from is None or t_to is None:
        return load_trace(db, deployment, trace, model_name=model_name)
    tr, info = load_trace(db, deployment, trace, model_name=model_name, t_from=t_from.timestamp(),
                          t_to=t_to.timestamp())
    if info.format == "mooncake":
        notes.append("a Mooncake trace's times start at 0: the window does not apply to it")
        return load_trace(db, deployment, trace, model_name=model_name)
    if not tr.requests:
        raise TraceError(f"trace {info.name!r} of {deployment!r} has no request in "
                         f"{t_from.isoformat()} .. {t_to.isoformat()}", source="--from/--to")
    return tr, info


def _compared_capacity(capacity_gb, bpc, configured, ranks: int, sat: int) -> int:
    """Total chunks compared shared vs private: the asked size, else the configured one,
    else half the saturation size (at least one chunk per rank)."""
    if capacity_gb is not None and bpc:
        return sim.capacity_chunks(capacity_gb * GB, bpc)
    if configured is not None:
        return configured.capacity_chunks
    return max(ranks, sat // 2)


def _shared_vs_private(tr, curve, caps, rates, *, ranks: int, routings, seed: int, total_chunks: int,
                       gb, chunk_tokens: int) -> SharedVsPrivate:
    """One shared pool against ``ranks`` private caches, at one total capacity and along the curve."""
    topo = {r: pools.topology(tr, ranks, r, seed=seed, shared=curve) for r in routings}
    return SharedVsPrivate(
        ranks=ranks, capacity_chunks=int(total_chunks), capacity_gb=gb(total_chunks),
        capacity_tokens=int(total_chunks) * chunk_tokens, per_rank_gb=gb(total_chunks // ranks), seed=seed,
        shared_hit_rate=float(curve.hit_rate(total_chunks)), shared_infinite_hit_rate=curve.infinite_hit_rate,
        private=tuple(PrivateCaches(r, t.private_hit_rate(total_chunks), t.private_infinite_hit_rate)
                      for r, t in topo.items()),
        points=tuple(TopologyPoint(int(c), gb(c), float(h), {r: t.private_hit_rate(int(c)) for r, t in topo.items()})
                     for c, h in zip(caps, rates, strict=True) if c >= ranks))


def _dollars(source: Source, history: History | None, curve, caps, pb: PriceBook, bpc, t0: float, t1: float,
             spt: float | None, tpm: float | None) -> tuple[Dollars | None, str | None]:
    """Each capacity priced (saved prefill GPU time minus cache memory), the best one and the
    break-even; or (None, why not)."""
    spt_source = "option" if spt is not None else None
    if spt is None and history is not None:
        spt = seconds_per_token_from_metrics(source, history, t0, t1)
        spt_source = "kvplan.models.prefill.savings over the trace's time span" if spt is not None else None
    tpm_source = "option" if tpm is not None else "the trace's own rate"
    if tpm is None and t1 > t0:
        tpm = value.tokens_per_month(curve.total_tokens, t1 - t0)
    if not bpc:
        return None, "bytes per chunk unknown"
    if spt is None or spt_source is None:
        return None, "no GPU-seconds per token: no metrics for the trace's time span; give --seconds-per-token"
    if tpm is None:
        return None, "the trace spans no time: give --tokens-per-month"
    v = value.ValueInputs(bytes_per_chunk=int(bpc), requested_tokens_per_month=tpm,
                          seconds_per_cached_token=spt, usd_per_gpu_hour=pb.effective_usd_per_gpu_hour(),
                          usd_per_gb_month=pb.usd_per_gb_month_cpu_memory)
    opt = value.optimum(curve, v)
    return Dollars(seconds_per_cached_token=spt, seconds_per_cached_token_source=spt_source,
                   requested_tokens_per_month=tpm, requested_tokens_per_month_source=tpm_source,
                   usd_per_gpu_hour=v.usd_per_gpu_hour, usd_per_gb_month=v.usd_per_gb_month, best=opt["best"],
                   break_even=opt["break_even"] or None,
                   saved_usd_per_month_at_infinite=opt["saved_usd_per_month_at_infinite"],
                   points=tuple(value.value_at(curve, v, caps))), None
