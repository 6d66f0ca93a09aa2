"""The topology and TTFT half of the what-if (``kvplan whatif --json`` keys ``today``, ``latency``,
``latency_curve``, ``latency_model``, ``engines_needed``): today's topology from the trace and the
deployment's metrics, checked against what it measured over the same span, and every alternative
in hit rate and TTFT (``kvplan.models.cache.alternatives``, ``kvplan.models.cache.latency``).

Inputs the trace does not carry:

* engines: the deployment's vLLM engines with data in the span (else one per cache instance);
* each instance's cache size: LMCache's own L1 gauges (in-use bytes / in-use share), else the
  configured size split over the instances, else unbounded (said in ``notes``);
* the prefill cost and the overheads: the deployment's history (``app.data.history.History``,
  fitted once per command); without an identified cost model the TTFT half is left out and says
  why;
* the TTFT SLO: the planning inputs' ``ttft_p99_slo_seconds``.

Every set-up's TTFT mean, p50 and p99 is calibrated on today (``kvplan.models.cache.calibration``:
today's measured / predicted per statistic, from the TTFT histogram over the span):
``ttft_mean_s`` is the calibrated value, ``ttft_mean_s_raw`` the replay's, ``ttft_mean_s_interval``
the calibrated value's block-bootstrap interval (the same for p50, p99 and the p99 read through
the histogram's buckets); ``today.ttft_calibration`` holds the ratios. ``holds_slo``, the finding
and the engine search use the calibrated p99; ``goodput_rps`` and ``within_slo`` count the raw
predicted TTFTs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np

from ...models.cache import alternatives as alt
from ...models.cache import calibration as cb
from ...models.cache import latency as lat
from ...models.cache.latency import Overheads
from ...models.cache.sim import GB, Trace, capacity_chunks
from ...models.core.vocabulary import Topology
from ...models.metrics.window import bucket_quantile
from ...models.prefill.fit import CostStatus
from ..answers import Answer
from ..data.history import History
from ..data.traces import SPAN_MARGIN_S, topology_span
from ..data.whatif import TopologyReads

MAX_LATENCY_REQUESTS = 20_000
"""The TTFT pass replays at most this many requests of the window (the first ones in time): the
discrete-event pass is Python: about 20,000 requests a second per alternative, and a what-if runs
about thirty of them (the set-ups, the capacity curve, the engine search)."""
CURVE_POINTS = 6
__all__ = ["SPAN_MARGIN_S", "TopologyWhatIf", "topology_span", "topology_whatif"]
ENGINE_ROUTING_ONE = ("round-robin over the engines in time order (the log does not say which engine served a "
                      "request)")
ENGINE_ROUTING_MANY = "each instance's requests round-robin over its engines"
HIT_RATE_DEFINITION = ("hit tokens / full-chunk tokens looked up (LMCache's lookup counters); with the TTFT pass, a "
                       "request hits only chunks stored before its lookup (hit_rate_predicted_lru: every chunk stored "
                       "at once, as LMCache's simulator)")
SLO_SOURCE = "planning inputs (ttft_p99_slo_seconds)"
ENGINES_RULE = ("fewest engines whose predicted TTFT p99, calibrated on today (x p99_ratio), is within the SLO, the "
                "same requests spread round-robin over them")


@dataclass(frozen=True)
class Today(Answer):
    """Today's topology from the trace, replayed, against what the deployment measured."""

    OMIT_IF_NONE = ("hit_rate_predicted_lru",)

    instances: int
    instance_names: tuple[str, ...]
    engines: int
    requests: int
    """Requests in the trace (replayed)."""
    requests_measured: float | None
    """Requests the TTFT histogram counted over the span."""
    capacity_chunks_per_instance: tuple[int, ...] | None
    capacity_gb_per_instance: tuple[float, ...] | None
    capacity_source: str | None
    hit_rate_predicted: float
    """Replayed hit rate: with the TTFT pass, a request hits only chunks stored before its
    lookup; without it, every chunk stored at once (as LMCache's simulator)."""
    hit_rate_measured: float | None
    ttft_mean_s_measured: float | None
    ttft_p50_s_measured: float | None
    ttft_p99_s_measured: float | None
    ttft_p99_bucket_s_measured: tuple[float, float] | None
    ttft_mean_s_predicted: float | None
    ttft_p50_s_predicted: float | None
    ttft_p99_s_predicted: float | None
    ttft_p99_s_predicted_as_histogram: float | None
    ttft_calibration: cb.Calibration | None
    """Today's measured / predicted per statistic, carried into every set-up (module doc); None
    until the TTFT pass ran."""
    span: tuple[str, str] | None
    engine_routing: str
    hit_rate_definition: str = HIT_RATE_DEFINITION
    hit_rate_predicted_lru: float | None = None
    """The replayed hit rate with every chunk stored at once (set when the TTFT pass ran)."""


