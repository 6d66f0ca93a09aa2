"""The what-if's replay, pure: a trace's chunk keys and a typed ``ReplayRequest`` in, hits out.

One pass of LMCache's hit rule over the trace (``sim.stack_distances``) gives the exact hit curve
at every capacity; the capacities asked for are read off it; the trace is routed once per
routing over ``ranks`` private caches (``pools.topology``); an L2 tier under the configured L1
splits the hits by tier (``sim.tier_split``). No I/O, no prices: the priced layer
(``kvplan.app.views.whatif``) turns these hits into GB, GPU-hours and dollars with the
deployment's measurement, and the TTFT replay (``kvplan.models.cache.latency``) reads the
same trace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.vocabulary import ROUTINGS, Routing
from . import pools, sim


@dataclass(frozen=True)
class ReplayRequest:
    """What to replay, in chunks (the priced layer converts GB with the bytes per chunk)."""

    points: int = 30
    """Capacities listed along the curve (log-spaced from 1 chunk to saturation)."""
    ranks: int = 8
    """Private caches compared with one shared pool."""
    routings: tuple[Routing, ...] = ROUTINGS
    """Routings of the private caches."""
    seed: int = 0
    """Seed of the random routing."""
    configured_chunks: int | None = None
    """The cache size run today, added to the listed capacities (None: unknown)."""
    compared_chunks: int | None = None
    """Total capacity compared shared vs private (None: the configured size, else half the saturation size)."""
    l2_chunks: int | None = None
    """An L2 tier under the configured L1 (needs ``configured_chunks``)."""


@dataclass(frozen=True)
class Replay:
    """Hits of one trace under a ``ReplayRequest``."""

    curve: sim.Curve
    """The exact LRU hit curve of one shared pool."""
    capacities: np.ndarray
    """The listed capacities, chunks (ascending, the configured one included)."""
    hit_rates: np.ndarray
    """Token hit rate at each listed capacity."""
    compared_chunks: int
    """Total capacity compared shared vs private."""
    topologies: dict[Routing, pools.Topology]
    """The shared pool and the private caches, per routing."""
    tiers: dict[str, Any] | None
    """L1/L2 hit tokens (``sim.tier_split``), when an L2 was asked for with a configured L1."""


def replay(trace: sim.Trace, req: ReplayRequest) -> Replay:
    dist = sim.stack_distances(trace)
    curve = sim.lru_curve(trace, dist)
    sat = curve.saturation_chunks
    caps = sim.log_capacities(1, sat, req.points)
    if req.configured_chunks is not None:
        caps = np.unique(np.concatenate((caps, [req.configured_chunks])))
    compared = req.compared_chunks if req.compared_chunks is not None else (
        req.configured_chunks if req.configured_chunks is not None else max(req.ranks, sat // 2))
    tiers = None
    if req.l2_chunks is not None and req.configured_chunks is not None:
        tiers = sim.tier_split(trace, dist, req.configured_chunks, req.l2_chunks)
    return Replay(curve=curve, capacities=caps, hit_rates=np.asarray(curve.hit_rate(caps)),
                  compared_chunks=int(compared),
                  topologies={Routing.parse(r): pools.topology(trace, req.ranks, r, seed=req.seed, shared=curve)
                              for r in req.routings},
                  tiers=tiers)
