"""One shared cache pool against N private caches (the article's 8 x 50 GB or one 400 GB
pool), on the curves of ``kvplan.models.cache.sim``: requests routed round-robin, at random (a fixed
seed), or by prefix affinity (follow the rank that served the deepest prefix already seen when
it covers at least ``AFFINITY_MIN_MATCH`` of the request, else round-robin; a simplified
version of SGLang's router rule). The traces carry no session ids, so there is no session
affinity."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import KvplanError
from ..core.vocabulary import ROUTINGS, Routing
from .sim import Curve, Trace, lru_curve, previous_reference

AFFINITY_MIN_MATCH = 0.5
"""Prefix affinity follows the earlier rank only when the seen prefix covers at least this
share of the request's chunks (SGLang's cache-aware router default threshold)."""


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
    if T == 0:
        return np.arange(R, dtype=np.int64) % ranks
    prev = previous_reference(trace.chunk_ids)
    idx = prev.dtype.type
    req = np.repeat(np.arange(R, dtype=idx), lengths)
    start = trace.offsets[:-1]
    unseen = prev < 0
    unseen |= prev >= start.astype(idx)[req]  # not looked up by an earlier request
    # Leading chunks seen before: position of the first unseen chunk in each request.
    first_unseen = np.flatnonzero(unseen)
    del unseen
    r_unseen = req[first_unseen]
    firsts = np.flatnonzero(np.diff(r_unseen, prepend=-1) != 0)  # each request's first unseen chunk
    matched = lengths.copy()
    matched[r_unseen[firsts]] = first_unseen[firsts] - start[r_unseen[firsts]]
    del first_unseen, r_unseen, firsts
    # The request that last referenced the deepest matched chunk.
    deep = np.full(R, -1, dtype=np.int64)
    has = matched > 0
    deep[has] = req[prev[start[has] + matched[has] - 1]]
    del req, prev
    follow = has & (matched >= AFFINITY_MIN_MATCH * lengths)
    # A request that does not follow takes the next rank round-robin (counted over those only);
    # one that follows takes the rank of the request it follows, so of the first request up its
    # chain that does not follow (found by pointer jumping: each request follows an earlier one).
    lead_to = np.where(follow, deep, np.arange(R, dtype=np.int64))
    while True:
        up = lead_to[lead_to]
        if np.array_equal(up, lead_to):
            break
        lead_to = up
    out = np.zeros(R, dtype=np.int64)
    out[~follow] = np.arange(int((~follow).sum()), dtype=np.int64) % ranks
    return out[lead_to]


@dataclass(frozen=True)
class Topology:
    """Shared pool vs ``ranks`` private caches under one routing."""

    ranks: int
    """Number of private caches (engines) the trace's requests are routed over."""
    policy: str
    """Routing that assigns requests to ranks: one of ``ROUTINGS``."""
    shared: Curve
    """Hit curve of one pool shared by every rank."""
    private: tuple[Curve, ...]
    """Hit curve of each rank's private cache, the rank's own requests only (one per rank)."""

    def private_hit_tokens(self, capacity_chunks_total: int) -> int:
        """Hit tokens of ``ranks`` private caches of ``capacity // ranks`` chunks each."""
        each = max(1, int(capacity_chunks_total) // self.ranks)
        return int(sum(c.hit_tokens(each) for c in self.private))

    def private_hit_rate(self, capacity_chunks_total: int) -> float:
        total = self.shared.total_tokens
        return self.private_hit_tokens(capacity_chunks_total) / total if total else 0.0

    @property
    def private_infinite_hit_rate(self) -> float:
        total = self.shared.total_tokens
        return sum(c.infinite_hit_tokens for c in self.private) / total if total else 0.0


def topology(trace: Trace, ranks: int, policy: str = "round_robin", seed: int = 0,
             shared: Curve | None = None) -> Topology:
    """Curves of the shared pool and of each rank's private cache."""
    assignment = route(trace, ranks, policy, seed)
    shared_curve = shared if shared is not None else lru_curve(trace)
    private = tuple(lru_curve(trace.subset(assignment == k)) for k in range(ranks))
    return Topology(ranks, policy, shared_curve, private)