@dataclass(frozen=True)
class SetupLatency(Answer):
    """One set-up's predicted hit rate and TTFT (today, one shared pool, private caches, tiered)."""

    ttft_p99_s_as_histogram: float | None
    """The predicted p99 read through the measured histogram's buckets (as the measured p99 is)."""
    topology: str
    """``today``, ``shared``, ``private`` or ``tiered``."""
    routing: str | None
    ranks: int
    capacity_chunks: int
    capacity_gb: float | None
    hit_rate: float
    ttft_mean_s: float | None
    """Calibrated on today: ``ttft_mean_s_raw`` times today's measured / predicted mean."""
    ttft_mean_s_raw: float | None
    """The replay's own prediction."""
    ttft_mean_s_interval: tuple[float, float] | None
    """The calibrated value's block-bootstrap interval (``calibration.LEVEL`` of the draws)."""
    ttft_p50_s: float | None
    ttft_p50_s_raw: float | None
    ttft_p50_s_interval: tuple[float, float] | None
    ttft_p99_s: float | None
    ttft_p99_s_raw: float | None
    ttft_p99_s_interval: tuple[float, float] | None
    ttft_p99_s_as_histogram_raw: float | None
    ttft_p99_s_as_histogram_interval: tuple[float, float] | None
    calibrated: bool
    """Whether today's calibration applied (else the calibrated values are the raw ones)."""
    goodput_rps: float | None
    """Counts the raw predicted TTFTs."""
    within_slo: float | None
    holds_slo: bool
    """The calibrated p99 within the SLO."""

    @property
    def name(self) -> str:
        """``shared``, ``private 2x round_robin``: the CLI's row label."""
        return self.topology + (f" {self.ranks}x {self.routing}" if self.routing else "")


@dataclass(frozen=True)
class LatencyModelInfo(Answer):
    """The cost model and overheads the TTFT pass ran with (the deployment's history)."""

    status: CostStatus
    reason: str
    history: str
    parts: dict[str, float]
    overheads: Overheads
    max_batch_tokens: int | None


@dataclass(frozen=True)
class EnginesNeeded(Answer):
    """Fewest engines that hold the SLO, today's caches and one shared pool."""

    today: int | None
    """None: more than ``searched_up_to``."""
    shared: int | None
    engines_today: int
    searched_up_to: int
    gpus_per_engine: int
    gpus_today: int | None
    gpus_shared: int | None
    p99_ratio: float = 1.0
    """Today's measured / predicted p99 the search multiplies each predicted p99 by."""
    rule: str = ENGINES_RULE


@dataclass(frozen=True)
class SloUsed(Answer):
    ttft_p99_s: float
    source: str = SLO_SOURCE


@dataclass(frozen=True)
class TopologyWhatIf(Answer):
    """The topology and TTFT half of the what-if (module doc); its keys join the what-if's JSON."""

    today: Today
    latency: tuple[SetupLatency, ...]
    """Today first, then one shared pool, the private caches per routing, and the tiered pool."""
    latency_curve: tuple[SetupLatency, ...]
    """TTFT against total capacity, today's topology and one shared pool."""
    latency_model: LatencyModelInfo | None
    engines_needed: EnginesNeeded | None
    finding: alt.TopologyFinding | None
    slo: SloUsed

    @property
    def shared(self) -> SetupLatency | None:
        """The one-shared-pool row."""
        return next((r for r in self.latency if r.topology == Topology.SHARED), None)


