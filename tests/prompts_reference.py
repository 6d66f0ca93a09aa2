"""The prompt tests' independent reference: what an unlimited prefix cache hits, computed from
token ids directly (no kvplan code): each request hits the longest token prefix it shares with
any earlier request, in full blocks within ``prompt_tokens - 1``."""

from __future__ import annotations

from collections.abc import Sequence


def shared_prefix(seqs: Sequence[Sequence[int]], i: int) -> int:
    """Tokens request ``i`` shares, from its start, with the earlier request that shares the most."""
    best = 0
    s = seqs[i]
    for prev in seqs[:i]:
        k = 0
        while k < min(len(s), len(prev)) and s[k] == prev[k]:
            k += 1
        best = max(best, k)
    return best


def hit_tokens(seqs: Sequence[Sequence[int]], i: int, block: int) -> int:
    """Request ``i``'s hit tokens with an unlimited cache of ``block``-token blocks."""
    return min(shared_prefix(seqs, i), len(seqs[i]) - 1) // block * block
