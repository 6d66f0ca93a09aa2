"""Today's cache topology and its alternatives, in hit rate and TTFT, from one trace.

**Today** comes from the data: the trace's cache instances (one LMCache server each) and which
requests each served (``Trace.instance``). Each instance's requests replay through an LRU of its
own capacity (``kvplan.models.cache.sim``, LMCache's hit rule), so today's predicted hit rate is
comparable with LMCache's counters over the same span (hit tokens / full-chunk tokens looked up:
the counters leave out the partial tail chunk).

**Engines.** With several instances, each serves its own engines (``engines / instances`` each,
requests spread round-robin among them in time order); with one instance (a shared pool) every
engine reads it and requests go to the engines round-robin in time order (the trace does not say
which engine served a request: that is an assumption, stated with the result).

**Alternatives** (``Alternative``): one shared pool of the total capacity on today's engines;
``ranks`` private caches of ``capacity / ranks`` each, requests routed round-robin, at random
(seeded) or by prefix affinity (``kvplan.models.cache.pools.route``), each rank one engine;
other total capacities; an L1 of today's size over an L2. Each is replayed for its hit tokens
per request and through ``kvplan.models.cache.latency.simulate`` for its TTFTs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..core.vocabulary import Topology
from . import latency as lat
from .pools import route
from .sim import Trace, hit_tokens_by_request, key_order, stack_distances

MAX_ENGINE_SEARCH = 4096
"""Most engines ``engines_needed`` tries."""


def per_cache(capacity_chunks: int | Sequence[int], caches: int) -> list[int]:
    """One capacity per cache: ``capacity_chunks`` for each of ``caches``, or the sequence as
    given (one per cache)."""
    if isinstance(capacity_chunks, int | np.integer):
        return [int(capacity_chunks)] * caches
    return [int(c) for c in capacity_chunks]


def hits(trace: Trace, assignment: np.ndarray | None, caches: int,
         capacity_chunks: int | Sequence[int]) -> np.ndarray:
    """Hit tokens of each request when ``caches`` LRU caches (``capacity_chunks`` each, or one
    capacity per cache) serve the requests ``assignment`` sends them (None: one cache, all)."""
    caps = per_cache(capacity_chunks, caches)
    if assignment is None or caches == 1:
        return hit_tokens_by_request(trace, stack_distances(trace), max(1, caps[0]))
    out = np.zeros(trace.requests, dtype=np.int64)
    for k in range(caches):
        mask = assignment == k
        if mask.any():
            sub = trace.subset(mask)
            out[mask] = hit_tokens_by_request(sub, stack_distances(sub), max(1, caps[k]))
    return out


def spread(groups: np.ndarray, per_group: int) -> np.ndarray:
    """Engine of each request: group ``g``'s requests go round-robin (in order) to engines
    ``g x per_group .. g x per_group + per_group - 1``."""
    groups = np.asarray(groups, dtype=np.int64)
    out = np.zeros(len(groups), dtype=np.int64)
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        out[idx] = g * per_group + np.arange(len(idx)) % per_group
    return out


@dataclass(frozen=True)
class Today:
    """The topology the data shows."""

    instances: int
    """Cache instances (one LMCache server each, at least 1): the caller's count of the trace's
    instance names (``app.views.whatif_topology``)."""
    engines: int
    """vLLM engines: as given (at least 1) with one instance; with several, ``engines //
    instances`` (at least 1) per instance, times the instances."""
    capacity_chunks: tuple[int, ...]
    """Each instance's LRU capacity, chunks, one entry per instance."""
    instance_of: np.ndarray
    """int64 per request: the instance that served it (``Trace.instance``; all 0 when the trace
    does not say)."""
    engine_of: np.ndarray
    """int64 per request: the engine assumed to serve it, round-robin in time order (over all
    engines with one instance, over the instance's own engines with several): the trace does not
    say which engine served a request."""
    hits: np.ndarray
    """int64 per request: hit tokens (whole chunks) when each instance's requests replay through
    an LRU of its capacity, every chunk stored at once (no in-flight cut: ``in_flight``)."""

    @property
    def total_chunks(self) -> int:
        return int(sum(self.capacity_chunks))


