"""``kvplan prompts check --ray ADDRESS``: the first pass's map stage (render with the chat
template, tokenize, hash into block keys) on a Ray cluster; the reading, the replay, the finders
and the second pass stay in this process. The only module that imports Ray (lazily: an optional
extra, ``pip install 'kvplan[ray]'``).

The log is read and parsed here, as without Ray (files merged by arrival time, the session
sample, the budget of bad lines), and the requests go to one actor per CPU of the cluster in
chunks of ``CHUNK`` (each actor holds a Renderer built from the tokenizer's path, which must
exist on every worker, kvplan installed there too). Their results are consumed in the log's
order, so the check's output is the same as in-process: the requests whose preparation depends
on what came before are prepared here instead (token ids and block-id traces, which need no
tokenizer; every request until one has rendered; chat requests until the template's date
check has run on one; text after a block-id line, refused here as without Ray), and a refused
request or a bad line is recorded at its place in the order. Ray adds start-up and transfer
(each request's text and token ids come back to this process): it pays only with more cores
than this machine has.
"""

from __future__ import annotations

import logging
import socket
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...models.core.errors import KvplanError
from ...models.prompts.busters import LineMap
from ...models.prompts.predict import Hashed
from .check import BATCH_CHARS, BATCH_REQUESTS, CheckOptions, FirstPass, Prepared, Preparer
from .read import LogRequest, Skipped, read_requests
from .render import Renderer, RequestRefused
from .sample import sampled

CHUNK = 64
"""Requests per task sent to an actor."""
AHEAD = 2
"""Chunks in flight per actor (bounds the requests held at once)."""
CONNECT_S = 5.0
"""How long the cluster's address is tried before it is called unreachable (Ray itself waits minutes)."""


@dataclass
class _Done:
    """One request prepared on a worker (the request itself stays here)."""

    hashed: Hashed
    ids: np.ndarray | None
    text: str | None
    lines: LineMap | None
    block_size: int


class _Worker:
    """A Ray actor: one Renderer and Preparer for the run (its piece cache kept across chunks)."""

    def __init__(self, tokenizer: str, template: str | None, clock_formats: tuple[str, ...],
                 piece_bytes: int | None, opts: CheckOptions):
        renderer = Renderer(tokenizer, piece_bytes=piece_bytes)
        renderer.template = template
        renderer.clock_formats = clock_formats
        self.renderer = renderer
        self.prep = Preparer(renderer, opts)
        self.prep.date_checked = True

    def prepare(self, date: tuple[str, str, tuple[int | None, str, int]] | None,
                requests: list[LogRequest]) -> tuple[list[_Done | tuple[str, str | None]], list[str]]:
        """Each request prepared (or its refusal: message, source), and the piece cache's notes."""
        self.prep.date = date  # the driver's date check, made on the log's first chat request
        out: list[_Done | tuple[str, str | None] | None] = []
        batch: list[tuple[int, Prepared]] = []
        chars = 0
        for r in requests:
            try:
                p = self.prep.prepare(r, encode=False)
            except RequestRefused as e:
                out.append((e.message, e.source))
                continue
            out.append(None)
            batch.append((len(out) - 1, p))
            chars += len(p.text or "")
            if len(batch) >= BATCH_REQUESTS or chars >= BATCH_CHARS:  # as check._batches: bounded text
                self._encode(batch, out)
                batch, chars = [], 0
        self._encode(batch, out)
        done = [x for x in out if x is not None]
        assert len(done) == len(out)
        return done, self.renderer.piece_notes()

    def _encode(self, batch: list[tuple[int, Prepared]], out: list[_Done | tuple[str, str | None] | None]) -> None:
        self.prep.encode_all([p for _, p in batch])
        for i, p in batch:
            assert p.hashed is not None
            out[i] = _Done(p.hashed, p.ids, p.text, p.lines, p.block_size)


class _Reads(Skipped):
    """The reader's bad lines, held until the requests before them are consumed: added to the
    run's ``Skipped`` in the log's order, as without Ray (its budget and its notes' order)."""

    def __init__(self, real: Skipped):
        super().__init__(real.source)
        self.real = real
        self.unfinished = real.unfinished
        self.read = 0
        self.held: deque[tuple[int, KvplanError]] = deque()

    def add(self, e: KvplanError) -> None:
        self.held.append((self.read, e))

    def flush(self, upto: int | None = None) -> None:
        while self.held and (upto is None or self.held[0][0] <= upto):
            self.real.add(self.held.popleft()[1])


