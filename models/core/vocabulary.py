"""One spelling per idea, shared by the CLI, the load generator, the plan, the what-if and the
charts.

Each vocabulary is a ``StrEnum``: its members compare equal to their strings, so JSON, DuckDB
rows and recorded fixtures keep reading as they did. ``parse`` also takes an older spelling a
user or a stored row may still hold (``ALIASES``) and names the choices when the value is none."""

from __future__ import annotations

from enum import StrEnum

from .errors import KvplanError


class Routing(StrEnum):
    """How requests are spread over servers or cache ranks."""

    ROUND_ROBIN = "round_robin"
    RANDOM = "random"
    PREFIX_AFFINITY = "prefix_affinity"
    """A conversation (or a request whose prefix was seen) goes back to the rank that holds it."""

    @classmethod
    def parse(cls, value: str, source: str = "routing") -> Routing:
        """``value`` as a routing; the load generator's and the CLI's older ``affinity`` is
        ``PREFIX_AFFINITY``."""
        try:
            return cls(ALIASES.get(value, value))
        except ValueError:
            choices = ", ".join([*cls, *ALIASES])
            raise KvplanError(f"must be one of {choices}; got {value!r}", source=source) from None


class Topology(StrEnum):
    """How the KV caches of a what-if's set-up are laid out over the engines."""

    TODAY = "today"
    """The deployment as recorded (its own caches, its own routing)."""
    SHARED = "shared"
    """One pool on today's engines."""
    PRIVATE = "private"
    """One cache per engine (each 1/N of the capacity), requests spread by a ``Routing``."""
    TIERED = "tiered"
    """An L1 over an L2, replayed as one pool of their sum."""


class Tier(StrEnum):
    """A cache tier a plan prices and a chart draws: the keys of ``PlanResult.saved_by_tier`` and
    ``decision_by_tier``, and of the two series of ``models.metrics.tiers`` that are a tier's own.
    vLLM's count of its KV connector (``external``) is not a third tier: it measures the LMCache
    tier from vLLM's side (the plan prices ``LMCACHE`` on those tokens,
    ``PricedWindow.external_cached``); ``l1``/``l2`` are levels inside LMCache."""

    DEVICE = "device"
    """vLLM's own prefix cache (GPU memory): free, it comes with vLLM."""
    LMCACHE = "lmcache"
    """LMCache behind vLLM's KV connector (its L1 and L2 together), net of its overhead."""


class PricedTier(StrEnum):
    """Which cached tokens a plan prices (``PrefillMeasurement.priced_tier``)."""

    ALL = "all"
    """Every cache tier against no cache at all."""
    LMCACHE = "lmcache"
    """Only what LMCache adds: the baseline keeps vLLM's own prefix-cache hits (free)."""


class NoteKind(StrEnum):
    """What a line of a plan's assumptions or a what-if's notes is, by the tag it begins with:
    readers filter on the kind (``kvplan plan`` prints the ``note: `` lines, the what-if pulls out
    why it has no dollars), and the stored and printed lines keep their spelling."""

    NOTE = "note: "
    """Something about the data a reader should know (a missing series, a partial window)."""
    DOLLARS_LEFT_OUT = "dollars left out: "
    """Why a what-if has no dollars (``WhatIf.dollars_left_out``)."""

    def of(self, text: object) -> str:
        """``text`` as a line of this kind."""
        return f"{self.value}{text}"

    def tags(self, line: str) -> bool:
        """Whether ``line`` is of this kind."""
        return line.startswith(self.value)


ALIASES = {"affinity": Routing.PREFIX_AFFINITY.value}
"""Older spellings still accepted on input (``kvplan pilot --routing affinity``, stored runs)."""

ROUTINGS: tuple[Routing, ...] = tuple(Routing)