def today(trace: Trace, *, instances: int, engines: int, capacity_chunks: int | Sequence[int]) -> Today:
    """Today's topology replayed (module doc). With several instances each serves
    ``engines // instances`` engines (at least one)."""
    inst = trace.instance if trace.instance is not None else np.zeros(trace.requests, dtype=np.int64)
    instances = max(1, int(instances))
    caps = tuple(per_cache(capacity_chunks, instances))
    h = hits(trace, inst, instances, caps)
    if instances == 1:
        engines = max(1, int(engines))
        engine = np.arange(trace.requests, dtype=np.int64) % engines
    else:
        per = max(1, int(engines) // instances)
        engines = per * instances
        engine = spread(inst, per)
    return Today(instances, engines, caps, inst, engine, h)


@dataclass(frozen=True)
class Alternative:
    """One cache set-up to predict."""

    topology: Topology
    """``today``, ``shared``, ``private`` or ``tiered`` (an L1 over an L2)."""
    routing: str | None
    """Private caches: the router's policy; None for today and a shared pool."""
    ranks: int
    """Caches (private) or engines (shared, today)."""
    capacity_chunks: int
    """Total over the caches (tiered: L1 + L2)."""
    hits: np.ndarray
    """int64 per request: hit tokens (whole chunks) under this set-up from the LRU replay;
    ``predict`` returns a copy cut to what was stored before each lookup (``in_flight``)."""
    engine: np.ndarray
    """int64 per request: the engine (rank, 0..engines-1) that prefills it."""
    engines: int
    """Engines the requests run on (``Stream.engines``); the constructors here set it to
    ``ranks``."""
    cache: np.ndarray | None = None
    """Which cache each request uses (None: one cache for all)."""


def shared(trace: Trace, t: Today, capacity_chunks: int) -> Alternative:
    """One pool of ``capacity_chunks`` on today's engines (the same requests to the same engines).
    When today is one pool of that size its replay is this one's: its hits are taken as they are."""
    same = t.instances == 1 and max(1, t.capacity_chunks[0]) == max(1, int(capacity_chunks))
    h = t.hits.copy() if same else hits(trace, None, 1, capacity_chunks)
    return Alternative(Topology.SHARED, None, t.engines, int(capacity_chunks), h, t.engine_of, t.engines)


def private(trace: Trace, ranks: int, routing: str, capacity_chunks: int, seed: int = 0) -> Alternative:
    """``ranks`` private caches of ``capacity_chunks / ranks`` each, one engine each."""
    assign = route(trace, ranks, routing, seed)
    each = max(1, int(capacity_chunks) // ranks)
    return Alternative(Topology.PRIVATE, routing, ranks, each * ranks, hits(trace, assign, ranks, each), assign, ranks,
                       assign)


def as_today(trace: Trace, t: Today) -> Alternative:
    return Alternative(Topology.TODAY, None, t.engines, t.total_chunks, t.hits, t.engine_of, t.engines,
                       t.instance_of if t.instances > 1 else None)


def stream(trace: Trace, alt: Alternative, output_tokens: np.ndarray | None = None,
           arrival: np.ndarray | None = None) -> lat.Stream:
    """``arrival``: when each request reached its engine (``latency.queued_arrival``); None: when
    its lookup was logged (``trace.ts``; zeros without)."""
    if arrival is None:
        arrival = trace.ts if trace.ts is not None else np.zeros(trace.requests)
    return lat.Stream(arrival=arrival,
                      prompt=trace.seq_len, hit=alt.hits, full=trace.full_chunk_tokens, engine=alt.engine,
                      engines=alt.engines, output_tokens=output_tokens)


@dataclass(frozen=True)
class Predicted:
    alternative: Alternative
    """The set-up as priced: when the trace has request times, its ``hits`` are cut to the chunks
    stored before each lookup (``in_flight``)."""
    hit_rate: float
    """LMCache's definition: hit tokens / full-chunk tokens looked up, of ``alternative.hits``
    (0 when the trace looks up no full chunk)."""
    ttft: np.ndarray
    """float per request, seconds (``latency.simulate``): arrival to the end of the step that
    finishes its prefill, plus the frontend; NaN for a request on no engine in 0..engines-1."""
    summary: lat.LatencySummary
    """Mean, p50, p99 of ``ttft`` and goodput at the SLO over the stream's span
    (``latency.summarize``)."""


def in_flight(trace: Trace, alt: Alternative, stored_at: np.ndarray) -> np.ndarray:
    """``alt.hits`` less what another engine had not stored yet: a request hits only leading
    chunks that an earlier request of its cache stored before its own lookup (``trace.ts``) --
    at once when that request ran on the same engine (vLLM's scheduler sends a lookup only after
    the engine's running step, so the chunks of a prefill on its own engine are in), else when its
    prefill had ended (``stored_at``). The LRU replay stores a request's chunks at once; under
    concurrency a lookup from one engine can come before another engine's prefill of the same
    chunks ends (a burst behind one system prompt on a shared pool misses it).

    Which request stored a chunk in a cache is the first of that cache's requests to reference it
    (later ones only refresh it): found for every reference at once by grouping the references by
    cache and key (``stored_by``), then only the hit chunks are checked.
    ``alt.hits`` are LRU hits (each hit chunk was referenced by an earlier request of its cache):
    so where each cache's requests all run on one engine (private caches) nothing is cut, and
    that is answered at once."""
    if one_engine_per_cache(alt):
        return alt.hits.copy()
    ts = trace.ts if trace.ts is not None else np.zeros(trace.requests)
    size = trace.chunk_size
    n_hit: np.ndarray = np.where(size > 0, alt.hits // np.where(size > 0, size, 1), 0)
    if not n_hit.any():
        return np.zeros(trace.requests, dtype=np.int64)
    first = stored_by(trace, alt.cache)
    # The hit chunks: the first n_hit[i] of each request i.
    offsets = trace.offsets
    req_of_hit = np.repeat(np.arange(trace.requests), n_hit)
    cum = np.zeros(trace.requests + 1, dtype=np.int64)
    np.cumsum(n_hit, out=cum[1:])
    pos = np.arange(int(cum[-1]), dtype=np.int64) - cum[req_of_hit]  # position inside the request
    by = first[offsets[req_of_hit] + pos]  # the request that stored it
    del first
    engine = alt.engine
    # Not stored by an earlier request (never, for an LRU hit), or stored from another engine
    # after this lookup: the hit ends at the first such chunk.
    fail = by >= req_of_hit
    fail |= (engine[by] != engine[req_of_hit]) & (stored_at[by] > ts[req_of_hit])
    k = n_hit.copy()
    f = np.flatnonzero(fail)
    if len(f):
        r = req_of_hit[f]
        head = np.flatnonzero(np.diff(r, prepend=-1) != 0)  # each request's first failing chunk
        k[r[head]] = pos[f[head]]
    out: np.ndarray = k * size
    return out


def one_engine_per_cache(alt: Alternative) -> bool:
    """Whether all the requests of each cache run on one engine."""
    engine = np.asarray(alt.engine)
    if alt.cache is None:
        return len(engine) == 0 or bool((engine == engine[0]).all())
    cache = np.asarray(alt.cache)
    order = np.argsort(cache, kind="stable")
    c, e = cache[order], engine[order]
    new_cache = np.ones(len(c), dtype=bool)
    new_cache[1:] = c[1:] != c[:-1]
    first_engine = e[np.maximum.accumulate(np.where(new_cache, np.arange(len(c)), 0))]
    return bool((e == first_engine).all())


def stored_by(trace: Trace, cache: np.ndarray | None) -> np.ndarray:
    """For each chunk reference, the request that first referenced its key in its cache (the one
    that stored it; ``cache``: one per request, None: one cache). int32 while positions fit."""
    order, same = key_order(trace.chunk_ids)  # by key, then position
    if cache is not None and trace.requests and int(np.max(cache)) != int(np.min(cache)):
        key_id = np.zeros(len(order), dtype=order.dtype)  # dense key number, in key order
        np.cumsum(~same, out=key_id[1:])
        del same
        cache = np.asarray(cache)
        small = np.int16 if int(cache.min()) >= -(2**15) and int(cache.max()) < 2**15 else np.int64
        c = np.repeat(cache.astype(small), np.diff(trace.offsets))[order]
        by_cache = np.argsort(c, kind="stable")  # by cache, then key, then position
        order, key_id, c = order[by_cache], key_id[by_cache], c[by_cache]
        del by_cache
        same = key_id[1:] == key_id[:-1]
        same &= c[1:] == c[:-1]
        del key_id, c
    head = np.arange(len(order), dtype=order.dtype)  # index in ``order`` of the group's first
    head[1:][same] = 0
    del same
    np.maximum.accumulate(head, out=head)
    np.take(order, head, out=head)  # the group's first reference
    req = np.repeat(np.arange(trace.requests, dtype=order.dtype), np.diff(trace.offsets))
    first = np.empty_like(order)
    first[order] = req[head]
    return first


def predict(trace: Trace, alt: Alternative, latency: lat.LatencyModel, *, slo_s: float | None,
            seconds: float, output_tokens: np.ndarray | None = None,
            arrival: np.ndarray | None = None) -> Predicted:
    """TTFTs and hit rate of one set-up: a first pass gives when each request's prefill ends
    (its chunks stored), the hits are cut to what was stored before each lookup (``in_flight``),
    and a second pass prices those. ``arrival``: as ``stream``'s."""
    full = float(trace.full_chunk_tokens.sum())
    s = stream(trace, alt, output_tokens, arrival)
    first = lat.run(s, latency)
    ttft = first.ttft
    if trace.ts is not None:
        stored_at = s.arrival + np.nan_to_num(ttft, nan=0.0) - latency.frontend_s
        cut = replace(alt, hits=in_flight(trace, alt, stored_at))
        if (cut.hits != alt.hits).any():  # the second pass replays only around the cut requests
            alt, ttft = cut, first.with_hits(cut.hits)
    return Predicted(alt, float(alt.hits.sum()) / full if full else 0.0, ttft,
                     lat.summarize(ttft, slo_s=slo_s, seconds=seconds))


def queued_arrival(trace: Trace, t: Today, latency: lat.LatencyModel, *, seconds: float = 1.0,
                   output_tokens: np.ndarray | None = None) -> np.ndarray | None:
    """When each of the trace's requests reached its engine (``latency.queued_arrival``): today
    replayed from its lookup times says how long each request kept its engine busy (lookup to
    prefill end); a lookup that came within that of the previous one on its engine waited behind
    it. None when the trace has no times."""
    if trace.ts is None:
        return None
    p = predict(trace, as_today(trace, t), latency, slo_s=None, seconds=seconds, output_tokens=output_tokens)
    start = latency.lookup_s + latency.load_s_per_hit_token * p.alternative.hits
    return lat.queued_arrival(trace.ts, t.engine_of, p.ttft - latency.frontend_s, start)


def engines_needed(trace: Trace, make: Callable[[int], Alternative], latency: lat.LatencyModel, *, slo_s: float,
                   most: int, output_tokens: np.ndarray | None = None, p99_ratio: float = 1.0,
                   arrival: np.ndarray | None = None) -> int | None:
    """Fewest engines (1..``most``) for which ``make(k)`` (an ``Alternative`` on k engines) keeps
    the TTFT p99, times ``p99_ratio`` (today's calibration, ``calibration``), within ``slo_s``;
    None when even ``most`` misses it. Binary search: more engines never queue a request longer
    here."""
    most = min(int(most), MAX_ENGINE_SEARCH)

    def holds(k: int) -> bool:
        s = lat.summarize(lat.simulate(stream(trace, make(k), output_tokens, arrival), latency), slo_s=slo_s,
                          seconds=1.0)
        return s.ttft_p99_s is not None and s.ttft_p99_s * p99_ratio <= slo_s

    if most < 1 or not holds(most):
        return None
    lo, hi = 1, most
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def rank_engines(trace: Trace, k: int) -> np.ndarray:
    """Round-robin over ``k`` engines in time order."""
    return np.arange(trace.requests, dtype=np.int64) % max(1, int(k))


def on_engines(alt: Alternative, trace: Trace, k: int) -> Alternative:
    """The same caches' hits, the requests spread round-robin over ``k`` engines (a shared
    pool on fewer or more engines)."""
    return Alternative(alt.topology, alt.routing, k, alt.capacity_chunks, alt.hits, rank_engines(trace, k), k,
                       alt.cache)


def capacity_grid(lo_chunks: int, hi_chunks: int, points: int, also: Sequence[int] = ()) -> list[int]:
    """Log-spaced total capacities (chunks) between lo and hi, plus ``also``."""
    lo, hi = max(1, int(lo_chunks)), max(1, int(lo_chunks), int(hi_chunks))
    vals = set(np.unique(np.rint(np.geomspace(lo, hi, max(1, points))).astype(np.int64)).tolist())
    return sorted(vals | {int(a) for a in also if a >= 1})


@dataclass(frozen=True)
class TopologyFinding:
    """What the TTFT what-if says for the decision: an alternative set-up against today at the
    TTFT SLO, and the engines each needs to hold it (``engines_needed``)."""

    label: str
    """The alternative, e.g. ``one shared pool of 400 GB``."""
    slo_s: float
    """The TTFT p99 SLO, seconds (the planning inputs' ``ttft_p99_slo_seconds``)."""
    today_p99_s: float | None
    """Predicted TTFT p99 of today's set-up on today's engines, seconds; None when no request got
    a predicted TTFT."""
    alternative_p99_s: float | None
    """Predicted TTFT p99 of the alternative on today's engines, seconds; None as for today."""
    engines_today: int
    """vLLM engines today (``Today.engines``)."""
    engines_needed_today: int | None
    """Fewest engines today's caches need to hold the SLO (``engines_needed``). None: even the
    most engines searched miss the SLO."""
    engines_needed_alternative: int | None
    """Fewest engines the alternative needs to hold the SLO; None: even the most searched miss
    it."""
    gpus_per_engine: int = 1
    """GPUs per engine (the deployment's ``gpus_per_engine`` setting): turns engines into GPUs."""

    @property
    def holds_where_today_misses(self) -> bool:
        return (self.alternative_p99_s is not None and self.alternative_p99_s <= self.slo_s
                and (self.today_p99_s is None or self.today_p99_s > self.slo_s))

    @property
    def gpus_saved(self) -> int | None:
        """GPUs the alternative needs fewer than today's set-up, both holding the SLO (None when
        today's needs are beyond the search or the alternative's unknown)."""
        if self.engines_needed_alternative is None or self.engines_needed_today is None:
            return None
        return (self.engines_needed_today - self.engines_needed_alternative) * self.gpus_per_engine

    def sentence(self) -> str:
        """The plan's sentence, with numbers."""
        g = self.gpus_per_engine
        alt_p99 = f"{self.alternative_p99_s:.3g} s" if self.alternative_p99_s is not None else "unknown"
        today_p99 = f"{self.today_p99_s:.3g} s" if self.today_p99_s is not None else "unknown"
        need_alt = (f"{self.engines_needed_alternative * g} GPUs needed" if self.engines_needed_alternative
                    else "no engine count searched holds it")
        need_today = (f"{self.engines_needed_today * g}" if self.engines_needed_today
                      else f"more than {self.engines_today * g * 4}")
        verb = "holds" if self.alternative_p99_s is not None and self.alternative_p99_s <= self.slo_s else "misses"
        return (f"{self.label}: TTFT p99 {alt_p99} against a {self.slo_s:g} s SLO ({verb} it; today {today_p99}); "
                f"{need_alt} instead of {need_today} (predicted from the deployment's trace and fitted prefill cost)")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TopologyFinding:
        return cls(d["label"], d["slo_s"], d["today_p99_s"], d["alternative_p99_s"], d["engines_today"],
                   d["engines_needed_today"], d["engines_needed_alternative"], d["gpus_per_engine"])

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "slo_s": self.slo_s, "today_p99_s": self.today_p99_s,
                "alternative_p99_s": self.alternative_p99_s, "engines_today": self.engines_today,
                "engines_needed_today": self.engines_needed_today,
                "engines_needed_alternative": self.engines_needed_alternative, "gpus_per_engine": self.gpus_per_engine,
                "gpus_saved": self.gpus_saved, "holds_where_today_misses": self.holds_where_today_misses,
                "sentence": self.sentence()}
