"""The prompts check's map stage in worker processes (``kvplan prompts check --workers N``).

Each text request's render (chat template), line map, tokenization by pieces and block keys
depend on that request alone (and the template's date, found once): N processes do them over
batches of requests, and the main process takes the results back in file order for the replay,
the finders and the totals, which depend on every request before. The main process still reads
and parses the lines (so a bad line is named file:line as before), admits each request (one
format per check), and prepares block-id and token-id lines and the first chat request itself
(it finds the template's date, which the workers then reuse). At most ``IN_FLIGHT`` batches per
worker are out at once: the text held stays bounded. Processes start by ``forkserver`` (a fork
after the Rust tokenizer has run can deadlock), each loading the tokenizer once, with
``TOKENIZERS_PARALLELISM=false`` (the processes are the parallelism)."""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...models.prompts.busters import LineMap
from ...models.prompts.predict import Hashed
from .prepare import Options, Prepared, Preparer
from .read import MAX_SKIPPED, LogRequest, Skipped
from .render import Renderer, RequestRefused

BATCH_REQUESTS = 16
"""Text requests a worker renders, then tokenizes in one batch call (``check.BATCH_REQUESTS``)."""
IN_FLIGHT = 3
"""Batches per worker submitted ahead of the one the main process waits for."""

Date = tuple[str, str, tuple[int | None, str, int]] | None
_Local = list[Prepared | tuple[RequestRefused, int]]
"""A batch prepared in the main process: each request, or its refusal and the bad lines read before it."""


@dataclass(frozen=True)
class _Spec:
    """What a worker needs to build the main process's Renderer and Preparer again."""

    tokenizer: str
    template: str | None
    clock_formats: tuple[str, ...]
    piece_bytes: int | None
    opts: Options


@dataclass
class _Done:
    """One request as a worker prepared it (the request itself stays in the main process)."""

    text: str | None
    lines: LineMap | None
    ids: np.ndarray | None
    hashed: Hashed | None
    digests: np.ndarray | None
    block_size: int


_prep: Preparer | None = None


def _start(spec: _Spec) -> None:
    """Worker initializer: the tokenizer, loaded once per process."""
    global _prep
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    renderer = Renderer(spec.tokenizer, piece_bytes=spec.piece_bytes)
    renderer.template = spec.template
    renderer.clock_formats = spec.clock_formats
    _prep = Preparer(renderer, spec.opts)


def _prepare(requests: list[LogRequest], date: Date, block_size: int
             ) -> tuple[list[_Done | tuple[str, str | None]], list[str], int]:
    """Render and encode ``requests`` (text prompts, admitted by the main process): per request a
    ``_Done`` or a refusal (message, file:line); this worker's piece-cache notes and its pid."""
    prep = _prep
    assert prep is not None and prep.renderer is not None
    prep.date, prep.date_checked, prep.block_size = date, True, block_size
    out: list[_Done | tuple[str, str | None]] = []
    ps: list[Prepared] = []
    for r in requests:
        try:
            p = prep.prepare(r, encode=False)
        except RequestRefused as e:
            out.append((e.message, e.source))
            continue
        ps.append(p)
        out.append(_Done(p.text, p.lines, None, None, None, p.block_size))
    prep.encode_all(ps)
    it = iter(ps)
    for i, d in enumerate(out):
        if isinstance(d, _Done):
            p = next(it)
            out[i] = _Done(p.text, p.lines, p.ids, p.hashed, p.digests, p.block_size)
    return out, prep.renderer.piece_notes(), os.getpid()


def _local(r: LogRequest, prep: Preparer) -> bool:
    """Prepared in the main process: block ids, token ids, and chat requests until the template's
    date has been looked for (on the first chat request that renders)."""
    return r.kind == "blocks" or (r.kind == "completion" and r.prompt_ids is not None) \
        or (r.kind == "chat" and not prep.date_checked)


def prepared_in_pool(requests: Iterator[LogRequest], prep: Preparer, skipped: Skipped, workers: int,
                     piece_notes: list[str]) -> Iterator[Prepared]:
    """``requests`` prepared (rendered, tokenized, keyed) by ``workers`` processes, in order, as
    ``check._batches`` + ``check._encoded`` yield them in one process; a refused request is added to
    ``skipped`` (file:line) in its place. ``piece_notes`` gets the workers' piece-cache notes."""
    renderer = prep.renderer
    assert renderer is not None
    spec = _Spec(renderer.name, renderer.template, renderer.clock_formats, renderer.piece_bytes, prep.opts)
    ctx = multiprocessing.get_context("forkserver")
    # a batch is either prepared here (a list of Prepared) or in a worker (its requests and future)
    pending: deque[_Local | tuple[list[tuple[LogRequest, int]], Future[Any]]] = deque()
    notes: dict[int, list[str]] = {}
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_start, initargs=(spec,)) as pool:
        def drain(limit: int) -> Iterator[Prepared]:
            while len(pending) > limit:
                head = pending.popleft()
                if isinstance(head, list):
                    for x in head:
                        if isinstance(x, Prepared):
                            yield x
                        else:
                            refuse(*x)
                    continue
                rs, fut = head
                done, worker_notes, pid = fut.result()
                notes[pid] = worker_notes
                for (r, at), d in zip(rs, done, strict=True):
                    if isinstance(d, _Done):
                        yield Prepared(r, d.hashed, d.ids, d.text, d.lines, d.block_size, d.digests)
                    else:
                        refuse(RequestRefused(d[0], source=d[1]), at)

        batch: list[tuple[LogRequest, int]] = []
        local: _Local = []
        refused = [0]

        def refuse(e: RequestRefused, at: int) -> None:
            # in the place the one-process run adds it: after the bad lines read before its request
            skipped.errors.insert(at + refused[0], e)
            refused[0] += 1
            if len(skipped.errors) > MAX_SKIPPED:
                skipped.add(skipped.errors.pop())  # the budget's error, as in one process

        def flush() -> None:
            nonlocal batch, local
            if local:
                prep.encode_all([p for p in local if isinstance(p, Prepared)])
                pending.append(local)
                local = []
            if batch:
                pending.append((batch, pool.submit(_prepare, [r for r, _ in batch], prep.date, prep.block_size)))
                batch = []

        for r in requests:
            if _local(r, prep):
                if batch:
                    flush()
                try:
                    local.append(prep.prepare(r, encode=False))
                except RequestRefused as e:
                    local.append((e, len(skipped.errors) - refused[0]))
            else:
                prep.admit(r)
                if local:
                    flush()
                batch.append((r, len(skipped.errors) - refused[0]))
                if len(batch) >= BATCH_REQUESTS:
                    flush()
            if len(local) >= BATCH_REQUESTS:
                flush()
            yield from drain(IN_FLIGHT * workers)
        flush()
        yield from drain(0)
    piece_notes.extend(dict.fromkeys(n for ns in notes.values() for n in ns))
