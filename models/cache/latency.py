"""TTFT of a request stream under a cache topology: a discrete-event pass over each engine's
scheduler steps, priced by the deployment's fitted prefill cost model.

**What a request costs.** Its prefill computes the prompt tokens its cache does not hit, at the
fitted cost (``kvplan.models.prefill.fit``, engine-seconds): ``fixed + per_token x computed +
attention x (P^2 - H^2)/2 + store x stored + load x hit + lmcache_request``. Before that, off the
engine, LMCache looks the prompt up (``lookup_s``) and loads the hit tokens into the engine's
KV cache (``load_s_per_hit_token`` each); after its first token the API server streams it
(``frontend_s``). Those three come from the deployment's TTFT, queue and prefill histograms in
quiet intervals (``calibrate``).

**The engine** (vLLM's scheduler, one per rank): at each step boundary the scheduler sees what
arrived meanwhile (a request's lookup starts then), and picks up lookups and loads that have
finished (an idle engine sees each at once). A step runs one token of every decoding request
and, in arrival order, the prefill of ready requests up to ``max_batch_tokens`` (vLLM's
``max_num_batched_tokens``; a longer prefill continues in the next steps). A step with prefill
lasts the prefill's cost plus one decode step when requests are decoding; a decode-only step
lasts ``decode_step_s``. A request's first token comes at the end of the step that finishes its
prefill; it then decodes ``output_tokens - 1`` more steps. Deterministic: the same stream gives
the same TTFTs (random routing takes a seed upstream).

**Cost.** One Python loop per engine, once per step or event (a few per request: about 3 s for a
million requests on this machine). An engine with nothing in flight has a future that depends only
on the time and the requests still to come, so ``run`` keeps those idle points and a second pass
whose hits differ for a few requests (``Run.with_hits``, the in-flight cut) replays only from the
idle point before each of them until the engine is back on the first pass's path.

What this cannot see: the engine's own noise (the same prompt's prefill varies run to run), a
cache server slowed by concurrent lookups from several engines (the shared pool's one server
under bursts), the time a request waited before the scheduler saw it in the stream it was
recorded from (the trace's time is when LMCache got the lookup), preemption, and decode steps
that grow with the batch.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..prefill.fit import PrefillCostModel
from ..prefill.nnls import nnls_fit

QUIET_SHARE = 0.9
"""An interval counts as quiet when at least this share of its decode steps carried one request
(``Interval.alone_share``): requests did not wait for each other there."""
MIN_QUIET = 3
"""Fewer quiet intervals than this: the overheads come from every interval (and say so)."""
DEFAULT_BATCH_TOKENS = 2048
"""vLLM's ``max_num_batched_tokens`` default for the OpenAI server (CPU and most GPUs)."""


@dataclass(frozen=True)
class LatencyInterval:
    """One target's scrape interval: the increases the overheads are measured from."""

    requests: float
    """TTFT observations over the interval (``vllm:time_to_first_token_seconds_count``); rows
    without any are not made (``app.data.latency.latency_intervals``)."""
    ttft_s: float
    """Sum of the interval's TTFTs, seconds (``vllm:time_to_first_token_seconds_sum``)."""
    queue_s: float
    """Sum of the interval's queue times, seconds (``vllm:request_queue_time_seconds_sum``); not
    used by ``calibrate``."""
    prefill_s: float
    """Sum of the interval's prefill times, seconds (``vllm:request_prefill_time_seconds_sum``)."""
    cached_tokens: float
    """Prompt tokens minus computed tokens of the same requests (``vllm:request_prompt_tokens_sum``
    less ``vllm:request_prefill_kv_computed_tokens_sum``, at least 0)."""
    decode_s: float = 0.0
    """Sum of the interval's decode times, seconds (``vllm:request_decode_time_seconds_sum``)."""
    decode_tokens: float = 0.0
    """Output tokens after each request's first: generation tokens less the decode histogram's
    count (one per request), at least 0."""
    generation_tokens: float = 0.0
    """Output tokens, first ones included (``vllm:generation_tokens_total``)."""
    lookup_s: float = 0.0
    """Seconds in LMCache lookups (``vllm:lmcache_mp_lookup_duration_seconds_sum``); 0 without
    LMCache."""
    lookups: float = 0.0
    """LMCache lookups (``vllm:lmcache_mp_lookup_duration_seconds_count``)."""
    alone: float = 1.0
    """Share of decode steps that carried one request (1 = requests never overlapped): the
    matching prefill interval's ``Interval.alone_share``; the reader gives 0 (not quiet) when
    there is none."""


