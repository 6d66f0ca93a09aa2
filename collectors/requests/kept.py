"""Rendered requests the prompt check's first pass keeps for its "if fixed" pass (``Kept``):
each text as what it adds to its conversation's previous turn (:func:`_delta`), memory only;
where the first pass says which request of the reading each one is, also its line map and its
light fields, so that the fix pass reads no line again after the last request not kept
(:meth:`Kept.requests`)."""

from __future__ import annotations

import os
import pickle
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from ...models.prompts.busters import LineMap, line_bounds
from .delta import Delta, delta, undelta
from .prepare import Prepared, conversation
from .read import LogRequest, SlimRequest, light

KEEP_BYTES = 192 << 20
"""Memory the first pass's renders may take to be reused by the fix pass (``Kept``)."""
REF_BYTES = 16 << 20
"""Characters each pass's recent texts (``Kept``'s references) may hold."""


class RecentTexts:
    """Recent texts by file:line, and each conversation's newest one, within ``budget``
    characters: the oldest forgotten first."""

    def __init__(self, budget: int = REF_BYTES):
        self.budget = budget
        self.used = 0
        self.by: OrderedDict[str, str] = OrderedDict()
        self.newest: dict[object, str] = {}

    def add(self, where: str, conv: object, data: str) -> None:
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

    def ref(self, conv: object) -> tuple[str, str] | None:
        w = self.newest.get(conv)
        got = self.by.get(w) if w is not None else None
        return (w, got) if w is not None and got is not None else None


_Entry = tuple[str | None, tuple[int, int, int, int, bool] | None, bytes, int, int, tuple[bytes, bytes] | None]
"""A kept text: the previous turn's file:line (None: none, the text compressed), how it is made
of it and its own characters (``delta.delta``: UTF-8, compressed past ``RAW_BYTES``), the text's
CRC-32, the request's place in the reading (-1: not told), and what makes it again without
reading (:meth:`Kept._again`; None: nothing)."""


RAW_BYTES = 256
"""What a kept text adds to its previous turn is kept as it is up to this size, compressed past it."""


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _stats(paths: Sequence[Path]) -> tuple[tuple[str, int, int], ...]:
    out = []
    for p in paths:
        st = os.stat(p)
        out.append((str(p), st.st_size, st.st_mtime_ns))
    return tuple(out)


