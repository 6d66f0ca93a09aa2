"""Tokenize each distinct piece of prompt text once (issue 35, item 1).

A fast tokenizer (HF ``tokenizers``) first cuts its input at its added tokens, then normalizes
and pre-tokenizes each segment between them on its own, and its model (BPE, WordPiece, Unigram)
encodes each pre-token on its own. So the ids of a rendered prompt are the ids of its pieces
put end to end, when it is cut:

* at an **added token** the tokenizer matches on the raw text (``normalized=False``) and that
  strips no whitespace around it (no ``lstrip``/``rstrip``/``single_word``): its id goes in
  between. Safe under any normalizer; not under a pre-tokenizer that treats the text's first
  segment differently (Metaspace with ``prepend_scheme="first"``), nor an unknown one.
* after a **newline** between two non-space characters (``x\\nY``), only under GPT-2's byte-level
  pre-tokenizer (``ByteLevel(use_regex=True, add_prefix_space=False)``, no normalizer, no added
  token holding a newline or stripping whitespace): its regex ends a pre-token there in the whole
  text and in both pieces alone (the newline after a non-space is a pre-token of its own, the
  regex has no look-behind, and its look-ahead only reads whitespace). This is what splits a
  template whose role markers are ordinary text (the fixture and demo tokenizers'), in pieces of
  about ``LINES_PER_PIECE`` lines.

Each piece's ids are cached under Python's 64-bit ``hash`` of its text (keyed SipHash, per
process; plus its length; the text is never kept), least recently used evicted past
``max_bytes`` (4 bytes per id and a fixed cost per piece). The pieces not cached are tokenized
in one batch call. So a system prompt, a tool list or an earlier turn is tokenized once per log,
not once per request.

A text that continues a conversation (``begin``'s ``streams``) starts with the ids of its last
turn's pieces up to shortly before the first character the two differ at (``Turn``): a piece ends
where it does in the whole text when the text up to its end and the ``guard`` characters after
it are the same, so only the rest is cut and looked up. Past the line where the two part, where
the last turn's text comes again (a timestamp rewritten in the system prompt), that turn's
pieces inside the run are taken too (``Span``): from the second of its piece boundaries twice
``guard`` characters into the run (the cutting starts afresh at every place a cut may go, so the
pieces after one such place inside the run are cut the same in both texts) to the last one that
ends ``guard`` characters before the run's end.

The equality is proven as the check goes: the first ``SAMPLE_FIRST`` prompts and one in
``SAMPLE_EVERY`` after are tokenized whole too and compared. On the first difference the cache
is switched off for the rest of the run (whole prompts, as before) and :meth:`PieceCache.notes`
says so, naming how many prompts were tokenized by pieces before it.
"""

from __future__ import annotations

import json
import re
import sys
import zlib
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

MAX_BYTES = 256 << 20
"""The cache's default bound: 256 MiB of ids (4 bytes each) plus ``PIECE_OVERHEAD`` per piece."""
PIECE_OVERHEAD = 340
"""Bytes counted per cached piece beyond its ids: the array object, its key and the LRU's entry
(tracemalloc: 341 bytes a piece on 100,000 pieces)."""
PROBE_PROMPTS = 64
WHOLE_PROMPTS = 256
MAX_WHOLE_PROMPTS = 4096
MIN_SAVED = 0.1
"""Where pieces do not repeat (a log of all-distinct prompts), cutting them costs more than it
saves: when the last ``PROBE_PROMPTS`` prompts tokenized by pieces took less than ``MIN_SAVED``
of their text from the cache, the next ``WHOLE_PROMPTS`` are tokenized whole (the same ids),
then pieces are tried again; each time they still save nothing, twice as many are tokenized
whole (at most ``MAX_WHOLE_PROMPTS``)."""
TURN_BYTES = 16 << 20
"""The bound on the turns :class:`PieceCache` holds (each stream's last text, its ids and where its
pieces end), least recently used dropped past it."""
SAMPLE_FIRST = 32
SAMPLE_EVERY = 1000
"""Prompts also tokenized whole and compared: the first ``SAMPLE_FIRST``, then one in ``SAMPLE_EVERY``."""

SAFE_PRE = {"ByteLevel", "Split", "Whitespace", "WhitespaceSplit", "Digits", "Punctuation", "BertPreTokenizer",
            "UnicodeScripts", "CharDelimiterSplit"}
