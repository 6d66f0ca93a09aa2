"""The check's tokenizer calls on a thread of their own, ahead of the Python work (``kvplan
prompts check``, in process).

Reading, rendering, cutting, keying and replaying a batch are Python: they run one thread at a
time (the GIL), and spreading them over threads only adds handovers of the GIL and of the CPU's
caches. The fast tokenizer's batch calls release the GIL and run in Rust on every core. So
:func:`overlapped` keeps all the Python on the main thread and hands only the tokenizer's calls
to one more thread (``kvplan-prompts-tokenize``): while batch n + 1 and n + 2 are being
tokenized, the main thread keys and replays batch n and renders the next. An agent log, whose
pieces are mostly cached, runs as fast as one thread would; a log of distinct prompts hides the
tokenizer's time behind the Python work.

At most ``DEPTH`` batches are begun ahead of the one being finished: the text held stays
bounded. The batches come out in order; an error raised by a tokenizer call is raised where
that batch is finished, after the batches before it; an error while reading stops the loop at
that place. When the consumer stops early, the thread finishes the call it is making and ends."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from .pieces import Run

T = TypeVar("T")
U = TypeVar("U")
B = TypeVar("B")

DEPTH = 2
"""Batches begun (their tokenizer calls handed over) ahead of the one being finished."""
THREAD = "kvplan-prompts-tokenize"


def overlapped(items: Iterable[T], begin: Callable[[T, Run], B], finish: Callable[[B], U],
               drop: Callable[[B], None] | None = None, depth: int = DEPTH) -> Iterator[U]:
    """``finish(begin(x, run))`` of each of ``items`` in order, ``depth`` items ahead: ``begin``
    does an item's Python work and hands its tokenizer calls to ``run`` (which makes them on
    the ``kvplan-prompts-tokenize`` thread and returns their future); ``finish`` waits for them
    and does the rest, on the caller's thread. When the loop stops early (the consumer's error
    or ``finish``'s), ``drop`` is given each item begun and not finished."""
    source = iter(items)
    began: list[B] = []
    try:
        with ThreadPoolExecutor(1, thread_name_prefix=THREAD) as pool:
            for x in source:
                began.append(begin(x, pool.submit))
                if len(began) > depth:
                    yield finish(began.pop(0))
            while began:
                yield finish(began.pop(0))
    finally:
        if drop is not None:
            for b in began:
                drop(b)
        close = getattr(source, "close", None)
        if close is not None:
            close()  # the files read, also when the consumer stopped early
