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
    out = np.zeros(R, dtype=np.int64)
    if T == 0:
        return np.arange(R, dtype=np.int64) % ranks
    req = np.repeat(np.arange(R, dtype=np.int64), lengths)
    start = trace.offsets[:-1]
    prev = previous_reference(trace.chunk_ids)
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
