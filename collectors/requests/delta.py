"""A text as what it adds to an earlier one of its conversation (the prompt check's kept renders,
``kept.py``, and the texts crossing the pipe from the process rendering ahead, ``forked.py``).

An agent's turn repeats the conversation so far and adds to it; a system prompt that carries a
timestamp rewrites one line near the start and is the same after it. So a text is: the common
prefix of the two, the rest of the line where they part, the longest run of the earlier text
that comes again where that line ends in both, and the rest (:func:`delta`). What is stored or
sent is the text's own characters, a few hundred on an agent log instead of the whole prompt."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import AnyStr

from .pieces import common_prefix

Delta = tuple[int, int, int, int, AnyStr]
"""(``k``: the common prefix's length, ``x`` and ``m``: the run of the earlier text that comes
again, where it starts there and its length, ``mid``: the text's own characters before the run,
``own``: the text's own characters)."""


def delta(ref: AnyStr, data: AnyStr) -> Delta[AnyStr]:
    """``data`` as what it adds to ``ref`` (module docstring); :func:`undelta` makes it again."""
    nl = "\n" if isinstance(data, str) else b"\n"
    k = common_prefix(ref, data)
    x, y = ref.find(nl, k), data.find(nl, k)
    if x < 0 or y < 0:
        x = m = 0
        y = len(data)
    else:
        m = common_prefix(ref[x:x + len(data) - y], data[y:y + len(ref) - x])
    return k, x, m, y - k, data[k:y] + data[y + m:]


def undelta(ref: AnyStr, d: Delta[AnyStr]) -> AnyStr:
    """The text :func:`delta` took apart against ``ref``."""
    k, x, m, mid, own = d
    return ref[:k] + own[:mid] + ref[x:x + m] + own[mid:]


class Mirror:
    """Each conversation's last text, at most ``budget`` characters in all (least recently used
    dropped): one on each side of a pipe, fed the same texts in the same order, so that a text
    crosses as what it adds to its conversation's last one (:meth:`send` on one side,
    :meth:`received` on the other). A text sent may carry a tag (its file:line): :meth:`send`
    also says the tag of the text it is a delta of, so that one who keeps it (``kept.py``) takes
    the delta as it is."""

    def __init__(self, budget: int = 4 << 20):
        self.budget = budget
        self.used = 0
        self.last: OrderedDict[Hashable, tuple[str, object]] = OrderedDict()

    def send(self, conv: Hashable, text: str) -> str | Delta[str]:
        """What crosses for ``text``: itself, or its delta against ``conv``'s last text."""
        return self.send_tagged(conv, text)[0]

    def send_tagged(self, conv: Hashable, text: str, tag: object = None) -> tuple[str | Delta[str], object]:
        """:meth:`send` of ``text`` tagged ``tag``, and the tag of the text it is a delta of (None:
        none, or it crosses whole)."""
        ref = self._swap(conv, text, tag)
        return (text, None) if ref is None else (delta(ref[0], text), ref[1])

    def received(self, conv: Hashable, sent: str | Delta[str]) -> str:
        """The text :meth:`send` sent (the other side's mirror fed as this one)."""
        if isinstance(sent, str):
            self._swap(conv, sent)
            return sent
        ref = self.last.get(conv)
        assert ref is not None, "the two mirrors are fed the same texts"
        text = undelta(ref[0], sent)
        self._swap(conv, text)
        return text

    def _swap(self, conv: Hashable, text: str, tag: object = None) -> tuple[str, object] | None:
        old = self.last.pop(conv, None)
        if old is not None:
            self.used -= len(old[0])
        self.last[conv] = (text, tag)
        self.used += len(text)
        while self.used > self.budget and len(self.last) > 1:
            self.used -= len(self.last.popitem(last=False)[1][0])
        return old
