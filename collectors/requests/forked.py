"""The first pass's renders made ahead in a forked process (``kvplan prompts check``, in process).

Reading and rendering a request log (JSON, the chat template, then the line map) is Python, and
so is what the check does with each render (keys, replay, finders): in one process they take
turns. :class:`RenderAhead` forks one process that reads the files, renders every text request
and sends back, in file order, each request with its text, its line map and the hashes the
finders take of it (the lines', the messages'), while the check's own process keys and replays
the ones before: the two run on two cores, and each line is parsed once. A request crosses slim
(``read.SlimRequest``: its few light fields, its content pickled, unpickled only where the check
needs it, and its conversation's key), its text as what it adds to its conversation's last text
(``delta.Mirror``: both processes hold the last texts, fed the same ones); one the check renders
itself crosses whole. The bad lines
it read cross with the request after them, and are recorded in the check's ``Skipped`` where
reading there would have recorded them (:func:`read_then_ahead`), so every bad line is named
where it always was, and a sample's counts (``--sample-sessions``) are its reading's. A forked
process's ``hash`` of a string is its parent's (the same interpreter and hash seed).

A render is a function of the request and of the template's date (``Preparer.date``), which the
check's process finds on the first chat request; the process is forked once it has (so it
inherits the date), and skips the requests read before. Nothing it does is needed for a result:
a request it could not render (vLLM would refuse it, any error) comes back without a render and
the check's process renders it itself, raising what it raises; if the process ends early (an
error, killed, or stopped), the check's process reads the rest itself (from the start again,
passing over the requests it was given). The results are the same either way.

The check stops it once the piece cache tokenizes prompts whole (``Renderer.tokenizing_whole``:
all-distinct prompts, where the tokenizer takes both cores and a second process only competes).
It is forked only where that is safe and pays: on Linux (``os.fork``), from a process running one
thread (a fork copies only the calling thread; a lock another thread held would stay held in the
child: the dashboard, a Streamlit server running threads, checks without forking), and never on a
Ray cluster's stream or with worker processes. The child does not tokenize (the fast tokenizer's
thread pool is not forked safely). At most ``PIPE_BYTES`` wait in the pipe: the text held stays
bounded. The process is killed when the check ends, finishes or fails.

The same process keeps its renders (``kept.Kept``) and, when the check's first pass ends with
findings, makes the "if fixed" pass's rewrites (:meth:`RenderAhead.fix`: read again up to the
last request it did not keep, the rest made again from what it kept, ``Kept.requests``; take
back or render, map lines, fix each variant) and sends each batch's changed texts with their
requests' light fields (``read.light``: what keying takes, not their messages); the check's
process keys and replays them. If it stops early, the check's process
does the whole pass again itself. Forked after one request, it holds little of the check's
memory, which grows with the log (its keys, its piece cache)."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from ...models.core.errors import KvplanError
from ...models.prompts.busters import LineHashes, LineMap, line_hashes
from .delta import Mirror
from .history import request_hashes
from .kept import Kept
from .prepare import Prepared, Preparer, conversation
from .read import LogRequest, Skipped, SlimRequest, read_requests, slimmed
from .sample import SessionSample, sampled

BATCH = 16
"""Renders sent at once (one message on the pipe)."""
PIPE_BYTES = 1 << 20
"""The pipe's buffer (Linux's default ``pipe-max-size``): a few batches rendered ahead, no more."""
_Sent = tuple[Any, np.ndarray, tuple[str, ...], int, bool, list[int] | None, LineHashes] | None
"""One request's render as sent (beside the request): text (as what it adds to its conversation's
last one: ``delta.Mirror``), the line map's arrays stacked, its roles, its
``split_of``, whether the template's date was put in, its ``history.request_hashes`` (chat) and
its ``busters.line_hashes``; None: rendered by the check itself."""


def can_fork() -> bool:
    """Whether this process may fork a renderer: Linux, one thread running."""
    return sys.platform == "linux" and threading.active_count() == 1 and hasattr(os, "fork")


def _rendered(prep: Preparer, r: LogRequest) -> tuple[_Sent, Prepared | None]:
    """``r``'s render as ``Preparer.prepare(r, encode=False)`` makes it, as sent and as made, or
    None (not a text request, or any error: the check's process renders it and meets the error
    itself)."""
    if r.kind == "blocks" or (r.kind == "completion" and r.prompt_ids is not None) or prep.renderer is None:
        return None, None
    try:
        before = prep.dated
        p = prep.prepare(r, encode=False)
    except Exception:
        return None, None
    lm = p.lines
    if p.text is None or lm is None:
        return None, None
    packed = lm.columns()
    return (p.text, packed, lm.roles, lm.split_of, prep.dated > before,
            request_hashes(r) if r.kind == "chat" and r.messages else None, line_hashes(p.text, lm)), p


Fix = Callable[[Any, Kept], Iterable[Any]]
"""The "if fixed" pass's batches, made in the forked process from what the check's process sends
when its first pass ends (picklable) and the renders the process kept."""


_Bad = tuple[list[tuple[type[KvplanError], tuple[Any, ...], dict[str, Any]]], list[str]] | None
"""The bad lines read since the request before (each error as its class, args and attributes:
``PayloadError`` is not made again from its args alone) and the unfinished ones; None: none."""


class _Lines:
    """A reading's bad lines not yet sent (``Skipped``'s, from ``mark`` on)."""

    def __init__(self, skipped: Skipped):
        self.skipped = skipped
        self.errors = self.unfinished = 0

    def mark(self) -> None:
        self.errors, self.unfinished = len(self.skipped.errors), len(self.skipped.unfinished)

    def since(self) -> _Bad:
        sk = self.skipped
        if len(sk.errors) == self.errors and len(sk.unfinished) == self.unfinished:
            return None
        got = ([(type(e), e.args, dict(e.__dict__)) for e in sk.errors[self.errors:]],
               sk.unfinished[self.unfinished:])
        self.mark()
        return got


def _add_bad(skipped: Skipped, bad: _Bad) -> None:
    """``bad`` (``_Lines.since``) recorded in ``skipped`` in order, as reading there records them
    (past the run's budget of bad lines, it raises where reading would)."""
    if bad is None:
        return
    errors, unfinished = bad
    for cls, args, attrs in errors:
        e = cls.__new__(cls)
        e.args = args
        e.__dict__.update(attrs)
        skipped.add(e)
    skipped.unfinished.extend(unfinished)


class _Unbounded(Skipped):
    """Bad lines recorded without the run's budget (the check's own ``Skipped`` counts them)."""

    def add(self, e: KvplanError) -> None:
        self.errors.append(e)


def read_then_ahead(paths: Sequence[Path], sample: SessionSample | None, skipped: Skipped,
                    ahead: list[RenderAhead]) -> Iterator[LogRequest]:
    """The check's requests in order: read here until the process rendering ahead is forked
    (``ahead`` filled while the last one given was rendered), then the ones it read
    (:meth:`RenderAhead.requests`: no line parsed here). If it ends early (failed, killed, or
    stopped by the check), the rest is read here: from the start again, the requests given before
    passed over and only the bad lines after them recorded, so each is recorded once."""
    given = 0
    own = sampled(read_requests(paths, skipped), sample)
    try:
        for r in own:
            given += 1
            yield r
            if ahead:
                break
        else:
            return
    finally:
        close = getattr(own, "close", None)
        if close is not None:
            close()
    a = ahead[0]
    for r in a.requests(skipped):
        given += 1
        yield r
    if a.complete:
        return
    lines = _Lines(_Unbounded())
    for i, r in enumerate(sampled(read_requests(paths, lines.skipped), sample)):
        if i < given:
            lines.mark()
            continue
        _add_bad(skipped, lines.since())
        yield r
    _add_bad(skipped, lines.since())


def _child(out: Connection, inbox: Connection, paths: Sequence[Path], sample: SessionSample | None,
           prep: Preparer, skip: int, fix: Fix | None, keep: Any) -> None:
    """The forked process: every request after the first ``skip`` read, rendered and sent in
    batches (each with the bad lines read before it, and slimmed: ``read.SlimRequest``; whole
    when the check's process renders it), then ("end", the bad lines after the last, the
    sample's counts): the check's process parses no line after the first ``skip``. Kept too,
    with ``fix``, within ``kept.KEEP_BYTES``, once ``keep`` is set (the check has a finding, so
    a fix pass will run), each with its place in the reading and its line map (made again
    without reading: ``Kept.requests``). Then, with ``fix``, waits for the fix pass's spec and sends its
    batches (``_produce``). Stops at a read error (the check's process, reading again, meets it)
    or a closed pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the check's to handle: it stops this process
    kept = Kept() if fix is not None else None
    batch: list[tuple[Any, _Bad, _Sent]] = []
    lines = _Lines(Skipped())
    n = 0
    mirror = Mirror()  # the check's process holds the same texts: a text crosses as what it adds
    try:
        for i, r in enumerate(sampled(read_requests(paths, lines.skipped), sample)):
            n = i + 1
            if i < skip:  # read by the check's process, and the bad lines before it
                lines.mark()
                continue
            sent, p = _rendered(prep, r)
            if sent is None or p is None:
                batch.append((r, lines.since(), None))
            else:
                conv = conversation(r)
                msg = mirror.send_tagged(conv, sent[0], r.where)
                if kept is not None and keep.value:
                    kept.put(p, i, conv, msg)  # the delta as sent: not computed again
                batch.append((slimmed(r, conv), lines.since(), (msg[0], *sent[1:])))
            if len(batch) >= BATCH:
                out.send(batch)
                batch = []
        if batch:
            out.send(batch)
        mirror.last.clear()  # the first pass's texts: not needed by the fix pass
        if kept is not None:
            kept.end(n, paths)
        out.send(("end", lines.since(), sample.counts if sample is not None else None))
    except Exception:  # a bad file or a closed pipe: what was sent stands, nothing more
        out.close()
        return
    try:
        spec = inbox.recv() if fix is not None else None
    except (EOFError, OSError):  # the check ended: no fix pass
        spec = None
    if spec is None or fix is None or kept is None:
        out.close()
        return
    _produce(out, lambda: fix(spec, kept), lambda: kept.made_again)


@contextmanager
def _forking() -> Iterator[None]:
    """Around a fork: ``TOKENIZERS_PARALLELISM`` set (then put back here), else the fast
    tokenizer's fork handler prints a warning in a child forked after its thread pool ran (the
    children never tokenize); and this process's objects frozen (``gc.freeze``) while it forks,
    so the child's garbage collector never walks them: a walk writes to every object it visits,
    and the pages of a forked process's memory are copied the first time either side writes
    one (the child would copy most of the check's memory, its caches included)."""
    had = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = had if had is not None else "true"
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        if had is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)


