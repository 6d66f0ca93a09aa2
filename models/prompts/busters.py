"""Cache-busters: where requests that share most of their content diverge early, what the
divergent span is, and how to rewrite a prompt with that span fixed.

Everything here works on a request's **rendered** prompt (the chat template's output) split in
lines, each line tied to where it came from (:func:`line_map`): a message (index, role, line in
its content), the tool list (role ``tools``), or text the template wrote itself (role
``template``: a date the template inserts, a header, a turn rendered differently as history).

:class:`Finder` sees requests in arrival order. A request that missed part of what it could hit
is compared with the recent request it shares the most line text with (at least half of its
text); when their first differing line comes before content they still share (at least a
quarter of the request's text), that line is a finding, and so is each line right after it
that the earlier request does not have (busters come in pairs), classified by the span that differs
(:func:`classify`); a line that one of the two has and the other does not (the lines after it
the same: a timestamp line some requests put first) is the finding, classified by the value it
holds (:func:`classify_inserted`). Findings are keyed by (kind, message index, role, line), so the same
timestamp line in every request is one finding.

The fix (:func:`apply_fix`) is applied to every request whose line at the finding's place holds
what the finding moves (:meth:`Finding.matches`), as a client makes it: volatile values
(timestamps, dates, ids, counters, other) are **moved to the end** of the message they are sent
with (the request's last), and stay there when that message comes back as history in the
conversation's later requests (:class:`Carried`); formatting (whitespace, JSON key order, tool
lists: their lines sorted) is **normalised**.
Prompt text is held in memory only: a finding keeps the *shape* of its span (:func:`shape`:
digits as 9, letters as a/A), never the text.
"""

from __future__ import annotations

import json
import re
import unicodedata
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import compress, count, repeat
from typing import overload

import numpy as np

KINDS = ("iso_timestamp", "epoch_timestamp", "date", "uuid", "hex_id", "counter", "json_keys", "tools",
         "whitespace", "other")
NORMALISED = frozenset({"json_keys", "tools", "whitespace"})
"""Kinds fixed by normalising the line; the others are fixed by moving it to the end."""

_ISO = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")
_EPOCH = re.compile(r"(?<!\d)1\d{9}(?:\d{3}|\.\d+)?(?!\d)")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}/\d{2,4}|\d{1,2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|"
                   r"Nov|Dec)[a-z]* \d{4}|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{1,2},? \d{4}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}")
_WORD = re.compile(r"[\w:.\-+/]")
_PATTERNS = {"iso_timestamp": _ISO, "uuid": _UUID, "epoch_timestamp": _EPOCH, "date": _DATE, "hex_id": _HEX}
MAX_EXAMPLE = 40
MAX_PAIRED = 4
"""Most consecutive divergent lines one request counts (busters come in pairs: a timestamp line,
then a session id line)."""


@dataclass(frozen=True)
class LineInfo:
    """One line of a rendered prompt: its character range, and where it came from. ``line``
    is 1-based within the message's content (or, for template text, within the whole prompt);
    ``content_end``: where the message's content ends in the text (message lines only)."""

    start: int
    """Character offset where the line starts in the rendered prompt."""
    end: int
    """Character offset where the line ends (exclusive)."""
    message_index: int | None
    """Index of the message it belongs to; None for text the chat template wrote."""
    role: str
    """The message's role (``system``, ``user``, ...), or ``template``."""
    line: int
    """1-based line number within the message's content (within the whole prompt for template text)."""
    content_end: int | None = None
    """Where the message's content ends in the text (message lines only; else None)."""

    @property
    def place(self) -> tuple[int | None, str, int]:
        return (self.message_index, self.role, self.line)


