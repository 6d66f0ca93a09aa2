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
``random`` draws from a seeded RNG, ``affinity`` hashes the user to one server.

Hard bounds: ``max_requests`` (requests sent in all) and ``max_seconds`` (wall
time; requests still running then are cancelled and recorded as errors).
Per-request failures are recorded in the results, never raised.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import httpx

Scenario = Literal["shared_prefix", "unique", "multi_turn"]
Routing = Literal["round_robin", "random", "affinity"]
SCENARIOS: tuple[str, ...] = ("shared_prefix", "unique", "multi_turn")
ROUTINGS: tuple[str, ...] = ("round_robin", "random", "affinity")

# A fixed vocabulary: prompts are the same on every machine and Python build.
VOCABULARY: tuple[str, ...] = tuple(
    ["the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at", "from", "this", "be", "are", "it", "an", "or", "have", "not", "which", "but", "had", "they", "their", "has", "were", "been", "one", "all", "would", "there", "what", "when", "can", "more", "if", "no", "will", "out", "so", "up", "said", "about", "into", "than", "them", "only", "other", "new", "some", "could", "time", "these", "two", "may", "first", "then", "do", "any", "like", "my", "now", "over", "such", "our", "man", "me", "even", "most", "made", "after", "also", "did", "many", "before", "must", "through", "back", "years", "where", "much", "your", "way", "well", "down", "should", "because", "each", "just", "those", "people", "how", "too", "little", "state", "good", "very", "make", "world", "still", "own", "see", "men", "work", "long", "get", "here", "between", "both", "life", "being", "under", "never", "day", "same", "another", "know", "while", "last", "might", "us", "great", "old", "year", "off", "come", "since", "against", "go", "came", "right", "used", "take", "three", "cache", "token", "prefix", "request", "server", "model", "memory", "latency", "budget", "queue", "batch", "tensor", "block", "layer", "worker", "engine", "cluster", "node", "rank", "replica", "shard", "storage", "disk", "network", "bandwidth", "cost", "price", "hour", "month", "invoice", "capacity", "planning", "forecast", "metric", "counter", "gauge", "histogram", "bucket", "quantile", "window", "rate", "scrape", "target", "label", "series", "sample", "query", "report", "dashboard", "export", "review", "approval", "finance", "platform", "operator", "deploy", "rollout", "pilot", "shadow", "baseline", "tail", "median", "average", "peak", "load", "traffic", "session", "user", "agent", "assistant", "system", "prompt", "context", "document", "conversation", "answer", "question", "summary", "table", "chart", "figure", "section", "chapter", "paragraph", "sentence", "word"]
)