"""Pre-tokenizers that act on each segment alone (no state from an earlier segment)."""
NEWLINE_CUT = re.compile(r"(?<=[^\s]\n)(?=[^\s])")
"""Where GPT-2's byte-level regex always ends a pre-token: after a newline between non-spaces."""
LINES_PER_PIECE = 2
"""Lines per piece on average where the newline cut applies: the text is cut after a line whose
CRC-32 is 0 modulo this (content-defined, as in deduplicating backups: a run of lines shared by two
prompts is cut the same way in both, wherever it sits). Two: on the benchmark's agent log, pieces
of one line cost more per call and per cache entry than they save, and pieces of eight lines
re-tokenize more of the text around each new turn and each changed line (bench/results/prompts.md)."""


@dataclass
class Plan:
    """How one tokenizer's text may be cut: ``added`` matches the added tokens (longest first)
    and ``split_ids`` gives the id of each one the text is cut at (the others stay inside a
    piece); ``newlines``: cut after ``x\\nY`` too. ``why_not``: the cache is not used, and why."""

    added: re.Pattern[str] | None = None
    split_ids: dict[str, int] = field(default_factory=dict)
    newlines: bool = False
    why_not: str | None = None
    longest: int | None = None
    """Characters in the longest added token ``added`` matches (None: not known, found from the
    tokenizer): how far back from a change a cut may move (:class:`PieceCache`'s turns)."""


def cuts(backend: Any) -> Plan:
    """How ``backend`` (a ``tokenizers.Tokenizer``)'s text may be cut, from its own JSON."""
    try:
        spec = json.loads(backend.to_str())
    except Exception as e:  # a tokenizer that cannot describe itself: whole prompts
        return Plan(why_not=f"the tokenizer's JSON is not readable ({type(e).__name__})")
    pre = spec.get("pre_tokenizer")
    bad = _unsafe_pre(pre)
    if bad is not None:
        return Plan(why_not=f"its pre-tokenizer ({bad}) does not treat the text between added tokens on its own")
    added = [a for a in spec.get("added_tokens") or [] if a.get("content")]
    if getattr(backend, "encode_special_tokens", False):  # special tokens encoded as text: not matched
        added = [a for a in added if not a.get("special")]
    raw = [a for a in added if not a.get("normalized", True)]
    stripping = [a for a in added if a.get("lstrip") or a.get("rstrip") or a.get("single_word")]
    split_ids = {a["content"]: int(a["id"]) for a in raw if a not in stripping}
    pattern = re.compile("|".join(re.escape(a["content"]) for a in sorted(raw, key=lambda a: -len(a["content"])))
                         ) if raw else None
    newlines = (spec.get("normalizer") is None and isinstance(pre, dict) and pre.get("type") == "ByteLevel"
                and bool(pre.get("use_regex", True)) and not pre.get("add_prefix_space", False)
                and not stripping and not any("\n" in a["content"] for a in added))
    if not split_ids and not newlines:
        return Plan(why_not="its text has no place to cut: no added token matched on the raw text, and a "
                            "pre-tokenizer other than GPT-2's byte-level one")
    return Plan(pattern, split_ids, newlines, longest=max((len(a["content"]) for a in raw), default=0))


def _unsafe_pre(pre: Any) -> str | None:
    """The first pre-tokenizer in ``pre`` that may carry something from one segment to the
    next (None: all act on each segment alone)."""
    if pre is None:
        return None
    kind = pre.get("type") if isinstance(pre, dict) else None
    if kind == "Sequence":
        return next((b for b in (_unsafe_pre(p) for p in pre.get("pretokenizers") or []) if b is not None), None)
    if kind == "Metaspace":
        scheme = pre.get("prepend_scheme", "always" if pre.get("add_prefix_space", True) else "never")
        return None if scheme in ("always", "never") else f"Metaspace, prepend_scheme {scheme!r}"
    return None if kind in SAFE_PRE else str(kind)


def newline_pieces(text: str, k: int, out: list[str | int]) -> None:
    """``text`` cut after newlines between two non-spaces (``NEWLINE_CUT``'s places), at those
    where the text since the last such place has a CRC-32 of 0 modulo ``k`` (every one when
    ``k`` is 1), appended to ``out``. With ``str.split`` and ``str.isspace`` (what ``\\s``
    matches): faster than the regex."""
    parts = text.split("\n")
    start = crc = 0
    for i in range(len(parts) - 1):
        line, nxt = parts[i], parts[i + 1]
        if k > 1:  # the CRC-32 of the text since the last place a cut could go, its newline included
            crc = zlib.crc32(b"\n", zlib.crc32(line.encode("utf-8", "surrogatepass"), crc))
        if line and nxt and not line[-1].isspace() and not nxt[0].isspace():
            if k == 1 or crc % k == 0:
                out.append("\n".join(parts[start:i + 1]) + "\n")
                start = i + 1
            crc = 0
    out.append("\n".join(parts[start:]))


