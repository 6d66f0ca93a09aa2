"""The prompts check's tokenizer calls on a thread of their own, ahead of the Python work
(collectors/requests/ahead.py): in order, at most ``depth`` batches ahead, the calls on their own
thread and the rest on the caller's, errors raised in place, the thread gone and the unfinished
items dropped when the consumer stops."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future

import pytest

from kvplan.collectors.requests.ahead import THREAD, overlapped
from kvplan.collectors.requests.pieces import Run
from kvplan.models.core.errors import KvplanError


def _no_thread_left() -> bool:
    return not any(t.name.startswith(THREAD) for t in threading.enumerate())


def _squares(items: Iterator[int] | list[int], depth: int = 2, dropped: list[int] | None = None) -> Iterator[int]:
    return overlapped(items, lambda x, run: (x, run(lambda: x * x)), lambda b: b[1].result(),
                      lambda b: (dropped if dropped is not None else []).append(b[0]), depth=depth)


def test_every_item_comes_out_once_in_order() -> None:
    dropped: list[int] = []
    assert list(_squares(range(3000), dropped=dropped)) == [i * i for i in range(3000)]
    assert dropped == []
    assert list(_squares([])) == []
    assert list(_squares([5], depth=0)) == [25]
    assert _no_thread_left()


def test_the_calls_run_on_their_own_thread_begun_ahead_of_the_finish_and_no_further() -> None:
    events: list[tuple[str, int, str]] = []

    def begin(i: int, run: Run) -> tuple[int, Future[str]]:
        events.append(("begin", i, threading.current_thread().name))
        return i, run(lambda: threading.current_thread().name)

    def finish(b: tuple[int, Future[str]]) -> str:
        events.append(("finish", b[0], threading.current_thread().name))
        return b[1].result()

    called_on = list(overlapped(range(20), begin, finish, depth=2))
    main = threading.current_thread().name
    assert all(name.startswith(THREAD) for name in called_on), called_on
    assert {name for _, _, name in events} == {main}  # the Python work on the caller's thread
    order = [(what, i) for what, i, _ in events]
    # item n is begun before item n - 2 is finished (a one-at-a-time loop would finish it first) ...
    assert order[:4] == [("begin", 0), ("begin", 1), ("begin", 2), ("finish", 0)]
    # ... and never more than 2 items are begun and not finished
    assert max(sum(1 for w, j in order[:k] if w == "begin") - sum(1 for w, j in order[:k] if w == "finish")
               for k in range(len(order) + 1)) == 3
    assert [i for w, i in order if w == "finish"] == list(range(20))
    assert _no_thread_left()


def test_an_error_in_a_call_is_raised_where_its_batch_is_finished_after_the_ones_before() -> None:
    err = KvplanError("the tokenizer refused", source="log.jsonl:8")

    def work(i: int) -> int:
        if i == 7:
            raise err
        return i

    got: list[int] = []
    dropped: list[int] = []
    with pytest.raises(KvplanError) as caught:
        for x in overlapped(range(50), lambda i, run: (i, run(lambda: work(i))), lambda b: b[1].result(),
                            lambda b: dropped.append(b[0])):
            got.append(x)
    assert got == list(range(7))
    assert caught.value is err
    assert dropped == [8, 9]  # begun ahead of the one that failed, never finished
    assert _no_thread_left()


def test_a_consumer_that_stops_early_ends_the_thread_and_closes_the_source() -> None:
    closed = threading.Event()

    def source() -> Iterator[int]:
        try:
            yield from range(10_000)
        finally:
            closed.set()

    dropped: list[int] = []
    it = _squares(source(), dropped=dropped)
    assert [next(it) for _ in range(3)] == [0, 1, 4]
    assert dropped == []
    it.close()  # what a for loop's exception or break does to the generator
    assert closed.is_set()
    assert dropped == [3, 4]  # begun, never finished: dropped
    assert _no_thread_left()
