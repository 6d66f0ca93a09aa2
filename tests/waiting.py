"""Waiting on a condition in tests: poll it until it holds or a deadline passes (no sleep as
synchronisation). The deadline is a hang guard, not a speed goal: keep it generous."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_until(cond: Callable[[], T], what: str, timeout_s: float = 60.0, every_s: float = 0.05) -> T:
    """Call ``cond`` until it returns something true and return that; fail the test naming
    ``what`` (and the last value seen) if it has not within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() >= deadline:
            pytest.fail(f"waited {timeout_s:g} s for {what}; last seen: {got!r}", pytrace=False)
        time.sleep(every_s)
