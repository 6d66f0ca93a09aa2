"""Hit rate against cache capacity, for every capacity at once, from one pass over a trace.

A trace is a sequence of requests; each request is the ordered list of its full-chunk
hashes (``chunk_ids``), its prompt length in tokens (``seq_len``, the partial tail chunk
included) and its tokens per chunk (``chunk_size``).

**The hit rule is LMCache's** (``lmcache tool cache-simulator``, LMCache 0.5.6,
``lmcache/tools/cache_simulator/simulator.py::simulate``):

1. a request hits the *leading* chunks that are in the cache; the first missing chunk ends
   the hit (prefix rule), later chunks count as misses even if present;
2. hit tokens = hit chunks x ``chunk_size``; requested tokens = ``seq_len`` (the tail that
   does not fill a chunk is always a miss);
3. then every chunk of the request, in order, becomes the most recently used (a missing chunk
   is inserted, evicting the least recently used when the cache is full);
4. the capacity in chunks is ``max(1, capacity_bytes // bytes_per_chunk)``.

Step 3 makes the cache a plain LRU over the concatenated reference stream, so the inclusion
property holds: a cache of ``C`` chunks always holds the ``C`` most recently referenced
distinct chunks. A chunk is in it at a request's lookup iff its *stack distance* ``d`` (the
number of distinct chunks referenced since its last reference, before the request) is
``< C`` (Mattson et al., 1970). With the prefix rule, chunk ``i`` of a request is a hit at
capacity ``C`` iff ``m_i = max(d_0..d_i) < C``. So the whole curve is the histogram of the
``m_i``, weighted by ``chunk_size``: ``hit_tokens(C) = sum of weights with m < C``.

**How ``d`` is computed** (exact, vectorised, no per-reference Python):

* ``d = D(s) - B(p, r)`` for a chunk of request ``r`` starting at reference ``s`` whose last
  earlier reference is ``p``: ``D(s)`` = distinct chunks referenced before ``s``;
  ``B(p, r)`` = references ``q <= p`` whose next reference belongs to request ``r`` or later
  (never referenced again counts as later). ``B`` is a prefix count of values ``>= r``, answered
  for all queries together with a wavelet matrix built level by level (one stable partition
  per bit of the request index, only the current level kept in memory).
* The next-request values come in long stretches of one value (a re-sent prefix is next looked
  up by one later request): the wavelet matrix is built over the stretches, each weighted by
  its length, and a query counts the stretches before its own plus its own up to ``p``. On the
  Mooncake conversation trace that is 12x fewer values than references.
* Chunks referenced last time at consecutive positions and looked up again at consecutive
  positions (a re-sent conversation prefix) form a *run*: inside a run ``d`` drops by exactly
  1 per chunk, so only the run's first chunk decides the prefix maximum and only it is queried.

Cost: ``O(T + S log R)`` vectorised work for ``T`` chunk references, ``S`` stretches and ``R``
requests (plus one stable sort of the keys), independent of how many capacities are asked for.
Memory: whole-trace temporaries are int32 or bool and freed as soon as used, about 5 int32
arrays of ``T`` at the peak on top of the trace itself, none of it per capacity (figures:
bench/results/topology.md).

**Topology** (``shared_vs_private``): ``N`` private caches of ``C/N`` each, requests routed to
ranks round-robin, at random (fixed seed), or by prefix affinity; each rank's sub-trace gets its
own curve in the same single pass, and the private hit tokens at ``C`` are the sum over ranks at
``C/N``. Prefix affinity (SGLang's cache-aware rule, simplified): a request goes to the rank
that last served the deepest of its leading chunks seen before, if that match covers at least
half of its chunks; otherwise to the next rank round-robin. The traces carry no session ids, so
there is no session affinity.

**Tiers** (``tier_split``): an L1 of ``C1`` chunks above an L2 of ``C2`` chunks that receives
what L1 evicts and gives a hit back to L1 (an exclusive LRU cascade) holds exactly what one LRU
of ``C1 + C2`` holds, L1 being its ``C1`` most recent chunks. So a prefix hit at ``C1 + C2`` is
served from L1 when the chunk's own distance is ``< C1``. This is a model of a tier cascade,
not LMCache's L2 adapter code.

What this module cannot know: eviction other than LRU (LMCache's L1 also evicts on memory
pressure and pins in-flight chunks), chunks stored by other means than the lookups in the
trace, and whether the trace's period is representative.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

GB = 1e9
"""Capacities in GB are decimal (10^9 bytes); LMCache's CLI takes GiB (2^30)."""
GIB = 2**30


