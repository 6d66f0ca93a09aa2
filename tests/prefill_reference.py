"""The prefill fit and the priced window as they were computed per interval, in Python, before
they ran over columns (``kvplan.models.prefill.table``): the reference the columnar code is
compared against (tests/test_prefill_table.py). Copied unchanged from 8834333's
models/prefill/interval.py (``merge``, ``rounds``), nnls.py (``design``, ``Estimator``),
fit.py (``fit_prefill_cost`` and its stages) and window.py (``PricedWindow.from_intervals`` as
``priced_window``, ``resample_hit_and_load``, ``peak_hour_rate``); the numeric cores they call
(``nnls_fit``, ``huber_weights``, ``weighted_spread``, the constants) are the package's own.
Also 8834333's app/data/prefill.py reader (``prefill_intervals``: one ``Interval`` per row of
the named queries). Used only by tests."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from kvplan.app.data.prefill import NAMES
from kvplan.app.data.window import rolled_days
from kvplan.models.core.timeutil import aware_utc, naive_utc
from kvplan.models.inputs.deployment import DeploymentFacts
from kvplan.models.metrics.spans import plan_spans
from kvplan.models.metrics.spellings import cached_rule
from kvplan.models.prefill.fit import (
    BAND,
    BOOTSTRAP,
    IDENTIFY_FIX,
    LONG_INTERVAL,
    MIN_CONNECTED_SPREAD,
    MIN_ROWS,
    MIN_SPREAD,
    SEED,
    SUPPORT,
    TERMS,
    UNITS,
    CostPart,
    CostStatus,
    PrefillCostModel,
    draw_percentile,
    weighted_spread,
)
from kvplan.models.prefill.interval import Interval, engine_prefill_seconds
from kvplan.models.prefill.nnls import ALONE_FLOOR, LMCACHE_TERMS, huber_weights, nnls_fit
from kvplan.models.prefill.window import PEAK_HOUR_MIN_COVER_S, RESAMPLE_SEED, RESAMPLES, PricedWindow, merge_spans
from kvplan.sql.db import Source


def merge(rows: Sequence[Interval]) -> Interval:
    """One row from several targets' intervals of the same scrape round (sums)."""
    def opt_sum(name: str) -> float | None:
        vals = [getattr(r, name) for r in rows if getattr(r, name) is not None]
        return sum(vals) if vals else None

    buckets: dict[float, float] = {}
    for r in rows:
        for le, c in r.step_buckets:
            buckets[le] = buckets.get(le, 0.0) + c
    return Interval(
        t_start=min(r.t_start for r in rows), t_end=max(r.t_end for r in rows),
        requests=sum(r.requests for r in rows),
        prefill_seconds=sum(r.prefill_seconds for r in rows),
        computed_tokens=sum(r.computed_tokens for r in rows),
        prompt_tokens=(sum(r.request_prompt for r in rows)
                       if any(r.prompt_tokens is not None for r in rows) else None),
        cached_tokens=opt_sum("cached_tokens"), external_tokens=opt_sum("external_tokens"),
        stored_tokens=opt_sum("stored_tokens"), lookup_seconds=opt_sum("lookup_seconds"),
        lookups=opt_sum("lookups"),
        engines=sum(r.engines for r in rows),
        inference_seconds=opt_sum("inference_seconds"),
        generation_tokens=opt_sum("generation_tokens"),
        step_buckets=tuple(sorted(buckets.items())),
        targets=tuple(t for r in rows for t in r.targets), reset=any(r.reset for r in rows))