_ASCII_SPACE = np.zeros(256, dtype=bool)
_ASCII_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True  # what str.isspace is true of below 128
_ASCII_SPACE[128:] = True  # a non-ASCII byte: looked at one character at a time (see newline_cuts)


def newline_cuts(data: bytes, k: int) -> np.ndarray:
    """Where :func:`newline_pieces` may cut ``data`` (a text's UTF-8): the offsets just after a
    newline between two non-spaces, with numpy over the bytes rather than a Python loop over the
    lines. A newline next to a non-ASCII character is decided on that character
    (``str.isspace``). With ``k`` > 1, the places :func:`newline_pieces` keeps (the CRC-32 of
    the text since the last place 0 modulo ``k``): the same pieces."""
    b = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(b[1:-1] == 10) + 1  # a newline with a byte on each side
    if not len(nl):
        return nl
    before, after = b[nl - 1], b[nl + 1]
    ok = ~(_ASCII_SPACE[before] | _ASCII_SPACE[after])
    odd = np.flatnonzero((before >= 128) | (after >= 128))
    for i in odd.tolist():  # rare: decide on the whole character
        at = int(nl[i])
        ok[i] = _non_space_before(data, at) and _non_space_after(data, at + 1)
    nl = nl[ok]
    cuts = nl + 1
    if k > 1 and len(cuts):  # newline_pieces' choice: the CRC-32 of the text since the last place
        ends = cuts.tolist()
        starts = [0, *ends[:-1]]
        crcs = np.fromiter(map(zlib.crc32, map(data.__getitem__, map(slice, starts, ends))), dtype=np.uint32,
                           count=len(ends))  # one CRC-32 a place, in C (no Python step per place)
        cuts = cuts[crcs % k == 0]
    return cuts


def _non_space_before(data: bytes, at: int) -> bool:
    """Whether the character ending just before byte ``at`` of ``data`` is not a space."""
    s = at - 1
    while s > 0 and 0x80 <= data[s] < 0xC0 and at - s < 4:
        s -= 1
    return not data[s:at].decode("utf-8", "surrogatepass").isspace()


def _non_space_after(data: bytes, at: int) -> bool:
    """Whether the character starting at byte ``at`` of ``data`` is not a space."""
    e = at + 1
    while e < len(data) and 0x80 <= data[e] < 0xC0 and e - at < 4:
        e += 1
    return not data[at:e].decode("utf-8", "surrogatepass").isspace()


def newline_pieces_fast(text: str, k: int, out: list[str | int]) -> None:
    """:func:`newline_pieces` (the same pieces) with the places found by :func:`newline_cuts`,
    appended to ``out``: a Python step per place, not per character."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) == len(text):  # ASCII: byte offsets are character offsets
        cut = newline_cuts(data, k).tolist()
        start = 0
        for c in cut:
            out.append(text[start:c])
            start = c
        out.append(text[start:])
        return
    start = 0
    for c in newline_cuts(data, k).tolist():
        out.append(data[start:c].decode("utf-8", "surrogatepass"))
        start = c
    out.append(data[start:].decode("utf-8", "surrogatepass"))


def piece_key(text: str) -> tuple[int, int]:
    """A piece's cache key: its length and Python's 64-bit ``hash`` of it (SipHash keyed per process:
    two different pieces share a key with odds about 2**-64, as two 64-bit blake2b digests do;
    the key is never compared across processes). Cheaper than encoding the text and hashing it."""
    return len(text), hash(text)


def _int64(ids: list[int]) -> np.ndarray:
    """Token ids as int64 (``np.fromiter``: faster than ``np.asarray`` on a list)."""
    return np.fromiter(ids, dtype=np.int64, count=len(ids))


def _int32(ids: list[int]) -> np.ndarray:
    return np.fromiter(ids, dtype=np.int32, count=len(ids))


Run = Callable[[Callable[[], Any]], "Future[Any]"]
"""Where a batch's tokenizer calls are made: given them as a function, returns their future."""