class LineMap(Sequence[LineInfo]):
    """A rendered prompt's lines (:func:`line_map`) as parallel arrays, one entry a line: start,
    end, message index (-1: None), role (a code into ``roles``), line, content end (-1: None). A
    :class:`LineInfo` is made only for a line asked for (``lines[i]``, iteration): a request's
    map is built for every request, but read line by line only where a finding or a fix is."""

    __slots__ = ("starts", "ends", "messages", "codes", "roles", "numbers", "content_ends", "split_of", "runs")

    def __init__(self, starts: np.ndarray, ends: np.ndarray, messages: np.ndarray, codes: np.ndarray,
                 roles: tuple[str, ...], numbers: np.ndarray, content_ends: np.ndarray, split_of: int = -1,
                 runs: tuple[np.ndarray, np.ndarray] | None = None):
        self.starts = starts
        self.ends = ends
        self.messages = messages
        self.codes = codes
        self.roles = roles
        self.numbers = numbers
        self.content_ends = content_ends
        self.split_of = split_of
        """The length of the text whose lines these are, every one (``line_map``'s), else -1."""
        self.runs = runs
        """What :meth:`from_runs` made it of (``line_map``'s maps), else None."""

    @classmethod
    def from_runs(cls, starts: np.ndarray, ends: np.ndarray, roles: tuple[str, ...], table: np.ndarray,
                  named: np.ndarray, split_of: int = -1) -> LineMap:
        """The map of the lines ``starts`` to ``ends`` from its runs of lines: ``table``'s columns,
        one a run, are how many lines, their message index, role code, content end and line number
        less the line's index (a message's lines are a run, and so are the lines between two
        messages); ``named``: the lines that name a tool (role code 1, ``tools``), found after.
        What :func:`line_map` makes its maps of, and what ``kept.py`` keeps of one (``runs``)."""
        messages, codes, content_ends, numbers = table[1:].repeat(table[0], axis=1)
        numbers += np.arange(len(starts), dtype=numbers.dtype)
        if len(named):
            codes[named] = 1
        return cls(starts, ends, messages, codes, roles, numbers, content_ends, split_of, (table, named))

    @classmethod
    def of(cls, infos: Sequence[LineInfo]) -> LineMap:
        """``infos`` as a map (itself when it is one)."""
        if isinstance(infos, LineMap):
            return infos
        roles = tuple(dict.fromkeys(i.role for i in infos))
        code = {r: c for c, r in enumerate(roles)}

        def arr(xs: Iterable[int]) -> np.ndarray:
            return np.fromiter(xs, dtype=np.int64, count=len(infos))
        return cls(arr(i.start for i in infos), arr(i.end for i in infos),
                   arr(-1 if i.message_index is None else i.message_index for i in infos),
                   arr(code[i.role] for i in infos), roles, arr(i.line for i in infos),
                   arr(-1 if i.content_end is None else i.content_end for i in infos))

    def __len__(self) -> int:
        return len(self.starts)

    def __eq__(self, other: object) -> bool:
        """Equal to a map or a sequence of :class:`LineInfo` listing the same lines."""
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def _info(self, i: int) -> LineInfo:
        m, ce = self.messages.item(i), self.content_ends.item(i)  # ``item``: a Python int, no numpy scalar
        return LineInfo(self.starts.item(i), self.ends.item(i), None if m < 0 else m, self.roles[self.codes.item(i)],
                        self.numbers.item(i), None if ce < 0 else ce)

    @overload
    def __getitem__(self, i: int) -> LineInfo: ...

    @overload
    def __getitem__(self, i: slice) -> list[LineInfo]: ...

    def __getitem__(self, i: int | slice) -> LineInfo | list[LineInfo]:
        if isinstance(i, slice):
            return [self._info(j) for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(f"line {i} of a map of {len(self)} lines")
        return self._info(i % len(self))

    def __iter__(self) -> Iterator[LineInfo]:
        roles = self.roles
        for s, e, m, c, n, ce in zip(self.starts.tolist(), self.ends.tolist(), self.messages.tolist(),
                                     self.codes.tolist(), self.numbers.tolist(), self.content_ends.tolist(),
                                     strict=True):
            yield LineInfo(s, e, None if m < 0 else m, roles[c], n, None if ce < 0 else ce)

    def find_all(self, place: tuple[int | None, str, int]) -> list[int]:
        """The indices of the lines at ``place`` (message index, role, line): one at most, unless
        a message's role is ``tools`` or ``template``."""
        if place[1] not in self.roles:
            return []
        hit: list[int] = np.flatnonzero((self.numbers == place[2]) & (self.codes == self.roles.index(place[1]))
                                        & (self.messages == (-1 if place[0] is None else place[0]))).tolist()
        return hit

    def find(self, place: tuple[int | None, str, int]) -> int | None:
        """The index of the first line at ``place``, or None."""
        hit = self.find_all(place)
        return hit[0] if hit else None

    def line_at(self, place: tuple[int | None, str, int]) -> LineInfo | None:
        """The line at ``place``, or None."""
        i = self.find(place)
        return None if i is None else self._info(i)

    def texts(self, text: str, limit: int | None = None) -> list[str]:
        """The text of each line (the first ``limit``) of ``text``, the text the map was made of."""
        if len(text) == self.split_of:  # every line of it: str.split
            return text.split("\n") if limit is None else text.split("\n", limit)[:limit]
        return list(map(text.__getitem__, map(slice, self.starts[:limit].tolist(), self.ends[:limit].tolist())))

    def columns(self) -> np.ndarray:
        """Its arrays stacked (starts, ends, messages, codes, numbers, content ends): one array to
        send or keep; :meth:`from_columns` makes the map again."""
        return np.stack([self.starts, self.ends, self.messages, self.codes, self.numbers, self.content_ends])

    @classmethod
    def from_columns(cls, cols: np.ndarray, roles: tuple[str, ...], split_of: int) -> LineMap:
        starts, ends, messages, codes, numbers, content_ends = cols
        return cls(starts, ends, messages, codes, roles, numbers, content_ends, split_of)

    def head(self, n: int) -> LineMap:
        """The first ``n`` lines, copied (a map held long holds no more than them)."""
        if n >= len(self):
            return self
        return LineMap(self.starts[:n].copy(), self.ends[:n].copy(), self.messages[:n].copy(), self.codes[:n].copy(),
                       self.roles, self.numbers[:n].copy(), self.content_ends[:n].copy())

    def with_role(self, role: str) -> list[int]:
        """The indices of the lines of ``role``."""
        return np.flatnonzero(self.codes == self.roles.index(role)).tolist() if role in self.roles else []

    def message_ends(self) -> list[int]:
        """Where each message's content ends in the text, in order."""
        ce = self.content_ends
        return sorted(set(ce[ce >= 0].tolist()))


def _find(text: str, s: str, start: int) -> int:
    """``text.find(s, start)``, looked for by the first 16 characters of ``s``, each place they
    are checked whole (``str.find`` prepares a table the size of a long ``s`` on every call)."""
    head = s[:16]
    p = text.find(head, start)
    for _ in range(8):
        if p < 0 or text.startswith(s, p):
            return p
        p = text.find(head, p + 1)
    return text.find(s, p) if p >= 0 else -1


def line_bounds(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Where each line of ``text`` (``str.split("\\n")``'s) starts and ends, in ``str`` character
    offsets: numpy over an ASCII text's bytes, else the lengths of the lines."""
    if text.isascii():  # a character a byte: numpy finds the newlines, no line is made
        breaks = (np.frombuffer(text.encode("ascii"), dtype=np.uint8) == 10).nonzero()[0]
        n = len(breaks) + 1
        starts = np.zeros(n, dtype=np.int64)
        starts[1:] = breaks + 1
        ends = np.full(n, len(text), dtype=np.int64)
        ends[:-1] = breaks
        return starts, ends
    lens = np.fromiter(map(len, text.split("\n")), dtype=np.int64)
    ends = (lens + 1).cumsum()
    ends -= 1
    return ends - lens, ends


def line_map(text: str, contents: Sequence[tuple[str, str | None]], tool_names: Sequence[str] = ()) -> LineMap:
    """The lines of ``text`` tied to the messages ``contents`` ((role, content) in order), found in
    the text in order; a line outside every message is ``tools`` when it names a tool, else
    ``template`` (then ``message_index`` is the message it precedes, None after the last).

    A line belongs to the first message whose content does not end before it starts (one
    ending right where an empty line starts counts it, without holding it) when their ranges
    overlap (an empty line: when the content holds its place); its ``line`` is 1 + the newlines
    from the content's start to it. Offsets are ``str`` character offsets, from where the newlines
    are (numpy over an ASCII text's bytes, else the lengths of ``str.split``'s lines). A message's
    lines are a run, and so are the lines between two messages: the map is made by runs
    (``np.repeat``), a few steps a message, none a line."""
    spans: list[tuple[int, int, int, str]] = []  # (start, end, message index, role) of each content found
    cursor = 0
    for i, (role, c) in enumerate(contents):
        if not c:
            continue
        p = _find(text, c, cursor)
        if p < 0:
            c = c.strip()
            p = _find(text, c, cursor) if c else -1
        if p >= 0:
            cursor = p + len(c)
            spans.append((p, cursor, i, role))
    starts, ends = line_bounds(text)
    n = len(starts)
    roles = tuple(dict.fromkeys(["template", "tools", *(s[3] for s in spans)]))
    runs: list[int] = []  # per run of lines: how many, message index, role code, content end, number - index
    g = 0  # the first line not tied to an earlier message
    if spans:
        a = np.array([s[0] for s in spans], dtype=np.int64)
        b = np.array([s[1] for s in spans], dtype=np.int64)
        code = {r: c for c, r in enumerate(roles)}
        for (_, end, idx, role), lo, hi, after, first in zip(
                spans,
                np.minimum(ends.searchsorted(a, "right"), starts.searchsorted(a)).tolist(),  # the first it overlaps
                starts.searchsorted(b).tolist(),  # the lines starting before its end
                ends.searchsorted(b, "right").tolist(),  # an empty line where it ends is tied to it, not held
                (starts.searchsorted(a, "right") - 1).tolist(), strict=True):  # the line it starts in
            lo = max(g, lo)
            runs += (lo - g, idx, 0, -1, 1, hi - lo, idx, code[role], end, 1 - first)
            g = max(hi, after)
            runs += (g - hi, idx, 0, -1, 1)
    runs += (n - g, -1, 0, -1, 1)
    table = np.array(runs, dtype=np.int64).reshape(-1, 5).T
    named: list[int] = []
    names = [f'"{x}"' for x in tool_names if x]
    if names:  # the lines outside messages that name a tool (they hold '"'; the template's own lines seldom do)
        outside = (table[3] < 0).repeat(table[0]).nonzero()[0]
        their = map(text.__getitem__, map(slice, starts[outside].tolist(), ends[outside].tolist()))
        quoted = [(i, t) for i, t in zip(outside.tolist(), their, strict=True) if '"' in t]
        for i, t in quoted:  # names tried from the one after the last found: a template writes them in order
            r = next(compress(count(), map(t.__contains__, names)), None)
            if r is not None:
                named.append(i)
                names = names[r + 1:] + names[:r + 1]
    return LineMap.from_runs(starts, ends, roles, table, np.array(named, dtype=np.int64), len(text))


def _shape_of(ch: str) -> str:
    """One character's shape by its Unicode category, in every script: an upper-case letter A, any
    other letter a (Chinese, Arabic, Thai... have no case), any digit or number 9, a space ' ';
    ASCII punctuation and symbols kept (they carry the format: 2026-12-05T10:00), any other one
    '*'; marks (accents, vowel signs) and invisible characters dropped."""
    cat = unicodedata.category(ch)
    if cat == "Lu":
        return "A"
    if cat[0] == "L":
        return "a"
    if cat[0] == "N":
        return "9"
    if cat[0] == "Z" or ch in "\t\n\r":
        return " "
    if cat[0] in "PS":
        return ch if ch.isascii() else "*"
    return ""  # M (combining marks) and C (controls, zero-width and other format characters)


def shape(span: str) -> str:
    """A span's shape, never its text (``_shape_of`` per character); at most 40 characters
    (longer ones end with '...')."""
    s = "".join(_shape_of(ch) for ch in span)
    return s if len(s) <= MAX_EXAMPLE else s[:MAX_EXAMPLE - 3] + "..."


def diff_span(a: str, b: str) -> tuple[int, int]:
    """The range of ``a`` that differs from ``b`` (common prefix and suffix removed), widened to
    whole words (letters, digits and ``:.-+/_``)."""
    p = 0
    while p < min(len(a), len(b)) and a[p] == b[p]:
        p += 1
    s = 0
    while s < min(len(a), len(b)) - p and a[len(a) - 1 - s] == b[len(b) - 1 - s]:
        s += 1
    lo, hi = p, len(a) - s
    while lo > 0 and _WORD.match(a[lo - 1]):
        lo -= 1
    while hi < len(a) and _WORD.match(a[hi]):
        hi += 1
    return lo, max(hi, lo)


def _json_equal(a: str, b: str) -> bool:
    """Whether the two lines hold the same JSON object or array (keys in any order)."""
    a, b = a.strip().rstrip(","), b.strip().rstrip(",")
    if a[:1] not in ("{", "[") or b[:1] not in ("{", "["):  # JSON text that is an object or an array starts so
        return False
    try:
        ja, jb = json.loads(a), json.loads(b)
    except ValueError:
        return False
    return isinstance(ja, (dict, list)) and ja == jb


def _overlapping(rx: re.Pattern[str], text: str, lo: int, hi: int) -> tuple[int, int] | None:
    """The first match of ``rx`` in ``text`` that overlaps [lo, hi) (a date whose day differs but
    whose year is shared still reads as a date)."""
    for m in rx.finditer(text):
        if m.start() < max(hi, lo + 1) and m.end() > lo:
            return m.start(), m.end()
    return None


def classify(a: str, b: str, role: str = "") -> tuple[str, tuple[int, int]]:
    """The kind of difference between line ``a`` (this request) and ``b`` (an earlier one), and
    the span of ``a`` it lies in."""
    lo, hi = diff_span(a, b)
    if a.split() == b.split():
        return "whitespace", (lo, hi)
    if _json_equal(a, b):
        return "json_keys", (0, len(a))
    if role == "tools":
        return "tools", (lo, hi)
    blo, bhi = diff_span(b, a)
    span, other = a[lo:hi], b[blo:bhi]
    for kind, rx in (("iso_timestamp", _ISO), ("uuid", _UUID), ("epoch_timestamp", _EPOCH), ("date", _DATE),
                     ("hex_id", _HEX)):
        m = _overlapping(rx, a, lo, hi)
        if m is not None and _overlapping(rx, b, blo, bhi) is not None:
            return kind, m
    if span.isdigit() and other.isdigit() and len(span) <= 9:
        return "counter", (lo, hi)
    return "other", (lo, hi)


def classify_inserted(a: str, role: str = "") -> tuple[str, tuple[int, int]]:
    """The kind of a line that one request has and another does not (a timestamp line some
    requests put first), by the value it holds, and its span; ``other`` (the whole line) if none."""
    if role == "tools":
        return "tools", (0, len(a))
    for kind, rx in _PATTERNS.items():
        m = rx.search(a)
        if m is not None:
            return kind, (m.start(), m.end())
    return "other", (0, len(a))


@dataclass
class Finding:
    """One cache-buster: where (``message_index``, ``role``, ``line``), what (``kind``, the span's
    ``example`` shape), the first divergent block seen, how many requests it broke; ``canonical``
    is the normalised line's text for kinds fixed by normalising (memory only, never output)."""

    kind: str
    """What differs: one of ``KINDS`` (``iso_timestamp``, ``epoch_timestamp``, ``date``, ``uuid``,
    ``hex_id``, ``counter``, ``json_keys``, ``tools``, ``whitespace``, ``other``)."""
    message_index: int | None
    """Index of the message holding the span; None when the chat template wrote it."""
    role: str
    """That message's role, or ``template``."""
    line: int
    """1-based line within the message's content (within the prompt for template text); 0 for a
    turn the template renders differently as history (``change``: the whole turn)."""
    example: str
    """The span's shape only (digits as 9, letters as a/A), never its text."""
    first_block: int
    """The first divergent block (0-based) seen for this span."""
    requests_affected: int = 0
    """Requests whose cache chain this span broke."""
    template: bool = False
    """True when the chat template, not the caller, writes the span (a template-level buster)."""
    canonical: str | None = field(default=None, repr=False)
    """The normalised line's text for kinds fixed by normalising; kept in memory only, never output."""
    change: str | None = None
    """``template_history`` found by rendering (``history``): what the template changed in the turn
    once it is history, in shape only ("a think block of about 40 tokens dropped from assistant
    turn 3 ..."); None otherwise."""
    tokens_missed: int = 0
    """Tokens the requests it broke missed that an unlimited cache held no copy of (``history``
    findings: what they cost, counted in the first pass)."""

    @property
    def key(self) -> tuple[str, int | None, str, int]:
        return (self.kind, self.message_index, self.role, self.line)

    @property
    def place(self) -> tuple[int | None, str, int]:
        return (self.message_index, self.role, self.line)

    def matches(self, line: str) -> bool:
        """Whether ``line`` (at this finding's place in some request) holds what the finding moves:
        a value of its kind (a timestamp, an id ...), or for ``other`` and ``counter`` a span of the
        example's shape. A client moves the volatile value, not whatever sits on that line in
        requests that have none (another system prompt's first line)."""
        if self.kind in NORMALISED:
            return True
        rx = _PATTERNS.get(self.kind)
        if rx is not None:
            return rx.search(line) is not None
        ex = self.example[:-3] if self.example.endswith("...") else self.example
        return ex in shape(line)

    @property
    def fix(self) -> str:
        if self.change is not None:
            return "a remedy (see remedies): the turn must render the same as history as it did when it was generated"
        return ("normalised" if self.kind in NORMALISED else
                "moved to the end of the message it is sent with (kept there in the conversation's later requests)")


@dataclass
class _Seen:
    lines: list[int]
    head: str
    """The text up to the end of its last line seen (``infos``' offsets are into it)."""
    infos: LineMap
    chars: int
    label: str = ""
    prefixes: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    """Each line's length + 1."""
    weights: list[int] = field(default_factory=list)
    """Each line's vote (:meth:`Finder._compare`): its length + 1, 0 for a blank line."""

    def text(self, k: int) -> str:
        """Its line ``k``'s text."""
        return self.head[int(self.infos.starts[k]):int(self.infos.ends[k])]


@dataclass(frozen=True)
class Divergence:
    """Where a request parted from the recent request it shares the longest run of leading lines
    with (the nearest the cache's chain could have come from)."""

    earlier: str
    """That request's label (``file:line``)."""
    shared_lines: int
    """Leading lines the two have in common."""
    line: LineInfo | None
    """This request's first line that differs from it; None when the earlier request's lines are
    all leading lines of this one (what follows them is new)."""


@dataclass(frozen=True)
class Observed:
    """What :meth:`Finder.observe` says of one request."""

    finding: Finding | None
    """The buster it counts for, if any."""
    divergence: Divergence | None
    """Where it parted from its nearest earlier request (requests that missed only; None: no
    recent request shares its first line)."""


_FEW_HOLDERS = 8
"""Up to this many recent requests holding a request's lines, :meth:`Finder._compare` sums each
one's votes apart (a C loop over the lines each); past it, in one Python pass over the lines."""


MAX_LINES = 400
"""A request's leading lines the finder holds (``Finder``'s ``max_lines``)."""


def _prefix_hashes(lines: Sequence[int]) -> list[int]:
    """Chained hashes of a request's first 1, 2, ... lines: equal when the leading lines are."""
    out: list[int] = []
    h = 0
    for x in lines:
        h = hash((h, x))
        out.append(h)
    return out


LineHashes = tuple[list[int], list[int], list[int]]
"""A request's first lines' hashes, their chained prefixes, and which of them are blank (:func:`line_hashes`)."""


def line_hashes(text: str, lines: LineMap, max_lines: int = MAX_LINES) -> LineHashes:
    """What :meth:`Finder.observe` reads of a request's text: its first ``max_lines`` lines'
    hashes, their chained prefixes, and the indices of the blank ones (nothing but white space)
    among them (taken apart so that another process of the same interpreter, whose ``hash`` is
    the same, can compute them ahead: ``collectors/requests/forked.py``)."""
    texts = lines.texts(text, max_lines)
    hashes = list(map(hash, texts))
    return hashes, _prefix_hashes(hashes), list(compress(count(), map("".__eq__, map(str.strip, texts))))


class Finder:
    """Finds busters over a stream of rendered requests (see the module docstring). Memory is
    bounded: the last ``window`` requests' first ``max_lines`` lines, and a line index of them.
    The index keeps what requests that left the window put in it (an entry naming a request out
    of the window reads as none: nothing is removed as a request leaves); past twice the lines
    the window holds (and ``slack`` more) it is made again from the window's requests alone,
    oldest first, as it would be had each request taken its entries with it. A small index
    stays in the CPU's caches: on a log of distinct prompts, one twice the window's lines costs
    no more than taking each request's entries out, and one ten times larger costs more."""

    def __init__(self, window: int = 256, max_lines: int = MAX_LINES, slack: int = 4096):
        self.window = window
        self.max_lines = max_lines
        self.slack = slack
        self.held = 0
        """Lines the window's requests hold (their first ``max_lines``)."""
        self.recent: OrderedDict[int, _Seen] = OrderedDict()
        self.index: dict[int, int] = {}
        """Hash of a line -> the newest request holding it (out of the window: none)."""
        self.prefix: dict[int, int] = {}
        """Chained hash of a request's leading lines -> the newest request holding them (out of
        the window: none)."""
        self.findings: dict[tuple[str, int | None, str, int], Finding] = {}
        self.seq = 0
        self.rebuilt = 0
        """Times the index was made again from the window (memory only, for the tests)."""

    def observe(self, text: str, infos: Sequence[LineInfo], first_miss_block: int, missed: bool,
                label: str = "", *, compare: bool = True,
                hashed: LineHashes | None = None) -> Observed:
        """Record one request (in arrival order, ``label`` naming it, e.g. ``file:line``); return
        the finding it counts for, if any, and (when it missed) where it parted from its nearest
        earlier request. ``missed``: it hit less than it could (full blocks within prompt_tokens - 1);
        ``compare``: False when its miss is already explained (a turn the template rewrote), so
        no line finding counts it; ``hashed``: its :func:`line_hashes` if computed ahead (at this
        finder's ``max_lines``)."""
        lm = LineMap.of(infos)
        hashes, prefixes, blank = hashed if hashed is not None else line_hashes(text, lm, self.max_lines)
        m = len(hashes)
        sizes = (lm.ends[:m] - lm.starts[:m] + 1).tolist()  # the lines' lengths + 1 (``str.split``'s lines)
        weights = sizes.copy()  # a line's vote; a blank one has none
        for i in blank:
            weights[i] = 0
        me = _Seen(hashes, text[:int(lm.ends[m - 1])] if m else "", lm.head(self.max_lines), sum(sizes), label,
                   prefixes, sizes, weights)
        found = self._compare(me, first_miss_block) if missed and compare and me.chars else None
        parted = self._nearest(me) if missed else None
        self.seq += 1
        self.recent[self.seq] = me
        self.held += len(hashes)
        while len(self.recent) > self.window:
            self.held -= len(self.recent.popitem(last=False)[1].lines)
        self._index(self.seq, me)
        bound = 2 * self.held + self.slack
        if len(self.index) > bound or len(self.prefix) > bound:
            self.index, self.prefix = {}, {}
            self.rebuilt += 1
            for seq, seen in self.recent.items():  # oldest first: the newest holder of a line last
                self._index(seq, seen)
        return Observed(found, parted)

    def _index(self, seq: int, me: _Seen) -> None:
        """Request ``seq`` (``me``) named the newest holder of its lines not blank and of its leading runs."""
        self.index.update(zip(compress(me.lines, me.weights), repeat(seq)))
        self.prefix.update(zip(me.prefixes, repeat(seq)))

    def _nearest(self, me: _Seen) -> Divergence | None:
        """The newest recent request with the longest run of leading lines in common with ``me``."""
        recent, prefix = self.recent, self.prefix
        # the leading prefixes a recent request holds (one holding a prefix holds the ones before it,
        # and its entries for them are as new or newer: the newest holder of one is as recent)
        k = bisect_left(me.prefixes, True, key=lambda h: prefix.get(h, 0) not in recent)
        if not k:
            return None
        other = recent[prefix[me.prefixes[k - 1]]]
        line = me.infos[k] if k < len(me.lines) and k < len(other.lines) else None
        return Divergence(other.label, k, line)

    def _compare(self, me: _Seen, first_miss_block: int) -> Finding | None:
        # the newest request holding each line (0: none; one out of the window is dropped below)
        got = list(map(self.index.get, me.lines, repeat(0)))
        if sum(compress(me.sizes, got)) * 2 < me.chars:  # no recent request can have half its text
            return None
        holders = [j for j in set(got) if j in self.recent]
        if not holders:
            return None
        weights = me.weights
        votes: dict[int, int] = {}
        if len(holders) <= _FEW_HOLDERS:  # a sum a holder, each over the lines at C speed
            votes = {j: sum(compress(weights, map(j.__eq__, got))) for j in holders}
        else:  # one pass over the lines
            for j, w in zip(got, weights, strict=True):
                if w and j in self.recent:
                    votes[j] = votes.get(j, 0) + w
        if not votes:
            return None
        j = max(votes, key=lambda s: (votes[s], s))
        if votes[j] * 2 < me.chars:
            return None
        other = self.recent[j]
        k = next(compress(count(), map(int.__ne__, me.lines, other.lines)), min(len(me.lines), len(other.lines)))
        if k >= len(me.lines):
            return None
        theirs = set(other.lines)
        after = sum(compress(weights[k + 1:], map(theirs.__contains__, me.lines[k + 1:])))
        if after * 4 < me.chars:
            return None
        if k + 1 < len(other.lines) and other.lines[k + 1] == me.lines[k]:
            return self._finding(other, me, k, first_miss_block, inserted=True)  # a line only it has
        if k + 1 < len(me.lines) and k < len(other.lines) and me.lines[k + 1] == other.lines[k]:
            return self._finding(me, other, k, first_miss_block, inserted=True)
        first: Finding | None = None
        m = k
        while m < len(me.lines) and m < k + MAX_PAIRED and (m == k or me.lines[m] not in theirs):
            f = self._finding(me, other, m, first_miss_block)
            first = first or f
            m += 1
        return first

    def _finding(self, me: _Seen, other: _Seen, k: int, first_miss_block: int, inserted: bool = False) -> Finding:
        """The finding at ``me``'s line ``k`` against ``other``'s; ``inserted``: a line ``me`` has
        and ``other`` does not (the lines after it are the same), classified by itself."""
        info = me.infos[k]
        a = me.text(k)
        b = other.text(k) if k < len(other.lines) else ""
        kind, (lo, hi) = classify_inserted(a, info.role) if inserted else classify(a, b, info.role)
        template = info.role == "template"
        if template and kind == "other" and info.message_index not in (None, 0):
            kind = "template_history"
        f = Finding(kind, info.message_index, info.role, info.line, shape(a[lo:hi]), first_miss_block,
                    template=template)
        f = self.findings.setdefault(f.key, f)
        if f.canonical is None and kind in NORMALISED:
            f.canonical = _canonical(b, kind)
        f.requests_affected += 1
        return f


def _canonical(line: str, kind: str) -> str:
    if kind == "whitespace":
        return " ".join(line.split())
    if kind == "json_keys":
        lead = line[:len(line) - len(line.lstrip())]
        body = line.strip()
        comma = "," if body.endswith(",") else ""
        try:
            return lead + json.dumps(json.loads(body.rstrip(",")), sort_keys=True) + comma
        except ValueError:
            return line
    return line


class Carried:
    """What a client that fixed its prompts has sent so far, per conversation: the moved lines
    each message was sent with, keyed by a hash of the fixed text up to that message's end (a
    later request of the same conversation renders the same text up to there, so its history
    finds them). Bounded: past ``limit`` entries the oldest are forgotten (a conversation idle
    that long is cold anyway)."""

    def __init__(self, limit: int = 1_000_000):
        self.limit = limit
        self.sent: OrderedDict[int, str] = OrderedDict()

    def get(self, key: int) -> str | None:
        return self.sent.get(key)

    def put(self, key: int, moved: str) -> None:
        self.sent[key] = moved
        self.sent.move_to_end(key)
        while len(self.sent) > self.limit:
            self.sent.popitem(last=False)


def apply_fix(text: str, infos: Sequence[LineInfo], fixes: Sequence[Finding], carried: Carried | None = None) -> str:
    """``text`` with every finding in ``fixes`` fixed at its place (a request without a line
    there is unchanged), as a client makes the fix: a normalised line is replaced by its canonical
    form (whitespace collapsed, JSON keys sorted; a tool list's lines sorted); a moved line goes to
    the end of the message it is sent with, the request's last (the text's end when no line is
    tied to a message). With ``carried`` (one per log and fix), a message that comes back as
    history in a later request of the same conversation gets back the lines it was sent with, so
    the conversation's text stays what was rendered before."""
    lm = LineMap.of(infos)
    by_place = {(f.message_index, f.role, f.line): f for f in fixes}
    moved: list[str] = []
    edits: list[tuple[int, int, str]] = []
    if any(f.kind == "tools" and f.role == "tools" and lm.find(f.place) is not None for f in fixes):
        tool_lines = [(int(lm.starts[i]), int(lm.ends[i])) for i in lm.with_role("tools")]
        ordered = sorted(text[s:e] for s, e in tool_lines)  # the tool list in one order
        edits.extend((s, e, t) for (s, e), t in zip(tool_lines, ordered, strict=True))
    at = sorted((i, f.place) for f in by_place.values() if f.kind != "tools" for i in lm.find_all(f.place))
    for i, place in at:  # in line order
        f = by_place[place]
        start, end = int(lm.starts[i]), int(lm.ends[i])
        line = text[start:end]
        if f.kind in NORMALISED:
            edits.append((start, end, _canonical(line, f.kind)))
        elif f.matches(line):
            moved.append(line)
            edits.append((start, min(end + 1, len(text)), ""))
    if not edits and (carried is None or not carried.sent):
        return text
    ends = lm.message_ends()
    last = max(ends, default=len(text))
    sent = "".join("\n" + m for m in moved)
    marks = sorted({*(ends if carried is not None else ()), last})
    todo = sorted(edits, key=lambda e: (e[0], e[1]))
    out: list[str] = []
    chunk: list[str] = []  # the fixed text since the last message's end
    pos = k = key = 0

    def emit(upto: int) -> None:
        nonlocal pos, k
        while k < len(todo) and todo[k][0] < upto:
            s0, s1, rep = todo[k]
            s0 = max(s0, pos)
            chunk.extend((text[pos:s0], rep))
            pos = max(pos, s1)
            k += 1
        if upto > pos:
            chunk.append(text[pos:upto])
            pos = upto

    for at in marks:  # at each message's end, the fixed text so far names the conversation up to it
        emit(at)
        key = hash((key, "".join(chunk)))
        out.extend(chunk)
        chunk.clear()
        if at == last and moved:
            chunk.append(sent)
            if carried is not None:
                carried.put(key, sent)
        elif carried is not None:
            back = carried.get(key)
            if back is not None:
                chunk.append(back)
    emit(len(text) + 1)
    out.extend(chunk)
    return "".join(out)