@dataclass(frozen=True)
class Overheads:
    """What a request spends around its prefill, measured (``calibrate``)."""

    lookup_s: float
    """Seconds per LMCache lookup: the lookup histogram's sum / count over the intervals used,
    at most the fit's intercept; 0 without lookups."""
    load_s_per_hit_token: float
    """Seconds per hit token to load it into the engine's KV cache: the slope of TTFT minus
    prefill per request against cached tokens per request (weighted NNLS, at least 0)."""
    frontend_s: float
    """Seconds per request of TTFT outside prefill and lookup (the API server streaming the first
    token): the fit's intercept less ``lookup_s``, at least 0."""
    decode_step_s: float
    """Seconds per decode step: decode time / output tokens after the first; 0 without decode
    data."""
    output_tokens: int
    """Output tokens per request: generation tokens / requests over every interval with requests
    (quiet or not), rounded, at least 1."""
    intervals: int
    """Intervals the lookup, load, frontend and decode figures came from (after the lower-half
    refit); 0 when no interval had TTFT observations."""
    quiet: bool
    """Whether they were quiet ones (else every interval: waits leak into the overheads)."""
    notes: tuple[str, ...] = ()
    """Caveats in words: too few quiet intervals, lookups longer than TTFT minus prefill, no TTFT
    histogram."""

    def to_dict(self) -> dict[str, Any]:
        return {"lookup_s": self.lookup_s, "load_s_per_hit_token": self.load_s_per_hit_token,
                "frontend_s": self.frontend_s, "decode_step_s": self.decode_step_s,
                "output_tokens": self.output_tokens, "intervals": self.intervals, "quiet": self.quiet,
                "notes": list(self.notes)}


def calibrate(rows: Sequence[LatencyInterval], *, quiet_share: float = QUIET_SHARE) -> Overheads:
    """The overheads from per-interval histogram sums: in quiet intervals, TTFT minus prefill
    per request = ``a + b x hit tokens`` (weighted NNLS, weight = requests); ``a`` is the lookup
    (its own histogram) plus the frontend, ``b`` the load per hit token. Decode step = decode
    time / output tokens after the first; output tokens = generation tokens / requests."""
    rows = [r for r in rows if r.requests > 0]
    if not rows:
        return Overheads(0.0, 0.0, 0.0, 0.0, 1, 0, False, ("no TTFT histogram in the history: TTFT is "
                                                          "prefill time alone",))
    notes: list[str] = []
    quiet = [r for r in rows if r.alone >= quiet_share]
    use = quiet if len(quiet) >= MIN_QUIET else rows
    if use is rows:
        notes.append(f"only {len(quiet)} quiet interval(s): the overheads come from all {len(rows)}, "
                     "and include waits behind other requests (they lean high)")
    a, b, use = _lower_half_fit(use)
    lookups = sum(r.lookups for r in use)
    lookup = sum(r.lookup_s for r in use) / lookups if lookups else 0.0
    dec_tok = sum(r.decode_tokens for r in use)
    decode_step = sum(r.decode_s for r in use) / dec_tok if dec_tok else 0.0
    gen = sum(r.generation_tokens for r in rows) / sum(r.requests for r in rows)
    if lookup > a:
        notes.append("the lookups took longer than TTFT minus prefill: the frontend is taken as 0")
    return Overheads(lookup_s=min(lookup, a), load_s_per_hit_token=b, frontend_s=max(0.0, a - lookup),
                     decode_step_s=decode_step, output_tokens=max(1, round(gen)) if gen else 1,
                     intervals=len(use), quiet=use is quiet, notes=tuple(notes))


