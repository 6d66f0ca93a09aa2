"""The replay as it was before it was vectorised (commit 5910da9), kept verbatim as the oracle
the fast paths are tested against (``tests/test_replay_scale.py``): the TTFT engine's event loop
(``latency.simulate``), the in-flight cut (``alternatives.in_flight``), the prefix-affinity router
(``pools.route``), the stack-distance pass (``sim.stack_distances``, unweighted wavelet matrix) and
``sim.make_trace``. Slow, independent of the code under test; not imported by kvplan."""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvplan.models.cache import latency as lat
from kvplan.models.cache.pools import AFFINITY_MIN_MATCH
from kvplan.models.cache.sim import Trace
from kvplan.models.core.errors import KvplanError
from kvplan.models.core.vocabulary import ROUTINGS, Routing


def make_trace(requests: Iterable[tuple[Sequence[int], int, int]]) -> Trace:
    """A trace from ``(chunk_ids, seq_len, chunk_size)`` tuples (tests, small traces)."""
    ids: list[int] = []
    offsets = [0]
    seq: list[int] = []
    sizes: list[int] = []
    for chunk_ids, seq_len, chunk_size in requests:
        ids.extend(int(c) for c in chunk_ids)
        offsets.append(len(ids))
        seq.append(int(seq_len))
        sizes.append(int(chunk_size))
    return Trace(np.asarray(ids, dtype=np.int64), np.asarray(offsets, dtype=np.int64),
                 np.asarray(seq, dtype=np.int64), np.asarray(sizes, dtype=np.int64))


def _index_dtype(n: int) -> type[np.int32] | type[np.int64]:
    """int32 positions while they fit (half the memory), else int64."""
    return np.int32 if n < 2**31 - 2 else np.int64


