"""Prediction against measurement, request by request: what ``kvplan prompts check --measured``
reports when the log holds the engine's own ``usage`` for each request (a gateway that logs
responses: ``usage.prompt_tokens`` and ``usage.prompt_tokens_details.cached_tokens``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_MISMATCHES = 20
"""Requests whose prediction differs from the measurement listed by name (the first ones)."""


@dataclass(frozen=True)
class Mismatch:
    where: str
    """``file:line``."""
    prompt_tokens_predicted: int
    """The prompt's length as the check tokenized it."""
    prompt_tokens_measured: int | None
    """The engine's ``usage.prompt_tokens`` (None: not logged)."""
    cached_predicted: int
    """Predicted cached tokens."""
    cached_measured: int
    """The engine's ``usage.prompt_tokens_details.cached_tokens``."""
    miss_reason: str
    """The predicted miss reason of that request (``models.prompts.reasons``)."""


@dataclass
class Comparison:
    """Counts over the requests that carry a measurement (the others are counted apart)."""

    requests: int = 0
    """Requests with a measured cached-token count."""
    unmeasured: int = 0
    """Requests without one (no ``usage.prompt_tokens_details.cached_tokens`` logged)."""
    prompt_tokens_equal: int = 0
    """Measured requests whose prompt length the check tokenized to the engine's (or whose
    engine prompt length was not logged)."""
    cached_equal: int = 0
    """Measured requests whose predicted cached tokens equal the engine's."""
    prompt_tokens: int = 0
    """Prompt tokens of the measured requests, as predicted."""
    measured_prompt_tokens: int = 0
    """Their prompt tokens as the engine reported (the predicted length where it did not)."""
    cached_predicted: int = 0
    """Predicted cached tokens of the measured requests."""
    cached_measured: int = 0
    """Their cached tokens as the engine reported."""
    mismatches: list[Mismatch] = field(default_factory=list)
    """The first ``MAX_MISMATCHES`` requests whose prediction differs from the measurement."""

    def add(self, where: str, prompt_tokens: int, cached: int, measured_prompt: int | None,
            measured_cached: int | None, miss_reason: str) -> None:
        if measured_cached is None:
            self.unmeasured += 1
            return
        self.requests += 1
        same_len = measured_prompt is None or measured_prompt == prompt_tokens
        self.prompt_tokens_equal += same_len
        self.cached_equal += cached == measured_cached
        self.prompt_tokens += prompt_tokens
        self.measured_prompt_tokens += measured_prompt if measured_prompt is not None else prompt_tokens
        self.cached_predicted += cached
        self.cached_measured += measured_cached
        if (not same_len or cached != measured_cached) and len(self.mismatches) < MAX_MISMATCHES:
            self.mismatches.append(Mismatch(where, prompt_tokens, measured_prompt, cached, measured_cached,
                                            miss_reason))

    @property
    def hit_rate_predicted(self) -> float | None:
        return self.cached_predicted / self.prompt_tokens if self.prompt_tokens else None

    @property
    def hit_rate_measured(self) -> float | None:
        return self.cached_measured / self.measured_prompt_tokens if self.measured_prompt_tokens else None

    def as_json(self) -> dict[str, Any]:
        p, m = self.hit_rate_predicted, self.hit_rate_measured
        return {"requests": self.requests, "unmeasured": self.unmeasured,
                "prompt_tokens_equal": self.prompt_tokens_equal, "cached_equal": self.cached_equal,
                "hit_rate_predicted": p, "hit_rate_measured": m,
                "points": abs(p - m) * 100 if p is not None and m is not None else None,
                "mismatches": [vars(x) for x in self.mismatches]}