def now(work: Callable[[], T]) -> Future[T]:
    """:data:`Run` on the calling thread, at once (its error kept for ``result()``)."""
    f: Future[T] = Future()
    try:
        f.set_result(work())
    except BaseException as e:  # noqa: BLE001 - raised again by result(), where the caller waits
        f.set_exception(e)
    return f


@dataclass(eq=False)
class Batch:
    """One :meth:`PieceCache.begin`: its texts, each cut as cached ids (arrays) and the keys of
    pieces to tokenize (``missing``: by this batch; ``borrowed``: by an earlier one), the prompts
    sampled whole, and the tokenizer's ``result`` to come. ``cut`` None: tokenized whole."""

    texts: list[str]
    special: bool
    cut: list[list[np.ndarray | tuple[int, int] | Turn | Span]] | None
    borrowed: dict[tuple[int, int], Batch]
    sample: list[int]
    result: Future[Any]
    missing: list[tuple[int, int]] = field(default_factory=list)
    affix: tuple[list[int], list[int]] | None = None
    first: int = 0
    """How many prompts came before this batch's (its sampled prompts' numbers)."""
    fresh: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    """Once finished: the pieces it tokenized."""
    turns: list[Turn | None] = field(default_factory=list)
    """Per text, the turn it is recorded as (None: no stream); its ids set by :meth:`PieceCache.finish`."""
    same: list[tuple[np.ndarray, int] | None] = field(default_factory=list)
    """Once finished by pieces: per text, the previous turn's ids it starts with and how many of
    them (their first ``n`` ids are its first ``n``: copied from them); None: no previous turn used."""
    spans: list[tuple[np.ndarray, int, int] | None] = field(default_factory=list)
    """Once finished by pieces: per text, the previous turn's ids it has again at the same places
    past the line they part at (a ``Span`` copied where it sits in both: ``(ids, at, n)``, their
    ids ``at`` to ``at + n`` are its own), or None."""


@dataclass(eq=False)
class Turn:
    """A stream's last text as :meth:`PieceCache.begin` cut it: where its pieces end (characters)
    and, once its batch is finished, its ids and the ids before each of those ends (``tokens``,
    the post-processor's ``head`` ids not counted)."""

    stream: Hashable
    text: str
    special: bool
    ends: list[int]
    tokens: list[int]
    """Ids before each of ``ends`` (once finished)."""
    base: Turn | None = None
    """Until it is finished: the previous turn its first ``first`` ends are (None: none). It is
    begun before this one, so finished before it: its ids up to there are this one's first part."""
    first: int = 0
    span: Span | None = None
    """Until it is finished: a run of the previous turn's pieces this one has again after the
    place the two differ at (None: none)."""
    ids: np.ndarray | None = None
    head: int = 0
    counted: int = 0
    """Its bytes as last counted in :attr:`PieceCache.turn_bytes`."""

    @property
    def size(self) -> int:
        """Bytes it holds, roughly: its text (as UTF-8 at most 4 a character), its ids, its ends."""
        return sys.getsizeof(self.text) + (self.ids.nbytes if self.ids is not None else 0) + 16 * len(self.ends) + 200


@dataclass(eq=False)
class Span:
    """The previous turn's (``base``) pieces ``a`` to ``b - 1``, which a turn has again at
    ``start`` to ``end`` of its text (``shift`` characters from where they were in ``base``):
    after the line where the two differ, the texts are the same again (a timestamp rewritten
    in the system prompt). Their ids are ``base``'s, once it is finished."""

    base: Turn
    a: int
    b: int
    start: int
    end: int
    shift: int


