"""One request made ready for the caches: rendered with the chat template (text prompts), line-mapped,
tokenized by pieces and keyed in 64-bit block keys (``Preparer``). Apart from ``check.py`` so the
worker processes (``workers.py``) build the same ``Preparer`` as the check's own process."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import numpy as np

from ...models.core.errors import KvplanError
from ...models.prompts.busters import LineHashes, LineInfo, LineMap, line_map
from ...models.prompts.hashing import (
    ROOT,
    ExtraKeys,
    chain_keys64,
    chain_keys64_many,
    hash_block,
    keys64,
    token_digests_many,
)
from ...models.prompts.predict import Hashed
from .pieces import Batch, Run, now
from .read import LogRequest
from .render import Renderer


def conversation(r: LogRequest) -> object:
    """Which conversation ``r`` continues, as far as telling its previous turn goes: its session
    field, else its first user message, else (completions) one stream for all (a ``SlimRequest``'s
    came with it)."""
    sent = r.__dict__.get("_conversation")
    if sent is not None:
        return sent
    if r.session is not None:
        return ("session", r.session)
    if r.kind == "chat" and r.messages:
        m = next((m for m in r.messages if m.get("role") == "user"), r.messages[0])
        return ("user", str(m.get("content") or ""))
    return ("completion",)


class Options(Protocol):
    """What a Preparer reads of ``check.CheckOptions``."""

    @property
    def block_size(self) -> int: ...

    @property
    def lora(self) -> frozenset[str]: ...


@dataclass
class Prepared:
    """One request ready for the caches: its keys and (text prompts) its text and line map."""

    request: LogRequest
    hashed: Hashed | None
    ids: np.ndarray | None
    text: str | None = None
    lines: LineMap | None = None
    block_size: int = 0
    """The block size its keys are (to be) computed at: the preparer's when it was rendered."""
    digests: np.ndarray | None = None
    """Its tokens' ``hashing.token_digests`` (once a request: its keys at every block size)."""
    message_hashes: list[int] | None = None
    """``history.request_hashes`` of its request, when computed ahead (``forked.py``)."""
    line_hashes: LineHashes | None = None
    """``busters.line_hashes`` of its text and lines, when computed ahead (``forked.py``)."""


_Began = tuple[Sequence[tuple["Prepared", str, int]], list[tuple[list[int], Batch]]]
"""Items begun (request, text, block size) and each kind's indices and tokenizer batch."""


@dataclass
class Tokenizing:
    """Requests whose tokenizer calls :meth:`Preparer.begin_encode` began."""

    items: list[Prepared]
    state: _Began


def hashed64(ids: np.ndarray | list[int], block_size: int, extra: ExtraKeys, output_tokens: int | None,
             digests: np.ndarray | None = None) -> Hashed:
    """``predict.hashed`` with 64-bit integer keys (``hashing.chain_keys64``: the same equalities
    as sha256's chain, computed at once; ``digests``: the ids' ``token_digests`` if known)."""
    return Hashed(len(ids), chain_keys64(ids, block_size, extra, digests=digests), max(1, output_tokens or 1))


