"""``kvplan prompts check --sample-sessions FRACTION``: the check run on whole conversations drawn
from the log, a filter on the request stream before anything is rendered.

A conversation's **key** is its session field when the request has one (``read.SESSION_FIELDS``;
a Bailian trace's ``parent_chat_id`` chain, followed back to its first turn), else its first user
message (a chat request's first ``user`` message; with none, its first message). Not the system
prompt: a buster in it (a timestamp rendered per request) would split each conversation into
single requests, the very logs the check is for. Conversations with the same first user message
fall together: kept or dropped together, never split.

A conversation is **kept** when the first 8 bytes of the BLAKE2b digest of its key, read as a
number in [0, 2^64), fall below ``FRACTION`` x 2^64: the same log and fraction keep the same
requests in every process and every run (Python's ``hash()`` is salted per process), and a
fraction's sample holds every smaller fraction's. 1 keeps every request.

Only digests are kept (8 bytes per conversation, in a set, to count them; with a Bailian trace,
also each chat_id's conversation); no text is stored or printed. A completions request or a
Mooncake trace line without a session field cannot be put in a conversation: refused, naming
the line.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ...models.core.errors import KvplanError
from .read import SESSION_FIELDS, LogRequest

OPTION = "--sample-sessions"
SESSION = "session_field"
FIRST_USER = "first_user_message"


@dataclass
class SampleCounts:
    """What one pass over the log saw: requests in all and kept, and the distinct conversations
    (their keys' digests) by how they were keyed."""

    requests: int = 0
    requests_kept: int = 0
    conversations: dict[str, set[int]] = field(default_factory=lambda: {SESSION: set(), FIRST_USER: set()})


@dataclass(frozen=True)
class SessionSample:
    """Keep the conversations whose key's digest falls below ``fraction`` (0 < fraction <= 1)."""

    fraction: float
    counts: SampleCounts = field(default_factory=SampleCounts, compare=False, repr=False)
    """The last pass's counts (each pass over the log counts anew: the fix pass reads the same lines)."""

    def __post_init__(self) -> None:
        f = self.fraction
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) or not 0 < f <= 1:
            raise KvplanError(f"must be a number above 0 and at most 1 (the share of conversations kept); got {f!r}",
                              source=OPTION)

    @property
    def bound(self) -> int:
        """Digests below this are kept: ``fraction`` x 2^64 (2^64 at 1: every digest)."""
        return 2**64 if self.fraction >= 1 else int(self.fraction * 2**64)

    def keep(self, requests: Iterable[LogRequest]) -> Iterator[LogRequest]:
        """The requests of the kept conversations, in the order given; a pass that keeps none of
        the requests it read is an error (never a silent zero)."""
        c = self.counts
        c.requests = c.requests_kept = 0
        for s in c.conversations.values():
            s.clear()
        roots: dict[str, int] = {}
        bound = self.bound
        for r in requests:
            how, d = conversation(r, roots)
            c.requests += 1
            c.conversations[how].add(d)
            if d < bound:
                c.requests_kept += 1
                yield r
        if c.requests and not c.requests_kept:
            raise KvplanError(f"{self.fraction:g} kept none of the log's {self.total():,} conversations "
                              f"({c.requests:,} requests): give a larger fraction", source=OPTION)

    def total(self) -> int:
        return sum(len(s) for s in self.counts.conversations.values())

    def kept(self) -> int:
        return sum(1 for s in self.counts.conversations.values() for d in s if d < self.bound)

    def key(self) -> str:
        """How the conversations were told apart, in words."""
        n = {k: len(v) for k, v in self.counts.conversations.items()}
        session = f"a session field ({' / '.join(SESSION_FIELDS)}, or a Bailian trace's parent_chat_id chain)"
        first = "a hash of the first user message"
        if n[SESSION] and n[FIRST_USER]:
            return f"{session} where a request has one ({n[SESSION]:,} conversations), else {first} ({n[FIRST_USER]:,})"
        return session if n[SESSION] else f"{first} (the log has no session field)"

    def as_json(self) -> dict[str, Any]:
        c = self.counts
        return {"fraction": self.fraction, "conversations": self.total(), "conversations_kept": self.kept(),
                "requests": c.requests, "requests_kept": c.requests_kept, "key": self.key(),
                "conversations_by_key": {k: len(v) for k, v in c.conversations.items()}}

    def line(self) -> str:
        """The sample in one line (the text output's first, and a note)."""
        c = self.counts
        return (f"a sample ({OPTION} {self.fraction:g}): {self.kept():,} of {self.total():,} conversations, "
                f"{c.requests_kept:,} of {c.requests:,} requests, conversations keyed by {self.key()}")


def sampled(requests: Iterator[LogRequest], sample: SessionSample | None) -> Iterator[LogRequest]:
    """``requests`` filtered by ``sample`` (all of them when None)."""
    return requests if sample is None else sample.keep(requests)


def digest(key: bytes) -> int:
    """The first 8 bytes of the key's BLAKE2b digest as a number: the same in every process."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8, person=b"kvplan-sample").digest(), "big")


def conversation(r: LogRequest, roots: dict[str, int]) -> tuple[str, int]:
    """(how it was keyed, the digest of its key) of ``r``'s conversation. ``roots``: a Bailian
    trace's chat_id -> its conversation's digest, filled as the trace is read."""
    if r.session is not None:
        return SESSION, digest(b"session\0" + r.session.encode())
    if r.chat_id is not None:
        parent = r.parent_chat_id
        first = parent is None or parent in ("-1", "None", "")
        d = digest(b"session\0bailian\0" + r.chat_id.encode()) if first else \
            roots.get(parent or "", digest(b"session\0bailian\0" + (parent or "").encode()))
        roots[r.chat_id] = d
        return SESSION, d
    if r.kind == "chat" and r.messages:
        m = next((m for m in r.messages if m.get("role") == "user"), r.messages[0])
        return FIRST_USER, digest(b"user\0" + str(m.get("content") or "").encode("utf-8", "surrogatepass"))
    what = "a completions request" if r.kind == "completion" else "a trace line without chat_id"
    raise KvplanError(f"{OPTION}: {what} with no session field ({', '.join(SESSION_FIELDS)}): its conversation "
                      "cannot be told apart from the others; log a session field or check the whole log",
                      source=r.where)