def _lower_half_fit(rows: list[LatencyInterval]) -> tuple[float, float, list[LatencyInterval]]:
    """``TTFT - prefill = a + b x cached`` per request: fitted on every row, then again on the
    rows at or below that fit (a wait behind another request only ever adds time: the lower
    half is where requests did not wait)."""
    def fit(rs: list[LatencyInterval]) -> tuple[float, float]:
        n = np.array([r.requests for r in rs])
        y = np.array([(r.ttft_s - r.prefill_s) / r.requests for r in rs])
        x = np.array([r.cached_tokens / r.requests for r in rs])
        if not x.any():
            return float(np.average(y, weights=n)), 0.0
        a, b = nnls_fit(np.column_stack([np.ones_like(n), x]), y, n)
        return float(a), float(b)

    a, b = fit(rows)
    low = [r for r in rows if (r.ttft_s - r.prefill_s) / r.requests <= a + b * r.cached_tokens / r.requests]
    if len(low) >= MIN_QUIET:
        a, b = fit(low)
        rows = low
    return a, b, rows


@dataclass(frozen=True)
class LatencyModel:
    """Engine-seconds per request part (the prefill cost model's) and the overheads."""

    fixed: float
    """Engine-seconds per prefill whatever its tokens (the cost model's ``fixed`` term)."""
    per_token: float
    """Engine-seconds per computed prompt token (``per_token``; a prefill computes at least 1)."""
    attention: float = 0.0
    """Engine-seconds per key read, times ``(P^2 - H^2)/2`` for P prompt and H hit tokens
    (``attention``; 0 when not fitted)."""
    store: float = 0.0
    """Engine-seconds per token LMCache stores: full-chunk tokens less hits (``store``)."""
    load: float = 0.0
    """Engine-seconds per hit token, on the engine's step (``load``)."""
    lmcache_request: float = 0.0
    """Engine-seconds per request through LMCache (``lmcache_request``), added to every prefill."""
    lookup_s: float = 0.0
    """Seconds of each request's LMCache lookup, off the engine, before the scheduler can take it
    (``Overheads.lookup_s``)."""
    load_s_per_hit_token: float = 0.0
    """Seconds per hit token to load it into the engine's KV cache, off the engine, after the
    lookup (``Overheads.load_s_per_hit_token``)."""
    frontend_s: float = 0.0
    """Seconds added to every TTFT after the step that finishes its prefill
    (``Overheads.frontend_s``)."""
    decode_step_s: float = 0.0
    """Seconds of a decode-only step, also added to a prefill step while requests decode
    (``Overheads.decode_step_s``)."""
    output_tokens: int = 1
    """Output tokens per request when the stream carries none (``Overheads.output_tokens``)."""
    max_batch_tokens: int | None = DEFAULT_BATCH_TOKENS
    """Tokens per scheduler step, one per decoding request included (vLLM's
    ``max_num_batched_tokens``); None: unbounded."""
    source: str = ""
    """The history the cost model was fitted on (``PrefillCostModel.history``); empty for a
    hand-made model (e.g. a bench preset)."""

    @classmethod
    def from_fit(cls, cost: PrefillCostModel, over: Overheads, *,
                 max_batch_tokens: int | None = DEFAULT_BATCH_TOKENS) -> LatencyModel:
        c = cost.coef()
        return cls(fixed=c["fixed"], per_token=c["per_token"], attention=c["attention"], store=c["store"],
                   load=c["load"], lmcache_request=c["lmcache_request"], lookup_s=over.lookup_s,
                   load_s_per_hit_token=over.load_s_per_hit_token, frontend_s=over.frontend_s,
                   decode_step_s=over.decode_step_s, output_tokens=over.output_tokens,
                   max_batch_tokens=max_batch_tokens, source=cost.history)

    def prefill_s(self, prompt: np.ndarray, hit: np.ndarray, full: np.ndarray) -> np.ndarray:
        """Engine-seconds of each request's whole prefill (no waiting)."""
        prompt, hit = np.asarray(prompt, float), np.asarray(hit, float)
        s = (self.fixed + self.lmcache_request + self.per_token * np.maximum(prompt - hit, 1.0)
             + self.attention * (prompt ** 2 - hit ** 2) / 2 + self.load * hit
             + self.store * np.maximum(np.asarray(full, float) - hit, 0.0))
        return np.asarray(s, float)  # numpy's ufunc stubs type the sum Any: as the float array it is