@dataclass(frozen=True)
class Trace:
    """Requests in replay order, columnar.

    ``chunk_ids[offsets[r]:offsets[r+1]]`` are request ``r``'s chunk keys (any int64: equal
    keys are the same chunk)."""

    chunk_ids: np.ndarray
    """int64, all requests' chunk keys concatenated."""
    offsets: np.ndarray
    """int64, ``R + 1`` request boundaries into ``chunk_ids``."""
    seq_len: np.ndarray
    """int64, prompt tokens per request (tail included)."""
    chunk_size: np.ndarray
    """int64, tokens per chunk, per request."""
    ts: np.ndarray | None = None
    """float64 seconds per request (when the lookup was logged), if known."""
    instance: np.ndarray | None = None
    """int64 per request: which cache instance served it (an index into the trace's instance
    names), if known."""

    @property
    def requests(self) -> int:
        return len(self.offsets) - 1

    @property
    def references(self) -> int:
        return int(self.offsets[-1])

    @property
    def full_chunk_tokens(self) -> np.ndarray:
        """Tokens of each request's full chunks (what LMCache's lookup counters count)."""
        return self.chunk_size * np.diff(self.offsets)

    def subset(self, mask: np.ndarray) -> Trace:
        """The requests where ``mask`` is true, in order."""
        mask = np.asarray(mask, dtype=bool)
        lengths = np.diff(self.offsets)
        ref_mask = np.repeat(mask, lengths)
        return Trace(
            chunk_ids=self.chunk_ids[ref_mask],
            offsets=np.concatenate(([0], np.cumsum(lengths[mask]))).astype(np.int64),
            seq_len=self.seq_len[mask],
            chunk_size=self.chunk_size[mask],
            ts=None if self.ts is None else self.ts[mask],
            instance=None if self.instance is None else self.instance[mask],
        )


def make_trace(requests: Iterable[tuple[Sequence[int], int, int]]) -> Trace:
    """A trace from ``(chunk_ids, seq_len, chunk_size)`` tuples. Each request's keys become one
    int64 array at once (8 bytes a key, no Python int per chunk), joined at the end; an int-valued
    key of another type (e.g. ``2.0``) is taken as ``int()`` takes it."""
    parts: list[np.ndarray] = []
    seq: list[int] = []
    sizes: list[int] = []
    for chunk_ids, seq_len, chunk_size in requests:
        if isinstance(chunk_ids, np.ndarray) and chunk_ids.dtype.kind in "iu":
            parts.append(chunk_ids.astype(np.int64).ravel())
        else:
            parts.append(np.fromiter(chunk_ids, dtype=np.int64))
        seq.append(int(seq_len))
        sizes.append(int(chunk_size))
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    ids = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return Trace(ids, offsets, np.asarray(seq, dtype=np.int64), np.asarray(sizes, dtype=np.int64))


