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


def line_map_reference(text: str, contents: Sequence[tuple[str, str | None]], tool_names: Sequence[str] = ()
                       ) -> list[tuple[int, int, int | None, str, int, int | None]]:
    """``busters.line_map`` as it was written before it was vectorised (commit 357468b), one
    Python step a line, as tuples (start, end, message index, role, line, content end): each
    message's content (or, not found, its stripped content) found in order; a line belongs to the
    span it overlaps, numbered from the span's first line; else ``tools`` when it names a tool,
    ``template`` otherwise, numbered in the whole text."""
    spans: list[tuple[int, int, int, str]] = []
    cursor = 0
    for i, (role, c) in enumerate(contents):
        if not c:
            continue
        for cand in (c, c.strip()):
            p = text.find(cand, cursor) if cand else -1
            if p >= 0:
                spans.append((p, p + len(cand), i, role))
                cursor = p + len(cand)
                break
    names = [f'"{n}"' for n in tool_names if n]
    out: list[tuple[int, int, int | None, str, int, int | None]] = []
    start, k, n = 0, 0, 0
    while True:
        nl = text.find("\n", start)
        end = len(text) if nl < 0 else nl
        n += 1
        while k < len(spans) and spans[k][1] <= start and not (start == end == spans[k][1] > spans[k][0]):
            k += 1
        inside = k < len(spans) and (max(start, spans[k][0]) < min(end, spans[k][1])
                                     or (start == end and spans[k][0] <= start < spans[k][1]))
        if inside:
            s0, s1, idx, role = spans[k]
            out.append((start, end, idx, role, text.count("\n", s0, max(s0, start)) + 1, s1))
        else:
            role = "tools" if any(x in text[start:end] for x in names) else "template"
            out.append((start, end, spans[k][2] if k < len(spans) else None, role, n, None))
        if nl < 0:
            return out
        start = nl + 1