def _capacities(l1: dict[str, float], names: tuple[str, ...], bpc: int | None, configured_gb: float | None,
                notes: list[str]) -> tuple[list[int] | None, str | None]:
    """Each instance's capacity in chunks, and where it came from (``l1``: LMCache's L1 gauges)."""
    if not bpc:
        notes.append("bytes per chunk unknown: today's caches replayed unbounded")
        return None, None
    if l1 and set(l1) == set(names):
        return [capacity_chunks(l1[n], bpc) for n in names], "LMCache's L1 gauges (in-use bytes / in-use share)"
    if l1 and len(set(round(v) for v in l1.values())) == 1:
        return [capacity_chunks(next(iter(l1.values())), bpc)] * len(names), "LMCache's L1 gauges"
    if l1:
        mean = sum(l1.values()) / len(l1)
        notes.append(f"LMCache targets ({', '.join(sorted(l1))}) and trace instances ({', '.join(names)}) do not "
                     "match by name: every instance replayed at their mean L1")
        return [capacity_chunks(mean, bpc)] * len(names), "LMCache's L1 gauges (mean)"
    if configured_gb:
        return ([capacity_chunks(configured_gb * GB / len(names), bpc)] * len(names),
                "the configured size split over the instances")
    notes.append("no LMCache L1 gauge and no configured size: today's caches replayed unbounded")
    return None, None


def _row(p: alt.Predicted, bpc: int | None, slo: float, cal: cb.Calibration,
         bounds: list[float] | None = None) -> SetupLatency:
    """One set-up's row: calibrated TTFTs beside the raw ones (module doc)."""
    a, s = p.alternative, p.summary
    hist_raw = bucket_quantile(0.99, lat.as_histogram(p.ttft, bounds)).value if bounds else None
    ttft: dict[str, Any] = {}
    for stat, key, raw in (("mean", "ttft_mean_s", s.ttft_mean_s), ("p50", "ttft_p50_s", s.ttft_p50_s),
                           ("p99", "ttft_p99_s", s.ttft_p99_s), ("p99", "ttft_p99_s_as_histogram", hist_raw)):
        value, interval = cb.calibrated(cal, stat, raw)
        ttft.update({key: value, f"{key}_raw": raw,
                     f"{key}_interval": (interval[0], interval[1]) if interval is not None else None})
    p99 = ttft["ttft_p99_s"]
    return SetupLatency(topology=a.topology, routing=a.routing, ranks=a.ranks, capacity_chunks=a.capacity_chunks,
                        capacity_gb=a.capacity_chunks * bpc / GB if bpc else None, hit_rate=p.hit_rate,
                        **ttft, calibrated=cal.calibrated, goodput_rps=s.goodput_rps, within_slo=s.within_slo,
                        holds_slo=bool(p99 is not None and p99 <= slo))


