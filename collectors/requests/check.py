"""``kvplan prompts check``: a request log in, the predicted prefix-cache hits, the cache-busters
and what fixing them is worth out. Two streaming passes over the files (the second only when
there are findings).

Memory is bounded except for the unlimited caches' keys: one 64-bit key per distinct block
(vLLM's blocks, LMCache's chunks; ``predict.KeySet``: 8 bytes each, plus a fixed buffer), in the
first pass and in each of the second pass's variants; with a geometry table
(``CheckOptions.geometry``), also the blocks at each of its other block sizes, each size with
its own capacity-bound pool (the same capacity in tokens). Nothing else grows with the log: no
per-request data is kept (each request's keys, lengths and first-pass hits go to a temporary
file, read back in order by the second pass, which so tokenizes only the requests a fix
changes), the buster finder holds a window of recent requests and a line index bounded by it,
the template-history finder (``history``) one hash per recent request (at most 100,000), a
capacity-bound pool ``gpu_blocks`` blocks, and the conversations' last turns (text, ids and
digests: ``pieces.Turn``, ``prepare.LastTurns``) at most 16 MiB each. A turn the chat template
renders differently once it is history is a ``template_history`` finding with one replay per remedy it allows
(``FindingResult.remedies``); the replay with every finding fixed uses the client dropping the
reasoning when that is one of them. The temporary file takes 8 bytes per
block plus 40 per request of disk. Prompt text is held in memory one request at a time (plus
the finder's window, one example per finding and, once the first pass has a finding, the
renders it keeps for the fix pass, at most ``KEEP_BYTES``) and never written anywhere; the
renders made ahead in a forked process (``forked.py``) cross a pipe of at most 1 MiB.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from ...models.core.errors import KvplanError
from ...models.core.vocabulary import Tier
from ...models.prompts.busters import Carried, Finder, Finding, apply_fix
from ...models.prompts.geometry import pool_blocks
from ...models.prompts.hashing import chain_keys64_many, token_digests
from ...models.prompts.history import DROP, Remedy
from ...models.prompts.measured import Comparison
from ...models.prompts.predict import Hashed, KeySet, LmcacheUnlimited, Outcome, Predictor, Totals
from ...models.prompts.reasons import RequestMiss, miss_of
from . import history
from .ahead import overlapped
from .delta import Mirror
from .forked import ChildFailed, RenderAhead, can_fork, read_then_ahead
from .history import HistoryFinder
from .kept import Kept
from .prepare import Prepared, Preparer, Tokenizing, conversation, hashed64
from .read import LogRequest, Skipped, SlimRequest, distinct_files, light, read_requests, spooled
from .render import Renderer, RequestRefused
from .sample import SessionSample, sampled

Progress = Callable[[str, int], None]
OnRequest = Callable[[LogRequest, Outcome, RequestMiss], None]
"""Called with each request, its prediction and its miss reason, in arrival order."""
MAX_EXAMPLES = 16
"""Findings whose first broken request's text is kept in memory (for the dashboard's example)."""


@dataclass(frozen=True)
class CheckOptions:
    """``block_size``: vLLM's (16 on GPUs, 128 on its CPU backend); ``gpu_blocks``: the engine's
    ``num_gpu_blocks`` (None: unlimited only); ``lmcache_chunk``: LMCache's chunk_size;
    ``lora``: model names that are LoRA adapters (their name is a block extra key);
    ``max_fixes``: findings whose fix is recomputed one by one (all are fixed together too)."""

    block_size: int = 16
    gpu_blocks: int | None = None
    lmcache_chunk: int = 256
    lora: frozenset[str] = frozenset()
    max_fixes: int = 5
    geometry: tuple[int, ...] = ()
    """Block sizes the first pass also replays the log at (the geometry table): each request's
    token ids re-hashed at each size, never tokenized again, in a pool of the same capacity in
    tokens (``gpu_blocks`` x ``block_size``). Empty: no table."""
    sample: SessionSample | None = None
    """Whole conversations kept (``--sample-sessions``), a filter on the requests as read, in both
    passes; its counts are the run's afterwards. None: every request."""
    workers: int = 1
    """Processes the first pass renders, tokenizes and keys text prompts in (``workers.py``);
    1: in this process. The results are the same either way."""
    render_ahead: bool = True
    """With ``workers`` 1: the first pass's renders made ahead in a forked process where that is
    safe (``forked.py``: Linux, one thread running); False: in this process. The results are
    the same either way."""


@dataclass
class FindingResult:
    """A finding and the totals of the replay with it alone fixed (None: not recomputed, past
    ``max_fixes``); a ``template_history`` finding's totals are its best remedy's, and
    ``remedies`` holds each remedy with its own replay's totals."""

    finding: Finding
    totals: Totals | None
    remedies: list[tuple[Remedy, Totals | None]] = field(default_factory=list)


