"""The check's map stage ahead of its replay, on two threads (``kvplan prompts check``, in process).

Reading, rendering and tokenizing a batch depend on that batch alone; the replay, the finders
and the totals depend on every request before. The fast tokenizer's batch call releases the
GIL and runs in Rust on every core. So :func:`staged` runs three stages at once: one thread
reads and renders batch n + 2, a second tokenizes and keys batch n + 1, and the main thread
replays batch n. Python work itself still runs one thread at a time (the GIL): this hides the
tokenizer's time (and zlib's) behind the Python work of the other two stages, rather than behind
one of them. With one thread doing both rendering and tokenizing, the rendering waited for the
tokenizer and the tokenizer for the rendering.

At most ``DEPTH`` batches wait between the two threads: the text held stays bounded. The
batches come out in order; an error raised while reading (a bad line past the budget, a file
that cannot be read) is raised in the main thread where that batch would have been, after the
batches before it. If the main thread stops early (its own error), the thread stops at its next
batch and the files are closed there."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
U = TypeVar("U")

DEPTH = 2
"""Batches prepared ahead of the one the main thread replays."""
_END = object()


def ahead(items: Iterable[T], depth: int = DEPTH, name: str = "kvplan-prompts-ahead") -> Generator[T, None, None]:
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


def staged(items: Iterable[T], then: Callable[[T], U], depth: int = DEPTH) -> Iterator[U]:
    """``then(x)`` of each of ``items`` in order: ``items`` produced on one thread
    (``kvplan-prompts-render``), ``then`` run on a second (``kvplan-prompts-ahead``), each up to
    ``depth`` items ahead of the next stage. An error in either stage stops both threads (the
    first one's source closed on it) and is raised in order."""

    def mapped() -> Iterator[U]:
        made = ahead(items, depth, name="kvplan-prompts-render")
        try:
            for x in made:
                yield then(x)
        finally:
            made.close()  # stops the first thread, also when ``then`` raised

    return ahead(mapped(), depth)


class _Raised:
    """An error the thread met, in the queue at the place it was raised."""

    def __init__(self, error: BaseException):
        self.error = error