@dataclass(frozen=True)
class Stream:
    """What the engines are asked: per request (arrival order not required)."""

    arrival: np.ndarray
    """Arrival per request, seconds (the trace's lookup time; zeros when the trace has none)."""
    prompt: np.ndarray
    """Prompt tokens per request."""
    hit: np.ndarray
    """Tokens the cache serves under this topology, per request."""
    full: np.ndarray
    """Full-chunk tokens (what LMCache stores of a miss)."""
    engine: np.ndarray
    """Engine (rank) index per request."""
    engines: int
    """Engines ``simulate`` runs (0..engines-1); a request whose ``engine`` is outside gets no TTFT
    (NaN)."""
    output_tokens: np.ndarray | None = None
    """Per request (Mooncake traces carry them); else ``LatencyModel.output_tokens``."""


def simulate(s: Stream, m: LatencyModel) -> np.ndarray:
    """TTFT of every request, seconds (module doc)."""
    return run(s, m).ttft


@dataclass(frozen=True)
class Run:
    """A stream's TTFTs and where each engine was idle: from such a point an engine's future
    depends only on the time and the requests not yet arrived, so a stream that differs only in
    some requests' hits is replayed again from the idle point before each of them
    (``with_hits``) rather than from the start."""

    stream: Stream
    """The stream that ran."""
    model: LatencyModel
    """The model it ran with."""
    ttft: np.ndarray
    """float per request, seconds (``simulate``)."""
    idle: tuple[tuple[list[int], list[float]], ...]
    """Per engine: each idle point as (requests of the engine seen by then, in arrival order;
    the time), in the order the engine met them."""

    def with_hits(self, hit: np.ndarray) -> np.ndarray:
        """TTFTs of the same stream with ``hit`` instead of its hits, the same as ``simulate`` on
        it: each engine replays only from the idle point before its first changed request to an
        idle point where it is back on the first run's path, until its next changed request."""
        s = replace(self.stream, hit=np.asarray(hit))
        changed = np.asarray(hit, float) != np.asarray(self.stream.hit, float)
        return _run_all(s, self.model, self).ttft if changed.any() else self.ttft.copy()


def run(s: Stream, m: LatencyModel) -> Run:
    """``simulate`` with the idle points kept (``Run.with_hits``)."""
    return _run_all(s, m, None)


def _run_all(s: Stream, m: LatencyModel, first: Run | None) -> Run:
    """Each engine on its own (``_run_engine``); with ``first``, only where ``s``'s hits differ
    from the stream ``first`` ran."""
    ttft = np.full(len(s.arrival), np.nan)
    arrival = np.asarray(s.arrival, float)
    hit = np.asarray(s.hit, float)
    prompt = np.asarray(s.prompt, float)
    full = np.asarray(s.full, float)
    out = (np.asarray(s.output_tokens).astype(np.int64) if s.output_tokens is not None
           else np.full(len(arrival), int(m.output_tokens), dtype=np.int64))
    engine = np.asarray(s.engine)
    changed = None if first is None else hit != np.asarray(first.stream.hit, float)
    # Each engine's requests, in request order (ties in the heaps break by request index).
    by_engine = np.argsort(engine, kind="stable")
    bounds = np.searchsorted(engine[by_engine], np.arange(s.engines + 1), side="left")
    idle: list[tuple[list[int], list[float]]] = []
    for e in range(s.engines):
        idx = by_engine[bounds[e]:bounds[e + 1]]
        if first is not None and changed is not None:
            if not changed[idx].any():  # nothing differs on this engine
                ttft[idx] = first.ttft[idx]
                idle.append(first.idle[e])
                continue
            res = _run_engine(arrival[idx], hit[idx], prompt[idx], full[idx], out[idx], m,
                              again=(first.ttft[idx].tolist(), first.idle[e], changed[idx]))
        else:
            res = _run_engine(arrival[idx], hit[idx], prompt[idx], full[idx], out[idx], m)
        ttft[idx] = res[0]
        idle.append(res[1])
    return Run(s, m, ttft, tuple(idle))


