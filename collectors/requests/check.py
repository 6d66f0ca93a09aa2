"""``kvplan prompts check``: a request log in, the predicted prefix-cache hits, the cache-busters
and what fixing them is worth out. Two streaming passes over the files (the second only when
there are findings): memory is bounded by the caches' keys (one 32-byte key per distinct block),
four integers per request and the buster finder's window, not by the files' size. Prompt text
is held in memory one request at a time (plus the finder's window) and never written anywhere.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ...models.core.errors import KvplanError
from ...models.prompts.busters import Finder, Finding, LineInfo, apply_fix, line_map
from ...models.prompts.hashing import ROOT, ExtraKeys, chunk_hashes, hash_block
from ...models.prompts.predict import Hashed, LmcacheUnlimited, Outcome, Predictor, Totals, hashed
from .read import LogRequest, read_requests
from .render import Renderer

Progress = Callable[[str, int], None]
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


@dataclass
class Prepared:
    """One request ready for the caches: its keys and (text prompts) its text and line map."""

    request: LogRequest
    hashed: Hashed | None
    ids: np.ndarray | None
    text: str | None = None
    lines: list[LineInfo] | None = None


@dataclass
class FindingResult:
    """A finding and the totals of the replay with it alone fixed (None: not recomputed, past
    ``max_fixes``)."""

    finding: Finding
    totals: Totals | None


@dataclass
class CheckResult:
    options: CheckOptions
    block_size: int
    totals: Totals
    fixed: Totals | None
    findings: list[FindingResult]
    missed_by_cause: dict[str, int]
    lmcache_hit_tokens: int
    notes: list[str] = field(default_factory=list)
    examples: dict[tuple[str, int | None, str, int], tuple[str, int, int]] = field(default_factory=dict, repr=False)
    """Per finding key, the first request it broke: (rendered text, start and end of the divergent
    line). Memory only, for the dashboard's highlighted example; never in ``as_json``."""
    first_arrival: float | None = None
    """Earliest and latest arrival time in the log (unix seconds), when it has them."""
    last_arrival: float | None = None

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
            "block_size": self.block_size,
            "gpu_blocks": self.options.gpu_blocks,
            "lmcache": {"chunk_tokens": self.options.lmcache_chunk,
                        "hit_rate_unlimited": self.lmcache_hit_tokens / t.prompt_tokens if t.prompt_tokens else None},
            "notes": list(self.notes),
        }


def finding_json(fr: FindingResult, base: Totals) -> dict[str, Any]:
    f = fr.finding
    return {"kind": f.kind, "message_index": f.message_index, "role": f.role, "line": f.line,
            "example": f.example, "requests_affected": f.requests_affected,
            "tokens_lost": max(0, fr.totals.cached - base.cached) if fr.totals is not None else None,
            "hit_rate_if_fixed": fr.totals.hit_rate if fr.totals is not None else None,
            "first_block": f.first_block, "template": f.template, "fix": f.fix}


