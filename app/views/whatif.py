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
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...models.cache import sim, value
from ...models.cache.replay import Replay, ReplayRequest, replay
from ...models.cache.sim import GB
from ...models.cache.value import CapacityValue
from ...models.core.errors import KvplanError
from ...models.core.vocabulary import NoteKind, Topology
from ...models.inputs.pricebook import PriceBook
from ...sql.db import Database, Snapshot
from ..answers import Answer
from ..data.history import History
from ..data.store import DeploymentSettings
from ..data.whatif import WhatIfInputs, WhatIfQuery, month_trace_of, whatif_inputs
from .whatif_topology import TopologyWhatIf, topology_whatif

DOLLARS_LEFT_OUT = NoteKind.DOLLARS_LEFT_OUT
"""How the note that says why the what-if has no dollars begins (``WhatIf.dollars_left_out``)."""
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
        return {"capacity_chunks": self.capacity_chunks, "capacity_gb": self.capacity_gb, Topology.SHARED: self.shared,
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
    def dollars_left_out(self) -> str | None:
        """Why the dollars are missing (the note that says so), or None."""
        return next((n for n in self.notes if n.startswith(DOLLARS_LEFT_OUT)), None)

    @property
    def other_notes(self) -> tuple[str, ...]:
        """The notes but the one about the dollars."""
        return tuple(n for n in self.notes if not n.startswith(DOLLARS_LEFT_OUT))

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


def whatif(source: Database | Snapshot, deployment: str, query: WhatIfQuery = WhatIfQuery(), *,
           cfg: DeploymentSettings = DeploymentSettings(), history: History | None = None) -> WhatIf:
    """The what-if for one trace (module doc), read through ``source`` (a snapshot: one
    connection, one view of the data) by ``app.data.whatif.whatif_inputs``, then computed by
    ``whatif_of``. ``history``: the deployment's history the command already read (``kvplan plan
    --topology``); else it is read, once, for the trace's span."""
    check_query(query)
    return whatif_of(deployment, query, whatif_inputs(source, deployment, query, cfg=cfg, history=history))


def check_query(q: WhatIfQuery) -> None:
    """``check_options`` of a query."""
    check_options(ranks=q.ranks, points=q.points, seed=q.seed, bytes_per_chunk=q.bytes_per_chunk,
                  capacity_gb=q.capacity_gb, configured_gb=q.configured_gb, l2_gb=q.l2_gb,
                  seconds_per_cached_token=q.seconds_per_cached_token, tokens_per_month=q.tokens_per_month)


def whatif_of(deployment: str, q: WhatIfQuery, inp: WhatIfInputs) -> WhatIf:
    """The what-if of ``q`` from what it read (``WhatIfInputs``): the replay
    (``kvplan.models.cache.replay``, pure) under the priced layer here (GB, GPU-hours, dollars, the
    TTFT what-if). Reads nothing."""
    check_query(q)
    tr, info, history, t0, t1 = inp.trace, inp.info, inp.history, inp.t0, inp.t1
    notes: list[str] = list(inp.notes)
    pb = inp.prices.pricebook
    bpc = q.bytes_per_chunk or info.bytes_per_chunk
    if not bpc:
        notes.append("bytes per chunk unknown (no shapes/dtypes in the trace): capacities in "
                     "GB need --bytes-per-chunk; shown in tokens only")
    chunk_tokens = int(np.median(tr.chunk_size)) if tr.requests else 0

    def gb(chunks) -> float | None:
        return float(chunks) * bpc / GB if bpc else None

    configured_gb = q.configured_gb
    if configured_gb is None and pb.cache_tier_gb_cpu > 0:
        configured_gb = pb.cache_tier_gb_cpu
        notes.append(f"configured size: the price book's cache_tier_gb_cpu ({configured_gb:g} GB)")
    configured_chunks = sim.capacity_chunks(configured_gb * GB, bpc) if configured_gb is not None and bpc else None
    l2_chunks = sim.capacity_chunks(q.l2_gb * GB, bpc) if q.l2_gb is not None and bpc else None
    if q.l2_gb is not None and (configured_chunks is None or l2_chunks is None):
        notes.append("L1/L2 split needs the configured (L1) size and bytes per chunk")
    rp = replay(tr, ReplayRequest(
        points=q.points, ranks=q.ranks, routings=q.routings, seed=q.seed, configured_chunks=configured_chunks,
        compared_chunks=sim.capacity_chunks(q.capacity_gb * GB, bpc) if q.capacity_gb is not None and bpc else None,
        l2_chunks=l2_chunks))
    curve, caps, rates = rp.curve, rp.capacities, rp.hit_rates
    sat = curve.saturation_chunks
    configured: Configured | None = None
    if configured_chunks is not None and configured_gb is not None:
        c = configured_chunks
        configured = Configured(configured_gb, c, c * chunk_tokens, float(curve.hit_rate(c)))
    pts = tuple(CapacityPoint(int(c), int(c) * chunk_tokens, gb(c), float(h)) for c, h in zip(caps, rates, strict=True))
    tiers = (TierSplit(**rp.tiers, l1_gb=configured_gb, l2_gb=q.l2_gb)
             if rp.tiers is not None and configured_gb is not None and q.l2_gb is not None else None)
    svp = _shared_vs_private(rp, ranks=q.ranks, seed=q.seed, gb=gb, chunk_tokens=chunk_tokens)
    spt = q.seconds_per_cached_token if q.seconds_per_cached_token is not None else inp.seconds_per_token
    spt_source = ("option" if q.seconds_per_cached_token is not None else
                  "kvplan.models.prefill.savings over the trace's time span" if spt is not None else None)
    dollars, why = (_dollars(curve, caps, pb, bpc, t0, t1, spt, spt_source, q.tokens_per_month) if q.dollars
                    else (None, "not asked for (the plan prices itself)"))
    best_gb = dollars.best.capacity_gb if dollars else None
    if why is not None:
        notes.append(f"{DOLLARS_LEFT_OUT}{why}")

    topo = None
    if q.latency:
        topo_notes: list[str] = []
        topo = topology_whatif(tr, info.instances, reads=inp.topology, bpc=bpc, history=history,
                               slo_s=inp.prices.planning.ttft_p99_slo_seconds,
                               configured_gb=configured.capacity_gb if configured else configured_gb,
                               routings=q.routings, seed=q.seed, l2_gb=q.l2_gb, gpus_per_engine=inp.cfg.gpus_per_engine,
                               t_from=q.t_from, t_to=q.t_to, lookup_times=info.lookup_times,
                               notes=topo_notes)
        notes += topo_notes
    summary = TraceSummary(
        name=info.name, format=info.format, model_name=q.model_name, requests=curve.requests,
        chunk_references=curve.references, unique_chunks=curve.unique_chunks, total_tokens=curve.total_tokens,
        full_chunk_tokens=int((tr.chunk_size * np.diff(tr.offsets)).sum()), chunk_tokens=chunk_tokens,
        bytes_per_chunk=bpc, bytes_source="option" if q.bytes_per_chunk else info.bytes_source,
        first_ts=t0, last_ts=t1, seconds=t1 - t0, instances=tuple(info.instances),
        window=(q.t_from.isoformat(), q.t_to.isoformat()) if q.t_from and q.t_to else None)
    return WhatIf(deployment=deployment, trace=summary, points=pts, infinite_hit_rate=curve.infinite_hit_rate,
                  saturation=Saturation(sat, sat * chunk_tokens, gb(sat)), configured=configured,
                  shared_vs_private=svp, tiers=tiers, dollars=dollars, best_capacity_gb=best_gb,
                  notes=tuple(notes), topology=topo)


def month_whatif(source: Database | Snapshot, deployment: str, month: str, query: WhatIfQuery = WhatIfQuery(), *,
                 cfg: DeploymentSettings = DeploymentSettings(), history: History | None = None) -> WhatIf:
    """The what-if of one UTC month ('YYYY-MM'), the call the page's "month" makes (the report
    computes the same from its month's reads, ``app.data.month``): the newest trace with a
    request in the month (a trace whose times are not unix times, Mooncake's, is replayed whole,
    with a note), its requests in the month, the deployment measured over the month. ``query``'s
    other options apply; ``TraceError`` when no trace has a request in the month."""
    q = WhatIfQuery.month(month)
    return whatif(source, deployment, replace(query, trace=month_trace_of(source, deployment, month), t_from=q.t_from,
                                              t_to=q.t_to), cfg=cfg, history=history)


def _shared_vs_private(rp: Replay, *, ranks: int, seed: int, gb, chunk_tokens: int) -> SharedVsPrivate:
    """One shared pool against ``ranks`` private caches, at one total capacity and along the curve."""
    curve, total_chunks = rp.curve, rp.compared_chunks
    return SharedVsPrivate(
        ranks=ranks, capacity_chunks=int(total_chunks), capacity_gb=gb(total_chunks),
        capacity_tokens=int(total_chunks) * chunk_tokens, per_rank_gb=gb(total_chunks // ranks), seed=seed,
        shared_hit_rate=float(curve.hit_rate(total_chunks)), shared_infinite_hit_rate=curve.infinite_hit_rate,
        private=tuple(PrivateCaches(r, t.private_hit_rate(total_chunks), t.private_infinite_hit_rate)
                      for r, t in rp.topologies.items()),
        points=tuple(TopologyPoint(int(c), gb(c), float(h), {r: t.private_hit_rate(int(c))
                                                              for r, t in rp.topologies.items()})
                     for c, h in zip(rp.capacities, rp.hit_rates, strict=True) if c >= ranks))


def _dollars(curve, caps, pb: PriceBook, bpc, t0: float, t1: float, spt: float | None, spt_source: str | None,
             tpm: float | None) -> tuple[Dollars | None, str | None]:
    """Each capacity priced (saved prefill GPU time minus cache memory), the best one and the
    break-even; or (None, why not)."""
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