class PieceCache:
    """Token ids of whole prompts, from the ids of their pieces (see the module docstring)."""

    def __init__(self, backend: Any, max_bytes: int = MAX_BYTES, *, plan: Plan | None = None,
                 lines_per_piece: int = LINES_PER_PIECE):
        self.bt = backend
        self.lines_per_piece = lines_per_piece
        self.plan = plan if plan is not None else cuts(backend)
        """How the text is cut (``plan``: given, not read from the tokenizer; the sample check
        still proves it)."""
        self.max_bytes = max_bytes
        self.cache: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self.bytes = 0
        self.prompts = 0
        """Prompts asked for (each kind), in order: which ones are sampled."""
        self.by_pieces = 0
        self.sampled = 0
        self.pieces_asked = 0
        self.pieces_tokenized = 0
        self.chars_asked = 0
        self.chars_tokenized = 0
        """Characters of text asked for and tokenized (by pieces; the samples not counted)."""
        self.evicted = 0
        self.failed: str | None = None
        """Set on the first sampled prompt whose pieces did not add up to its whole ids."""
        self.affix: dict[bool, tuple[list[int], list[int]] | None] = {False: ([], [])}
        """The ids the post-processor puts before and after a text, with special tokens added or not."""
        self.whole_left = 0
        """Prompts still to tokenize whole before pieces are tried again (``MIN_SAVED``)."""
        self.whole_run = WHOLE_PROMPTS
        """Prompts to tokenize whole the next time pieces save nothing."""
        self.whole = 0
        """Prompts tokenized whole because their pieces were not repeating."""
        self.probe = [0, 0, 0]
        """Since the last decision: prompts, characters asked and characters tokenized by pieces."""
        self.pending: dict[tuple[int, int], Batch] = {}
        """Pieces being tokenized, by the batch that asked for them (begun, not finished)."""
        self._added: dict[int, np.ndarray] = {}
        self.turns: OrderedDict[Hashable, Turn] = OrderedDict()
        """Each stream's last turn (see :meth:`begin`), least recently used first."""
        self.turn_bytes = 0
        self.max_turn_bytes = TURN_BYTES
        self.chars_kept = 0
        """Characters of text whose ids came from the stream's previous turn (not cut, not looked up)."""
        self._added_len = {i: len(t) for t, i in self.plan.split_ids.items()}
        longest = self.plan.longest
        if longest is None and self.plan.added is not None:
            longest = _longest_added(backend)
        self.guard = 1 + (longest if longest is not None else 1 << 40)
        """How far before the first character two turns differ at a piece must end to be kept (the
        longest added token's length and one; an unknown length: none kept)."""

    @property
    def active(self) -> bool:
        return self.plan.why_not is None and self.failed is None

    def encode(self, texts: Sequence[str], *, add_special_tokens: bool) -> list[np.ndarray]:
        """Token ids (int64) of each of ``texts``, as ``backend.encode_batch_fast`` gives them."""
        return self.finish(self.begin(texts, add_special_tokens=add_special_tokens))

    def begin(self, texts: Sequence[str], *, add_special_tokens: bool, run: Run = now,
              streams: Sequence[Hashable | None] | None = None) -> Batch:
        """:meth:`encode` up to the tokenizer: ``texts`` cut into pieces and looked up, and the
        tokenizer's batch calls (the pieces not cached, the sampled prompts whole) handed to
        ``run``, which may make them on another thread (they release the GIL); :meth:`finish`
        takes them back. Batches are finished in the order they were begun. A piece an earlier
        batch still being tokenized asks for is taken from that batch, not asked for again.

        ``streams``: per text, the conversation it continues (None: none). A text whose stream
        has a last turn starts with that turn's ids (once it is finished: begun before, it is
        finished before) up to the last of its pieces that ends ``guard`` characters before the
        first one they differ at (one slice: neither cut nor looked up); only the rest is cut.
        Each piece ends at the same place in both (a piece's end depends on the text up to it
        and the character after it, an added token's on at most ``guard`` characters after its
        start), so the ids are those of the whole text cut."""
        texts = list(texts)
        bt = self.bt
        affix = self._affix(add_special_tokens) if self.active and texts else None
        if affix is None or self.whole_left > 0:
            self.whole_left -= len(texts) if affix is not None else 0
            self.whole += len(texts) if affix is not None else 0
            return Batch(texts, add_special_tokens, None, {}, [],
                         run(lambda: [_int64(e.ids) for e in bt.encode_batch_fast(
                             texts, add_special_tokens=add_special_tokens)] if texts else []))
        cache, pending, added = self.cache, self.pending, self._added
        missing: dict[tuple[int, int], str] = {}
        borrowed: dict[tuple[int, int], Batch] = {}
        cut: list[list[np.ndarray | tuple[int, int] | Turn | Span]] = []
        turns: list[Turn | None] = []
        kept_chars = 0
        for i, t in enumerate(texts):
            stream = streams[i] if streams is not None else None
            turn = self._next_turn(stream, t, add_special_tokens) if stream is not None else None
            turns.append(turn)
            parts: list[np.ndarray | tuple[int, int] | Turn | Span] = []
            start = 0
            if turn is not None and turn.base is not None:
                parts.append(turn)  # the previous turn's ids up to ``turn.first`` of its ends, once it is finished
                start = turn.ends[-1]
                kept_chars += start
            ends = turn.ends if turn is not None else None
            at = start
            span = turn.span if turn is not None else None
            for p in self._cut_around(t, start, span):
                if isinstance(p, Span):  # the previous turn's pieces again: neither cut nor looked up
                    parts.append(p)
                    assert ends is not None
                    ends.extend(e + p.shift for e in p.base.ends[p.a:p.b])
                    at = p.end
                    kept_chars += p.end - p.start
                    continue
                if isinstance(p, int):
                    a = added.get(p)
                    if a is None:
                        a = added[p] = np.array([p], dtype=np.int32)
                    parts.append(a)
                    if ends is not None:
                        at += self._added_len[p]
                        ends.append(at)
                    continue
                if ends is not None:
                    at += len(p)
                    ends.append(at)
                self.pieces_asked += 1
                k = piece_key(p)
                got = cache.get(k)
                if got is not None:
                    cache.move_to_end(k)
                    parts.append(got)  # the array itself: held even if evicted before the batch ends
                    continue
                if k not in missing:
                    earlier = pending.get(k)
                    if earlier is not None:
                        borrowed[k] = earlier
                    else:
                        missing[k] = p
                parts.append(k)
            cut.append(parts)
        sample, first = [], self.prompts
        for i in range(len(texts)):
            if self.prompts < SAMPLE_FIRST or self.prompts % SAMPLE_EVERY == 0:
                sample.append(i)
            self.prompts += 1
        asked, tokenized = sum(len(t) for t in texts), sum(len(t) for t in missing.values())
        self.chars_asked += asked
        self.chars_tokenized += tokenized
        self.chars_kept += kept_chars
        pr = self.probe
        pr[0], pr[1], pr[2] = pr[0] + len(texts), pr[1] + asked, pr[2] + tokenized
        if pr[0] >= PROBE_PROMPTS:
            if pr[2] > (1 - MIN_SAVED) * pr[1]:
                self.whole_left = self.whole_run
                self.whole_run = min(2 * self.whole_run, MAX_WHOLE_PROMPTS)
            else:
                self.whole_run = WHOLE_PROMPTS
            pr[0] = pr[1] = pr[2] = 0
        asks, wholes = list(missing.values()), [texts[i] for i in sample]

        def tokenize() -> tuple[list[np.ndarray], list[list[int]]]:
            enc = bt.encode_batch_fast(asks, add_special_tokens=False) if asks else []
            whole = bt.encode_batch_fast(wholes, add_special_tokens=add_special_tokens) if wholes else []
            return [_int32(e.ids) for e in enc], [e.ids for e in whole]
        b = Batch(texts, add_special_tokens, cut, borrowed, sample, run(tokenize), list(missing), affix, first,
                  turns=turns if streams is not None else [])
        for k in missing:
            pending[k] = b
        return b

    def _finished(self, turn: Turn, ids: np.ndarray, head: int, lens: list[int]) -> None:
        """``turn``'s ids (``head`` of them the post-processor's) and the ids before the end of
        each of its pieces after its prefix (``lens``: the ids in each): what its stream's next
        turn starts with."""
        base, n = turn.base, 0
        if base is not None:
            n = base.tokens[turn.first - 1]
            turn.tokens = base.tokens[:turn.first]
            turn.base = None  # no chain of turns held
        turn.span = None
        turn.tokens += (np.cumsum(lens, dtype=np.int64) + n).tolist()
        turn.ids, turn.head = ids, head
        if self.turns.get(turn.stream) is turn:
            self._count(turn)

    def _next_turn(self, stream: Hashable, text: str, special: bool) -> Turn:
        """``stream``'s new turn, ``text``, recorded in its place, starting with the previous
        turn's pieces that end ``guard`` characters before the first one the two texts differ at
        (``base`` and ``first``; when it is of the same kind)."""
        turns = self.turns
        prev = turns.pop(stream, None)
        turn = Turn(stream, text, special, [], [])
        if prev is not None:
            self.turn_bytes -= prev.counted
            if prev.special == special:
                # never its last piece (the text's end, no cut in a text that goes on): it ends
                # past the common prefix less the guard
                k = common_prefix(prev.text, text)
                j = bisect_right(prev.ends, k - self.guard)
                if j:
                    turn.ends, turn.base, turn.first = prev.ends[:j], prev, j
                if k < len(prev.text) and k < len(text):
                    turn.span = self._span(prev, text, k)
        turns[stream] = turn
        self._count(turn)
        return turn

    def _span(self, prev: Turn, text: str, k: int) -> Span | None:
        """The run of ``prev``'s pieces ``text`` has again after the line they differ at (``k``
        the first character): past the end of that line in each, the longest run of the same
        characters; in it, the pieces from the second boundary twice ``guard`` characters or more past
        its start (a reset point of the cutting in both, past any added token that starts
        before the run: the first may be cut otherwise in ``text``, whose text before it differs)
        to the last that ends ``guard`` characters or more before its end. None: no such piece."""
        x = prev.text.find("\n", k)
        y = text.find("\n", k)
        if x < 0 or y < 0:
            return None
        m = common_prefix(prev.text[x:x + len(text) - y], text[y:y + len(prev.text) - x])
        ends, guard = prev.ends, self.guard
        a = bisect_right(ends, x + 2 * guard - 1) + 2  # ends[a - 2]: the reset point; ends[a - 1]: the start
        b = bisect_right(ends, x + m - guard)
        if b <= a:
            return None
        return Span(prev, a, b, ends[a - 1] + y - x, ends[b - 1] + y - x, y - x)

    def _cut_around(self, text: str, start: int, span: Span | None) -> list[str | int | Span]:
        """``text`` from ``start`` cut (:meth:`_cut`), the previous turn's ``span`` in its place."""
        if span is None or span.start < start:
            return list(self._cut(text[start:] if start else text))
        return [*self._cut(text[start:span.start]), span, *self._cut(text[span.end:])]

    def _count(self, turn: Turn) -> None:
        """``turn``'s bytes counted again, and the oldest turns dropped past the bound."""
        size = turn.size
        self.turn_bytes += size - turn.counted
        turn.counted = size
        turns = self.turns
        while self.turn_bytes > self.max_turn_bytes and turns:
            self.turn_bytes -= turns.popitem(last=False)[1].counted

    def finish(self, b: Batch) -> list[np.ndarray]:
        """The token ids of a batch :meth:`begin` began (waiting for its tokenizer calls)."""
        self._unpend(b)  # no later batch takes its pieces from it now: they come from the cache
        got = b.result.result()
        if b.cut is None:
            whole_ids: list[np.ndarray] = got
            return whole_ids
        ids, whole = got
        fresh = b.fresh = dict(zip(b.missing, ids, strict=True))
        for k, a in fresh.items():
            self._put(k, a)
        self.pieces_tokenized += len(fresh)
        if self.failed is not None:  # an earlier batch's pieces did not add up: whole from now on
            return self.encode(b.texts, add_special_tokens=b.special)
        assert b.affix is not None
        head, tail = (np.asarray(x, dtype=np.int32) for x in b.affix)
        out: list[np.ndarray] = []
        same: list[tuple[np.ndarray, int] | None] = [None] * len(b.cut)
        spans: list[tuple[np.ndarray, int, int] | None] = [None] * len(b.cut)
        for i, parts in enumerate(b.cut):
            arrs = [head]
            lens: list[int] = []  # ids in each piece after the previous turn's first part
            for p in parts:
                if isinstance(p, np.ndarray):
                    arrs.append(p)
                    lens.append(len(p))
                elif isinstance(p, Turn):
                    base = p.base
                    assert base is not None and base.ids is not None, "begun before this turn: finished before it"
                    n = base.tokens[p.first - 1]
                    arrs.append(base.ids[base.head:base.head + n])
                    same[i] = (base.ids, base.head + n)  # its head is this one's (one kind, one affix)
                elif isinstance(p, Span):
                    sb = p.base
                    assert sb.ids is not None, "begun before this turn: finished before it"
                    tok = sb.tokens
                    lo = sb.head + tok[p.a - 1]
                    hi = sb.head + tok[p.b - 1]
                    at = sum(map(len, arrs))
                    if at == lo:  # at the same places in both (a line rewritten to as many ids)
                        spans[i] = (sb.ids, lo, hi - lo)
                    arrs.append(sb.ids[lo:hi])
                    lens += [y - x for x, y in zip(tok[p.a - 1:p.b - 1], tok[p.a:p.b], strict=True)]
                else:
                    mine = fresh.get(p)
                    got = mine if mine is not None else b.borrowed[p].fresh[p]
                    arrs.append(got)
                    lens.append(len(got))
            arrs.append(tail)
            ids = np.concatenate(arrs, dtype=np.int64)
            out.append(ids)
            turn = b.turns[i] if b.turns else None
            if turn is not None:
                self._finished(turn, ids, len(head), lens)
        b.cut, b.borrowed = [], {}  # what a later batch may take from it is only ``fresh``: no chain of batches held
        for i, want in zip(b.sample, whole, strict=True):
            self.sampled += 1
            if out[i].tolist() != want:
                # the pieces did not add up: this batch and the rest of the run whole
                self.failed = (f"prompt {b.first + i + 1:,} (by pieces: {len(out[i]):,} ids, "
                               f"whole: {len(want):,})")
                self.turns.clear()
                self.turn_bytes = 0
                return self.encode(b.texts, add_special_tokens=b.special)
        self.by_pieces += len(b.texts)
        b.same, b.spans = same, spans
        return out

    def drop(self, b: Batch) -> None:
        """Forget ``b``, begun and never to be finished (the check stopped early): no batch begun
        later waits on it for its pieces, and no turn begun later starts from one of its turns
        (a later check with the same renderer starts its conversations afresh)."""
        self._unpend(b)
        for t in b.turns:
            if t is not None and self.turns.get(t.stream) is t:
                del self.turns[t.stream]
                self.turn_bytes -= t.counted

    def _unpend(self, b: Batch) -> None:
        """Forget that ``b`` is tokenizing its pieces: it is finished, or dropped."""
        for k in b.missing:
            if self.pending.get(k) is b:
                del self.pending[k]

    def _cut(self, text: str) -> list[str | int]:
        """``text`` as its pieces (str) and the added tokens it is cut at (their ids), in order."""
        pl = self.plan
        segs: list[str | int] = []
        pos = 0
        if pl.added is not None and pl.split_ids:
            for m in pl.added.finditer(text):
                tid = pl.split_ids.get(m.group(0))
                if tid is None:
                    continue  # an added token that strips whitespace: left inside its piece
                if m.start() > pos:
                    segs.append(text[pos:m.start()])
                segs.append(tid)
                pos = m.end()
        if pos < len(text):
            segs.append(text[pos:])
        if not pl.newlines:
            return segs
        out: list[str | int] = []
        for s in segs:
            if isinstance(s, str) and "\n" in s:
                newline_pieces_fast(s, self.lines_per_piece, out)
            else:
                out.append(s)
        return out

    def _affix(self, add_special_tokens: bool) -> tuple[list[int], list[int]] | None:
        """What the post-processor adds around a text's ids (found on two probe texts, the
        same both times), or None when it is not a fixed prefix and suffix."""
        if add_special_tokens not in self.affix:
            got = None
            for probe in ("hello world", "a\nb"):
                plain = self.bt.encode(probe, add_special_tokens=False).ids
                full = self.bt.encode(probe, add_special_tokens=True).ids
                n = len(full) - len(plain)
                at = next((i for i in range(n + 1) if full[i:i + len(plain)] == plain), None)
                this = (full[:at], full[at + len(plain):]) if at is not None and plain else None
                if this is None or (got is not None and this != got):
                    got = None
                    break
                got = this
            self.affix[add_special_tokens] = got
        return self.affix[add_special_tokens]

    def _put(self, k: tuple[int, int], ids: np.ndarray) -> None:
        size = 4 * len(ids) + PIECE_OVERHEAD
        if size > self.max_bytes:
            return
        self.cache[k] = ids
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, old = self.cache.popitem(last=False)
            self.bytes -= 4 * len(old) + PIECE_OVERHEAD
            self.evicted += 1

    def notes(self) -> list[str]:
        """What the check says about how its prompts were tokenized (empty: nothing to say)."""
        if self.plan.why_not is not None:
            return [f"prompts tokenized whole (not by pieces): {self.plan.why_not}"]
        if self.failed is not None:
            return [f"tokenized by pieces, then whole: the pieces did not add up to the whole prompt's ids at "
                    f"{self.failed}; {self.by_pieces:,} prompt(s) before it were tokenized by pieces "
                    f"({self.sampled:,} of them checked whole and equal), the rest whole"]
        return []


def common_prefix(a: str | bytes, b: str | bytes) -> int:
    """Length of the common prefix of ``a`` and ``b`` (two texts, or two byte strings): halves
    compared as slices (memcmp), not a character at a time."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        m = (lo + hi) // 2
        if a[lo:m] == b[lo:m]:
            lo = m
        else:
            hi = m
    return lo


def _longest_added(backend: Any) -> int | None:
    """Characters in ``backend``'s longest added token (None: not readable)."""
    try:
        return max((len(a.get("content") or "") for a in json.loads(backend.to_str()).get("added_tokens") or []),
                   default=0)
    except Exception:  # noqa: BLE001 - a tokenizer that cannot describe itself
        return None