def _run_engine(arrival: np.ndarray, hit: np.ndarray, prompt: np.ndarray, full: np.ndarray, out: np.ndarray,
                m: LatencyModel, again: tuple[list[float], tuple[list[int], list[float]], np.ndarray] | None = None,
                ) -> tuple[list[float], tuple[list[int], list[float]]]:
    """One engine's scheduler steps (module doc) over its requests (given in request order): their
    TTFTs and the engine's idle points. One flat loop over Python floats and lists: it runs once
    per step or event, so every attribute look-up and call it saves is paid back a million times
    on a fleet's trace. The arithmetic is the step rule's, operation for operation (the same
    floats come out).

    ``again``: the TTFTs and idle points of a first run of these requests, and which requests'
    hits differ from it. Reaching one of that run's idle points (same requests seen, same time),
    the engine is back on its path until its next changed request arrives: the first run's TTFTs
    are copied up to its last idle point before that arrival, and the loop goes on from there."""
    n = len(arrival)
    arr: list[float] = arrival.tolist()
    hitf: list[float] = hit.tolist()
    order: list[int] = np.argsort(arrival, kind="stable").tolist()
    # Per request, what each step adds: the step rule's operations, done ahead in numpy (IEEE
    # doubles both: the same floats; the prompt less its hits is truncated to int as ``int()`` does).
    need0: list[int] = np.maximum(1, np.trunc(prompt - hit).astype(np.int64)).tolist()
    first_cost: list[float] = ((m.fixed + m.lmcache_request) + m.load * hit).tolist()
    store_cost: list[float] = (m.store * np.maximum(0.0, full - hit)).tolist()
    load_s: list[float] = (m.load_s_per_hit_token * hit).tolist()
    outn: list[int] = out.tolist()
    ttft = [math.nan] * n
    done = [-1] * n  # prompt tokens computed so far; -1: its prefill has not started
    per_token, attention, lookup_s = m.per_token, m.attention, m.lookup_s
    decode_step_s, frontend_s = m.decode_step_s, m.frontend_s
    batch = m.max_batch_tokens or 2**62
    d_step = max(decode_step_s, 1e-9)
    inf = math.inf
    heappush, heappop, ceil, isfinite = heapq.heappush, heapq.heappop, math.ceil, math.isfinite
    lookups: list[tuple[float, int]] = []  # (when the lookup ends, request)
    loads: list[tuple[float, int]] = []  # (when the load of the hit tokens ends, request)
    ready: list[int] = []  # requests whose prefill can run, in arrival order
    decoding: list[int] = []  # heap of the step at which each decoding request ends
    idle_k: list[int] = []
    idle_t: list[float] = []
    old_k: list[int] = []
    old_t: list[float] = []
    changed_at: list[int] = []  # arrival positions of the changed requests, ascending
    if again is not None:
        old_ttft, (old_k, old_t), changed = again
        changed_at = np.flatnonzero(np.asarray(changed)[order]).tolist()
    c = 0  # next changed request: changed_at[c]
    t = -inf
    step = 0
    k = 0
    while k < n or lookups or loads or ready or decoding:
        if not (decoding or ready or lookups or loads):  # idle
            j = _idle_point(old_k, old_t, k, t) if again is not None else -1
            if j >= 0:  # on the first run's path: skip to its last idle point before the next change
                while c < len(changed_at) and changed_at[c] < k:
                    c += 1
                if c == len(changed_at):
                    j_to, k_to = len(old_k) - 1, n
                else:
                    j_to = bisect.bisect_right(old_k, changed_at[c], lo=j) - 1
                    k_to = old_k[j_to]
                for p in range(k, k_to):
                    ttft[order[p]] = old_ttft[order[p]]
                idle_k.extend(old_k[j:j_to])
                idle_t.extend(old_t[j:j_to])
                if k_to == n:
                    idle_k.append(old_k[j_to])
                    idle_t.append(old_t[j_to])
                    break
                k, t = k_to, old_t[j_to]
            idle_k.append(k)
            idle_t.append(t)
        # What the scheduler sees at this boundary: arrivals start their lookups, finished lookups
        # start their loads, finished loads make requests ready. One pass sees everything due by
        # ``t``: each stage only feeds the later ones.
        while k < n and arr[order[k]] <= t:
            heappush(lookups, (t + lookup_s, order[k]))  # max(t, arrival) is t here
            k += 1
        while lookups and lookups[0][0] <= t:
            i = heappop(lookups)[1]
            load = load_s[i]
            if load > 0:
                heappush(loads, (t + load, i))
            else:
                ready.append(i)
        while loads and loads[0][0] <= t:
            ready.append(heappop(loads)[1])
        if not ready:
            nxt = inf
            if lookups and lookups[0][0] < nxt:
                nxt = lookups[0][0]
            if loads and loads[0][0] < nxt:
                nxt = loads[0][0]
            if k < n and arr[order[k]] < nxt:
                nxt = arr[order[k]]
            if not decoding:
                if nxt > t:
                    t = nxt
                continue
            jump = decoding[0] - step  # to the next decode's end, or the next event's step
            if isfinite(nxt):
                to_event = ceil((nxt - t) / d_step)
                if to_event < 1:
                    to_event = 1
                if to_event < jump:
                    jump = to_event
            t += jump * d_step
            step += jump
        else:
            # One prefill step: ready requests in arrival order up to the token budget.
            budget = batch - len(decoding)
            dur = 0.0
            finished = []
            for i in ready:
                if budget <= 0:
                    break
                dn = done[i]
                started = dn >= 0
                if not started:
                    dn = 0
                need = need0[i] - dn
                take = need if need < budget else budget
                c0 = hitf[i] + dn
                dur += per_token * take + attention * ((c0 + take) ** 2 - c0 ** 2) / 2
                if not started:
                    dur += first_cost[i]
                done[i] = dn + take
                budget -= take
                if take == need:
                    finished.append(i)
                    dur += store_cost[i]
            if decoding:
                dur += decode_step_s
            t += dur
            step += 1
            for i in finished:
                ready.remove(i)
                ttft[i] = t - arr[i] + frontend_s
                if outn[i] > 1:
                    heappush(decoding, step + outn[i] - 1)
        while decoding and decoding[0] <= step:
            heappop(decoding)
    return ttft, (idle_k, idle_t)


