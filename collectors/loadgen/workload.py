"""Workload driver: concurrent streaming users against OpenAI-compatible servers.

Used by the integration tests against the local CPU stack, and as the pilot
traffic generator against real (GPU) deployments. Each user is a coroutine that
sends its turns one after another; users run concurrently. Every request is a
streaming ``POST {base}/v1/completions`` with ``ignore_eos`` (so output lengths
are exactly ``max_tokens``) and ``stream_options.include_usage`` (so the server
reports prompt / completion token counts).

Scenarios (prompt text is deterministic from ``seed``: words sampled from a fixed
vocabulary with ``random.Random`` seeded by strings):

- ``shared_prefix``: one shared system prompt (``prefix_chars``) + a per-user,
  per-turn tail (``tail_chars``): what a fleet behind one system prompt sends.
- ``unique``: every request is new text of ``prefix_chars + tail_chars``, with
  the unique part at the *beginning* so that no two requests share a prefix.
- ``multi_turn``: a per-user opening context (``prefix_chars``, unique per user)
  then each turn re-sends the whole conversation so far (previous prompts and
  the model's answers) plus a new question (``tail_chars``).

Routing decides the server per request: ``round_robin`` sends user u's turn t to
server ``(u + t) % n`` (so a user's next turn lands on the next server),
``random`` draws from a seeded RNG, ``prefix_affinity`` (``Routing``; ``affinity`` is still accepted)
hashes the user to one server, so a conversation stays where its prefix is.

Hard bounds: ``max_requests`` (requests sent in all) and ``max_seconds`` (wall
time; requests still running then are cancelled and recorded as errors).
Per-request failures are recorded in the results, never raised.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ...models.core.errors import KvplanError
from ...models.core.vocabulary import Routing

Scenario = Literal["shared_prefix", "unique", "multi_turn"]
SCENARIOS: tuple[str, ...] = ("shared_prefix", "unique", "multi_turn")

# A fixed vocabulary: prompts are the same on every machine and Python build.
VOCABULARY: tuple[str, ...] = (
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at", "from", "this",
    "be", "are", "it", "an", "or", "have", "not", "which", "but", "had", "they", "their", "has", "were",
    "been", "one", "all", "would", "there", "what", "when", "can", "more", "if", "no", "will", "out", "so",
    "up", "said", "about", "into", "than", "them", "only", "other", "new", "some", "could", "time", "these",
    "two", "may", "first", "then", "do", "any", "like", "my", "now", "over", "such", "our", "man", "me",
    "even", "most", "made", "after", "also", "did", "many", "before", "must", "through", "back", "years",
    "where", "much", "your", "way", "well", "down", "should", "because", "each", "just", "those", "people",
    "how", "too", "little", "state", "good", "very", "make", "world", "still", "own", "see", "men", "work",
    "long", "get", "here", "between", "both", "life", "being", "under", "never", "day", "same", "another",
    "know", "while", "last", "might", "us", "great", "old", "year", "off", "come", "since", "against", "go",
    "came", "right", "used", "take", "three", "cache", "token", "prefix", "request", "server", "model",
    "memory", "latency", "budget", "queue", "batch", "tensor", "block", "layer", "worker", "engine", "cluster",
    "node", "rank", "replica", "shard", "storage", "disk", "network", "bandwidth", "cost", "price", "hour",
    "month", "invoice", "capacity", "planning", "forecast", "metric", "counter", "gauge", "histogram",
    "bucket", "quantile", "window", "rate", "scrape", "target", "label", "series", "sample", "query", "report",
    "dashboard", "export", "review", "approval", "finance", "platform", "operator", "deploy", "rollout",
    "pilot", "shadow", "baseline", "tail", "median", "average", "peak", "load", "traffic", "session", "user",
    "agent", "assistant", "system", "prompt", "context", "document", "conversation", "answer", "question",
    "summary", "table", "chart", "figure", "section", "chapter", "paragraph", "sentence", "word",
)


@dataclass
class Workload:
    scenario: Scenario = "shared_prefix"
    users: int = 10
    turns: int = 3
    output_tokens: int = 16
    prefix_chars: int = 4000
    tail_chars: int = 200
    routing: Routing = Routing.ROUND_ROBIN
    seed: int = 0
    max_requests: int = 1000
    max_seconds: float = 600.0
    request_timeout_s: float = 300.0
    temperature: float = 0.0

    def __post_init__(self) -> None:
        """Values a user passes (``kvplan pilot``): a ``KvplanError`` naming the field."""
        if self.scenario not in SCENARIOS:
            raise KvplanError(f"must be one of {', '.join(SCENARIOS)}; got {self.scenario!r}", source="scenario")
        self.routing = Routing.parse(self.routing)
        for name in ("users", "turns", "output_tokens"):
            if getattr(self, name) < 1:
                raise KvplanError(f"must be >= 1; got {getattr(self, name)!r}", source=name)
        if self.max_requests < 0:
            raise KvplanError(f"must be >= 0; got {self.max_requests!r}", source="max_requests")
        if not self.max_seconds > 0 or not math.isfinite(self.max_seconds):
            raise KvplanError(f"must be a finite number > 0; got {self.max_seconds!r}", source="max_seconds")


@dataclass
class RequestResult:
    user: int
    turn: int
    server: str  # base URL the request went to
    started_at: float  # unix seconds
    ttft_s: float | None  # time to the first streamed token
    total_s: float | None  # time to the end of the stream
    prompt_tokens: int | None  # as reported by the server (usage)
    output_tokens: int | None
    tokens_per_s: float | None  # output_tokens / total_s: what one user sees, TTFT included
    ok: bool
    error: str | None = None
    prompt_chars: int = 0
    decode_tokens_per_s: float | None = None  # (output_tokens - 1) / (total_s - ttft_s)
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, if reported


@dataclass
class RunResult:
    scenario: str
    started_at: float
    ended_at: float
    workload: Workload
    results: list[RequestResult] = field(default_factory=list)
    model_name: str = ""
    servers: list[str] = field(default_factory=list)
    stopped_by: str | None = None  # 'max_requests' | 'max_seconds' | None

    @property
    def ok(self) -> list[RequestResult]:
        return [r for r in self.results if r.ok]

    @property
    def errors(self) -> list[RequestResult]:
        return [r for r in self.results if not r.ok]

    def summary(self) -> dict[str, Any]:
        ok = self.ok
        ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
        tps = [r.tokens_per_s for r in ok if r.tokens_per_s is not None]
        out_tokens = sum(r.output_tokens or 0 for r in ok)
        wall = max(self.ended_at - self.started_at, 1e-9)
        return {
            "scenario": self.scenario,
            "requests": len(self.results),
            "ok": len(ok),
            "failed": len(self.results) - len(ok),
            "wall_s": round(wall, 3),
            "ttft_p50_s": _round(percentile(ttft, 50)),
            "ttft_p99_s": _round(percentile(ttft, 99)),
            "ttft_mean_s": _round(statistics.fmean(ttft) if ttft else None),
            "tokens_per_s_p50": _round(percentile(tps, 50)),
            "prompt_tokens": sum(r.prompt_tokens or 0 for r in ok),
            "output_tokens": out_tokens,
            "aggregate_output_tokens_per_s": _round(out_tokens / wall),
            "stopped_by": self.stopped_by,
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def _round(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), None for no values."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


# ----------------------------------------------------------------- prompt text


def text(seed: int, key: str, chars: int) -> str:
    """Deterministic pseudo-text of exactly `chars` characters for (seed, key)."""
    if chars <= 0:
        return ""
    rng = random.Random(f"kvplan:{seed}:{key}")
    parts: list[str] = []
    n = -1  # length of " ".join(parts)
    while n < chars:
        w = rng.choice(VOCABULARY)
        parts.append(w)
        n += len(w) + 1
    return " ".join(parts)[:chars]


def system_prompt(w: Workload) -> str:
    """The shared system prompt of the shared_prefix scenario."""
    return "System: " + text(w.seed, "system", max(w.prefix_chars - 8, 0))


def first_prompt(w: Workload, user: int) -> str:
    """The opening of a user's conversation (multi_turn): unique per user from its first character."""
    head = f"Session {w.seed}-{user}. "
    return head + text(w.seed, f"context:{user}", max(w.prefix_chars - len(head), 0))