class Preparer:
    """Renders, tokenizes and hashes requests with one tokenizer and block size."""

    def __init__(self, renderer: Renderer | None, opts: CheckOptions):
        self.renderer = renderer
        self.opts = opts
        self.block_size = opts.block_size
        self.trace_block: int | None = None
        self.notes: list[str] = []
        self.date: tuple[str, str, tuple[int | None, str, int]] | None = None
        self.date_checked = False
        self.dated = 0

    def extra(self, r: LogRequest) -> ExtraKeys:
        return ExtraKeys(lora=r.model if r.model in self.opts.lora else None, cache_salt=r.cache_salt)

    def prepare(self, r: LogRequest, *, encode: bool = True) -> Prepared:
        """Render (text prompts) and, unless ``encode`` is False, tokenize and hash ``r``."""
        if r.kind == "blocks":
            return Prepared(r, self._blocks(r), None)
        if r.kind == "completion" and r.prompt_ids is not None:
            ids = np.asarray(r.prompt_ids, dtype=np.int64)
            return Prepared(r, hashed(ids, self.block_size, self.extra(r), output_tokens=r.output_tokens), ids)
        if self.renderer is None:
            raise KvplanError("a text prompt needs the model's tokenizer: give --tokenizer DIR (or a model id in "
                              "the local Hugging Face cache)", source=r.where)
        text = self.renderer.text(r)
        contents: list[tuple[str, str | None]] = (
            [(m["role"], m.get("content")) for m in r.messages] if r.kind == "chat" else [("prompt", r.prompt)])
        names = [str((t.get("function") or {}).get("name", "")) for t in (r.tools or []) if isinstance(t, dict)]
        lines = line_map(text, contents, names)
        if r.kind == "chat":
            dated = self._server_date(r, text, lines)
            if dated is not None:
                text = dated
                lines = line_map(text, contents, names)
        p = Prepared(r, None, None, text, lines)
        if encode:
            self.encode(p)
        return p

    def encode(self, p: Prepared) -> Hashed:
        """``p``'s token ids and keys from its text (once)."""
        if p.hashed is None:
            assert self.renderer is not None and p.text is not None
            p.ids = np.asarray(self.renderer.encode(p.text, add_special_tokens=p.request.kind == "completion"),
                               dtype=np.int64)
            p.hashed = hashed(p.ids, self.block_size, self.extra(p.request), output_tokens=p.request.output_tokens)
        return p.hashed

    def _server_date(self, r: LogRequest, text: str, lines: list[LineInfo]) -> str | None:
        """A chat template that writes today's date (``strftime_now``) renders, in vLLM, the date
        the request arrived: the text with that date in place of today's, or None. Found once, on
        the first chat request, in the template's own lines."""
        if not self.date_checked:
            self.date_checked = True
            self.date = template_date(text, lines)
            if self.date is not None:
                place = self.date[2]
                self.notes.append(f"the chat template writes the server's date (template line {place[2]}): vLLM "
                                  "renders the day a request arrives, so cached prefixes after it are lost once a "
                                  "day" + ("" if r.arrival is not None else "; the log has no arrival times, so the "
                                           "prediction renders every request with today's date"))
        if self.date is None or r.arrival is None:
            return None
        fmt, today, place = self.date
        day = datetime.fromtimestamp(r.arrival, tz=UTC).strftime(fmt)
        for li in lines:
            if li.place == place and today in text[li.start:li.end]:
                self.dated += 1
                return text[:li.start] + text[li.start:li.end].replace(today, day, 1) + text[li.end:]
        return None

    def retokenize(self, p: Prepared, text: str) -> Hashed:
        assert self.renderer is not None
        ids = self.renderer.encode(text, add_special_tokens=p.request.kind == "completion")
        return hashed(ids, self.block_size, self.extra(p.request), output_tokens=p.request.output_tokens)

    def _blocks(self, r: LogRequest) -> Hashed:
        assert r.block_ids is not None
        b = r.block_tokens
        if self.trace_block is None:
            self.trace_block = b
            if self.block_size % b:
                self.notes.append(f"the trace's blocks are {b} tokens, which do not divide the block size "
                                  f"{self.block_size}: predicted at {b}-token blocks")
                self.block_size = b
        elif self.trace_block != b:
            raise KvplanError(f"blocks of {b} tokens after blocks of {self.trace_block}: one trace format at a "
                              "time", source=r.where)
        g = self.block_size // b
        full = r.input_length // self.block_size
        keys: list[bytes] = []
        prev = ROOT
        extra = self.extra(r)
        for i in range(full):
            prev = hash_block(prev, r.block_ids[i * g:(i + 1) * g], extra.for_block(i))
            keys.append(prev)
        return Hashed(r.input_length, tuple(keys), max(1, r.output_tokens or 1))


DATE_FORMATS = ("%d %B %Y", "%d %b %Y", "%Y-%m-%d", "%B %d, %Y", "%b %d, %Y", "%A, %B %d, %Y", "%m/%d/%Y",
                "%d/%m/%Y", "%Y/%m/%d", "%d.%m.%Y")
"""strftime formats a template's date is looked for in (Llama 3.1's "Today Date: 26 Jul 2024" is %d %b %Y)."""


def template_date(text: str, lines: Sequence[LineInfo]) -> tuple[str, str, tuple[int | None, str, int]] | None:
    """(format, today's date in it, the line's place) when a template line holds today's date."""
    days = {datetime.now(), datetime.now(UTC)}
    for li in lines:
        if li.role != "template":
            continue
        seg = text[li.start:li.end]
        for fmt in DATE_FORMATS:
            for d in days:
                today = d.strftime(fmt)
                if today in seg:
                    return fmt, today, li.place
    return None


def _lmcache(lm: LmcacheUnlimited, p: Prepared) -> int:
    if p.ids is None:  # a trace of block ids: LMCache chunks cannot be rebuilt from them
        return 0
    keys = chunk_hashes(p.ids, lm.chunk_size, ExtraKeys(), partial=True)
    full = len(p.ids) // lm.chunk_size
    return lm.serve(keys[:full], keys[full] if len(keys) > full else None)


def _ticker(progress: Progress | None, stage: str) -> Callable[[int], None]:
    last = [time.monotonic()]

    def tick(n: int) -> None:
        if progress is not None and time.monotonic() - last[0] >= 2.0:
            last[0] = time.monotonic()
            progress(stage, n)
    return tick