class Kept:
    """Rendered requests the first pass keeps for the fix pass, by file:line, once it has a
    finding (so a fix pass will run), within ``budget`` bytes: the first of them in arrival order
    (past the budget nothing more is kept; the fix pass renders the rest again). The fix pass
    takes each back as it reads it, freeing it, and maps its lines again (cheaper than the
    render; a map is larger than its text).

    A text is kept as what it adds to its conversation's previous turn (``prepare.conversation``; the
    newest earlier text of it, among the recent ones): their common prefix, then, past the line
    they part at, the run of the previous turn it has again (a timestamp rewritten in the system
    prompt), and its own bytes (:func:`_delta`; compressed past ``RAW_BYTES``, and a text with no
    previous turn). An agent's turn that repeats the conversation so far so takes what it adds
    (on the 200 MB agent log, about 500 bytes a request). The fix pass, reading in
    the same order, holds the same recent texts (the ones it takes back and the ones it renders
    again); a text whose previous turn it no longer holds, or that does not come back as it was
    (its CRC-32), is rendered again. Memory only, never written.

    Where the first pass tells each request's place in its reading and its line map (the process
    rendering ahead, ``forked.py``), the request's light fields and its line map are kept too
    (the map as runs of lines: about 350 bytes a request with its light fields, on an agent log),
    and :meth:`requests` gives the fix pass the requests after the last one not kept without
    reading them."""

    def __init__(self, budget: int | None = None):
        self.budget = KEEP_BYTES if budget is None else budget
        self.used = 0
        self.full = False
        self.by: dict[str, _Entry] = {}
        self.twice: set[str] = set()
        self.put_texts = RecentTexts()
        self.take_texts = RecentTexts()
        self.next = 0
        """Requests of the reading told so far (the place after the last one put)."""
        self.last_gap = -1
        """The place of the last request of the reading that cannot be made again (-1: none)."""
        self.placed = True
        """Every request put said its place in the reading."""
        self.ended: int | None = None
        """The reading's requests in all (:meth:`end`; None: not told)."""
        self.files: tuple[tuple[str, int, int], ...] | None = None
        self.convs: dict[object, int] = {}
        self.conv_keys: list[object] = []
        self.made_again = 0
        """Requests :meth:`requests` made again without reading."""

    def put(self, p: Prepared, at: int | None = None, conv: object = None,
            sent: tuple[str | Delta[str], object] | None = None) -> None:
        """Keep ``p``'s text. ``at``: its place in the first pass's reading (its requests counted
        from 0, the sample's only; the ones between two places told are not kept), its line map
        kept too (as ``LineMap.runs``) to make it again without reading; ``conv``: its
        ``prepare.conversation`` when the caller has it; ``sent``: the text as the process
        rendering ahead sent it (``delta.Mirror.send_tagged``: itself, or its delta against its
        conversation's last text and that one's file:line), kept as it is."""
        if at is None:
            self.placed = False
        else:
            if at > self.next:
                self.last_gap = at - 1
            self.next = at + 1
        if self.full or p.text is None or self.budget <= 0:
            self._gap(at)
            return
        where = p.request.where
        if where in self.by or where in self.twice:  # two requests at one place: neither is kept
            self.by.pop(where, None)
            self.twice.add(where)
            self._gap(at)
            return
        text = p.text
        conv = conversation(p.request) if conv is None else conv
        if sent is None:
            ref = self.put_texts.ref(conv)
            self.put_texts.add(where, conv, text)
            sent = (text, None) if ref is None else (delta(ref[1], text), ref[0])
        msg, tag = sent
        ref_where = tag if isinstance(tag, str) else None
        cut: tuple[int, int, int, int, bool] | None = None
        if isinstance(msg, str) or ref_where is None:
            ref_where, z = None, zlib.compress(_utf8(text), 1)
        else:
            k, x, m, mid, own = msg
            z = _utf8(own)
            cut = (k, x, m, mid, len(z) > RAW_BYTES)
            if cut[4]:
                z = zlib.compress(z, 1)
        again = self._again(p, conv) if at is not None else None
        size = 150 + len(z) + (100 + len(again[0]) + len(again[1]) if again is not None else 0)
        if self.used + size > self.budget:
            self.full = True
            self._gap(at)
            return
        self.by[where] = (ref_where, cut, z, zlib.crc32(_utf8(text)), -1 if at is None else at, again)
        self.used += size
        if again is None:
            self._gap(at)

    def _gap(self, at: int | None) -> None:
        if at is not None:
            self.last_gap = max(self.last_gap, at)

    def _again(self, p: Prepared, conv: object) -> tuple[bytes, bytes] | None:
        """What makes ``p`` again without reading: its light fields, its conversation (by number)
        and its map's roles (pickled), and its map's runs of lines (``LineMap.runs``: the runs and
        the lines that name a tool; the lines' bounds are found in the text again:
        ``busters.line_bounds``). None: a map not made of runs over every line of the text."""
        lm = p.lines
        text = p.text
        if lm is None or text is None or lm.runs is None or lm.split_of != len(text):
            return None
        c = self.convs.get(conv)
        if c is None:
            c = self.convs[conv] = len(self.conv_keys)
            self.conv_keys.append(conv)
            self.used += 100 + len(repr(conv))
        table, named = lm.runs
        table = table[:, table[0] > 0]
        small = table.size and -32768 <= table.min() and table.max() < 32768 and (not len(named) or named[-1] < 32768)
        dtype = np.int16 if small else np.int32
        head = pickle.dumps((light(p.request, c), lm.roles, np.dtype(dtype).char, table.shape[1]),
                            protocol=pickle.HIGHEST_PROTOCOL)
        return head, table.astype(dtype).tobytes() + named.astype(dtype).tobytes()

    def end(self, n: int, paths: Sequence[Path]) -> None:
        """The first pass's reading ended: ``n`` requests read, from ``paths`` (their size and
        time of change noted: a file changed since is read again)."""
        if n > self.next:
            self.last_gap = n - 1
        self.ended = n
        self.files = _stats(paths)
        self.put_texts = RecentTexts(0)  # nothing more is put: its texts freed before the fix pass

    def requests(self, read: Callable[[], Iterable[LogRequest]], paths: Sequence[Path]
                 ) -> Iterator[LogRequest | Prepared]:
        """The fix pass's requests, in the first pass's order: the ones up to the last one not
        kept read (``read()``, the same reading), then the kept ones made again without reading
        (a ``Prepared`` with its text and line map; its request with its light fields only:
        ``read.SlimRequest``). All read when a request put did not say its place, the reading's
        end was not told, or a file changed since; from where a kept one cannot be made again (its
        previous turn no longer held, its CRC), the rest read again, the ones given passed over."""
        if not self.placed or self.ended is None or self.files != _stats(paths):
            yield from read()
            return
        start, n = self.last_gap + 1, 0
        if start > 0:
            it = iter(read())
            try:
                for r in it:
                    yield r
                    n += 1
                    if n >= start:
                        break
            finally:
                close = getattr(it, "close", None)
                if close is not None:
                    close()
            if n < start:
                return
        for where in list(self.by):  # n == start here
            e = self.by.get(where)
            if e is None or e[4] != n or e[5] is None:
                break
            p = self._made_again(where, e)
            if p is None:
                break
            yield p
            n += 1
        else:
            if n == self.ended:
                return
        for i, r in enumerate(read()):  # the rest read: the ones given passed over
            if i >= n:
                yield r

    def _made_again(self, where: str, e: _Entry) -> Prepared | None:
        assert e[5] is not None
        head, runs = e[5]
        (fields, bulky, c), roles, dtype, n = pickle.loads(head)
        r = SlimRequest.of(fields, bulky, self.conv_keys[c])
        text = self._taken(r, self.by.pop(where))
        if text is None:
            return None
        starts, ends = line_bounds(text)
        flat = np.frombuffer(runs, dtype=dtype).astype(np.int64)
        table = flat[:5 * n].reshape(5, n)
        if int(table[0].sum()) != len(starts):
            return None
        self.made_again += 1
        return Prepared(r, None, None, text, LineMap.from_runs(starts, ends, roles, table, flat[5 * n:], len(text)), 0)

    def take(self, r: LogRequest) -> str | None:
        """``r``'s text as the first pass rendered it (None: not kept, or its previous turn no
        longer held); the memory it held is freed, the budget is not given back."""
        got = self.by.pop(r.where, None)
        return self._taken(r, got) if got is not None else None

    def _taken(self, r: LogRequest, got: _Entry) -> str | None:
        ref_where, cut, z, crc = got[:4]
        if ref_where is None or cut is None:
            text = zlib.decompress(z).decode("utf-8", "surrogatepass")
        else:
            ref = self.take_texts.by.get(ref_where)
            k, x, m, mid, zipped = cut
            if ref is None or len(ref) < max(k, x + m):
                return None
            own = (zlib.decompress(z) if zipped else z).decode("utf-8", "surrogatepass")
            text = undelta(ref, (k, x, m, mid, own))
        if zlib.crc32(_utf8(text)) != crc:  # not the previous turn it was kept against (two requests at one place)
            return None
        self.seen(r, text)
        return text

    def seen(self, r: LogRequest, text: str) -> None:
        """``r``'s text, taken back or rendered again by the fix pass: what later texts refer to."""
        if self.by:
            self.take_texts.add(r.where, conversation(r), text)