@dataclass
class Workload:
    scenario: Scenario = "shared_prefix"
    users: int = 10
    turns: int = 3
    output_tokens: int = 16
    prefix_chars: int = 4000
    tail_chars: int = 200
    routing: Routing = "round_robin"
    seed: int = 0
    max_requests: int = 1000
    max_seconds: float = 600.0
    request_timeout_s: float = 300.0
    temperature: float = 0.0

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(f"scenario must be one of {SCENARIOS}, not {self.scenario!r}")
        if self.routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {ROUTINGS}, not {self.routing!r}")
        if self.users < 1 or self.turns < 1 or self.output_tokens < 1:
            raise ValueError("users, turns and output_tokens must be >= 1")
        if self.max_requests < 0 or self.max_seconds <= 0:
            raise ValueError("max_requests must be >= 0 and max_seconds > 0")


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
    model: str = ""
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
    if w.routing == "round_robin":
        return (user + turn) % n_servers
    if w.routing == "random":
        return random.Random(f"kvplan-route:{w.seed}:{user}:{turn}").randrange(n_servers)
    digest = hashlib.sha256(f"user-{user}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % n_servers


def plan(w: Workload, n_servers: int) -> list[tuple[int, int, int]]:
    """(user, turn, server index) for every request the workload may send, in order."""
    return [(u, t, route(w, u, t, n_servers)) for u in range(w.users) for t in range(w.turns)]


def normalize_base_url(url: str) -> str:
    url = url.rstrip("/")
    url = url.removesuffix("/v1")
    return url


# ------------------------------------------------------------------------ driver


class _Budget:
    def __init__(self, max_requests: int, deadline: float):
        self.left = max_requests
        self.deadline = deadline  # time.monotonic()
        self.stopped_by: str | None = None

    def take(self) -> bool:
        if time.monotonic() >= self.deadline:
            self.stopped_by = self.stopped_by or "max_seconds"
            return False
        if self.left <= 0:
            self.stopped_by = self.stopped_by or "max_requests"
            return False
        self.left -= 1
        return True


async def _one_request(client: httpx.AsyncClient, base: str, model: str, prompt: str,
                       w: Workload, user: int, turn: int, deadline: float) -> tuple[RequestResult, str]:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": w.output_tokens,
        "temperature": w.temperature,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    started_at = time.time()
    t0 = time.perf_counter()
    res = RequestResult(user=user, turn=turn, server=base, started_at=started_at, ttft_s=None,
                        total_s=None, prompt_tokens=None, output_tokens=None, tokens_per_s=None,
                        ok=False, prompt_chars=len(prompt))
    pieces: list[str] = []
    remaining = min(w.request_timeout_s, deadline - time.monotonic())
    try:
        if remaining <= 0:
            raise TimeoutError
        async with asyncio.timeout(remaining):
            async with client.stream("POST", base + "/v1/completions", json=body) as resp:
                if resp.status_code != 200:
                    detail = (await resp.aread()).decode("utf-8", "replace")[:500]
                    res.error = f"HTTP {resp.status_code}: {detail}"
                    res.total_s = time.perf_counter() - t0
                    return res, ""
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    if "error" in chunk and not chunk.get("choices"):
                        raise RuntimeError(f"server error in stream: {chunk['error']}")
                    choices = chunk.get("choices") or []
                    if choices:
                        if res.ttft_s is None:
                            res.ttft_s = time.perf_counter() - t0
                        pieces.append(choices[0].get("text") or "")
                    usage = chunk.get("usage")
                    if usage:
                        res.prompt_tokens = usage.get("prompt_tokens")
                        res.output_tokens = usage.get("completion_tokens")
                        details = usage.get("prompt_tokens_details") or {}
                        res.cached_tokens = details.get("cached_tokens")
        res.total_s = time.perf_counter() - t0
        if res.ttft_s is None:
            res.error = "stream ended without any token"
        else:
            res.ok = True
            if res.output_tokens and res.total_s > 0:
                res.tokens_per_s = res.output_tokens / res.total_s
                if res.output_tokens > 1 and res.total_s > res.ttft_s:
                    res.decode_tokens_per_s = (res.output_tokens - 1) / (res.total_s - res.ttft_s)
    except TimeoutError:
        res.total_s = time.perf_counter() - t0
        res.error = "timeout (request_timeout_s or max_seconds reached)"
    except asyncio.CancelledError:
        res.total_s = time.perf_counter() - t0
        res.error = "cancelled"
        raise
    except Exception as exc:  # noqa: BLE001 - every failure is recorded, never raised
        res.total_s = time.perf_counter() - t0
        res.error = f"{type(exc).__name__}: {exc}"
    return res, "".join(pieces)


async def run_async(servers: Sequence[str], model: str, workload: Workload,
                    client: httpx.AsyncClient | None = None) -> RunResult:
    """Run the workload; never raises for request failures."""
    bases = [normalize_base_url(s) for s in servers]
    if not bases:
        raise ValueError("no servers given")
    w = workload
    results: list[RequestResult] = []
    started_at = time.time()
    deadline = time.monotonic() + w.max_seconds
    budget = _Budget(w.max_requests, deadline)
    own_client = client is None
    if client is None:
        client = httpx.AsyncClient(
            timeout=httpx.Timeout(w.request_timeout_s, connect=10.0),
            limits=httpx.Limits(max_connections=max(w.users, 1) * 2),
            trust_env=False,
        )

    async def user_task(user: int) -> None:
        history = ""
        for turn in range(w.turns):
            if not budget.take():
                return
            base = bases[route(w, user, turn, len(bases))]
            prompt = prompt_for(w, user, turn, history)
            try:
                res, answer = await _one_request(client, base, model, prompt, w, user, turn, deadline)
            except asyncio.CancelledError:
                results.append(RequestResult(user, turn, base, time.time(), None, None, None, None,
                                             None, False, "cancelled at max_seconds",
                                             prompt_chars=len(prompt)))
                raise
            results.append(res)
            if w.scenario == "multi_turn":
                history = extend_history(prompt, answer)

    tasks = [asyncio.create_task(user_task(u)) for u in range(w.users)]
    try:
        done, pending = await asyncio.wait(tasks, timeout=max(deadline - time.monotonic(), 0) + 5)
        for t in pending:
            t.cancel()
        if pending:
            budget.stopped_by = budget.stopped_by or "max_seconds"
            await asyncio.gather(*pending, return_exceptions=True)
        for t in done:  # surface nothing: a task error is a driver bug, record it
            exc = t.exception()
            if exc is not None:
                results.append(RequestResult(-1, -1, "", time.time(), None, None, None, None, None,
                                             False, f"driver error: {type(exc).__name__}: {exc}"))
    finally:
        if own_client:
            await client.aclose()
    results.sort(key=lambda r: (r.started_at, r.user, r.turn))
    return RunResult(scenario=w.scenario, started_at=started_at, ended_at=time.time(), workload=w,
                     results=results, model=model, servers=bases, stopped_by=budget.stopped_by)


async def run_prompts_async(servers: Sequence[str], model: str, prompts: Sequence[Sequence[str]], *,
                            output_tokens: int = 8, scenario: Scenario = "unique",
                            request_timeout_s: float = 300.0,
                            client: httpx.AsyncClient | None = None) -> RunResult:
    """Send fixed prompts: user ``u`` sends ``prompts[u]`` one after another to
    ``servers[u % len(servers)]``; users run concurrently. The same prompts make the same request
    stream on any server (an A/B's two sides), whatever the model answers. Never raises for a
    failed request."""
    bases = [normalize_base_url(s) for s in servers]
    if not bases:
        raise ValueError("no servers given")
    w = Workload(scenario=scenario, users=max(len(prompts), 1), turns=max((len(p) for p in prompts), default=1),
                 output_tokens=output_tokens, request_timeout_s=request_timeout_s,
                 max_requests=sum(len(p) for p in prompts), max_seconds=request_timeout_s * 10)
    results: list[RequestResult] = []
    started_at = time.time()
    deadline = time.monotonic() + w.max_seconds
    own = client is None
    if client is None:
        client = httpx.AsyncClient(timeout=httpx.Timeout(request_timeout_s, connect=10.0),
                                   limits=httpx.Limits(max_connections=max(len(prompts), 1) * 2),
                                   trust_env=False)

    async def user(u: int) -> None:
        for turn, prompt in enumerate(prompts[u]):
            res, _ = await _one_request(client, bases[u % len(bases)], model, prompt, w, u, turn, deadline)
            results.append(res)

    try:
        await asyncio.gather(*(user(u) for u in range(len(prompts))))
    finally:
        if own:
            await client.aclose()
    results.sort(key=lambda r: (r.started_at, r.user, r.turn))
    return RunResult(scenario=scenario, started_at=started_at, ended_at=time.time(), workload=w,
                     results=results, model=model, servers=bases)


async def run_arrivals_async(server: str, model: str, prompts: Sequence[str], offsets_s: Sequence[float], *,
                             output_tokens: int = 8, scenario: Scenario = "shared_prefix",
                             request_timeout_s: float = 120.0,
                             client: httpx.AsyncClient | None = None) -> RunResult:
    """Open loop: prompt ``i`` is sent at ``offsets_s[i]`` seconds after the start whether or
    not earlier ones have been answered (arrivals do not wait for the server, so a replica
    past its capacity builds a queue, as it would under real traffic). Request ``i`` is
    recorded as user ``i``, turn 0. Never raises for a failed request."""
    if len(prompts) != len(offsets_s):
        raise ValueError("one offset per prompt")
    base = normalize_base_url(server)
    w = Workload(scenario=scenario, users=max(len(prompts), 1), turns=1, output_tokens=output_tokens,
                 request_timeout_s=request_timeout_s, max_requests=len(prompts),
                 max_seconds=(max(offsets_s, default=0.0) + request_timeout_s) * 2)
    results: list[RequestResult] = []
    started_at = time.time()
    t0 = time.monotonic()
    deadline = t0 + w.max_seconds
    own = client is None
    if client is None:
        client = httpx.AsyncClient(timeout=httpx.Timeout(request_timeout_s, connect=10.0),
                                   limits=httpx.Limits(max_connections=max(len(prompts), 1)),
                                   trust_env=False)

    async def one(i: int) -> None:
        await asyncio.sleep(max(t0 + offsets_s[i] - time.monotonic(), 0.0))
        res, _ = await _one_request(client, base, model, prompts[i], w, i, 0, deadline)
        results.append(res)

    try:
        await asyncio.gather(*(one(i) for i in range(len(prompts))))
    finally:
        if own:
            await client.aclose()
    results.sort(key=lambda r: (r.started_at, r.user))
    return RunResult(scenario=scenario, started_at=started_at, ended_at=time.time(), workload=w,
                     results=results, model=model, servers=[base])


def run_arrivals(server: str, model: str, prompts: Sequence[str], offsets_s: Sequence[float], **kw: Any) -> RunResult:
    """Synchronous wrapper around run_arrivals_async."""
    return _run_sync(lambda: run_arrivals_async(server, model, prompts, offsets_s, **kw))


def run_prompts(servers: Sequence[str], model: str, prompts: Sequence[Sequence[str]], **kw: Any) -> RunResult:
    """Synchronous wrapper around run_prompts_async."""
    return _run_sync(lambda: run_prompts_async(servers, model, prompts, **kw))


def _run_sync(coro_fn):
    """Run a coroutine to completion from sync code. Inside a thread that already runs an
    event loop (Jupyter, Playwright's sync API, Streamlit callbacks) it runs in a fresh
    thread with its own loop instead of failing."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_fn())
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(coro_fn())).result()


def run(servers: Sequence[str], model: str, workload: Workload) -> RunResult:
    """Synchronous wrapper around run_async."""
    return _run_sync(lambda: run_async(servers, model, workload))


def complete(server: str, model: str, prompt: str, *, output_tokens: int = 16,
             timeout_s: float = 300.0, user: int = 0, turn: int = 0) -> tuple[RequestResult, str]:
    """Send one streaming completion (same request shape as the workloads); return it and its text.

    Never raises for a failed request: the error is in the result.
    """
    w = Workload(users=1, turns=1, output_tokens=output_tokens, request_timeout_s=timeout_s,
                 max_seconds=timeout_s)
    base = normalize_base_url(server)

    async def go() -> tuple[RequestResult, str]:
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0),
                                     trust_env=False) as client:
            return await _one_request(client, base, model, prompt, w, user, turn,
                                      time.monotonic() + timeout_s)

    return _run_sync(go)


# ------------------------------------------------------------------------- CLI


def _main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m collectors.workload",
                                 description="Drive a bounded streaming workload and print a summary.")
    ap.add_argument("--server", action="append", required=True,
                    help="OpenAI-compatible base URL (repeat for several servers)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--scenario", choices=SCENARIOS, default="shared_prefix")
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--output-tokens", type=int, default=16)
    ap.add_argument("--prefix-chars", type=int, default=4000)
    ap.add_argument("--tail-chars", type=int, default=200)
    ap.add_argument("--routing", choices=ROUTINGS, default="round_robin")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-requests", type=int, default=1000)
    ap.add_argument("--max-seconds", type=float, default=600.0)
    ap.add_argument("--json", action="store_true", help="print every request, not only the summary")
    a = ap.parse_args(argv)
    w = Workload(scenario=a.scenario, users=a.users, turns=a.turns, output_tokens=a.output_tokens,
                 prefix_chars=a.prefix_chars, tail_chars=a.tail_chars, routing=a.routing,
                 seed=a.seed, max_requests=a.max_requests, max_seconds=a.max_seconds)
    result = run(a.server, a.model, w)
    print(result.to_json() if a.json else json.dumps(result.summary(), indent=2))
    return 0 if not result.errors else 1


if __name__ == "__main__":
    sys.exit(_main())
