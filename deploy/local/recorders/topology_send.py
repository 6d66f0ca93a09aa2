"""How the topology A/B (``record_topology_ab``) sends its schedule to one side: one streamed
completion per planned request (``Done``: client-side TTFT and total time, the tokens the
server reported), and one segment at a time, sequential requests one after another, a
concurrent burst at its due times."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import httpx

from kvplan.deploy.local.recorders.topology_schedule import Planned

OUTPUT_TOKENS = 8
SEQUENTIAL_GAP_S = 0.2


@dataclass
class Done:
    idx: int
    server: str
    sent_at: float
    """unix seconds"""
    ttft_s: float | None
    total_s: float | None
    prompt_tokens: int | None
    cached_tokens: int | None
    output_tokens: int | None
    response_id: str | None
    ok: bool
    error: str | None = None


async def _send(client: httpx.AsyncClient, base: str, server: str, model_name: str, p: Planned) -> Done:
    body = {"model": model_name, "prompt": p.prompt, "max_tokens": OUTPUT_TOKENS, "temperature": 0.0,
            "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    d = Done(p.idx, server, time.time(), None, None, None, None, None, None, False)
    t0 = time.perf_counter()
    try:
        async with client.stream("POST", base + "/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                d.error = f"HTTP {resp.status_code}: {(await resp.aread())[:300]!r}"
                return d
            async for line in resp.aiter_lines():
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                chunk = json.loads(line[5:])
                d.response_id = d.response_id or chunk.get("id")
                if chunk.get("choices") and d.ttft_s is None:
                    d.ttft_s = time.perf_counter() - t0
                usage = chunk.get("usage")
                if usage:
                    d.prompt_tokens = usage.get("prompt_tokens")
                    d.output_tokens = usage.get("completion_tokens")
                    d.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        d.total_s = time.perf_counter() - t0
        d.ok = d.ttft_s is not None
        d.error = None if d.ok else "stream ended without a token"
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        d.total_s = time.perf_counter() - t0
        d.error = f"{type(e).__name__}: {e}"
    return d


async def run_segment(seg: list[Planned], bases: list[str], names: list[str], model_name: str) -> list[Done]:
    """One segment on one side: sequential requests one after another (each 0.2 s after the
    previous answer), a concurrent burst at its due times."""
    out: list[Done] = []
    async with httpx.AsyncClient(timeout=httpx.Timeout(120, connect=10), trust_env=False,
                                 limits=httpx.Limits(max_connections=32)) as client:
        if seg[0].at_s is None:
            for p in seg:
                out.append(await _send(client, bases[p.rank], names[p.rank], model_name, p))
                await asyncio.sleep(SEQUENTIAL_GAP_S)
            return out
        start = time.monotonic()

        async def one(p: Planned) -> None:
            await asyncio.sleep(max(0.0, start + (p.at_s or 0.0) - time.monotonic()))
            out.append(await _send(client, bases[p.rank], names[p.rank], model_name, p))

        await asyncio.gather(*(one(p) for p in seg))
    return sorted(out, key=lambda d: d.idx)