def rounds(intervals: Iterable[Interval], tolerance_s: float | None = None) -> list[Interval]:
    """Group every target's intervals into scrape rounds (ends within ``tolerance_s``, default
    a quarter of the median interval, at most 2 s; never two intervals of one target) and sum
    each round: deployment-level rows, so LMCache's stores (a separate target) line up with the
    vLLM intervals they belong to."""
    rows = sorted(intervals, key=lambda r: r.t_end)
    if not rows:
        return []
    if tolerance_s is None:
        lengths = sorted(r.seconds for r in rows if r.seconds > 0)
        tolerance_s = min(2.0, 0.25 * lengths[len(lengths) // 2]) if lengths else 0.0
    out, group = [], [rows[0]]
    for r in rows[1:]:
        seen = {t for g in group for t in g.targets}
        if r.t_end - group[0].t_end <= tolerance_s and not seen & set(r.targets):
            group.append(r)
        else:
            out.append(merge(group))
            group = [r]
    out.append(merge(group))
    return out


def design(rows: Sequence[Interval], terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray,
                                                                        np.ndarray]:
    """Per-request means: X (rows x terms), y (engine prefill seconds per request), w."""
    X, y, w = [], [], []
    for r in rows:
        n = r.requests
        t, cached = r.computed_tokens / n, r.request_cached / n
        p = t + cached
        cols = {"fixed": 1.0, "per_token": t, "attention": (p * p - cached * cached) / 2.0,
                "store": (r.stored_tokens or 0.0) / n,
                "load": cached * r.external_share,
                "lmcache_request": min(1.0, (r.lookups or 0.0) / n)}
        X.append([cols[k] for k in terms])
        y.append(engine_prefill_seconds(r)[0] / n)
        w.append(n * max(r.alone_share(), ALONE_FLOOR))
    return np.asarray(X, float), np.asarray(y, float), np.asarray(w, float)


class Estimator:
    """The fit of ``terms`` on ``rows``: one weighted NNLS, or -- with ``plain`` (a mask of
    vLLM-only rows) -- the compute terms on those rows, then LMCache's terms on the other rows'
    excess over them. Huber weights are computed once per stage; ``bootstrap`` resamples rows."""

    def __init__(self, rows: Sequence[Interval], terms: Sequence[str], plain: np.ndarray | None):
        self.X, self.y, w = design(rows, terms)
        self.terms = list(terms)
        self.plain = plain
        self.comp = [j for j, t in enumerate(terms) if t not in LMCACHE_TERMS]
        self.lm = [j for j, t in enumerate(terms) if t in LMCACHE_TERMS]
        if plain is None or not self.lm:
            self.plain = None
            self.h = huber_weights(self.X, self.y, w)
        else:
            self.h = np.ones_like(w)
            Xp = self.X[np.ix_(plain, np.asarray(self.comp))]
            self.h[plain] = huber_weights(Xp, self.y[plain], w[plain])
            beta_c = nnls_fit(Xp, self.y[plain], (w * self.h)[plain])
            resid = self.y - self.X[:, self.comp] @ beta_c
            conn = ~plain
            self.h[conn] = huber_weights(self.X[np.ix_(conn, np.asarray(self.lm))], resid[conn], w[conn])
        self.w = w * self.h

    def fit(self, counts: np.ndarray | None = None) -> np.ndarray:
        if self.plain is None:
            return nnls_fit(self.X, self.y, self.w, counts)
        c = np.ones_like(self.w) if counts is None else counts
        p, q = self.plain, ~self.plain
        beta = np.zeros(len(self.terms))
        if (c[p] > 0).sum() == 0:
            return nnls_fit(self.X, self.y, self.w, counts)
        beta[self.comp] = nnls_fit(self.X[np.ix_(p, np.asarray(self.comp))], self.y[p], self.w[p], c[p])
        resid = self.y - self.X[:, self.comp] @ beta[self.comp]
        if (c[q] > 0).sum():
            beta[self.lm] = nnls_fit(self.X[np.ix_(q, np.asarray(self.lm))], resid[q], self.w[q], c[q])
        return beta

    def bootstrap(self, draws: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        n = len(self.y)
        out = np.empty((draws, len(self.terms)))
        for i in range(draws):
            out[i] = self.fit(np.bincount(rng.integers(0, n, n), minlength=n).astype(float))
        return out


def fit_prefill_cost(intervals: Iterable[Interval], *, history: str,
                     bootstrap: int = BOOTSTRAP, seed: int = SEED,
                     group_rounds: bool = True) -> PrefillCostModel:
    """Fit the prefill cost model on ``intervals`` (one row per target and scrape interval;
    grouped into scrape rounds unless ``group_rounds`` is False). ``history`` says which
    history they are (shown with every figure derived from the model).

    Stages: the rows that can enter; notes on their timers; can the history identify the
    model at all; the candidate terms; one stage or two; which optional terms the bootstrap
    supports; the final fit and its band."""
    raw = list(intervals)
    notes: list[str] = []
    rows = _usable_rows(rounds(raw) if group_rounds else raw, notes)
    if not rows:
        return PrefillCostModel(CostStatus.NO_DATA, (), history, 0, 0.0,
                                reason="no interval with prefilled requests and prefill timing "
                                       "(vllm:request_prefill_time_seconds, "
                                       "vllm:request_prefill_kv_computed_tokens) in the history",
                                fix=IDENTIFY_FIX, notes=tuple(notes))
    _timer_notes(rows, notes)
    t_mean = np.array([r.computed_tokens / r.requests for r in rows])
    w = np.array([r.requests * max(r.alone_share(), ALONE_FLOOR) for r in rows])
    unidentified = _unidentified(rows, t_mean, w, history, notes)
    if unidentified is not None:
        return unidentified
    candidates = _candidate_terms(rows, t_mean, notes)
    plain = _two_stage_mask(rows, candidates, t_mean, w, notes)
    terms = _supported_terms(rows, candidates, plain, bootstrap, seed, notes)
    return _final_fit(rows, terms, plain, history, bootstrap, seed, notes)


def _usable_rows(rows_all: Sequence[Interval], notes: list[str]) -> list[Interval]:
    """Rows with prefilled requests, prefill timing and computed tokens, no counter restart,
    and not much longer than the others."""
    rows = [r for r in rows_all if r.requests >= 1 and r.prefill_seconds > 0
            and r.computed_tokens > 0 and not r.reset]
    lengths = sorted(r.seconds for r in rows)
    if lengths:
        limit = LONG_INTERVAL * lengths[len(lengths) // 2]
        long_rows = [r for r in rows if r.seconds > limit]
        if long_rows:
            notes.append(f"{len(long_rows)} interval(s) longer than {LONG_INTERVAL:g}x the median "
                         f"({limit:,.0f} s) left out of the fit (e.g. a server's start to its first "
                         "scrape)")
            rows = [r for r in rows if r.seconds <= limit]
    skipped_reset = sum(1 for r in rows_all if r.reset and r.requests >= 1)
    if skipped_reset:
        notes.append(f"{skipped_reset} interval(s) with a counter restart left out")
    return rows


def _timer_notes(rows: Sequence[Interval], notes: list[str]) -> None:
    """What the rows' timers stand for: shared engine steps, claims capped at the clock,
    requests that overlapped."""
    co = [engine_prefill_seconds(r) for r in rows]
    shared = sum(1 for _, f, _ in co if f < 1)
    capped = sum(1 for _, _, c in co if c)
    if shared:
        notes.append(f"{shared} interval(s) prefilled several requests per engine step "
                     "(iteration-token histogram): their timers were scaled to engine time")
    if capped:
        notes.append(f"{capped} interval(s) claimed more prefill seconds than interval x "
                     "engines: capped at the engines' time")
    overlapped = sum(1 for r in rows if r.alone_share() < 0.5)
    if overlapped:
        notes.append(f"{overlapped} of {len(rows)} interval(s) ran requests concurrently (most "
                     "decode steps carried several requests): a request's prefill timer then "
                     "spans other requests' steps, so each interval weighs in proportion to how "
                     "often a request had the engine alone")
    if overlapped == len(rows):
        notes.append("every interval ran requests concurrently: the fit rests on overlapping "
                     "timers and leans high; a low-concurrency pilot (one user) would pin it")


def _unidentified(rows: Sequence[Interval], t_mean: np.ndarray, w: np.ndarray, history: str,
                  notes: list[str]) -> PrefillCostModel | None:
    """The model when too few rows, or too alike ones, cannot separate fixed from per-token
    cost; None when they can."""
    m, cv = weighted_spread(t_mean, w)
    if len(rows) >= MIN_ROWS and cv >= MIN_SPREAD:
        return None
    why = (f"only {len(rows)} interval(s) with requests" if len(rows) < MIN_ROWS else
           f"computed tokens per request hardly vary across the {len(rows)} intervals "
           f"({m:,.0f} +- {cv:.0%})")
    return PrefillCostModel(
        CostStatus.UNIDENTIFIED, (), history, len(rows), float(sum(r.requests for r in rows)),
        reason=f"cannot separate the per-request from the per-token prefill cost: {why}",
        fix=IDENTIFY_FIX, notes=tuple(notes))


def _candidate_terms(rows: Sequence[Interval], t_mean: np.ndarray, notes: list[str]) -> list[str]:
    """fixed and per_token always; the optional terms whose inputs the history holds."""
    candidates = ["fixed", "per_token"]
    has_cached = any(r.request_cached > 0 for r in rows)
    if has_cached or len({round(x) for x in t_mean}) > 2:
        candidates.append("attention")
    if any((r.stored_tokens or 0) > 0 for r in rows):
        candidates.append("store")
    if any(r.external_share > 0 and r.request_cached > 0 for r in rows):
        candidates.append("load")
    shares = np.array([min(1.0, (r.lookups or 0.0) / r.requests) for r in rows])
    if shares.any():
        if shares.std() >= MIN_CONNECTED_SPREAD:
            candidates.append("lmcache_request")
        else:
            notes.append("every interval's requests went through LMCache alike: a per-request "
                         "LMCache cost (beyond the lookups vLLM times) cannot be told from the "
                         "fixed cost and stays in it; history with vLLM-only replicas separates "
                         "them")
    return candidates


def _two_stage_mask(rows: Sequence[Interval], candidates: Sequence[str], t_mean: np.ndarray,
                    w: np.ndarray, notes: list[str]) -> np.ndarray | None:
    """The vLLM-only rows (no request went through LMCache, nothing stored) when they can fix
    the compute model on their own (LMCache's terms are then fitted on the other rows' excess
    over it: two stages); None for one joint fit."""
    plain = np.array([not r.lookups and not r.stored_tokens and not
                      (r.external_share > 0 and r.request_cached > 0) for r in rows])
    if not any(t in LMCACHE_TERMS for t in candidates) or plain.sum() < MIN_ROWS or (~plain).sum() < 1:
        return None
    if weighted_spread(t_mean[plain], w[plain])[1] < MIN_SPREAD:
        return None
    notes.append(f"compute cost fitted on the {int(plain.sum())} interval(s) whose requests "
                 f"did not go through LMCache; LMCache's cost on the excess of the other "
                 f"{int((~plain).sum())}")
    return plain


def _supported_terms(rows: Sequence[Interval], candidates: list[str], plain: np.ndarray | None,
                     bootstrap: int, seed: int, notes: list[str]) -> list[str]:
    """The candidate terms the bootstrap supports (their band excludes zero), in ``TERMS``
    order. LMCache's terms compete with each other (a request that stores chunks also went
    through LMCache): they are judged together, by the cost they give an average LMCache
    request of the history, and the fit splits it."""
    est = Estimator(rows, candidates, plain)
    probe = est.bootstrap(bootstrap, seed)
    terms = [t for t in candidates if t not in LMCACHE_TERMS]
    if "attention" in terms and float(np.mean(probe[:, candidates.index("attention")] > 0)) < SUPPORT:
        terms.remove("attention")
    lm_cand = [t for t in candidates if t in LMCACHE_TERMS]
    if lm_cand:
        idx = [candidates.index(t) for t in lm_cand]
        Xc = est.X[:, idx]
        connected = Xc.any(axis=1)
        mean_row = Xc[connected].mean(axis=0) if connected.any() else Xc.mean(axis=0)
        support = float(np.mean(probe[:, idx] @ mean_row > 0))
        if support >= SUPPORT:
            terms += lm_cand
        else:
            notes.append("LMCache's own cost (storing chunks, per-request work beyond the "
                         "lookups vLLM times) is not supported by the history (positive in "
                         f"{support:.0%} of resamples): only the timed lookups are counted; "
                         "history with computed tokens LMCache did not store (vLLM-only "
                         "replicas, prefix hits with short tails) separates it")
    return [t for t in TERMS if t in terms]


def _final_fit(rows: Sequence[Interval], terms: list[str], plain: np.ndarray | None, history: str,
               bootstrap: int, seed: int, notes: list[str]) -> PrefillCostModel:
    """The fit on the supported terms, its band (a second bootstrap) and how well it explains
    the history."""
    est = Estimator(rows, terms, plain if any(t in LMCACHE_TERMS for t in terms) else None)
    down = int((est.h < 1).sum())
    if down:
        notes.append(f"{down} interval(s) far from the fit weighed less (Huber): e.g. a moment "
                     "the machine was busy with something else")
    beta = est.fit()
    draws = est.bootstrap(bootstrap, seed + 1)
    X, y, w = est.X, est.y, est.w
    pred = X @ beta
    ybar = float((w * y).sum() / w.sum())
    rel_rms = float(math.sqrt((w * (y - pred) ** 2).sum() / w.sum()) / ybar) if ybar > 0 else None
    parts = tuple(CostPart(t, float(beta[j]), draw_percentile(draws[:, j], BAND[0]),
                           draw_percentile(draws[:, j], BAND[1]), UNITS[t]) for j, t in enumerate(terms))
    full = np.zeros((len(draws), len(TERMS)))
    for j, t in enumerate(terms):
        full[:, TERMS.index(t)] = draws[:, j]
    if beta[terms.index("per_token")] == 0 and "attention" not in terms:
        notes.append("the fit put no cost on computed tokens: every prefill second is "
                     "per-request; cached tokens are then worth nothing")
    return PrefillCostModel(CostStatus.FITTED, parts, history, len(rows), float(sum(r.requests for r in rows)),
                            rel_rms=rel_rms, notes=tuple(notes), draws=tuple(map(tuple, full)))


def priced_window(intervals: Iterable[Interval], *, t_from: float, t_to: float) -> PricedWindow:
    """Sum the intervals that lie inside [t_from, t_to] (unix seconds)."""
    raw = [r for r in intervals if r.t_end > t_from and r.t_start >= t_from - 1e-6
           and r.t_end <= t_to + 1e-6]
    vllm_rows = [r for r in raw if r.engines > 0]
    spans = merge_spans((max(r.t_start, t_from), min(r.t_end, t_to)) for r in vllm_rows)
    covered = sum(b - a for a, b in spans)
    peak = peak_hour_rate(vllm_rows, spans)
    rows = rounds(raw)
    boot = resample_hit_and_load(rows)
    req = prompt = comp = dev = ext = stored = gen = lookup = exposed = lookups = 0.0
    dev_att = cached_att = prompt_att = prefill = 0.0
    busy: float | None = None
    engines = 0
    for r in rows:
        stored += r.stored_tokens or 0.0
        exposed += (r.stored_tokens or 0.0) * r.exposure()
        engines = max(engines, r.engines)
        cap = r.seconds * max(r.engines, 1)
        running = min(r.inference_seconds, cap) if r.inference_seconds is not None else None
        if running is not None:
            busy = (busy or 0.0) + running
        if r.lookup_seconds:
            lookup += r.lookup_seconds * r.exposure()
        if r.lookups:
            lookups += r.lookups * r.exposure()
        gen += r.generation_tokens or 0.0
        if r.requests <= 0:
            continue
        n, c = r.requests, r.request_cached
        e = c * r.external_share
        d = c - e
        p = r.request_prompt
        req += n
        prompt += p
        comp += r.computed_tokens
        dev += d
        ext += e
        dev_att += d * d / (2 * n)
        cached_att += c * c / (2 * n)
        prompt_att += p * p / (2 * n)
        prefill += engine_prefill_seconds(r)[0]
    return PricedWindow(asked_seconds=max(0.0, t_to - t_from), covered_seconds=covered,
                        requests=req, prompt_tokens=prompt, computed_tokens=comp,
                        device_cached=dev, external_cached=ext, stored_tokens=stored,
                        device_attention=dev_att, cached_attention=cached_att,
                        prompt_attention=prompt_att, engines=engines,
                        prefill_engine_seconds=prefill, generation_tokens=gen,
                        engine_busy_seconds=busy, lookup_seconds=lookup,
                        store_exposure=exposed / stored if stored > 0 else 1.0,
                        exposed_lookups=lookups, peak_hour_requests_per_s=peak, resamples=boot)


def resample_hit_and_load(rows: Sequence[Interval], draws: int = RESAMPLES,
                          seed: int = RESAMPLE_SEED) -> tuple[tuple[float, float], ...]:
    """Bootstrap the window's intervals (with requests and prompt tokens): per resample the
    token-weighted hit rate and the mean requests per interval relative to the window's. Empty
    with fewer than 2 such intervals."""
    use = [r for r in rows if r.requests > 0 and r.request_prompt > 0]
    if len(use) < 2:
        return ()
    cached = np.array([r.request_cached for r in use], dtype=float)
    prompt = np.array([r.request_prompt for r in use], dtype=float)
    req = np.array([r.requests for r in use], dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(use), size=(draws, len(use)))
    hit = cached[idx].sum(axis=1) / prompt[idx].sum(axis=1)
    load = req[idx].mean(axis=1) / req.mean()
    return tuple((float(h), float(k)) for h, k in zip(hit, load, strict=True))


def peak_hour_rate(rows: Sequence[Interval], spans: Sequence[tuple[float, float]]) -> float | None:
    """Requests per second of the busiest UTC hour: each interval's requests are spread over the
    hours it spans in proportion to time (a missed scrape makes one interval of two); an hour's
    rate divides by the seconds of it the data covers (``spans``, the vLLM targets' intervals,
    merged). Hours covered for less than ``PEAK_HOUR_MIN_COVER_S`` compete
    only when no hour is covered longer."""
    def hours(a: float, b: float) -> Iterator[tuple[int, float]]:
        h = int(a // 3600)
        while h * 3600 < b:
            yield h, max(0.0, min(b, (h + 1) * 3600) - max(a, h * 3600))
            h += 1

    reqs: dict[int, float] = {}
    for r in rows:
        if r.requests > 0 and r.t_end > r.t_start:
            for h, sec in hours(r.t_start, r.t_end):  # a long interval (a missed scrape) is spread
                reqs[h] = reqs.get(h, 0.0) + r.requests * sec / (r.t_end - r.t_start)
    if not reqs:
        return None
    cover: dict[int, float] = {}
    for a, b in merge_spans(spans):
        for h, sec in hours(a, b):
            cover[h] = cover.get(h, 0.0) + sec
    rates = {h: n / cover[h] for h, n in reqs.items() if cover.get(h, 0.0) > 0}
    long = {h: v for h, v in rates.items() if cover[h] >= PEAK_HOUR_MIN_COVER_S}
    pick = long or rates
    return max(pick.values()) if pick else None


# ---- the reader (app/data/prefill.py) ----
def _epoch(ts: datetime) -> float:
    return aware_utc(ts).timestamp()


def prefill_intervals(db: Source, deployment: str, t_from: datetime, t_to: datetime,
                      model_name: str | None = None, *,
                      chunk_tokens: int = DeploymentFacts().lmcache_chunk_tokens) -> list[Interval]:
    """One row per target and scrape interval in [t_from, t_to]: vLLM targets with their
    prefill increases, LMCache targets with the tokens they stored (write chunks x
    ``chunk_tokens``). Whole UTC days the nightly job stored (``prefill_rollups``) are read from
    there, the edges from raw samples, split as the dashboard splits a window
    (``spans.plan_spans``: the same intervals as a raw read, for intervals under a day); one
    model's intervals are read raw."""
    rows = _rows(db, deployment, aware_utc(t_from), aware_utc(t_to), model_name)
    out: list[Interval] = []
    for r in rows:
        if r["t_start"] is None:
            continue
        buckets: dict[float, float] = {}
        for b in r["step_buckets"] or []:
            if b["le"] is not None:
                buckets[float(b["le"])] = buckets.get(float(b["le"]), 0.0) + float(b["n"])
        base: dict[str, Any] = dict(t_start=_epoch(r["t_start"]), t_end=_epoch(r["t_end"]),
                                    targets=(r["target"],), reset=bool(r["reset"]))
        if r["requests"] is None:
            chunks = r["lmcache_write_chunks"]
            if chunks is not None:
                out.append(Interval(stored_tokens=float(chunks) * chunk_tokens, **base))
            continue
        ext = r["external_tokens"]
        if ext is None and r["by_source_tokens"] is None and r["external_queries"] is not None:
            ext = 0.0  # a connector-less server exports external_* at 0 without by_source
        if ext is None and r["external_hits"] is None and r["lm_inproc_hits"] is not None:
            ext = r["lm_inproc_hits"]  # LMCache in-process without vLLM's external counters (0.11-style)
        computed, cached = _computed_and_cached(r)
        if computed is None:
            continue  # cached tokens unknown (see _computed_and_cached): such requests cannot be priced
        out.append(Interval(
            requests=float(r["requests"] or 0.0), prefill_seconds=float(r["prefill_seconds"] or 0.0),
            computed_tokens=computed,
            prompt_tokens=None if r["prompt_tokens"] is None else float(r["prompt_tokens"]),
            cached_tokens=cached,
            external_tokens=None if ext is None else float(ext),
            engines=max(int(r["engines"] or 0), 1),
            inference_seconds=None if r["inference_seconds"] is None else float(r["inference_seconds"]),
            lookup_seconds=None if r["lookup_seconds"] is None else float(r["lookup_seconds"]),
            lookups=None if r["lookups"] is None else float(r["lookups"]),
            generation_tokens=None if r["generation_tokens"] is None else float(r["generation_tokens"]),
            step_buckets=tuple(sorted(buckets.items())), **base))
    return out


def _rows(db: Source, deployment: str, t_from: datetime, t_to: datetime,
          model_name: str | None) -> list[dict[str, Any]]:
    days = [] if model_name is not None else rolled_days(db, deployment, t_from, t_to, "prefill_rolled_days")
    spans = plan_spans(days, t_from, t_to)
    rows: list[dict[str, Any]] = []
    for lb, after, end in spans.raw:
        rows += db.fetch("prefill_intervals", deployment=deployment, t_lookback=naive_utc(lb),
                         t_after=naive_utc(after), t_to=naive_utc(end), model_name=model_name, names=NAMES)
    if spans.rolled:
        rows += db.fetch("prefill_rollup_rows", deployment=deployment, d_from=spans.rolled[0],
                         d_to=spans.rolled[1])
        rows.sort(key=lambda r: (r["t_end"], r["target"]))
    return rows


def _computed_and_cached(r: dict) -> tuple[float | None, float | None]:
    """(computed prompt tokens, cached prompt tokens) of one interval row. Computed tokens are
    vLLM's ``request_prefill_kv_computed_tokens`` (0.13+); where a release lacks them they are
    prompt - cached, the cached tokens read by the rule ``stats`` uses
    (``models.metrics.spellings.cached_rule``); where neither is known the interval is left out
    (None): never prompt - 0, which made every prompt token "cached" (a hit rate of 1.0)."""
    by_source = None
    if r["by_source_tokens"] is not None:
        by_source = float(r["local_hit_tokens"] or 0.0) + float(r["external_tokens"] or 0.0)
    cached, _ = cached_rule(r["cached_tokens"], by_source, r["prefix_hits"], r["external_hits"],
                            r["lm_inproc_hits"])
    if r["computed_tokens"] is not None:
        return float(r["computed_tokens"]), None if cached is None else float(cached)
    if cached is None or r["prompt_tokens"] is None:
        return None, None
    return max(0.0, float(r["prompt_tokens"]) - float(cached)), float(cached)
