"""A window's cache tiers: vLLM's device prefix cache, the KV connector, LMCache's lookup and
its L1 and L2, each with its token-weighted hit rate (``Tier``, ``tiers``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core import vocabulary
from . import catalog as c
from .spellings import resolve
from .window import Increase, WindowStats, total


@dataclass(frozen=True)
class Tier:
    """One cache tier's token-weighted hit rate over the window."""

    key: str
    """A ``vocabulary.Tier`` (device, lmcache) or a series of one: external (vLLM's count of its KV
    connector), l1, l2, retrieve. Code filters on this, never on ``label``."""
    label: str
    """The tier's name as pages and the report show it."""
    hit_rate: float | None
    """Hits / queries in tokens; None when the tier is not reported."""
    hits: float | None
    """Tokens found in this tier."""
    queries: float | None
    """Tokens looked up in this tier."""


def tiers(s: WindowStats, rows: list[Increase]) -> list[Tier]:
    """Every cache tier of a window: vLLM's device prefix cache, the KV connector, LMCache (its
    lookup; in-process, the retrieve success apart: it is not a share of the prompt)."""
    rows, _ = resolve(rows)
    req = total(rows, c.total_name(c.LM_REQUESTED))
    inproc = req is None and total(rows, c.total_name(c.LM_INPROC_LOOKUP_TOKENS)) is not None
    lm = "LMCache (in-process)" if inproc else "LMCache MP"
    hit_name = c.total_name(c.LM_INPROC_LOOKUP_HITS if inproc else c.LM_HIT)
    out = [
        Tier(vocabulary.Tier.DEVICE, "vLLM prefix cache (device)", s.prefix_cache_hit_rate, s.prefix_cache_hits,
             s.prefix_cache_queries),
        Tier("external", "KV connector (external, e.g. LMCache)", s.external_prefix_cache_hit_rate,
             s.external_prefix_cache_hits, s.external_prefix_cache_queries),
        Tier(vocabulary.Tier.LMCACHE, f"{lm} lookup, L1+L2", s.lmcache_lookup_hit_rate, total(rows, hit_name),
             total(rows, c.total_name(c.LM_INPROC_LOOKUP_TOKENS)) if inproc else req),
        Tier("l1", "LMCache MP L1 (CPU memory)", s.lmcache_l1_hit_rate, total(rows, c.total_name(c.LM_HIT_L1)), req),
        Tier("l2", "LMCache MP L2 (disk / remote)", s.lmcache_l2_hit_rate, total(rows, c.total_name(c.LM_HIT_L2)), req),
    ]
    if s.lmcache_retrieve_hit_rate is not None:
        out.append(Tier("retrieve", "LMCache (in-process) retrieve success: loaded / requested to load",
                        s.lmcache_retrieve_hit_rate, total(rows, c.total_name(c.LM_INPROC_HIT)),
                        total(rows, c.total_name(c.LM_INPROC_REQUESTED))))
    return out
