"""The prompts check's read-render-tokenize stage ahead of its replay on threads (collectors/requests/ahead.py):
in order, bounded, errors raised in place, the threads gone when the consumer stops; rendering and
tokenizing on two threads of their own (``staged``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from kvplan.collectors.requests.ahead import ahead, staged
from kvplan.models.core.errors import KvplanError


def _source(closed_on: list[str]) -> Iterator[int]:
    """A long source (a file's lines) that notes the thread it is closed on."""
    try:
        yield from range(10_000)
    finally:
        closed_on.append(threading.current_thread().name)


def test_every_item_comes_out_once_in_order() -> None:
    assert list(ahead(iter(range(5000)), depth=2)) == list(range(5000))
    assert list(ahead(iter([]))) == []


def test_the_thread_works_ahead_of_the_consumer_and_no_further_than_its_depth() -> None:
    produced: list[int] = []
    two_made = threading.Event()

    def gen() -> Iterator[int]:
        for i in range(50):
            produced.append(i)
            if i == 2:
                two_made.set()
            yield i

    it = ahead(gen(), depth=2)
    assert next(it) == 0
    # while the consumer still holds item 0, the thread has made items 1 and 2 (a plain generator would not)
    assert two_made.wait(timeout=30), "the thread did not work ahead"
    taken = 1
    for x in it:
        taken += 1
        assert x == taken - 1
        # the queue holds at most `depth` items and the thread one more, waiting to put it
        assert len(produced) <= taken + 2 + 1
    assert taken == 50


def test_an_error_is_raised_where_it_happened_after_the_items_before_it() -> None:
    err = KvplanError("bad JSON", source="log.jsonl:6")

    def gen() -> Iterator[int]:
        yield from range(5)
        raise err

    got: list[int] = []
    with pytest.raises(KvplanError) as caught:
        for x in ahead(gen()):
            got.append(x)
    assert got == [0, 1, 2, 3, 4]
    assert caught.value is err


def test_a_consumer_that_stops_early_stops_the_thread_and_closes_the_source_on_it() -> None:
    closed_on: list[str] = []
    gen = _source(closed_on)

    it = ahead(gen, name="kvplan-test-ahead")
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    it.close()  # what a for loop's exception or break does to the generator
    assert closed_on == ["kvplan-test-ahead"]  # the file-reading generator closed by the thread that ran it
    assert not any(t.name == "kvplan-test-ahead" for t in threading.enumerate())


def test_staged_makes_items_on_one_thread_and_maps_them_on_another_ahead_of_the_consumer() -> None:
    made_on: set[str] = set()
    mapped_on: set[str] = set()
    three_mapped = threading.Event()

    def gen() -> Iterator[int]:
        for i in range(40):
            made_on.add(threading.current_thread().name)
            yield i

    def then(i: int) -> int:
        mapped_on.add(threading.current_thread().name)
        if i == 3:
            three_mapped.set()
        return i * i

    it = staged(gen(), then)
    assert next(it) == 0
    # while the consumer holds item 0, the second thread has mapped item 3 (a one-thread stage would too;
    # the thread names below tell the stages apart)
    assert three_mapped.wait(timeout=30), "the mapping thread did not work ahead"
    assert [0, *it] == [i * i for i in range(40)]
    assert made_on == {"kvplan-prompts-render"} and mapped_on == {"kvplan-prompts-ahead"}, (made_on, mapped_on)


def test_staged_raises_an_error_of_either_stage_in_place_and_stops_both_threads() -> None:
    closed_on: list[str] = []
    gen = _source(closed_on)

    def then(i: int) -> int:
        if i == 7:
            raise KvplanError("the tokenizer refused", source="log.jsonl:8")
        return i

    got: list[int] = []
    with pytest.raises(KvplanError, match="refused"):
        for x in staged(gen, then):
            got.append(x)
    assert got == list(range(7))
    assert closed_on == ["kvplan-prompts-render"]  # the reading generator closed on its own thread
    assert not any(t.name.startswith("kvplan-prompts-") for t in threading.enumerate())