class Preparer:
    """Renders, tokenizes and hashes requests with one tokenizer and block size."""

    def __init__(self, renderer: Renderer | None, opts: Options):
        self.renderer = renderer
        self.opts = opts
        self.block_size = opts.block_size
        self.trace_block: int | None = None
        self.first_tokens: str | None = None
        """Where the first text or token-id request is (file:line): block-id lines after it are refused."""
        self.notes: list[str] = []
        self.date: tuple[str, str, tuple[int | None, str, int]] | None = None
        self.date_checked = False
        self.dated = 0
        self.turns = LastTurns()
        """Each conversation's last ids and digests: a turn's digests up to where its ids part from them are theirs."""

    def extra(self, r: LogRequest) -> ExtraKeys:
        return ExtraKeys(lora=r.model if r.model in self.opts.lora else None, cache_salt=r.cache_salt)

    def prepare(self, r: LogRequest, *, encode: bool = True) -> Prepared:
        """Render (text prompts) and, unless ``encode`` is False, tokenize and hash ``r``."""
        if r.kind == "blocks":
            return Prepared(r, self._blocks(r), None)
        self.admit(r)
        if r.kind == "completion" and r.prompt_ids is not None:
            ids = np.asarray(r.prompt_ids, dtype=np.int64)
            return Prepared(r, hashed64(ids, self.block_size, self.extra(r), r.output_tokens), ids)
        assert self.renderer is not None
        text = self.renderer.text(r)
        lines = self.lines(r, text)
        if r.kind == "chat":
            dated = self._server_date(r, text, lines)
            if dated is not None:
                text = dated
                lines = self.lines(r, text)
        p = Prepared(r, None, None, text, lines, self.block_size)
        if encode:
            self.encode(p)
        return p

    @staticmethod
    def lines(r: LogRequest, text: str) -> LineMap:
        """The line map of ``text``, ``r``'s prompt as rendered: its lines tied to its messages."""
        contents: list[tuple[str, str | None]] = (
            [(m["role"], m.get("content")) for m in r.messages] if r.kind == "chat" else [("prompt", r.prompt)])
        names = [str((t.get("function") or {}).get("name", "")) for t in (r.tools or []) if isinstance(t, dict)]
        return line_map(text, contents, names)

    def admit(self, r: LogRequest) -> None:
        """Refuse a token or text request ``r`` after block-id lines, or a text prompt without a
        tokenizer (``KvplanError`` naming its file:line); else note where the first one is."""
        if self.trace_block is not None:
            raise KvplanError(f"a {r.kind} request after block-id trace lines (blocks of {self.trace_block} "
                              "tokens): one format per check (the keys would mix block sizes); check the trace and "
                              "the request log apart", source=r.where)
        self.first_tokens = self.first_tokens or r.where
        if self.renderer is None and not (r.kind == "completion" and r.prompt_ids is not None):
            raise KvplanError("a text prompt needs the model's tokenizer: give --tokenizer DIR (or a model id in "
                              "the local Hugging Face cache)", source=r.where)

    def encode(self, p: Prepared) -> Hashed:
        """``p``'s token ids and keys from its text (once)."""
        if p.hashed is None:
            self.encode_all([p])
        assert p.hashed is not None
        return p.hashed

    def encode_all(self, ps: Sequence[Prepared]) -> None:
        """:meth:`encode` of each of ``ps`` not yet encoded, with one tokenizer batch call per
        kind (chat without special tokens added, completions with)."""
        self.finish_encode(self.begin_encode(ps))

    def begin_encode(self, ps: Sequence[Prepared], run: Run = now) -> Tokenizing:
        """:meth:`encode_all` up to the tokenizer's calls, which ``run`` makes (perhaps on another
        thread); :meth:`finish_encode` sets each request's ids and keys."""
        todo = [p for p in ps if p.hashed is None]
        return Tokenizing(todo, self._begin([(p, p.text or "", p.block_size or self.block_size) for p in todo], run))

    def drop(self, began: _Began) -> None:
        """Tokenizer calls begun (:meth:`begin_encode`'s ``state``, :meth:`begin_retokenize`)
        whose batch will not be finished: the check stopped early."""
        for _, batch in began[1]:
            assert self.renderer is not None
            self.renderer.drop_ids(batch)

    def finish_encode(self, t: Tokenizing) -> None:
        for p, (ids, h, dg) in zip(t.items, self._finish(t.state), strict=True):
            p.ids, p.hashed, p.digests = ids, h, dg

    def _begin(self, items: Sequence[tuple[Prepared, str, int]], run: Run) -> _Began:
        """The tokenizer's batch calls for each (request, text, block size), one per kind (chat
        without special tokens added, completions with), by pieces (``Renderer.begin_ids``: the
        first pass's and the fix pass's share one piece cache), handed to ``run``."""
        kinds: list[tuple[list[int], Batch]] = []
        if items:
            assert self.renderer is not None
            for special in (False, True):
                idx = [i for i, (p, _, _) in enumerate(items) if (p.request.kind == "completion") == special]
                if idx:
                    kinds.append((idx, self.renderer.begin_ids(
                        [items[i][1] for i in idx], add_special_tokens=special, run=run,
                        streams=[conversation(items[i][0].request) for i in idx])))
        return items, kinds

    def _finish(self, began: _Began) -> list[tuple[np.ndarray, Hashed, np.ndarray]]:
        """Token ids and 64-bit keys of each item :meth:`_begin` began, in order: the digests and
        keys of each kind's requests at once (``token_digests_many``, ``chain_keys64_many``; each
        request's are views of them)."""
        items, kinds = began
        out: list[tuple[np.ndarray, Hashed, np.ndarray] | None] = [None] * len(items)
        for idx, batch in kinds:
            assert self.renderer is not None
            ids = self.renderer.finish_ids(batch)
            bounds = np.zeros(len(ids) + 1, dtype=np.int64)
            np.cumsum([len(x) for x in ids], out=bounds[1:])
            dg = self.turns.digests(ids, bounds, [conversation(items[i][0].request) for i in idx],
                                    batch.same if len(batch.same) == len(ids) else None,
                                    batch.spans if len(batch.spans) == len(ids) else None)
            by_size: dict[int, list[int]] = {}
            for j, i in enumerate(idx):
                by_size.setdefault(items[i][2], []).append(j)
            for block_size, js in by_size.items():
                sub, digests = bounds, dg
                if len(by_size) > 1:  # requests at several block sizes: each size's apart
                    sub = np.zeros(len(js) + 1, dtype=np.int64)
                    np.cumsum([len(ids[j]) for j in js], out=sub[1:])
                    digests = np.concatenate([dg[bounds[j]:bounds[j + 1]] for j in js])
                extras = [self.extra(items[idx[j]][0].request) for j in js]
                keys, kb = chain_keys64_many(digests, sub, block_size, extras)
                for n, j in enumerate(js):
                    p = items[idx[j]][0]
                    h = Hashed(len(ids[j]), keys[kb[n]:kb[n + 1]], max(1, p.request.output_tokens or 1))
                    out[idx[j]] = (ids[j], h, dg[bounds[j]:bounds[j + 1]])
        return [x for x in out if x is not None]

    def _server_date(self, r: LogRequest, text: str, lines: LineMap) -> str | None:
        """A chat template that writes today's date (``strftime_now``) renders, in vLLM, the date
        the request arrived: the text with that date in place of today's, or None. Found once, on
        the first chat request, in the template's own lines."""
        if not self.date_checked:
            self.date_checked = True
            asked = tuple(self.renderer.clock_formats) if self.renderer is not None else ()
            self.date = template_date(text, lines, (*asked, *DATE_FORMATS))
            if self.date is not None:
                place = self.date[2]
                self.notes.append(f"the chat template writes the server's date (template line {place[2]}): vLLM "
                                  "renders the day a request arrives, so cached prefixes after it are lost once a "
                                  "day" + ("" if r.arrival is not None else "; the log has no arrival times, so the "
                                           "prediction renders every request with today's date"))
        if self.date is None or r.arrival is None:
            return None
        fmt, today, place = self.date
        day = datetime.fromtimestamp(r.arrival, tz=UTC).strftime(fmt)
        for li in lines:
            if li.place == place and today in text[li.start:li.end]:
                self.dated += 1
                return text[:li.start] + text[li.start:li.end].replace(today, day, 1) + text[li.end:]
        return None

    def retokenize(self, p: Prepared, text: str) -> Hashed:
        return self.retokenize_all([(p, text)])[0]

    def retokenize_all(self, items: Sequence[tuple[Prepared, str]]) -> list[Hashed]:
        """Keys of each (request, rewritten text), one tokenizer batch call per kind."""
        return self.finish_retokenize(self.begin_retokenize(items))

    def begin_retokenize(self, items: Sequence[tuple[Prepared, str]], run: Run = now) -> _Began:
        """:meth:`retokenize_all` up to the tokenizer's calls, which ``run`` makes."""
        return self._begin([(p, text, self.block_size) for p, text in items], run)

    def finish_retokenize(self, began: _Began) -> list[Hashed]:
        return [h for _, h, _ in self._finish(began)]

    def _blocks(self, r: LogRequest) -> Hashed:
        assert r.block_ids is not None
        b = r.block_tokens
        if self.first_tokens is not None:
            raise KvplanError(f"block-id trace lines (blocks of {b} tokens) after a text or token-id request (at "
                              f"{self.first_tokens}, keyed in blocks of {self.block_size} tokens): one format per "
                              "check (the keys would mix block sizes); check the trace and the request log apart",
                              source=r.where)
        if self.trace_block is None:
            self.trace_block = b
            if self.block_size % b:
                self.notes.append(f"the trace's blocks are {b} tokens, which do not divide the block size "
                                  f"{self.block_size}: predicted at {b}-token blocks")
                self.block_size = b
        elif self.trace_block != b:
            raise KvplanError(f"blocks of {b} tokens after blocks of {self.trace_block}: one trace format at a "
                              "time", source=r.where)
        g = self.block_size // b
        full = r.input_length // self.block_size
        keys: list[bytes] = []
        prev = ROOT
        extra = self.extra(r)
        for i in range(full):
            prev = hash_block(prev, r.block_ids[i * g:(i + 1) * g], extra.for_block(i))
            keys.append(prev)
        return Hashed(r.input_length, tuple(keys64(keys)), max(1, r.output_tokens or 1))