def topology_whatif(tr: Trace, names: tuple[str, ...], *, reads: TopologyReads | None, bpc: int | None,
                    history: History | None, slo_s: float, configured_gb: float | None, routings: tuple[str, ...],
                    seed: int, l2_gb: float | None, gpus_per_engine: int, t_from: datetime | None = None,
                    t_to: datetime | None = None, lookup_times: bool = False, notes: list[str]) -> TopologyWhatIf:
    """``today``, ``latency``, ``latency_curve``, ``latency_model``, ``engines_needed`` (module
    doc), predicted with ``history``'s cost model and overheads (calibrated: ``app.data.whatif``
    reads them) on what ``reads`` holds (None when the span is not unix times: nothing was
    measured). ``lookup_times``: the trace's times are when LMCache logged each lookup (its own
    logs; a Mooncake trace's are arrivals), so a burst's wait before them is taken back
    (``alt.queued_arrival``). Reads nothing; appends its notes to ``notes``."""
    span = topology_span(tr, t_from, t_to)
    meas = reads.measured if reads is not None and span else {}
    instances = max(1, len(names))
    engines = int(meas.get("engines") or 0) or instances
    if not meas.get("engines"):
        notes.append(f"no vLLM engine with data in the span: one engine per cache instance ({instances})")
    caps, cap_source = _capacities(reads.l1_bytes if reads is not None and span else {}, names, bpc, configured_gb,
                                   notes)
    each = caps or [max(1, tr.references + 1)] * instances
    today = alt.today(tr, instances=instances, engines=engines, capacity_chunks=each)
    total = int(sum(each))
    bucket = meas.get("ttft_p99_bucket_s")
    t = Today(
        instances=instances, instance_names=tuple(names), engines=today.engines, requests=tr.requests,
        requests_measured=meas.get("requests"),
        capacity_chunks_per_instance=tuple(each) if caps else None,
        capacity_gb_per_instance=tuple(c * bpc / GB for c in each) if caps and bpc else None,
        capacity_source=cap_source,
        hit_rate_predicted=float(today.hits.sum()) / max(1.0, float(tr.full_chunk_tokens.sum())),
        hit_rate_measured=meas.get("hit_rate"),
        ttft_mean_s_measured=meas.get("ttft_mean_s"), ttft_p50_s_measured=meas.get("ttft_p50_s"),
        ttft_p99_s_measured=meas.get("ttft_p99_s"), ttft_p99_bucket_s_measured=tuple(bucket) if bucket else None,
        ttft_mean_s_predicted=None, ttft_p50_s_predicted=None, ttft_p99_s_predicted=None,
        ttft_p99_s_predicted_as_histogram=None, ttft_calibration=None,
        span=(span[0].isoformat(), span[1].isoformat()) if span else None,
        engine_routing=ENGINE_ROUTING_MANY if instances > 1 else ENGINE_ROUTING_ONE)
    out = TopologyWhatIf(t, (), (), None, None, None, SloUsed(slo_s))
    if span is None or history is None:
        notes.append("the trace's times are not unix times: no metrics to measure or price it with")
        return out
    cost, over, latency = history.cost, history.overheads, history.latency
    if over is None:
        notes.append("no TTFT prediction: the overheads were not calibrated")
        return out
    out = replace(out, latency_model=LatencyModelInfo(cost.status, cost.reason, cost.history,
                                                      {p.name: p.value for p in cost.parts}, over,
                                                      lat.DEFAULT_BATCH_TOKENS))
    if latency is None:
        notes.append(f"no TTFT prediction: the prefill cost model is {cost.status} ({cost.reason})")
        return out
    if tr.requests > MAX_LATENCY_REQUESTS:
        notes.append(f"TTFT replayed on the first {MAX_LATENCY_REQUESTS:,} of {tr.requests:,} requests")
        keep = np.zeros(tr.requests, dtype=bool)
        keep[:MAX_LATENCY_REQUESTS] = True
        tr = tr.subset(keep)
        today = alt.today(tr, instances=instances, engines=engines, capacity_chunks=each)
    # goodput's denominator, the stream's span; a trace without request times (priced here when
    # --from / --to gave the span) replays every request at 0 (alt.stream): 1 s, as with no requests
    seconds = max(1e-9, float(tr.ts[-1] - tr.ts[0])) if tr.ts is not None and tr.requests else 1.0
    # when each request reached its engine: a burst's lookups wait for the step before them
    arrival = alt.queued_arrival(tr, today, latency, seconds=seconds) if lookup_times else None
    out = _fill(out, tr, today, latency, total, bpc, slo_s, seconds, routings, seed, l2_gb, meas, notes,
                reads.ttft if reads is not None else [], arrival)
    cal = out.today.ttft_calibration
    assert cal is not None  # _fill always calibrates (or says why not)
    e = _engines_needed(tr, today, latency, total, slo_s, gpus_per_engine, cal.p99.ratio or 1.0, arrival)
    pool = out.shared
    assert pool is not None  # _fill always predicts one shared pool
    size = f"{pool.capacity_gb:,.3g} GB" if pool.capacity_gb is not None else f"{total:,} chunks"
    finding = alt.TopologyFinding(f"one shared pool of {size}", slo_s, out.latency[0].ttft_p99_s,
                                  pool.ttft_p99_s, today.engines, e.today, e.shared, gpus_per_engine)
    return replace(out, engines_needed=e, finding=finding)