def question(w: Workload, user: int, turn: int) -> str:
    return text(w.seed, f"tail:{user}:{turn}", w.tail_chars)


def prompt_for(w: Workload, user: int, turn: int, history: str = "") -> str:
    """The prompt user `user` sends at turn `turn` (0-based).

    For multi_turn, `history` is the conversation so far (what
    `extend_history` returned after the previous turn); other scenarios ignore it.
    """
    if w.scenario == "shared_prefix":
        return f"{system_prompt(w)}\nUser {user}: {question(w, user, turn)}\nAssistant:"
    if w.scenario == "unique":
        # The unique part comes first: the request shares no prefix with any other.
        head = f"Request {w.seed}-{user}-{turn}. "
        body = text(w.seed, f"unique:{user}:{turn}", max(w.prefix_chars + w.tail_chars - len(head), 0))
        return f"{head}{body}\nAssistant:"
    # multi_turn
    if turn == 0 or not history:
        history = first_prompt(w, user)
    return f"{history}\nUser: {question(w, user, turn)}\nAssistant:"


def extend_history(prompt: str, answer: str) -> str:
    """The conversation after a turn: the prompt just sent plus the model's answer."""
    return prompt + answer


# ---------------------------------------------------------------------- routing


def route(w: Workload, user: int, turn: int, n_servers: int) -> int:
    """Index of the server that user `user`'s turn `turn` goes to."""
    if n_servers <= 0:
        raise ValueError("no servers to route to")
    if w.routing == Routing.ROUND_ROBIN:
        return (user + turn) % n_servers
    if w.routing == Routing.RANDOM:
        return random.Random(f"kvplan-route:{w.seed}:{user}:{turn}").randrange(n_servers)
    digest = hashlib.sha256(f"user-{user}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % n_servers


def request_schedule(w: Workload, n_servers: int) -> list[tuple[int, int, int]]:
    """(user, turn, server index) for every request the workload may send, in order."""
    return [(u, t, route(w, u, t, n_servers)) for u in range(w.users) for t in range(w.turns)]