def prev_next(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Previous and next reference of the same key (-1 / len(keys) when none)."""
    n = len(keys)
    idx = _index_dtype(n)
    order = np.argsort(keys, kind="stable").astype(idx)
    same = keys[order[1:]] == keys[order[:-1]]
    prev = np.full(n, -1, dtype=idx)
    nxt = np.full(n, n, dtype=idx)
    later, earlier = order[1:][same], order[:-1][same]
    del order, same
    prev[later] = earlier
    nxt[earlier] = later
    return prev, nxt


def _count_prefix_ge(values: np.ndarray, n: np.ndarray, x: np.ndarray, nbits: int) -> np.ndarray:
    """For each query j: how many of ``values[:n[j]]`` are ``>= x[j]`` (wavelet matrix).

    Levels are built and consumed one at a time, highest bit first, so memory stays at a
    few arrays of ``len(values)``."""
    size = len(values)
    idx = np.int32 if size < 2**31 - 1 else np.int64
    cur: np.ndarray = values.astype(idx, copy=True)
    lo: np.ndarray = np.zeros(len(n), dtype=idx)
    hi: np.ndarray = n.astype(idx)
    count = np.zeros(len(n), dtype=np.int64)
    ones = np.zeros(size + 1, dtype=idx)
    for b in range(nbits - 1, -1, -1):
        bit = ((cur >> b) & 1).astype(bool)
        np.cumsum(bit, out=ones[1:], dtype=idx)
        zeros_total = size - int(ones[-1])
        o_lo = ones[lo]
        o_hi = ones[hi]
        go_zero = ((x >> b) & 1) == 0
        # x has a 0 here: every value with a 1 here (and the same higher bits) is larger.
        count += np.where(go_zero, o_hi - o_lo, 0)
        lo = np.where(go_zero, lo - o_lo, zeros_total + o_lo).astype(idx)
        hi = np.where(go_zero, hi - o_hi, zeros_total + o_hi).astype(idx)
        cur = np.concatenate((cur[~bit], cur[bit]))
        del bit, o_lo, o_hi, go_zero
    count += hi - lo  # values equal to x
    return count


@dataclass(frozen=True)
class Distances:
    """Per chunk reference: its stack distance at its request's lookup and the prefix max."""

    d: np.ndarray
    """Stack distance before the request (``INF`` = never referenced before)."""
    m: np.ndarray
    """Prefix maximum of ``d`` within the request (``INF`` from the first new chunk on)."""
    inf: int
    """The distance standing for "never referenced before": references + 1, beyond any capacity."""
    unique_chunks: int
    """Distinct chunk keys in the trace."""


def stack_distances(trace: Trace) -> Distances:
    """Exact LRU stack distances of every chunk reference under LMCache's lookup rule. Long on
    purpose: one vectorised pass (previous/next occurrence, prefix-hit cut, counting) whose steps
    share their arrays; split, each part would need the others' intermediates."""
    keys = trace.chunk_ids
    T = len(keys)
    R = trace.requests
    inf = T + 1
    idx = _index_dtype(T + 2)
    if T == 0:
        empty = np.zeros(0, dtype=idx)
        return Distances(empty, empty, inf, 0)
    lengths = np.diff(trace.offsets)
    req = np.repeat(np.arange(R, dtype=idx), lengths)
    starts = trace.offsets[:-1].astype(idx)
    prev, nxt = prev_next(keys)

    # Next reference's request (R when none): B counts q <= p with next_req[q] >= r.
    next_req = req[np.minimum(nxt, T - 1)]
    next_req[nxt == T] = R
    del nxt
    # Distinct chunks referenced before each request start: D = cumulative first references.
    first_cum = np.zeros(T + 1, dtype=idx)
    np.cumsum(prev < 0, out=first_cum[1:], dtype=idx)
    unique = int(first_cum[-1])
    d_start = first_cum[starts]  # per request
    del first_cum
    start = starts[req]  # request start of each reference
    seen = (prev >= 0) & (prev < start)  # looked up with an earlier reference
    dup = prev >= start  # repeated inside its own request: same answer as its first copy
    cont = np.zeros(T, dtype=bool)
    cont[1:] = seen[1:] & seen[:-1] & (req[1:] == req[:-1]) & (prev[1:] == prev[:-1] + 1)
    query = seen & ~cont
    del seen
    qi = np.flatnonzero(query).astype(idx)
    nbits = max(1, int(R).bit_length())
    b = _count_prefix_ge(next_req, prev[qi] + 1, req[qi], nbits)
    del next_req

    d = np.full(T, inf, dtype=idx)
    d[qi] = d_start[req[qi]] - b
    del b
    # Inside a run d drops by one per chunk: d[t] = d[run start] - (t - run start).
    run_start = np.zeros(T, dtype=idx)
    run_start[qi] = qi
    del qi
    np.maximum.accumulate(run_start, out=run_start)
    ci = np.flatnonzero(cont).astype(idx)
    del cont
    d[ci] = d[run_start[ci]] - (ci - run_start[ci])
    del ci, run_start
    # A chunk repeated inside its request has the distance of its first copy.
    di = np.flatnonzero(dup)
    if len(di):
        first = prev[di]
        while True:
            more = prev[first] >= start[di]
            if not more.any():
                break
            first = np.where(more, prev[first], first)
        d[di] = d[first]
    del dup, start, prev

    # Prefix maximum per request: request index in the high 32 bits, so one running maximum
    # restarts at every request.
    m = req.astype(np.int64)
    del req
    m <<= 32
    m |= d
    np.maximum.accumulate(m, out=m)
    m &= 0xFFFFFFFF
    return Distances(d=d, m=m.astype(idx), inf=inf, unique_chunks=unique)


def route(trace: Trace, ranks: int, policy: str = "round_robin", seed: int = 0) -> np.ndarray:
    """The rank (0..ranks-1) each request goes to under ``policy`` (``ROUTINGS``)."""
    if ranks < 1:
        raise ValueError("ranks must be >= 1")
    R = trace.requests
    try:
        policy = Routing.parse(policy)
    except KvplanError:
        raise ValueError(f"unknown routing {policy!r}; one of {', '.join(ROUTINGS)}") from None
    if policy == Routing.ROUND_ROBIN:
        return np.arange(R, dtype=np.int64) % ranks
    if policy == Routing.RANDOM:
        return np.random.default_rng(seed).integers(0, ranks, size=R, dtype=np.int64)
    T = trace.references
    lengths = np.diff(trace.offsets)
    out = np.zeros(R, dtype=np.int64)
    if T == 0:
        return np.arange(R, dtype=np.int64) % ranks
    req = np.repeat(np.arange(R, dtype=np.int64), lengths)
    start = trace.offsets[:-1]
    prev, _ = prev_next(trace.chunk_ids)
    seen_before = (prev >= 0) & (prev < start[req])
    # Leading chunks seen before: position of the first unseen chunk in each request.
    broken = np.where(~seen_before, np.arange(T) - start[req], lengths[req])
    lead = np.minimum.reduceat(broken, start[lengths > 0]) if (lengths > 0).any() else np.zeros(0, np.int64)
    matched = np.zeros(R, dtype=np.int64)
    matched[lengths > 0] = lead
    # The request that last referenced the deepest matched chunk.
    deep = np.full(R, -1, dtype=np.int64)
    has = matched > 0
    deep[has] = req[prev[start[has] + matched[has] - 1]]
    follow = has & (matched >= AFFINITY_MIN_MATCH * lengths)
    nxt = 0
    deep_l = deep.tolist()
    follow_l = follow.tolist()
    for r in range(R):
        if follow_l[r]:
            out[r] = out[deep_l[r]]
        else:
            out[r] = nxt
            nxt = (nxt + 1) % ranks
    return out


def simulate(s: lat.Stream, m: lat.LatencyModel) -> np.ndarray:
    """TTFT of every request, seconds (module doc)."""
    ttft = np.full(len(s.arrival), np.nan)
    for e in range(s.engines):
        idx = np.flatnonzero(s.engine == e)
        _Engine(s, m, ttft).run(idx[np.argsort(s.arrival[idx], kind="stable")])
    return ttft


@dataclass
class _Engine:
    s: lat.Stream
    m: lat.LatencyModel
    ttft: np.ndarray
    t: float = -math.inf
    step: int = 0
    lookups: list[tuple[float, int]] = field(default_factory=list)
    """Heap of (when the lookup ends, request)."""
    loads: list[tuple[float, int]] = field(default_factory=list)
    """Heap of (when the load of the hit tokens ends, request)."""
    ready: deque[int] = field(default_factory=deque)
    """Requests whose prefill can run, in arrival order."""
    done: dict[int, int] = field(default_factory=dict)
    """Prompt tokens computed so far per request (a long prefill spans steps)."""
    decoding: list[int] = field(default_factory=list)
    """Heap of the step at which each decoding request ends."""

    def run(self, requests: np.ndarray) -> None:
        order: list[int] = requests.tolist()
        k = 0
        while k < len(order) or self.lookups or self.loads or self.ready or self.decoding:
            k = self._see(order, k)
            if not self.ready:
                nxt = min([math.inf] + [h[0][0] for h in (self.lookups, self.loads) if h]
                          + ([float(self.s.arrival[order[k]])] if k < len(order) else []))
                if not self.decoding:
                    self.t = max(self.t, nxt)
                    continue
                d = max(self.m.decode_step_s, 1e-9)  # decode-only steps, up to the next event
                jump = self.decoding[0] - self.step  # to the next decode's end, or the next event's step
                if math.isfinite(nxt):
                    jump = min(jump, max(1, math.ceil((nxt - self.t) / d)))
                self.t += jump * d
                self.step += jump
            else:
                self._prefill_step()
            while self.decoding and self.decoding[0] <= self.step:
                heapq.heappop(self.decoding)

    def _see(self, order: list[int], k: int) -> int:
        """What the scheduler sees at this boundary (repeatedly: an idle engine sees at once)."""
        changed = True
        while changed:
            changed = False
            while k < len(order) and self.s.arrival[order[k]] <= self.t:
                heapq.heappush(self.lookups, (max(self.t, float(self.s.arrival[order[k]])) + self.m.lookup_s,
                                              order[k]))
                k, changed = k + 1, True
            while self.lookups and self.lookups[0][0] <= self.t:
                _, i = heapq.heappop(self.lookups)
                load = self.m.load_s_per_hit_token * float(self.s.hit[i])
                if load > 0:
                    heapq.heappush(self.loads, (self.t + load, i))
                else:
                    self.ready.append(i)
                changed = True
            while self.loads and self.loads[0][0] <= self.t:
                self.ready.append(heapq.heappop(self.loads)[1])
                changed = True
        return k

    def _prefill_step(self) -> None:
        m, s = self.m, self.s
        budget = (m.max_batch_tokens or 2**62) - len(self.decoding)
        dur, finished = 0.0, []
        for i in list(self.ready):
            if budget <= 0:
                break
            hit, prompt = float(s.hit[i]), float(s.prompt[i])
            need = max(1, int(prompt - hit)) - self.done.get(i, 0)
            take = min(need, budget)
            c0 = hit + self.done.get(i, 0)
            dur += m.per_token * take + m.attention * ((c0 + take) ** 2 - c0 ** 2) / 2
            if i not in self.done:
                dur += m.fixed + m.lmcache_request + m.load * hit
            self.done[i] = self.done.get(i, 0) + take
            budget -= take
            if take == need:
                finished.append(i)
                dur += m.store * max(0.0, float(s.full[i]) - hit)
        if self.decoding:
            dur += m.decode_step_s
        self.t += dur
        self.step += 1
        for i in finished:
            self.ready.remove(i)
            self.ttft[i] = self.t - float(s.arrival[i]) + m.frontend_s
            out = int(s.output_tokens[i]) if s.output_tokens is not None else m.output_tokens
            if out > 1:
                heapq.heappush(self.decoding, self.step + out - 1)


def in_flight(trace: Trace, alt: Any, stored_at: np.ndarray) -> np.ndarray:
    """``alt.hits`` less what another engine had not stored yet: a request hits only leading
    chunks that an earlier request of its cache stored before its own lookup (``trace.ts``) --
    at once when that request ran on the same engine (vLLM's scheduler sends a lookup only after
    the engine's running step, so the chunks of a prefill on its own engine are in), else when its
    prefill had ended (``stored_at``). The LRU replay stores a request's chunks at once; under
    concurrency a lookup from one engine can come before another engine's prefill of the same
    chunks ends (a burst behind one system prompt on a shared pool misses it)."""
    ts = trace.ts if trace.ts is not None else np.zeros(trace.requests)
    cache = alt.cache if alt.cache is not None else np.zeros(trace.requests, dtype=np.int64)
    first: dict[tuple[int, int], tuple[float, int]] = {}
    out = alt.hits.copy()
    ids, off, size = trace.chunk_ids.tolist(), trace.offsets.tolist(), trace.chunk_size.tolist()
    engine = alt.engine.tolist()
    for i in range(trace.requests):
        c, lo = int(cache[i]), off[i]
        n_hit = int(alt.hits[i]) // size[i] if size[i] else 0
        k = 0
        while k < n_hit:
            at, e = first.get((c, ids[lo + k]), (np.inf, -1))
            if e != engine[i] and at > ts[i]:
                break
            k += 1
        out[i] = k * size[i]
        for h in ids[lo:off[i + 1]]:
            first.setdefault((c, h), (float(stored_at[i]), engine[i]))
    return out