def _idle_point(ks: list[int], ts: list[float], k: int, t: float) -> int:
    """Index of the idle point (k, t) among a run's (in the order met: by k, then t); -1: none."""
    j = bisect.bisect_left(ks, k)
    while j < len(ks) and ks[j] == k and ts[j] < t:
        j += 1
    return j if j < len(ks) and ks[j] == k and ts[j] == t else -1


QUEUED_SLACK = 2.0
"""A lookup that came within this many times the previous request's predicted lookup-to-prefill-
end of that request's own lookup, on the same engine, waited behind it (``queued_arrival``): the
replay's prefill is an engine-seconds fit, and under a burst the engines share the cores (in the
three recorded A/Bs' bursts, lookup to first token took a median 1.2-1.9x and a 90th percentile
1.7-2.9x the replay's; a choice read from them, not fitted per deployment)."""
AFTER_STEP_S = 1e-6
"""How long after the step that kept it waiting a queued request is taken to arrive: after that
step's boundary (else the replay would batch it into the step)."""


def queued_arrival(lookup: np.ndarray, engine: np.ndarray, busy_s: np.ndarray, start_s: np.ndarray | float = 0.0,
                   *, slack: float = QUEUED_SLACK) -> np.ndarray:
    """When each request reached its engine, from when its lookup was logged. vLLM's scheduler
    sends a request's lookup only at the boundary after the step it arrived in, and looks up
    every request waiting at a boundary at once. So a request whose lookup came after the
    previous lookup on its engine while that request's prefill was still running (within
    ``slack`` x ``busy_s``, its predicted lookup to prefill end) arrived after that request's
    prefill step began (``start_s`` after its lookup: the lookup and the load of its hits) and
    waited for it: it is taken to have arrived just then, the most it can have waited (in a burst
    the requests arrive together). Any other request arrived when its lookup was logged.
    ``engine``: the engine each request ran on in the data (today's); ``busy_s`` per request
    (NaN or not positive: no wait taken behind it)."""
    lookup = np.asarray(lookup, float)
    engine = np.asarray(engine)
    busy = np.nan_to_num(np.asarray(busy_s, float), nan=0.0)
    start = np.broadcast_to(np.asarray(start_s, float), lookup.shape)
    out = lookup.copy()
    if len(lookup) < 2:
        return out
    order = np.lexsort((lookup, engine))  # by engine, then lookup time
    e, t, b, st = engine[order], lookup[order], busy[order], start[order]
    same = e[1:] == e[:-1]
    gap = t[1:] - t[:-1]
    waited = same & (gap > 0) & (b[:-1] > 0) & (gap <= slack * b[:-1])
    at = np.minimum(t[:-1] + st[:-1] + AFTER_STEP_S, t[1:])
    out[order[1:][waited]] = at[waited]
    return out


