"""LMCache's own cache simulation, one capacity at a time: its ``simulate`` loop over an
``OrderedDict`` LRU (LMCache 0.5.6, ``lmcache/tools/cache_simulator/simulator.py``). Slow; the
reference the one-pass curves of ``kvplan.models.cache.sim`` are tested against."""

from __future__ import annotations

from collections import OrderedDict

from .sim import Trace


def reference_hit_tokens(trace: Trace, capacity: int) -> int:
    """LMCache's ``simulate`` loop (``LRUCacheFast``) at one capacity: slow, for tests."""
    cache: OrderedDict[int, None] = OrderedDict()
    cap = max(1, int(capacity))
    hits = 0
    for r in range(trace.requests):
        chunk_ids = trace.chunk_ids[trace.offsets[r]:trace.offsets[r + 1]].tolist()
        hit_prefix = 0
        for h in chunk_ids:
            if h in cache:
                hit_prefix += 1
            else:
                break
        hits += hit_prefix * int(trace.chunk_size[r])
        for i, h in enumerate(chunk_ids):
            if i < hit_prefix or h in cache:
                cache.move_to_end(h)
            else:
                if len(cache) >= cap:
                    cache.popitem(last=False)
                cache[h] = None
    return hits
