"""Rendered requests the prompt check's first pass keeps for its "if fixed" pass (``Kept``):
each text as what it adds to its conversation's previous turn, zlib-compressed, memory only."""

from __future__ import annotations

import zlib
from collections import OrderedDict

from .pieces import common_prefix
from .prepare import Prepared, conversation
from .read import LogRequest

KEEP_BYTES = 128 << 20
"""Memory the first pass's renders may take to be reused by the fix pass (``Kept``)."""
REF_BYTES = 16 << 20
"""Memory each pass's recent texts (``Kept``'s references) may take."""


class RecentTexts:
    """Recent texts (UTF-8) by file:line, and each conversation's newest one, within ``budget``
    bytes: the oldest forgotten first."""

    def __init__(self, budget: int = REF_BYTES):
        self.budget = budget
        self.used = 0
        self.by: OrderedDict[str, bytes] = OrderedDict()
        self.newest: dict[object, str] = {}

    def add(self, where: str, conv: object, data: bytes) -> None:
        old = self.by.pop(where, None)
        self.used -= len(old) if old is not None else 0
        self.by[where] = data
        self.used += len(data)
        self.newest[conv] = where
        while self.used > self.budget and self.by:
            _, gone = self.by.popitem(last=False)
            self.used -= len(gone)
        if len(self.newest) > 4 * len(self.by) + 1024:  # conversations whose text is gone
            self.newest = {c: w for c, w in self.newest.items() if w in self.by}

    def ref(self, conv: object) -> tuple[str, bytes] | None:
        w = self.newest.get(conv)
        got = self.by.get(w) if w is not None else None
        return (w, got) if w is not None and got is not None else None


class Kept:
    """Rendered requests the first pass keeps for the fix pass, by file:line, once it has a
    finding (so a fix pass will run), within ``budget`` bytes: the first of them in arrival order
    (past the budget nothing more is kept; the fix pass renders the rest again). The fix pass
    takes each back as it reads it, freeing it, and maps its lines again (cheaper than the
    render; a map is larger than its text).

    A text is kept as what it adds to its conversation's previous turn (``prepare.conversation``; the
    newest earlier text of it, among the recent ones): the length of their common prefix and the
    rest, zlib-compressed with the previous turn's matching text as the dictionary. An agent's turn
    that repeats the conversation so far so takes a few hundred bytes. The fix pass, reading in
    the same order, holds the same recent texts (the ones it takes back and the ones it renders
    again); a text whose previous turn it no longer holds, or that does not come back as it was
    (its CRC-32), is rendered again. Memory only, never written."""

    def __init__(self, budget: int | None = None):
        self.budget = KEEP_BYTES if budget is None else budget
        self.used = 0
        self.full = False
        self.by: dict[str, tuple[str | None, int, bytes, int]] = {}
        self.twice: set[str] = set()
        self.put_texts = RecentTexts()
        self.take_texts = RecentTexts()

    def put(self, p: Prepared) -> None:
        if self.full or p.text is None or self.budget <= 0:
            return
        where = p.request.where
        if where in self.by or where in self.twice:  # two requests at one place: neither is kept
            self.by.pop(where, None)
            self.twice.add(where)
            return
        data = p.text.encode("utf-8", "surrogatepass")
        conv = conversation(p.request)
        ref = self.put_texts.ref(conv)
        self.put_texts.add(where, conv, data)
        if ref is None:
            entry: tuple[str | None, int, bytes, int] = (None, 0, zlib.compress(data, 1), zlib.crc32(data))
        else:
            k = common_prefix(ref[1], data)
            z = zlib.compressobj(1, zdict=ref[1][k:k + 32768]) if len(ref[1]) > k else zlib.compressobj(1)
            entry = (ref[0], k, z.compress(data[k:]) + z.flush(), zlib.crc32(data))
        size = 150 + len(entry[2])
        if self.used + size > self.budget:
            self.full = True
            return
        self.by[where] = entry
        self.used += size

    def take(self, r: LogRequest) -> str | None:
        """``r``'s text as the first pass rendered it (None: not kept, or its previous turn no
        longer held); the memory it held is freed, the budget is not given back."""
        got = self.by.pop(r.where, None)
        if got is None:
            return None
        ref_where, k, z, crc = got
        if ref_where is None:
            data = zlib.decompress(z)
        else:
            ref = self.take_texts.by.get(ref_where)
            if ref is None or len(ref) < k:
                return None
            d = zlib.decompressobj(zdict=ref[k:k + 32768]) if len(ref) > k else zlib.decompressobj()
            try:
                data = ref[:k] + d.decompress(z) + d.flush()
            except zlib.error:  # not the previous turn it was kept against (two requests at one place)
                return None
        if zlib.crc32(data) != crc:
            return None
        self.seen(r, data)
        return data.decode("utf-8", "surrogatepass")

    def seen(self, r: LogRequest, data: bytes | str) -> None:
        """``r``'s text, taken back or rendered again by the fix pass: what later texts refer to."""
        if self.by:
            self.take_texts.add(r.where, conversation(r),
                                data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