@dataclass(frozen=True)
class Variant:
    """One replay of the second pass: the text findings fixed in it and, for a template's
    history, the remedy every request is rewritten with first (None: none)."""

    findings: list[Finding]
    remedy: Remedy | None = None


@dataclass
class GeometryRow:
    """The log replayed at another block size: ``gpu_blocks`` (the check's capacity in tokens
    in blocks of ``block_size``; None: unlimited), its totals (None: not computable, ``why``)."""

    block_size: int
    gpu_blocks: int | None
    totals: Totals | None
    why: str | None = None

    def as_json(self) -> dict[str, Any]:
        t = self.totals
        return {"block_size": self.block_size, "gpu_blocks": self.gpu_blocks,
                "hit_rate": t.hit_rate if t is not None else None,
                "hit_rate_unlimited": t.hit_rate_unlimited if t is not None else None,
                "cached_tokens": t.cached if t is not None else None,
                "hittable_tokens": t.hittable if t is not None else None,
                "requests_unfit": t.unfit if t is not None else None, "why_null": self.why}


@dataclass
class CheckResult:
    options: CheckOptions
    block_size: int
    totals: Totals
    fixed: Totals | None
    findings: list[FindingResult]
    missed_by_cause: dict[str, int]
    lmcache_hit_tokens: int | None
    notes: list[str] = field(default_factory=list)
    examples: dict[tuple[str, int | None, str, int], tuple[str, int, int]] = field(default_factory=dict, repr=False)
    """Per finding key, the first request it broke: (rendered text, start and end of the divergent
    line). Memory only, for the dashboard's highlighted example; never in ``as_json``."""
    first_arrival: float | None = None
    """Earliest and latest arrival time in the log (unix seconds), when it has them."""
    last_arrival: float | None = None
    keys_held: int = 0
    """Distinct keys the first pass's unlimited caches ended up holding (vLLM blocks plus LMCache
    chunks, plus the geometry table's blocks, 8 bytes each): what the check's memory grows with.
    Memory only, not in ``as_json``."""
    geometry: list[GeometryRow] = field(default_factory=list)
    """The hit rate at each of ``options.geometry``'s block sizes and the check's own, sorted by
    block size (empty when no size was asked for)."""
    miss_reasons: dict[str, int] = field(default_factory=dict)
    """Requests per miss reason (``models.prompts.reasons``): each request's first computed token's cause."""
    measured: Comparison = field(default_factory=Comparison)
    """Prediction against the engine's own ``usage`` where the log holds it (``models.prompts.measured``)."""
    rendered_ahead: int = 0
    """First-pass renders made by the forked process (``forked.py``; 0: all made in this one).
    Memory only, not in ``as_json``: the results are the same either way."""

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` object (issue 26, item 10, plus the block size, capacity, LMCache tier
        and notes)."""
        t = self.totals
        fixed = self.fixed.hit_rate if self.fixed is not None else t.hit_rate
        return {
            "requests": t.requests,
            "prompt_tokens": t.prompt_tokens,
            "cached_tokens_predicted": t.cached,
            "hit_rate_predicted": t.hit_rate,
            "hit_rate_unlimited": t.hit_rate_unlimited,
            "hit_rate_if_fixed": fixed,
            "findings": [finding_json(f, self.totals) for f in self.findings],
            "missed_by_cause": dict(self.missed_by_cause),
            "miss_reasons": dict(self.miss_reasons),
            "measured": self.measured.as_json(),
            "block_size": self.block_size,
            "gpu_blocks": self.options.gpu_blocks,
            Tier.LMCACHE: {"chunk_tokens": self.options.lmcache_chunk,
                        "hit_rate_unlimited": self.lmcache_hit_tokens / t.prompt_tokens
                        if t.prompt_tokens and self.lmcache_hit_tokens is not None else None},
            "notes": list(self.notes),
            "block_geometry": {"capacity_tokens": self.options.gpu_blocks * self.block_size
                               if self.options.gpu_blocks is not None else None,
                               "rows": [g.as_json() for g in self.geometry]} if self.geometry else None,
        }


def finding_json(fr: FindingResult, base: Totals) -> dict[str, Any]:
    f = fr.finding
    out: dict[str, Any] = {
        "kind": f.kind, "message_index": f.message_index, "role": f.role, "line": f.line,
        "example": f.example, "requests_affected": f.requests_affected,
        "tokens_lost": max(0, fr.totals.cached - base.cached) if fr.totals is not None else None,
        "hit_rate_if_fixed": fr.totals.hit_rate if fr.totals is not None else None,
        "first_block": f.first_block, "template": f.template, "fix": f.fix,
        "below_today": below_today(fr.totals, base) if fr.totals is not None else None}
    if f.change is not None:
        out["change"] = f.change
        out["tokens_missed"] = f.tokens_missed
        out["remedies"] = [{**rm.as_json(), "hit_rate_if_fixed": t.hit_rate if t is not None else None,
                            "tokens_lost": max(0, t.cached - base.cached) if t is not None else None,
                            "below_today": below_today(t, base) if t is not None else None}
                           for rm, t in fr.remedies]
    return out


def below_today(fixed: Totals, base: Totals) -> str | None:
    """Why a fix's predicted rate is below today's (None when it is not): a rate lower than
    today's is never given without its reason."""
    if fixed.hit_rate is None or base.hit_rate is None or fixed.hit_rate >= base.hit_rate:
        return None
    if fixed.cached_unlimited >= base.cached_unlimited:
        return (f"the fixed requests hit as much or more with an unlimited cache ({fixed.hit_rate_unlimited:.1%} "
                f"against {base.hit_rate_unlimited:.1%}), but the pool evicts more of them at this capacity")
    return ("moved as a client moves it, the value changes text that later requests do not repeat the same way "
            "(a template that renders history differently, or a value other requests carry elsewhere): "
            "this fix does not pay on this log")


FirstPass = Callable[[Sequence[Path], CheckOptions, Preparer, Callable[[LogRequest], Prepared | None], Skipped],
                     Iterator[list[Prepared]]]
"""Where the first pass's prepared requests come from instead of being rendered here
(``distributed.on_ray``): given the files, the options, the run's Preparer, its render function
and its ``Skipped``, in arrival order."""


def _lmcache_many(lm: LmcacheUnlimited, batch: Sequence[Prepared]) -> list[int | None]:
    """LMCache's hit tokens for each request of ``batch`` in order, looked up at once; None for a
    trace of block ids: LMCache's chunks cannot be rebuilt from them, so the log cannot tell."""
    have = [p for p in batch if p.ids is not None]
    if not have:
        return [None] * len(batch)
    bounds = np.zeros(len(have) + 1, dtype=np.int64)
    np.cumsum([len(p.ids) for p in have], out=bounds[1:])  # type: ignore[arg-type]
    digests = np.concatenate([p.digests if p.digests is not None else token_digests(p.ids) for p in have])  # type: ignore[arg-type]
    keys, key_bounds = chain_keys64_many(digests, bounds, lm.chunk_size, partial=True)
    hits = iter(lm.serve_many(keys, key_bounds, np.diff(bounds) // lm.chunk_size).tolist())
    return [next(hits) if p.ids is not None else None for p in batch]


def _grouped(stream: Iterator[Prepared], n: int) -> Iterator[list[Prepared]]:
    """``stream`` in lists of ``n`` (the last one shorter)."""
    batch: list[Prepared] = []
    for p in stream:
        batch.append(p)
        if len(batch) >= n:
            yield batch
            batch = []
    if batch:
        yield batch


BATCH_REQUESTS = 32
BATCH_CHARS = 2_000_000
"""Requests rendered, then tokenized in one batch call: at most this many, and this much text.
Each batch's keying, look-ups and spill are a fixed number of numpy calls, spread over more
requests in a larger batch (measured: ``bench/results/prompts.md``)."""


def _batches(requests: Iterator[Any], render: Callable[[Any], Prepared | None]) -> Iterator[list[Prepared]]:
    """``requests`` rendered in order (``render``; None: skipped), in lists of at most
    ``BATCH_REQUESTS`` requests or ``BATCH_CHARS`` characters of text: the text held at once
    stays bounded."""
    batch: list[Prepared] = []
    chars = 0
    for r in requests:
        p = render(r)
        if p is None:
            continue
        batch.append(p)
        chars += len(p.text) if p.text is not None else 0
        if len(batch) >= BATCH_REQUESTS or chars >= BATCH_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def _ticker(progress: Progress | None, stage: str) -> Callable[[int], None]:
    last = [time.monotonic()]

    def tick(n: int) -> None:
        if progress is not None and time.monotonic() - last[0] >= 2.0:
            last[0] = time.monotonic()
            progress(stage, n)
    return tick


class _Spill:
    """The first pass's per-request records, in arrival order, in a temporary file (deleted on
    close): prompt and output tokens, hittable and unlimited-cache hit tokens, the block keys
    (40 bytes + 8 per block). The second pass reads them back in the same order."""

    def __init__(self) -> None:
        self.f: IO[bytes] = tempfile.TemporaryFile(prefix="kvplan-prompts-")  # noqa: SIM115 (closed by check)

    def write_many(self, hs: Sequence[Hashed], outcomes: Sequence[Outcome]) -> None:
        """Each request's record (``hs`` and their ``outcomes``, in order), in one write."""
        parts: list[bytes] = []
        for h, o in zip(hs, outcomes, strict=True):
            parts.append(np.array([h.prompt_tokens, h.output_tokens, o.hittable, o.cached_unlimited, len(h.hashes)],
                                  dtype=np.uint64).tobytes())
            parts.append(np.asarray(h.hashes, dtype=np.uint64).tobytes())
        self.f.write(b"".join(parts))

    def rewind(self) -> None:
        self.f.flush()
        self.f.seek(0)

    def read(self) -> tuple[Hashed, int, int]:
        """The next request's (keys, hittable tokens, unlimited-cache hit tokens)."""
        pt, out, hit, u, n = (int(x) for x in np.frombuffer(self.f.read(40), dtype=np.uint64))
        keys = np.frombuffer(self.f.read(8 * n), dtype=np.uint64)
        return Hashed(pt, keys, out), hit, u

    def close(self) -> None:
        self.f.close()


def check(paths: Sequence[Path], renderer: Renderer | None, opts: CheckOptions = CheckOptions(), *,
          progress: Progress | None = None,
          on_request: OnRequest | None = None, first_pass: FirstPass | None = None) -> CheckResult:
    """Predict, find busters, recompute with them fixed; see the module docstring. ``first_pass``:
    the first pass's requests prepared elsewhere (a Ray cluster), in arrival order."""
    if opts.block_size < 1 or opts.lmcache_chunk < 1 or (opts.gpu_blocks is not None and opts.gpu_blocks < 2) \
            or any(s < 1 for s in opts.geometry):
        raise KvplanError("block sizes and chunk must be at least 1, gpu blocks at least 2", source="options")
    distinct_files(paths)
    spill = _Spill()
    ahead: list[RenderAhead] = []  # the process rendering ahead (forked.py), once started
    try:
        with spooled(paths) as files:  # a pipe is read once: the fix pass reads its copy
            return _check(files, renderer, opts, spill, progress, on_request, first_pass, ahead)
    finally:
        for a in ahead:  # stopped (killed if it still runs) and reaped
            a.close()
        spill.close()


def _check(paths: Sequence[Path], renderer: Renderer | None, opts: CheckOptions, spill: _Spill,
           progress: Progress | None, on_request: OnRequest | None, first_pass: FirstPass | None,
           ahead: list[RenderAhead]) -> CheckResult:
    prep = Preparer(renderer, opts)
    totals = Totals()
    finder = Finder()
    hist: HistoryFinder | None = None
    lm = LmcacheUnlimited(opts.lmcache_chunk)
    lm_hits: int | None = 0
    out_sources: Counter[str | None] = Counter({"logged": 0, "max_tokens": 0, None: 0})
    examples: dict[tuple[str, int | None, str, int], tuple[str, int, int]] = {}
    predictor: Predictor | None = None
    geo = _Geometry(opts, opts.block_size)
    tick = _ticker(progress, "predicting")
    t_first: float | None = None
    t_last: float | None = None
    sizes: list[int] = []
    reasons: Counter[str] = Counter()
    measured = Comparison()
    kept = Kept()

    skipped = Skipped()

    fork = opts.render_ahead and first_pass is None and opts.workers <= 1 and renderer is not None and can_fork()
    read = 0

    def render(r: LogRequest) -> Prepared | None:
        nonlocal read
        if ahead and ahead[0].streaming and renderer is not None and renderer.tokenizing_whole():
            ahead[0].close()  # the tokenizer takes both cores: a second process rendering only competes
        p = ahead[0].take(r) if ahead else None
        if p is not None:
            prep.admit(r)
        else:
            p = _rendered(prep, r, skipped)
        read += 1
        if fork and not ahead and prep.date_checked and can_fork():  # the date found: the renders go ahead
            ahead.append(RenderAhead(paths, opts.sample, prep, read, _packed_rewrites(renderer)))
        if p is not None and not sizes:
            sizes.append(prep.block_size)  # the predictor's: the block size once the first request is read
        return p

    requests = sampled(read_requests(paths, skipped), opts.sample)
    pool_notes: list[str] = []
    stream: Iterator[list[Prepared]]
    if first_pass is not None:  # on a Ray cluster (it reads the files itself)
        stream = (_encoded(prep, batch) for batch in first_pass(paths, opts, prep, render, skipped))
    elif opts.workers > 1 and renderer is not None:
        from .workers import prepared_in_pool
        stream = _grouped(prepared_in_pool(requests, prep, skipped, opts.workers, pool_notes), BATCH_REQUESTS)
    else:  # Python on this thread, the tokenizer's calls on another, ahead of it (ahead.py)
        if fork:  # the lines after the fork read and parsed by the forked process only
            requests = read_then_ahead(paths, opts.sample, skipped, ahead)
        stream = overlapped(_batches(requests, render), lambda b, run: (b, prep.begin_encode(b, run)),
                            lambda x: _finished(prep, *x), lambda x: prep.drop(x[1].state))
    for batch in stream:
        if predictor is None:
            sizes.append(prep.block_size)  # (the pool's stream does not call render)
            predictor = Predictor(sizes[0], opts.gpu_blocks)
            geo = _Geometry(opts, sizes[0])
        hs = [p.hashed for p in batch if p.hashed is not None]
        assert len(hs) == len(batch)
        outcomes = predictor.serve_many(hs)  # every request of the batch looked up at once
        spill.write_many(hs, outcomes)
        lm_got = _lmcache_many(lm, batch)
        for p, o, got in zip(batch, outcomes, lm_got, strict=True):
            r = p.request
            if r.arrival is not None:
                t_first = r.arrival if t_first is None else min(t_first, r.arrival)
                t_last = r.arrival if t_last is None else max(t_last, r.arrival)
            geo.serve(prep, p)
            totals.add(o)
            out_sources[r.output_source] += 1
            lm_hits = None if got is None or lm_hits is None else lm_hits + got
            miss = miss_of(o, predictor.block_size)
            if p.text is not None and p.lines is not None:
                if hist is None and renderer is not None:
                    hist = HistoryFinder(renderer, predictor.block_size)
                missed = o.cached_unlimited < o.hittable
                hf = hist.observe(r, p.text, missed=missed, prompt_tokens=o.prompt_tokens,
                                  cached=o.cached_unlimited, hittable=o.hittable,
                                  first_block=o.first_miss_block, hashes=p.message_hashes) \
                    if hist is not None else None
                # a turn the template rewrote explains the miss: no line finding counts it too
                seen = finder.observe(p.text, p.lines, o.first_miss_block, missed, r.where, compare=hf is None,
                                      hashed=p.line_hashes)
                f = hf or seen.finding
                li = p.lines.line_at(f.place) if f is not None else None
                if f is not None and li is not None and f.key not in examples and len(examples) < MAX_EXAMPLES:
                    examples[f.key] = (p.text, li.start, li.end)  # a request holding the line (not one without it)
                span = hist.span if hf is not None and hist is not None else None
                if span is not None and span[0] not in examples and len(examples) < MAX_EXAMPLES:
                    examples[span[0]] = (p.text, span[1], span[2])  # the line where it parts from the turn as then
                miss = miss_of(o, predictor.block_size, f, seen.divergence)
                if finder.findings or (hist is not None and hist.findings):  # a fix pass will run: it reuses renders
                    if ahead and ahead[0].alive:
                        ahead[0].keep_renders()  # kept where they are made
                    else:
                        kept.put(p)
            reasons[miss.reason] += 1
            measured.add(r.where, o.prompt_tokens, o.cached, r.measured_prompt_tokens, r.measured_cached_tokens,
                         miss.reason)
            if on_request is not None:
                on_request(r, o, miss)
            tick(totals.requests)
    if progress is not None:
        progress("predicted", totals.requests)
    if not totals.requests and (skipped.errors or skipped.unfinished):
        raise KvplanError("no request could be read: " + "; ".join(skipped.notes()), source=str(paths[0]))
    notes = list(prep.notes) + skipped.notes()
    if opts.gpu_blocks is not None:
        src = out_sources
        notes.append(f"output lengths (the blocks a request holds while decoding): {src['logged']:,} logged, "
                     f"{src['max_tokens']:,} taken from max_tokens (a bound, not the length: those requests "
                     f"are counted holding more blocks than they did), {src[None]:,} unknown (1 token)")
    if lm_hits is None:
        notes.append("LMCache's hit rate: not known from block ids (its chunks cannot be rebuilt from them): null")
    if totals.unfit:
        notes.append(f"{totals.unfit} request(s) need more blocks than the pool holds (vLLM refuses them): "
                     "counted as misses")
    keys_held = (len(predictor.unlimited.keys) if predictor is not None else 0) + len(lm.keys) + geo.keys()
    # the first pass's caches are done: their keys freed before the fix pass's fill (the peak of memory)
    predictor = None
    lm.keys = KeySet()
    geo.preds.clear()
    remedies = hist.remedies if hist is not None else {}
    found = sorted([*finder.findings.values(), *(hist.findings.values() if hist is not None else ())],
                   key=lambda f: (-f.requests_affected, f.key[1:], f.kind))
    results: list[FindingResult] = []
    fixed: Totals | None = None
    busted = 0
    if found:
        variants: list[Variant] = []
        owner: list[int] = []  # per variant, the finding (its index in found) it replays
        for i, f in enumerate(found[:opts.max_fixes]):
            for rm in remedies.get(f.key, [None]) if f.change is not None else [None]:
                variants.append(Variant([] if f.change is not None else [f], rm))
                owner.append(i)
        rewritten = [f for f in found if f.change is not None]
        rm_all = next((rm for f in rewritten for rm in remedies.get(f.key, []) if rm == DROP),
                      next((rm for f in rewritten for rm in remedies.get(f.key, [])), None))
        every = Variant([f for f in found if f.change is None], rm_all)  # everything fixed: the last replay
        if every in variants:  # one finding's replay already is it: moved last, not replayed twice
            i = variants.index(every)
            variants.append(variants.pop(i))
            owner.append(owner.pop(i))
        else:
            variants.append(every)
        spill.rewind()
        spec = FixSpec(tuple(paths), opts, prep.block_size, tuple(variants), totals.requests,
                       (prep.date, prep.date_checked))
        vt, busted = _fix_pass(spec, renderer, spill, progress, kept, ahead[0] if ahead else None)
        for i, f in enumerate(found[:opts.max_fixes]):
            mine = [(variants[v].remedy, vt[v]) for v in range(len(owner)) if owner[v] == i]
            if f.change is None:
                results.append(FindingResult(f, mine[0][1]))
                continue
            done: list[tuple[Remedy, Totals | None]] = [(rm, t) for rm, t in mine if rm is not None]
            best = max((t for _, t in done if t is not None), key=lambda t: t.hit_rate or 0.0, default=None)
            results.append(FindingResult(f, best, done))
        results += [FindingResult(f, None) for f in found[opts.max_fixes:]]
        fixed = vt[-1]
        if len(found) > opts.max_fixes:
            notes.append(f"{len(found)} findings: the first {opts.max_fixes} recomputed one by one (the others' "
                         "tokens_lost and hit_rate_if_fixed are null), all of them together")
    partial = totals.prompt_tokens - totals.hittable
    evicted = totals.cached_unlimited - totals.cached
    cold = totals.hittable - totals.cached_unlimited - busted
    notes.append("one request at a time in arrival order: requests in flight together (concurrency) are not "
                 "modelled; multimodal inputs are not supported")
    notes += list(dict.fromkeys([*(renderer.piece_notes() if renderer is not None else []), *pool_notes]))
    notes += geo.notes()
    return CheckResult(opts, prep.block_size, totals, fixed, results,
                       {"cold": cold, "evicted": evicted, "busted": busted, "partial": partial}, lm_hits, notes,
                       {k: v for k, v in examples.items() if any(f.key == k for f in found[:1])}, t_first, t_last,
                       keys_held,
                       geo.rows(totals), {str(k): v for k, v in reasons.most_common()}, measured,
                       ahead[0].taken if ahead else 0)


class _Geometry:
    """The geometry table's replays (``CheckOptions.geometry``): one :class:`Predictor` per block
    size other than the check's own (``block_size``), each fed the request's token ids hashed
    at its size (``hashed64``: only full blocks get keys, so a partial last block never hits),
    with the same capacity in tokens (``geometry.pool_blocks``). The check's own size is its
    main prediction. A trace of block ids cannot be re-hashed at another size: its rows are
    null."""

    def __init__(self, opts: CheckOptions, block_size: int):
        self.block_size = block_size
        self.gpu_blocks = opts.gpu_blocks
        self.capacity = opts.gpu_blocks * block_size if opts.gpu_blocks is not None else None
        self.preds: dict[int, Predictor] = {}
        self.totals: dict[int, Totals] = {}
        self.small: list[int] = []
        self.traced = False
        for s in sorted(set(opts.geometry) - {block_size}):
            gb = pool_blocks(self.capacity, s) if self.capacity is not None else None
            if gb is not None and gb < 2:
                self.small.append(s)  # vLLM needs the null block and one more
                continue
            self.preds[s] = Predictor(s, gb)
            self.totals[s] = Totals()
        self.sizes = sorted({*opts.geometry, block_size}) if opts.geometry else []

    def serve(self, prep: Preparer, p: Prepared) -> None:
        if not self.preds:
            return
        if p.ids is None:
            self.traced = True
            return
        extra = prep.extra(p.request)
        for s, pred in self.preds.items():
            self.totals[s].add(pred.serve(hashed64(p.ids, s, extra, p.request.output_tokens, p.digests)))

    def keys(self) -> int:
        return sum(len(p.unlimited.keys) for p in self.preds.values())

    def notes(self) -> list[str]:
        if not self.sizes:
            return []
        out = [f"block geometry: the log replayed at block sizes {', '.join(map(str, self.sizes))}, each with "
               + (f"the check's capacity in tokens ({self.capacity:,} = {self.gpu_blocks:,} blocks x "
                  f"{self.block_size})" if self.capacity is not None else "an unlimited cache")
               + "; only full blocks are cached (a prompt shorter than one block never hits)"]
        if self.small:
            out.append(f"block geometry: {self.capacity:,} tokens hold fewer than 2 blocks of "
                       f"{', '.join(map(str, self.small))} tokens (vLLM needs its null block and one more): null")
        if self.traced:
            out.append("block geometry: a trace of block ids cannot be re-hashed at another block size: only the "
                       f"check's own ({self.block_size}) is given")
        return out

    def rows(self, main: Totals) -> list[GeometryRow]:
        out = []
        for s in self.sizes:
            gb = pool_blocks(self.capacity, s) if self.capacity is not None else None
            if s == self.block_size:
                out.append(GeometryRow(s, self.gpu_blocks, main))
            elif s in self.small:
                out.append(GeometryRow(s, gb, None, "the capacity holds fewer than 2 blocks"))
            elif self.traced:
                out.append(GeometryRow(s, gb, None, "a trace of block ids cannot be re-hashed at another block size"))
            else:
                out.append(GeometryRow(s, gb, self.totals[s]))
        return out


_Rewritten = tuple[list[list[int | None]], list[tuple[Prepared, str]]]
"""A fix-pass batch: per request, per variant, where its rewritten text is in the list (None:
unchanged); the list of (request, rewritten text) to key."""


@dataclass(frozen=True)
class FixSpec:
    """What the fix pass's rewrites depend on (picklable: sent to the process rendering ahead,
    ``forked.RenderAhead.fix``): the files, the options, the block size, the variants, the
    requests the first pass read, and the server date it found (``Preparer.date``, ``date_checked``)."""

    paths: tuple[Path, ...]
    opts: CheckOptions
    block_size: int
    variants: tuple[Variant, ...]
    requests: int
    date: tuple[tuple[str, str, tuple[int | None, str, int]] | None, bool] | None

    def preparer(self, renderer: Renderer | None) -> Preparer:
        """A Preparer at the first pass's block size, with the date it found (not found again)."""
        o = self.opts
        prep = Preparer(renderer, CheckOptions(self.block_size, o.gpu_blocks, o.lmcache_chunk, o.lora))
        prep.block_size = self.block_size
        if self.date is not None:
            prep.date, prep.date_checked = self.date
        return prep


def _rewrites(spec: FixSpec, renderer: Renderer | None, reuse: Kept) -> Iterator[_Rewritten]:
    """The fix pass's rewrites, per batch: for each request, under each variant, the place in
    ``items`` of its text (None: unchanged), and ``items``: the changed texts to key. Every
    request rendered again (rewritten first by the variant's remedy of a template's history, if
    any: ``history.remedied``), or taken back from ``reuse``; each variant's findings fixed in it
    (``busters.apply_fix``). Made here or in the process rendering ahead (``forked.py``)."""
    opts = spec.opts
    prep = spec.preparer(renderer)
    carried = [Carried() for _ in spec.variants]  # per fix: what each conversation's messages were sent with
    skipped = Skipped()  # the same lines as the first pass's: the files are read the same way

    def render(r: LogRequest | Prepared) -> Prepared | None:
        if isinstance(r, Prepared):  # made again from what was kept, not read
            return r
        text = reuse.take(r)
        if text is not None:
            return Prepared(r, None, None, text, prep.lines(r, text), 0)
        p = _rendered(prep, r, skipped)
        if p is not None and p.text is not None:
            reuse.seen(r, p.text)  # a kept text may continue it
        return p

    def read() -> Iterator[LogRequest]:
        return sampled(read_requests(spec.paths, skipped), opts.sample)

    # a remedy rewrites a request's messages: then every request is read
    requests = read() if any(v.remedy is not None for v in spec.variants) else reuse.requests(read, spec.paths)
    m = 0
    for batch in _batches(requests, render):
        rows: list[list[int | None]] = []
        todo: dict[tuple[int, str], int] = {}  # (request in the batch, rewritten text) -> its place in `items`
        items: list[tuple[Prepared, str]] = []
        for b, p in enumerate(batch):
            if m + b >= spec.requests:
                raise KvplanError("the log changed while it was read (more requests on the second pass)",
                                  source=p.request.where)
            row: list[int | None] = []
            for v, kept in zip(spec.variants, carried, strict=True):
                q = _remedied(prep, p, v.remedy)
                t = (apply_fix(q.text, q.lines, v.findings, kept) if q.text is not None and q.lines is not None
                     else None)
                if t is None or t == p.text:
                    row.append(None)  # unchanged: the first pass's keys
                    continue
                if (b, t) not in todo:
                    todo[(b, t)] = len(items)
                    items.append((p, t))
                row.append(todo[(b, t)])
            rows.append(row)
        m += len(batch)
        yield rows, items


def _fix_pass(spec: FixSpec, renderer: Renderer | None, spill: _Spill, progress: Progress | None,
              reuse: Kept | None = None, ahead: RenderAhead | None = None) -> tuple[list[Totals], int]:
    """The second pass: each variant of ``spec`` predicted in its own caches, over the rewrites
    (:func:`_rewrites`) made by ``ahead``'s process when it has kept the renders, else here
    (taking back the renders ``reuse`` kept; all of it again here when that process stops
    early). A request whose text a variant leaves unchanged reuses its first-pass keys from
    ``spill`` (not tokenized again). Returns each variant's totals and the ``busted`` tokens:
    per request, what the last variant (every finding fixed) hits beyond the first pass with an
    unlimited cache, within what the request could hit."""
    opts, variants = spec.opts, spec.variants
    prep = spec.preparer(renderer)  # keys the rewritten texts (the date is the renders' only)

    def replay(source: Iterable[_Rewritten]) -> tuple[list[Totals], int]:
        preds = [Predictor(spec.block_size, opts.gpu_blocks) for _ in variants]
        totals = [Totals() for _ in variants]
        tick = _ticker(progress, "recomputing with the findings fixed")
        n = busted = 0
        for rows, redone in overlapped(source, lambda x, run: (x[0], prep.begin_retokenize(x[1], run)),
                                       lambda y: (y[0], prep.finish_retokenize(y[1])), lambda y: prep.drop(y[1])):
            first = [spill.read() for _ in rows]  # per request: its first-pass keys, hittable and unlimited hits
            for i, pred in enumerate(preds):  # each variant's requests of the batch looked up at once
                hs = [base if (k := row[i]) is None else redone[k]
                      for row, (base, _, _) in zip(rows, first, strict=True)]
                for o, (_, hit, u) in zip(pred.serve_many(hs), first, strict=True):
                    totals[i].add(o)
                    if i == len(variants) - 1:
                        busted += min(max(0, o.cached_unlimited - u), hit - u)
            n += len(rows)
            tick(n)
        return totals, busted

    if ahead is not None and ahead.alive:  # rewritten in the process rendering ahead, keyed and replayed here
        try:
            return replay(_unpacked(ahead.fix(spec)))
        except ChildFailed:  # it stopped early: all of it again here (what it replayed is dropped)
            spill.rewind()
    return replay(_rewrites(spec, renderer, reuse if reuse is not None else Kept(0)))


_Packed = tuple[list[list[int | None]], list[tuple[tuple[tuple[Any, ...], None, object], Any]]]


def _first_variants(rows: list[list[int | None]]) -> dict[int, int]:
    """Per changed text of a fix-pass batch (its place in the batch's items), the first variant
    it is the text of: which of its conversation's texts it follows."""
    first: dict[int, int] = {}
    for row in rows:
        for v, k in enumerate(row):
            if k is not None:
                first.setdefault(k, v)
    return first


def _packed(x: _Rewritten, mirror: Mirror) -> _Packed:
    """A fix-pass batch as sent from the forked process: each changed text with its request's
    light fields only (``read.light``: what keying it takes, its kind, conversation, extra keys
    and output length; not its messages), the text as what it adds to the last one of its
    conversation under its variant (``delta.Mirror``)."""
    rows, items = x
    first = _first_variants(rows)
    out = []
    for i, (p, t) in enumerate(items):
        conv = conversation(p.request)
        out.append((light(p.request, conv), mirror.send((first[i], conv), t)))
    return rows, out


def _unpacked(stream: Iterable[_Packed]) -> Iterator[_Rewritten]:
    mirror = Mirror()  # the forked process's, fed the same texts
    for rows, items in stream:
        first = _first_variants(rows)
        yield rows, [(Prepared(SlimRequest.of(*r), None, None), mirror.received((first[i], r[2]), t))
                     for i, (r, t) in enumerate(items)]


def _packed_rewrites(renderer: Renderer | None) -> Callable[[FixSpec, Kept], Iterator[_Packed]]:
    """The fix pass's rewrites as the process rendering ahead makes them (``forked.Fix``)."""
    def fix(spec: FixSpec, kept: Kept) -> Iterator[_Packed]:
        mirror = Mirror()
        return (_packed(x, mirror) for x in _rewrites(spec, renderer, kept))
    return fix


def _remedied(prep: Preparer, p: Prepared, remedy: Remedy | None) -> Prepared:
    """``p`` rewritten by ``remedy`` and rendered again (``p`` itself when there is none, it
    changes nothing, or the template refuses the rewritten request)."""
    rr = history.remedied(p.request, remedy) if remedy is not None else None
    if rr is None:
        return p
    try:
        return prep.prepare(rr, encode=False)
    except RequestRefused:
        return p


def _encoded(prep: Preparer, batch: list[Prepared]) -> list[Prepared]:
    prep.encode_all(batch)
    return batch


def _finished(prep: Preparer, batch: list[Prepared], t: Tokenizing) -> list[Prepared]:
    prep.finish_encode(t)
    return batch


def _rendered(prep: Preparer, r: LogRequest, skipped: Skipped) -> Prepared | None:
    """``r`` rendered, or None when the request cannot be (vLLM would refuse it): recorded in
    ``skipped`` with its file and line, within the run's budget of bad lines."""
    try:
        return prep.prepare(r, encode=False)
    except RequestRefused as e:
        skipped.add(e)
        return None
