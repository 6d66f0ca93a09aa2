"""How a workload is sent: streaming completions to OpenAI-compatible servers, concurrently
per user (``run``), as fixed prompt lists (``run_prompts``) or on an open-loop arrival schedule
(``run_arrivals``), each bounded by ``max_requests`` and ``max_seconds``. A failed request is
recorded in its result, never raised. What is sent: ``kvplan.collectors.loadgen.workload``."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import httpx

from .workload import (
    RequestResult,
    RunResult,
    Scenario,
    Workload,
    extend_history,
    prompt_for,
    route,
)


def normalize_base_url(url: str) -> str:
    url = url.rstrip("/")
    url = url.removesuffix("/v1")
    return url


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


async def _one_request(client: httpx.AsyncClient, base: str, model_name: str, prompt: str,
                       w: Workload, user: int, turn: int, deadline: float) -> tuple[RequestResult, str]:
    body = {
        "model": model_name,
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


async def run_async(servers: Sequence[str], model_name: str, workload: Workload,
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
                res, answer = await _one_request(client, base, model_name, prompt, w, user, turn, deadline)
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
                     results=results, model_name=model_name, servers=bases, stopped_by=budget.stopped_by)


async def run_prompts_async(servers: Sequence[str], model_name: str, prompts: Sequence[Sequence[str]], *,
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
            res, _ = await _one_request(client, bases[u % len(bases)], model_name, prompt, w, u, turn, deadline)
            results.append(res)

    try:
        await asyncio.gather(*(user(u) for u in range(len(prompts))))
    finally:
        if own:
            await client.aclose()
    results.sort(key=lambda r: (r.started_at, r.user, r.turn))
    return RunResult(scenario=scenario, started_at=started_at, ended_at=time.time(), workload=w,
                     results=results, model_name=model_name, servers=bases)


async def run_arrivals_async(server: str, model_name: str, prompts: Sequence[str], offsets_s: Sequence[float], *,
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
        res, _ = await _one_request(client, base, model_name, prompts[i], w, i, 0, deadline)
        results.append(res)

    try:
        await asyncio.gather(*(one(i) for i in range(len(prompts))))
    finally:
        if own:
            await client.aclose()
    results.sort(key=lambda r: (r.started_at, r.user))
    return RunResult(scenario=scenario, started_at=started_at, ended_at=time.time(), workload=w,
                     results=results, model_name=model_name, servers=[base])


def run_arrivals(server: str, model_name: str, prompts: Sequence[str], offsets_s: Sequence[float],
                 **kw: Any) -> RunResult:
    """Synchronous wrapper around run_arrivals_async."""
    return _run_sync(lambda: run_arrivals_async(server, model_name, prompts, offsets_s, **kw))


def run_prompts(servers: Sequence[str], model_name: str, prompts: Sequence[Sequence[str]], **kw: Any) -> RunResult:
    """Synchronous wrapper around run_prompts_async."""
    return _run_sync(lambda: run_prompts_async(servers, model_name, prompts, **kw))


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


def run(servers: Sequence[str], model_name: str, workload: Workload) -> RunResult:
    """Synchronous wrapper around run_async."""
    return _run_sync(lambda: run_async(servers, model_name, workload))


def complete(server: str, model_name: str, prompt: str, *, output_tokens: int = 16,
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
            return await _one_request(client, base, model_name, prompt, w, user, turn,
                                      time.monotonic() + timeout_s)

    return _run_sync(go)