def capacity_chunks(capacity_bytes: float, bytes_per_chunk: int) -> int:
    """LMCache's conversion: ``max(1, capacity_bytes // bytes_per_chunk)``."""
    if bytes_per_chunk <= 0:
        raise ValueError("bytes_per_chunk must be > 0")
    return max(1, int(capacity_bytes) // int(bytes_per_chunk))


@dataclass(frozen=True)
class Curve:
    """Hit tokens for every capacity, as a step function of the capacity in chunks.

    ``hit_tokens(C) = cum_hit_tokens[k]`` where ``k`` = number of ``depths`` ``< C``."""

    depths: np.ndarray
    """Sorted distinct finite prefix-maximum stack distances ``m``."""
    cum_hit_tokens: np.ndarray
    """``len(depths) + 1`` values: hit tokens with ``m`` below ``depths[k]`` (index k)."""
    total_tokens: int
    """Requested tokens (sum of ``seq_len``)."""
    requests: int
    """Requests in the trace."""
    references: int
    """Chunk references in the trace (every chunk of every request)."""
    unique_chunks: int
    """Distinct chunks in the trace: a cache this large never evicts."""

    @property
    def infinite_hit_tokens(self) -> int:
        return int(self.cum_hit_tokens[-1])

    @property
    def infinite_hit_rate(self) -> float:
        return self.infinite_hit_tokens / self.total_tokens if self.total_tokens else 0.0

    @property
    def saturation_chunks(self) -> int:
        """Smallest capacity (chunks) that reaches the infinite-capacity hit tokens."""
        return int(self.depths[-1]) + 1 if len(self.depths) else 1

    def hit_tokens(self, capacity: int | np.ndarray) -> np.ndarray | int:
        """Hit tokens at capacity ``capacity`` chunks (scalar or array)."""
        k = np.searchsorted(self.depths, capacity, side="left")
        out = self.cum_hit_tokens[k]
        return int(out) if np.ndim(out) == 0 else out

    def hit_rate(self, capacity: int | np.ndarray) -> np.ndarray | float:
        """Token hit rate at ``capacity`` chunks, LMCache's definition."""
        hits = self.hit_tokens(capacity)
        if not self.total_tokens:
            return 0.0 if np.ndim(hits) == 0 else np.zeros(np.shape(hits))
        return hits / self.total_tokens


def _index_dtype(n: int) -> type[np.int32] | type[np.int64]:
    """int32 positions while they fit (half the memory), else int64."""
    return np.int32 if n < 2**31 - 2 else np.int64


BLOCK = 1 << 22
"""Elements per block where a whole-trace temporary would be int64 (bounds the peak memory)."""


def key_order(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The references grouped by key, in order within a key (a stable argsort), and whether each
    sorted reference has the same key as the one before it (``same[i]``: ``order[i+1]`` and
    ``order[i]``). The key comparison runs in blocks: no int64 copy of the whole trace."""
    idx = _index_dtype(len(keys) + 2)
    order = np.argsort(keys, kind="stable").astype(idx)
    same = np.empty(max(0, len(keys) - 1), dtype=bool)
    for lo in range(0, len(same), BLOCK):
        hi = min(lo + BLOCK, len(same))
        k = keys[order[lo:hi + 1]]
        np.equal(k[1:], k[:-1], out=same[lo:hi])
    return order, same


def previous_reference(keys: np.ndarray) -> np.ndarray:
    """Each reference's previous reference of the same key (-1 when none)."""
    order, same = key_order(keys)
    prev = np.full(len(keys), -1, dtype=order.dtype)
    prev[order[1:][same]] = order[:-1][same]
    return prev


def _sum_prefix_ge(values: np.ndarray, weights: np.ndarray, n: np.ndarray, x: np.ndarray,
                   nbits: int) -> np.ndarray:
    """For each query j: the sum of ``weights[i]`` over ``i < n[j]`` with ``values[i] >= x[j]``
    (a wavelet matrix over ``values``, weighted). Levels are built and consumed one at a time,
    highest bit first, so memory stays at a few arrays of ``len(values)``."""
    size = len(values)
    idx = np.int32 if size < 2**31 - 1 else np.int64
    cur: np.ndarray = values.astype(idx, copy=True)
    w: np.ndarray = weights.astype(np.int64, copy=True)
    lo: np.ndarray = np.zeros(len(n), dtype=idx)
    hi: np.ndarray = n.astype(idx)
    total = np.zeros(len(n), dtype=np.int64)
    ones = np.zeros(size + 1, dtype=idx)
    wones = np.zeros(size + 1, dtype=np.int64)
    for b in range(nbits - 1, -1, -1):
        bit = ((cur >> b) & 1).astype(bool)
        np.cumsum(bit, out=ones[1:], dtype=idx)
        np.cumsum(np.where(bit, w, 0), out=wones[1:])
        zeros_total = size - int(ones[-1])
        o_lo = ones[lo]
        o_hi = ones[hi]
        go_zero = ((x >> b) & 1) == 0
        # x has a 0 here: every value with a 1 here (and the same higher bits) is larger.
        total += np.where(go_zero, wones[hi] - wones[lo], 0)
        lo = np.where(go_zero, lo - o_lo, zeros_total + o_lo).astype(idx)
        hi = np.where(go_zero, hi - o_hi, zeros_total + o_hi).astype(idx)
        cur = np.concatenate((cur[~bit], cur[bit]))
        w = np.concatenate((w[~bit], w[bit]))
        del bit, o_lo, o_hi, go_zero
    np.cumsum(w, out=wones[1:])
    total += wones[hi] - wones[lo]  # values equal to x
    return total


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
    share their arrays; split, each part would need the others' intermediates. Whole-trace
    temporaries are int32 (or bool) and freed as soon as used: the peak is about 5 int32 arrays
    of the references on top of the trace."""
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
    order, same = key_order(keys)
    later, earlier = order[1:][same], order[:-1][same]
    del order, same
    prev = np.full(T, -1, dtype=idx)
    prev[later] = earlier
    # Next reference's request (R when none): B counts q <= p with next_req[q] >= r.
    next_req = np.full(T, R, dtype=idx)
    next_req[earlier] = req[later]
    del later, earlier
    # Distinct chunks referenced before each request start: first references before it.
    firsts = np.flatnonzero(prev < 0)
    unique = len(firsts)
    d_start = np.searchsorted(firsts, starts, side="left").astype(idx)  # per request
    del firsts
    # B is a prefix count over next_req, which is constant over long stretches (a re-sent
    # prefix is next looked up by one later request): count over those stretches, weighted.
    change = np.flatnonzero(next_req[1:] != next_req[:-1]).astype(idx)
    seg_start = np.concatenate((np.zeros(1, dtype=idx), change + 1))
    del change
    seg_val = next_req[seg_start]
    del next_req
    seg_len = np.diff(np.append(seg_start, idx(T)))

    start = starts[req]  # request start of each reference
    seen = prev >= 0
    seen &= prev < start  # looked up with an earlier reference
    dup = prev >= start  # repeated inside its own request: same answer as its first copy
    del start
    cont = np.zeros(T, dtype=bool)
    cont[1:] = seen[1:] & seen[:-1] & (req[1:] == req[:-1]) & (prev[1:] == prev[:-1] + 1)
    seen &= ~cont  # the queries: first chunk of each run
    qi = np.flatnonzero(seen).astype(idx)
    del seen
    p = prev[qi]
    x = req[qi]
    g = (np.searchsorted(seg_start, p, side="right") - 1).astype(idx)  # the stretch holding p
    # the stretches before p's, and p's own up to p (it holds p, whose next request is x: >= x)
    b = _sum_prefix_ge(seg_val, seg_len, g, x, max(1, int(R).bit_length()))
    b += p - seg_start[g] + 1
    del seg_start, seg_val, seg_len, g, p

    d = np.full(T, inf, dtype=idx)
    d[qi] = d_start[x] - b
    del b, x, d_start
    # Inside a run d drops by one per chunk: d[t] = d[run start] - (t - run start).
    run_start = np.zeros(T, dtype=idx)
    run_start[qi] = qi
    del qi
    np.maximum.accumulate(run_start, out=run_start)
    ci = np.flatnonzero(cont).astype(idx)
    del cont
    rs = run_start[ci]
    del run_start
    d[ci] = d[rs] - (ci - rs)
    del ci, rs
    # A chunk repeated inside its request has the distance of its first copy.
    di = np.flatnonzero(dup)
    del dup
    if len(di):
        first = prev[di]
        while True:
            more = prev[first] >= starts[req[di]]
            if not more.any():
                break
            first = np.where(more, prev[first], first)
        d[di] = d[first]
    del prev

    # Prefix maximum per request: request index in the high 32 bits, so one running maximum
    # restarts at every request (in blocks of whole requests: int64 only a block at a time).
    m = np.empty(T, dtype=idx)
    bounds = trace.offsets[np.searchsorted(trace.offsets, np.arange(0, T, BLOCK), side="right") - 1].tolist()
    for lo, hi in zip(bounds, bounds[1:] + [T], strict=True):
        if hi > lo:
            blk = req[lo:hi].astype(np.int64)
            blk <<= 32
            blk |= d[lo:hi]
            np.maximum.accumulate(blk, out=blk)
            blk &= 0xFFFFFFFF
            m[lo:hi] = blk
    return Distances(d=d, m=m, inf=inf, unique_chunks=unique)


def lru_curve(trace: Trace, distances: Distances | None = None) -> Curve:
    """The exact hit-tokens-vs-capacity step function of ``trace`` (all capacities)."""
    dist = distances if distances is not None else stack_distances(trace)
    total = int(trace.seq_len.sum())
    T = trace.references
    if T == 0:
        return Curve(np.zeros(0, np.int64), np.zeros(1, np.int64), total, trace.requests, 0, 0)
    finite = dist.m < dist.inf
    m = dist.m[finite]
    sizes = trace.chunk_size
    if len(sizes) and np.all(sizes == sizes[0]):  # one chunk size: count, then scale
        counts = np.bincount(m, minlength=dist.unique_chunks + 1).astype(np.int64) * int(sizes[0])
    else:  # float sums of integers below 2**53: exact
        weights = np.repeat(sizes, np.diff(trace.offsets))[finite].astype(np.float64)
        counts = np.rint(np.bincount(m, weights=weights, minlength=dist.unique_chunks + 1)
                         ).astype(np.int64)
    depths = np.flatnonzero(counts)
    cum = np.concatenate(([0], np.cumsum(counts[depths])))
    return Curve(depths.astype(np.int64), cum, total, trace.requests, T, dist.unique_chunks)


def hit_tokens_by_request(trace: Trace, distances: Distances, capacity: int) -> np.ndarray:
    """Hit tokens of each request at ``capacity`` chunks (same rule as the curve)."""
    lengths = np.diff(trace.offsets)
    hits = np.zeros(trace.requests, dtype=np.int64)
    if trace.references == 0:
        return hits
    hit = (distances.m < capacity) & (distances.m < distances.inf)  # inf: never seen before
    hit_chunks = np.add.reduceat(hit.astype(np.int64),
                                 trace.offsets[:-1][lengths > 0])
    hits[lengths > 0] = hit_chunks
    out: np.ndarray = hits * trace.chunk_size
    return out


def tier_split(trace: Trace, distances: Distances, l1_chunks: int, l2_chunks: int) -> dict[str, Any]:
    """Hit tokens served from L1 and from L2 for an exclusive LRU cascade (module doc)."""
    weights = np.repeat(trace.chunk_size, np.diff(trace.offsets))
    hit = (distances.m < l1_chunks + l2_chunks) & (distances.m < distances.inf)
    from_l1 = hit & (distances.d < l1_chunks)
    total = int(trace.seq_len.sum())
    l1 = int(weights[from_l1].sum())
    both = int(weights[hit].sum())
    return {"l1_chunks": int(l1_chunks), "l2_chunks": int(l2_chunks),
            "l1_hit_tokens": l1, "l2_hit_tokens": both - l1, "total_tokens": total,
            "l1_hit_rate": l1 / total if total else 0.0,
            "l2_hit_rate": (both - l1) / total if total else 0.0}


# --------------------------------------------------------------------------------------------
# Capacities to show (the reference implementation for tests: lru_reference.py)
# --------------------------------------------------------------------------------------------


def log_capacities(lo_chunks: int, hi_chunks: int, points: int) -> np.ndarray:
    """``points`` capacities (chunks) log-spaced in ``[lo, hi]``, distinct, sorted."""
    lo = max(1, int(lo_chunks))
    hi = max(lo, int(hi_chunks))
    vals = np.unique(np.rint(np.geomspace(lo, hi, max(1, points))).astype(np.int64))
    return vals