def _ray(address: str) -> tuple[Any, bool]:
    """Ray, connected to ``address`` (``local``: a cluster started here), and whether this call
    connected it (a process already connected, ``ray.init`` done, keeps its connection)."""
    try:
        import ray
    except ImportError:
        raise KvplanError("Ray is not installed: pip install 'kvplan[ray]'", source=f"--ray {address}") from None
    if address not in ("local", "auto"):
        host, _, port = address.removeprefix("ray://").rpartition(":")
        if not host or not port.isdigit():
            raise KvplanError("not a Ray cluster address: HOST:PORT (the head node's GCS port, 6379 by default), "
                              "ray://HOST:PORT, auto or local", source=f"--ray {address}")
        try:
            socket.create_connection((host, int(port)), timeout=CONNECT_S).close()
        except OSError as e:
            raise KvplanError(f"cannot reach the Ray cluster: {e.strerror or e}", source=f"--ray {address}") from None
    if ray.is_initialized():
        return ray, False
    try:
        if address == "local":
            ray.init(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
        else:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except Exception as e:  # ConnectionError, RuntimeError: no cluster there
        raise KvplanError(f"cannot connect to the Ray cluster: {type(e).__name__}: {str(e).splitlines()[0][:200]} "
                          "(a cluster with token authentication needs its token where Ray looks for it: "
                          "RAY_AUTH_TOKEN)", source=f"--ray {address}") from None
    return ray, True


def on_ray(address: str) -> FirstPass:
    """``check``'s ``first_pass`` on the Ray cluster at ``address``."""
    def first_pass(paths: Sequence[Path], opts: CheckOptions, prep: Preparer,
                   render: Callable[[LogRequest], Prepared | None], skipped: Skipped) -> Iterator[list[Prepared]]:
        return prepared(address, paths, opts, prep, render, skipped)
    return first_pass


def prepared(address: str, paths: Sequence[Path], opts: CheckOptions, prep: Preparer,
             render: Callable[[LogRequest], Prepared | None], skipped: Skipped) -> Iterator[list[Prepared]]:
    """The first pass's prepared requests, in the log's order, in lists (``check._batches``'
    place): rendered, tokenized and hashed on the Ray cluster at ``address``, except those
    ``render`` (the check's own) prepares here (module docstring). Bad lines and refused requests
    go to ``skipped`` at their place in the order."""
    renderer = prep.renderer
    ray, owned = _ray(address)
    try:
        yield from _stream(ray, address, paths, opts, prep, renderer, render, skipped)
    finally:
        if owned:
            ray.shutdown()


def _stream(ray: Any, address: str, paths: Sequence[Path], opts: CheckOptions, prep: Preparer,
            renderer: Renderer | None, render: Callable[[LogRequest], Prepared | None],
            skipped: Skipped) -> Iterator[list[Prepared]]:
    reads = _Reads(skipped)
    requests = sampled(read_requests(paths, reads), opts.sample)
    workers: list[Any] = []
    if renderer is not None:
        tok = Path(renderer.name).resolve() if Path(renderer.name).exists() else renderer.name
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        actor = ray.remote(num_cpus=1)(_Worker)
        wopts = CheckOptions(opts.block_size, opts.gpu_blocks, opts.lmcache_chunk, opts.lora)
        workers = [actor.remote(str(tok), renderer.template, renderer.clock_formats, renderer.piece_bytes, wopts)
                   for _ in range(cpus)]
    slots: deque[tuple[int, LogRequest, int | None, int]] = deque()  # (order, request, chunk or None: here, index)
    buf: list[LogRequest] = []
    chunks: dict[int, Any] = {}  # chunk -> its ObjectRef, then its results once fetched
    left: dict[int, int] = {}  # chunk -> its requests not yet consumed
    notes: set[str] = set()
    n = cid = remote = 0
    rendered = seen_blocks = done = False
    where = f"--ray {address}"

    def submit() -> None:
        nonlocal buf, cid
        chunks[cid] = workers[cid % len(workers)].prepare.remote(prep.date, buf)
        left[cid] = len(buf)
        buf, cid = [], cid + 1

    while slots or not done:
        while not done and len(slots) < AHEAD * max(1, len(workers)) * CHUNK \
                and len(chunks) <= AHEAD * len(workers) and (rendered or not slots):
            r = next(requests, None)
            reads.read = n + 1
            if r is None:
                done = True
                break
            seen_blocks = seen_blocks or r.kind == "blocks"
            here = (not workers or seen_blocks or not rendered or r.prompt_ids is not None
                    or (r.kind == "chat" and not prep.date_checked))
            if here:
                slots.append((n, r, None, 0))
            else:
                slots.append((n, r, cid, len(buf)))
                remote += 1
                buf.append(r)
                if len(buf) >= CHUNK:
                    submit()
            n += 1
        if not slots:
            break
        k, r, c, i = slots.popleft()
        reads.flush(k)
        if c is None:
            p = render(r)
            rendered = rendered or p is not None
            if p is not None:
                yield [p]
            continue
        if c == cid:
            submit()  # the chunk being filled: sent as it is
        prep.first_tokens = prep.first_tokens or r.where
        if not isinstance(chunks[c], tuple):
            try:
                chunks[c] = ray.get(chunks[c])
            except Exception as e:  # RayTaskError, RayActorError: a worker without kvplan or the tokenizer
                raise KvplanError(f"a Ray worker failed (kvplan and the tokenizer must be on every worker): "
                                  f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}",
                                  source=where) from None
            notes.update(chunks[c][1])
        got = chunks[c][0][i]
        left[c] -= 1
        if not left[c]:
            del chunks[c], left[c]
        if isinstance(got, tuple):
            skipped.add(RequestRefused(got[0], source=got[1]))
            continue
        yield [Prepared(r, got.hashed, got.ids, got.text, got.lines, got.block_size)]
    reads.flush()
    mine = renderer.piece_notes() if renderer is not None else []
    prep.notes += [x for x in sorted(notes) if x not in mine]
    prep.notes.append(f"the first pass's rendering and tokenizing ran on Ray ({address}, {len(workers)} worker(s)): "
                      f"{remote:,} of {n:,} requests (the others depend on the ones before them: here); reading, "
                      "the replay and the second pass (the hit rates if fixed) in this process")