def _fill(out: TopologyWhatIf, tr: Trace, today: alt.Today, latency: lat.LatencyModel, total: int, bpc: int | None,
          slo: float, seconds: float, routings: tuple[str, ...], seed: int, l2_gb: float | None,
          meas: dict[str, Any], notes: list[str], measured_ttft: list[cb.MeasuredInterval],
          arrival: np.ndarray | None) -> TopologyWhatIf:
    """The predicted half: today (and its check), today's calibration, the alternatives, TTFT
    against capacity; every set-up replayed from ``arrival`` (``alt.queued_arrival``)."""
    def run(a: alt.Alternative) -> alt.Predicted:
        return alt.predict(tr, a, latency, slo_s=slo, seconds=seconds, arrival=arrival)

    p_today = run(alt.as_today(tr, today))
    s = p_today.summary
    bounds = meas.get("ttft_bounds") or None
    # today's error, per statistic, carried into every set-up (a trace without times: nothing to match)
    start = arrival if arrival is not None else tr.ts if tr.ts is not None else np.full(tr.requests, np.nan)
    cal = cb.calibrate_today(p_today.ttft, start + p_today.ttft, measured_ttft if tr.ts is not None else [])
    if not cal.calibrated:
        notes.append("TTFTs not calibrated on today: " + "; ".join(cal.notes))
    t = replace(out.today, ttft_mean_s_predicted=s.ttft_mean_s, ttft_p50_s_predicted=s.ttft_p50_s,
                ttft_calibration=cal,
                ttft_p99_s_predicted=s.ttft_p99_s, hit_rate_predicted_lru=out.today.hit_rate_predicted,
                hit_rate_predicted=p_today.hit_rate,
                ttft_p99_s_predicted_as_histogram=(bucket_quantile(0.99, lat.as_histogram(p_today.ttft, bounds)).value
                                                   if bounds else None))
    alts = [alt.shared(tr, today, total)]
    alts += [alt.private(tr, today.engines, r, total, seed) for r in routings]
    if l2_gb is not None and bpc:
        l2 = capacity_chunks(l2_gb * GB, bpc)
        tier = alt.shared(tr, today, total + l2)
        alts.append(alt.Alternative(Topology.TIERED, None, tier.ranks, total + l2, tier.hits, tier.engine,
                                    tier.engines))
        notes.append("L1 + L2: one pool of L1 + L2 (the LRU cascade holds what one LRU of their sum holds); L2 "
                     "hits priced as L1 loads (no L2 load cost measured)")
    rows = [_row(p_today, bpc, slo, cal, bounds)] + [_row(run(a), bpc, slo, cal, bounds) for a in alts]
    grid = alt.capacity_grid(max(1, total // 16), max(total * 4, 1), CURVE_POINTS, also=[total])
    curve = []
    for c in grid:
        mine = alt.hits(tr, today.instance_of, today.instances, max(1, c // today.instances))
        for a in (alt.Alternative(Topology.TODAY, None, today.engines, c, mine, today.engine_of, today.engines,
                                  today.instance_of if today.instances > 1 else None), alt.shared(tr, today, c)):
            curve.append(_row(run(a), bpc, slo, cal))
    return replace(out, today=t, latency=tuple(rows), latency_curve=tuple(curve))


def _engines_needed(tr: Trace, today: alt.Today, latency: lat.LatencyModel, total: int, slo: float,
                    gpus_per_engine: int, p99_ratio: float = 1.0,
                    arrival: np.ndarray | None = None) -> EnginesNeeded:
    """Fewest engines that hold the SLO, today's caches and one shared pool (``alt.engines_needed``),
    on the p99 calibrated on today (``p99_ratio``)."""
    most = min(alt.MAX_ENGINE_SEARCH, max(4 * today.engines, 1))
    per = max(1, total // today.instances)
    if today.instances == 1:
        today_k = alt.engines_needed(tr, lambda k: alt.on_engines(alt.as_today(tr, today), tr, k), latency,
                                     slo_s=slo, most=most, p99_ratio=p99_ratio,
                                     arrival=arrival)
    else:  # k private caches of today's size each, round-robin (the data's routing needs today's ranks)
        today_k = alt.engines_needed(tr, lambda k: alt.private(tr, k, "round_robin", per * k), latency,
                                     slo_s=slo, most=most, p99_ratio=p99_ratio,
                                     arrival=arrival)
    pool = alt.shared(tr, today, total)
    shared_k = alt.engines_needed(tr, lambda k: alt.on_engines(pool, tr, k), latency, slo_s=slo, most=most,
                                  p99_ratio=p99_ratio, arrival=arrival)
    return EnginesNeeded(today_k, shared_k, today.engines, most, gpus_per_engine,
                         today_k * gpus_per_engine if today_k else None,
                         shared_k * gpus_per_engine if shared_k else None, p99_ratio)
