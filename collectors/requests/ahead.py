"""The first pass's map stage one step ahead, on a thread (``kvplan prompts check``, in process).

Reading, rendering and tokenizing a batch depend on that batch alone; the replay, the finders
and the totals depend on every request before. The fast tokenizer's batch call releases the
GIL and runs in Rust on every core, so while the main thread replays batch n, a thread reads,
renders and tokenizes batch n + 1: the check's wall time becomes about the larger of the two,
not their sum. Python work itself still runs one thread at a time (the GIL): this only hides
the tokenizer's time (and zlib's), which is most of a log of distinct prompts.

At most ``DEPTH`` batches wait between the two threads: the text held stays bounded. The
batches come out in order; an error raised while reading (a bad line past the budget, a file
that cannot be read) is raised in the main thread where that batch would have been, after the
batches before it. If the main thread stops early (its own error), the thread stops at its next
batch and the files are closed there."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

DEPTH = 2
"""Batches prepared ahead of the one the main thread replays."""
_END = object()


def ahead(items: Iterable[T], depth: int = DEPTH, name: str = "kvplan-prompts-ahead") -> Iterator[T]:
    """``items`` in order, each produced on a thread up to ``depth`` items before it is taken."""
    q: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(x: object) -> bool:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        it = iter(items)
        try:
            for x in it:
                if not put(x):
                    return
            put(_END)
        except BaseException as e:  # handed to the main thread, raised there in order
            put(_Raised(e))
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()  # a generator's files closed on this thread, which runs it

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    try:
        while True:
            x = q.get()
            if x is _END:
                return
            if isinstance(x, _Raised):
                raise x.error
            yield x  # type: ignore[misc]
    finally:
        stop.set()
        t.join()


class _Raised:
    """An error the thread met, in the queue at the place it was raised."""

    def __init__(self, error: BaseException):
        self.error = error