def _pipe(ctx: Any) -> tuple[Connection, Connection]:
    """A one-way pipe (reading end, writing end) with a ``PIPE_BYTES`` buffer where Linux allows."""
    recv, send = ctx.Pipe(duplex=False)
    try:
        import fcntl
        fcntl.fcntl(send.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except OSError:  # a smaller limit: the default buffer
        pass
    return recv, send


class ChildFailed(Exception):
    """A forked process stopped before the end of what it was to send (an error, killed)."""


def _produce(conn: Connection, produce: Callable[[], Iterable[Any]], told: Callable[[], Any] = lambda: None) -> None:
    """``produce()``'s items sent in order, then ("end", ``told()``); ("error", why) where it fails."""
    try:
        for x in produce():
            conn.send(("item", x))
        conn.send(("end", told()))
    except BaseException as e:  # noqa: BLE001 (told to the parent, which does the work itself)
        try:
            conn.send(("error", f"{type(e).__name__}: {e}"))
        except Exception:
            pass
    finally:
        conn.close()


class RenderAhead:
    """A forked process rendering the requests after the first ``skip`` of ``paths`` (see the
    module docstring): :meth:`take` gives each one's render in turn; with ``fix``, the same
    process keeps the renders and then makes the "if fixed" pass's rewrites (:meth:`fix`)."""

    def __init__(self, paths: Sequence[Path], sample: SessionSample | None, prep: Preparer, skip: int,
                 fix: Fix | None = None):
        ctx = multiprocessing.get_context("fork")
        recv, send = _pipe(ctx)
        inbox, outbox = ctx.Pipe(duplex=False)
        self.keep = ctx.Value("b", 0, lock=False)  # one shared byte: set once, read by the process
        with _forking():
            self.proc: Any = ctx.Process(target=_child, args=(send, inbox, list(paths), sample, prep, skip, fix,
                                                              self.keep), daemon=True, name="kvplan-prompts-render")
            self.proc.start()
        send.close()
        inbox.close()
        self.conn: Connection | None = recv
        self.outbox: Connection | None = outbox
        self.serves_fix = fix is not None
        self.streaming = True
        """Still sending the first pass's requests."""
        self.complete = False
        """Its first pass's end came: it sent every request after the first ``skip``."""
        self.sample = sample
        self.queue: deque[tuple[Any, _Bad, _Sent]] = deque()
        self.mirror = Mirror()
        """The texts received, as the process's: each text crosses as what it adds to its
        conversation's last one (``delta.Mirror``)."""
        self.pending: tuple[LogRequest, _Sent] | None = None
        """The last request :meth:`requests` gave and its render (:meth:`take` takes it)."""
        self.prep = prep
        self.taken = 0
        """Renders taken from the process (not made by the check's own)."""
        self.fix_batches = 0
        self.fix_ended: str | None = None
        """How its fix pass ended: "end", or why it failed (memory only, for the tests)."""
        self.made_again = 0
        """Requests its fix pass made again from what it kept, without reading (``Kept.requests``)."""

    def keep_renders(self) -> None:
        """The check has a finding (a fix pass will run): the process keeps its renders from now on."""
        self.keep.value = 1

    @property
    def alive(self) -> bool:
        """Whether the process may still make the fix pass's rewrites (it has not failed)."""
        return self.proc is not None and self.serves_fix

    def requests(self, skipped: Skipped) -> Iterator[LogRequest]:
        """The requests the process read after the first ``skip``, in order, each one's render
        for :meth:`take`, and the bad lines it read recorded in ``skipped`` where they were
        met; ``complete`` once its end came (then the sample's counts are its reading's). Ends
        early when the process does (the check reads the rest: ``complete`` stays False)."""
        while self.conn is not None and self.streaming:
            try:
                got = self.conn.recv()
            except (EOFError, OSError):  # the process ended early
                self.close()
                return
            if isinstance(got, tuple):  # ("end", the bad lines after the last request, the sample's counts)
                _, bad, counts = got
                _add_bad(skipped, bad)
                self.streaming, self.complete = False, True
                self.mirror = Mirror()  # its texts: not needed after the first pass
                if counts is not None and self.sample is not None:
                    c = self.sample.counts
                    c.requests, c.requests_kept, c.conversations = counts.requests, counts.requests_kept, \
                        counts.conversations
                return
            self.queue.extend(got)
            while self.queue:
                req, bad, sent = self.queue.popleft()
                _add_bad(skipped, bad)
                r = SlimRequest.of(*req) if isinstance(req, tuple) else req
                if sent is not None:  # its text as sent: what it adds to its conversation's last one
                    sent = (self.mirror.received(req[2], sent[0]), *sent[1:])
                self.pending = (r, sent)
                yield r

    def take(self, r: LogRequest) -> Prepared | None:
        """``r`` as the process rendered it (the request :meth:`requests` gave last: its text,
        line map and the finders' hashes), or None: the check's process renders it (not a text
        request, refused, or the process no longer used)."""
        if self.pending is None or self.pending[0] is not r:
            return None
        x = self.pending[1]
        self.pending = None
        if x is None:
            return None
        text, packed, roles, split_of, dated, messages_hashed, lines_hashed = x
        self.taken += 1
        if dated:
            self.prep.dated += 1
        lines = LineMap.from_columns(packed, roles, split_of)
        return Prepared(r, None, None, text, lines, self.prep.block_size, message_hashes=messages_hashed,
                        line_hashes=lines_hashed)

    def fix(self, spec: Any) -> Iterator[Any]:
        """The fix pass's batches for ``spec`` (picklable), made by the process from the renders
        it kept, in order; raises :class:`ChildFailed` where the process stops early (an error
        there, killed, or renders left unread: the two passes did not read the same requests)."""
        try:
            if self.proc is None or self.conn is None or self.outbox is None or not self.serves_fix:
                raise ChildFailed("no process")
            if not self.complete or self.queue:
                raise ChildFailed("requests left unread")
            self.streaming = False
            self.outbox.send(spec)
            while True:
                kind, x = self._next() or ("error", "the first pass's end again")
                if kind == "end":
                    self.fix_ended, self.made_again = "end", int(x or 0)
                    return
                if kind != "item":
                    raise ChildFailed(x)
                self.fix_batches += 1
                yield x
        except ChildFailed as e:
            self.fix_ended = f"failed: {e}"
            raise
        finally:
            self.close()

    def _next(self) -> Any:
        assert self.conn is not None and self.proc is not None
        try:
            return self.conn.recv()
        except (EOFError, OSError):  # its end of the pipe closed: it is ending, if not ended
            self.proc.join(5)
            raise ChildFailed(f"the process ended (exit code {self.proc.exitcode})") from None

    def close(self) -> None:
        """The process stopped (killed if it still runs) and reaped; nothing more is taken."""
        self.queue.clear()
        self.pending = None
        self.mirror = Mirror()
        for c in (self.conn, self.outbox):
            if c is not None:
                c.close()
        self.conn = self.outbox = None
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join()
            self.proc = None
