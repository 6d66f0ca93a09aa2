"""Cache-size and topology what-ifs from traces: the hit-rate curve at every capacity in one pass
(Mattson stack distances under LMCache's hit rule), one shared pool against N private caches
under a routing policy, and what each capacity is worth per month.

The public names of the group, re-exported; each module says more."""

from __future__ import annotations

from .pools import Topology, topology
from .sim import Curve, Trace, lru_curve, make_trace
from .value import CapacityValue, ValueInputs, optimum

__all__ = [
    "CapacityValue", "Curve", "Topology", "Trace", "ValueInputs", "lru_curve", "make_trace", "optimum", "topology"
]