def check(paths: Sequence[Path], renderer: Renderer | None, opts: CheckOptions = CheckOptions(), *,
          progress: Progress | None = None,
          on_request: Callable[[LogRequest, Outcome], None] | None = None) -> CheckResult:
    """Predict, find busters, recompute with them fixed; see the module docstring."""
    if opts.block_size < 1 or opts.lmcache_chunk < 1 or (opts.gpu_blocks is not None and opts.gpu_blocks < 2):
        raise KvplanError("block size and chunk must be at least 1, gpu blocks at least 2", source="options")
    prep = Preparer(renderer, opts)
    totals = Totals()
    finder = Finder()
    lm = LmcacheUnlimited(opts.lmcache_chunk)
    lm_hits = 0
    examples: dict[tuple[str, int | None, str, int], tuple[str, int, int]] = {}
    per: dict[str, array[int]] = {k: array("q") for k in ("P", "H", "U", "C")}
    predictor: Predictor | None = None
    tick = _ticker(progress, "predicting")
    t_first: float | None = None
    t_last: float | None = None
    for r in read_requests(paths):
        if r.arrival is not None:
            t_first = r.arrival if t_first is None else min(t_first, r.arrival)
            t_last = r.arrival if t_last is None else max(t_last, r.arrival)
        p = prep.prepare(r)
        if predictor is None:
            predictor = Predictor(prep.block_size, opts.gpu_blocks)
        o = predictor.serve(prep.encode(p) if p.hashed is None else p.hashed)
        totals.add(o)
        for k, v in (("P", o.prompt_tokens), ("H", o.hittable), ("U", o.cached_unlimited), ("C", o.cached)):
            per[k].append(v)
        lm_hits += _lmcache(lm, p)
        if p.text is not None and p.lines is not None:
            f = finder.observe(p.text, p.lines, o.first_miss_block, o.cached_unlimited < o.hittable)
            if f is not None and f.key not in examples and len(examples) < MAX_EXAMPLES:
                li = next(x for x in p.lines if x.place == (f.message_index, f.role, f.line))
                examples[f.key] = (p.text, li.start, li.end)
        if on_request is not None:
            on_request(r, o)
        tick(totals.requests)
    if progress is not None:
        progress("predicted", totals.requests)
    notes = list(prep.notes)
    if totals.unfit:
        notes.append(f"{totals.unfit} request(s) need more blocks than the pool holds (vLLM refuses them): "
                     "counted as misses")
    found = sorted(finder.findings.values(), key=lambda f: (-f.requests_affected, f.key[1:], f.kind))
    results: list[FindingResult] = []
    fixed: Totals | None = None
    busted = 0
    if found:
        variants = [[f] for f in found[:opts.max_fixes]]
        if len(found) > 1:
            variants.append(found)
        fixed_u = array("q")
        vt = _fix_pass(paths, renderer, opts, prep.block_size, variants, fixed_u, progress)
        results = [FindingResult(f, vt[i]) for i, f in enumerate(found[:opts.max_fixes])]
        results += [FindingResult(f, None) for f in found[opts.max_fixes:]]
        fixed = vt[-1]
        if len(found) > opts.max_fixes:
            notes.append(f"{len(found)} findings: the first {opts.max_fixes} recomputed one by one (the others' "
                         "tokens_lost and hit_rate_if_fixed are null), all of them together")
        for u, h, f_u in zip(per["U"], per["H"], fixed_u, strict=True):
            busted += min(max(0, f_u - u), h - u)
    partial = sum(per["P"]) - sum(per["H"])
    evicted = sum(per["U"]) - sum(per["C"])
    cold = sum(per["H"]) - sum(per["U"]) - busted
    notes.append("one request at a time in arrival order: requests in flight together (concurrency) are not "
                 "modelled; multimodal inputs are not supported")
    return CheckResult(opts, prep.block_size, totals, fixed, results,
                       {"cold": cold, "evicted": evicted, "busted": busted, "partial": partial}, lm_hits, notes,
                       {k: v for k, v in examples.items() if any(f.key == k for f in found[:1])}, t_first, t_last)


def _fix_pass(paths: Sequence[Path], renderer: Renderer | None, opts: CheckOptions, block_size: int,
              variants: list[list[Finding]], fixed_u: array[int], progress: Progress | None) -> list[Totals]:
    """The second pass: every request rendered again, each variant's findings fixed in it, each
    variant predicted in its own caches. ``fixed_u`` gets the last variant's unlimited hits per
    request (for the ``busted`` cause)."""
    prep = Preparer(renderer, CheckOptions(block_size, opts.gpu_blocks, opts.lmcache_chunk, opts.lora))
    prep.block_size = block_size
    preds = [Predictor(block_size, opts.gpu_blocks) for _ in variants]
    totals = [Totals() for _ in variants]
    tick = _ticker(progress, "recomputing with the findings fixed")
    n = 0
    for r in _requests(paths):
        p = prep.prepare(r, encode=False)
        for i, (v, pred) in enumerate(zip(variants, preds, strict=True)):
            h = p.hashed
            if p.text is not None and p.lines is not None:
                t = apply_fix(p.text, p.lines, v)
                h = prep.retokenize(p, t) if t != p.text else prep.encode(p)
            assert h is not None
            o = pred.serve(h)
            totals[i].add(o)
            if i == len(variants) - 1:
                fixed_u.append(o.cached_unlimited)
        n += 1
        tick(n)
    return totals


def _requests(paths: Sequence[Path]) -> Iterator[LogRequest]:
    yield from read_requests(paths)
