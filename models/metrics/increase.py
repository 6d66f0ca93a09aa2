"""One series' increase over a window: the row the counter macros (``increments()``) give and
the window math (``window``) and its notes (``window_notes``) read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Increase:
    """Increase of one series over the window."""

    name: str
    """Sample name, e.g. ``vllm:prompt_tokens_total`` or a histogram's ``..._bucket``, ``_sum``,
    ``_count``."""
    increase: float
    """How much the series grew over the window: the sum of its sample pairs' increases (after a
    reset, the value counted from 0)."""
    family: str = ""
    """Metric family of the sample (the name without ``_total``, ``_bucket``, ``_sum``,
    ``_count``)."""
    model_name: str | None = None
    """The series' ``model_name`` label: the served LLM; None when the series has none."""
    engine: str | None = None
    """The series' ``engine`` label (a vLLM data-parallel engine); None when absent or summed over
    engines."""
    le: float | None = None
    """Upper bound of a histogram bucket (``le`` label) for ``_bucket`` samples, else None."""
    labels: str = "{}"
    """The series' other labels as a JSON object with sorted keys (``{}`` when none)."""
    target: str = ""
    """Scrape target the series came from; empty when the reading sums over targets."""
    pairs: int = 0
    """Pairs of consecutive samples the increase is summed over."""
    resets: int = 0
    """Counter resets (server restarts) among those pairs."""
    broken: int = 0
    """Decreases with an unchanged ``_created``: a broken or replaced target, not counted
    (``increments()`` macro)."""
    gaps: int = 0
    """Pairs spanning a scrape of its target the series was missing from: continued from its last
    value, not from 0 (migration 012)."""