@dataclass(frozen=True)
class LatencySummary:
    requests: int
    """Requests with a finite predicted TTFT (NaN ones left out)."""
    ttft_mean_s: float | None
    """Mean TTFT, seconds; None when no request has one."""
    ttft_p50_s: float | None
    """Median TTFT, seconds (linear interpolation); None when no request has one."""
    ttft_p99_s: float | None
    """99th percentile TTFT, seconds (linear interpolation); None when no request has one."""
    within_slo: float | None
    """Share of requests with TTFT at most the SLO; None without an SLO."""
    goodput_rps: float | None
    """Requests per second within the SLO over the stream's span; None without an SLO or span."""

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "ttft_mean_s": self.ttft_mean_s, "ttft_p50_s": self.ttft_p50_s,
                "ttft_p99_s": self.ttft_p99_s, "within_slo": self.within_slo, "goodput_rps": self.goodput_rps}


def summarize(ttft: np.ndarray, *, slo_s: float | None, seconds: float) -> LatencySummary:
    """Mean, p50, p99 (linear interpolation, numpy's default) and goodput at the SLO."""
    v = np.asarray(ttft, float)
    v = v[np.isfinite(v)]
    if not len(v):
        return LatencySummary(0, None, None, None, None, None)
    ok = float((v <= slo_s).mean()) if slo_s else None
    good = float((v <= slo_s).sum()) / seconds if slo_s and seconds > 0 else None
    return LatencySummary(len(v), float(v.mean()), float(np.percentile(v, 50)), float(np.percentile(v, 99)),
                          ok, good)


def as_histogram(ttft: np.ndarray, bounds: Sequence[float]) -> list[tuple[float, float]]:
    """Predicted TTFTs as cumulative (upper bound, count) buckets of a measured histogram's
    bounds (+Inf added): a quantile of them reads like the measured one, bucket for bucket."""
    v = np.asarray(ttft, float)
    v = v[np.isfinite(v)]
    les = sorted({float(b) for b in bounds} | {math.inf})
    return [(le, float((v <= le).sum())) for le in les]