TURN_BYTES = 16 << 20
"""The bound on :class:`LastTurns`' ids and digests (16 bytes a token), least recently used dropped past it."""


class LastTurns:
    """Each conversation's last turn's token ids and digests (``hashing.token_digests``), so that
    a turn that repeats the conversation so far computes the digests of what it adds only: a
    token's digest is its id mixed with its position, so the tokens a turn shares with the last
    one from the start have its digests."""

    def __init__(self, max_bytes: int = TURN_BYTES):
        self.max_bytes = max_bytes
        self.bytes = 0
        self.last: OrderedDict[Hashable, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.reused = 0
        """Digests taken from an earlier turn (not computed)."""

    def digests(self, ids: Sequence[np.ndarray], bounds: np.ndarray, streams: Sequence[Hashable],
                same: Sequence[tuple[np.ndarray, int] | None] | None = None,
                spans: Sequence[tuple[np.ndarray, int, int] | None] | None = None) -> np.ndarray:
        """``token_digests_many`` of ``ids`` (``bounds`` where each starts end to end), each
        prompt's leading tokens in common with its stream's last turn taken from it (the one
        before it in the batch, if any, else the last one kept). ``same``: per prompt, ids it is
        known to start with (``pieces.Batch.same``: copied from them) and how many; when they are
        its last turn's, those are not compared again. ``spans``: per prompt, a run of ids it
        has at the same places as ids known (``pieces.Batch.spans``: copied from them); when they
        are its last turn's, their digests are taken from it too."""
        last = self.last
        shared = np.zeros(len(ids), dtype=np.int64)
        # per prompt, the run of its last turn's ids taken past ``shared`` (none: empty, at its end)
        runs: list[tuple[int, int]] = [(len(a), len(a)) for a in ids]
        before: list[int] = [-1] * len(ids)  # per prompt, its last turn's place in the batch (-1: ``last``'s)
        newest: dict[Hashable, int] = {}  # per stream, its newest prompt of the batch so far
        for j, (a, s) in enumerate(zip(ids, streams, strict=True)):
            i = newest.get(s)
            newest[s] = j
            if i is not None:
                b = ids[i]
                before[j] = i
            else:
                prev = last.get(s)
                if prev is None:
                    continue
                b = prev[0]
            m = min(len(a), len(b))
            known = same[j] if same is not None else None
            k = min(known[1], m) if known is not None and known[0] is b else 0
            n = shared[j] = _first_difference(a, b, k, m)
            sp = spans[j] if spans is not None else None
            if sp is not None and sp[0] is b and sp[1] + sp[2] > n and sp[1] + sp[2] <= m:
                runs[j] = (max(n, sp[1]), sp[1] + sp[2])
        if not shared.any() and all(x == y for x, y in runs):
            dg = token_digests_many(np.concatenate(ids) if len(ids) else np.empty(0, dtype=np.int64), bounds)
        else:
            # each prompt's ids not taken from its last turn: the two tails around its run (one may be empty)
            parts: list[np.ndarray] = []
            firsts: list[int] = []
            for a, n, (x, y) in zip(ids, shared.tolist(), runs, strict=True):
                parts += (a[n:x], a[y:])
                firsts += (n, y)
            tb = np.zeros(len(parts) + 1, dtype=np.int64)
            np.cumsum([len(t) for t in parts], out=tb[1:])
            td = token_digests_many(np.concatenate(parts), tb, np.array(firsts, dtype=np.int64))
            dg = np.empty(int(bounds[-1]), dtype=np.uint64)
            for j, (s, n, (x, y), i) in enumerate(zip(streams, shared.tolist(), runs, before, strict=True)):
                at, end = int(bounds[j]), int(bounds[j + 1])
                if n or y > x:  # its last turn's digests: of a prompt before it here (set), or kept
                    src = last[s][1] if i < 0 else dg[int(bounds[i]):int(bounds[i + 1])]
                    dg[at:at + n] = src[:n]
                    dg[at + x:at + y] = src[x:y]
                dg[at + n:at + x] = td[tb[2 * j]:tb[2 * j + 1]]
                dg[at + y:end] = td[tb[2 * j + 1]:tb[2 * j + 2]]
                self.reused += n + y - x
        for j, (a, s) in enumerate(zip(ids, streams, strict=True)):
            if newest[s] != j:
                continue
            old = last.pop(s, None)
            if old is not None:
                self.bytes -= old[0].nbytes + old[1].nbytes
            last[s] = got = (a, dg[bounds[j]:bounds[j + 1]].copy())
            self.bytes += got[0].nbytes + got[1].nbytes
        while self.bytes > self.max_bytes and last:
            a, d = last.popitem(last=False)[1]
            self.bytes -= a.nbytes + d.nbytes
        return dg


def _first_difference(a: np.ndarray, b: np.ndarray, k: int, m: int, window: int = 256) -> int:
    """The first place from ``k`` (before ``m``) where ``a`` and ``b`` differ, else ``m``: the
    first ``window`` ids compared first (a turn that rewrites a line differs soon after what
    is known), the rest only if they are all the same."""
    w = min(m, k + window)
    diff = np.flatnonzero(a[k:w] != b[k:w])
    if len(diff):
        return k + int(diff[0])
    if w == m:
        return m
    diff = np.flatnonzero(a[w:m] != b[w:m])
    return w + int(diff[0]) if len(diff) else m


DATE_FORMATS = ("%d %B %Y", "%d %b %Y", "%Y-%m-%d", "%B %d, %Y", "%b %d, %Y", "%A, %B %d, %Y", "%m/%d/%Y",
                "%d/%m/%Y", "%Y/%m/%d", "%d.%m.%Y")
"""strftime formats a template's date is looked for in (Llama 3.1's "Today Date: 26 Jul 2024" is %d %b %Y)."""


def template_date(text: str, lines: Sequence[LineInfo], formats: Sequence[str] = DATE_FORMATS
                  ) -> tuple[str, str, tuple[int | None, str, int]] | None:
    """(format, today's date in it, the line's place) when a template line holds today's date:
    in one of ``formats`` (the ones the template asked ``strftime_now`` for, then common ones)."""
    days = {datetime.now(), datetime.now(UTC)}
    for li in lines:
        if li.role != "template":
            continue
        seg = text[li.start:li.end]
        for fmt in formats:
            for d in days:
                today = d.strftime(fmt)
                if today in seg:
                    return fmt, today, li.place
    return None
