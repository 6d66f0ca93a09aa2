"""What one request's prefill costs, fitted from the deployment's own metrics, and what the
cache saved with it.

**The data.** Per scrape interval (or per scrape round: every target's interval ending at about
the same time, summed), the increases of the per-request histograms vLLM observes when a
request finishes: requests prefilled ``n`` (``vllm:request_prefill_time_seconds_count``),
prefill seconds ``y`` (``..._sum``), tokens computed ``T``
(``vllm:request_prefill_kv_computed_tokens_sum``) and prompt tokens ``P``
(``vllm:request_prompt_tokens_sum``); the cached tokens of the same requests are ``C = P - T``.
vLLM's iteration counters split ``C`` into its own device cache ``D`` and the connector's
(LMCache) ``E`` (``vllm:prompt_tokens_by_source_total``); LMCache's
``lmcache_mp_l1_write_chunks_total`` x chunk size gives the tokens it stored ``S``.

**The model.** Per request, in engine-seconds:

    prefill = fixed + per_token x computed + attention x (P^2 - C^2) / 2
              + store x stored + load x loaded + lmcache_request x [went through LMCache]

``attention x (P^2 - C^2)/2`` is self-attention over the prefix: computing the token at position
``j`` reads ``j`` keys, so the computed positions ``C..P`` cost ``(P^2 - C^2)/2`` key reads.
Per interval the means ``P/n``, ``C/n`` stand in for each request (exact when the interval's
requests are alike; scrape intervals are short).

**The fit.** Weighted non-negative least squares on the per-request means of every interval
with requests (weight ``n``: a mean of ``n`` requests is ``n`` times less noisy than one; times
how often a request had the engine alone, see below), the exact NNLS optimum (every subset of
terms, best feasible); intervals far from the fit weigh less (Huber weights on relative
residuals, ``HUBER_K``). The optional terms enter only where the data supports them, i.e. where
their band excludes zero: attention when it is positive in at least ``SUPPORT`` (95 %) of the
bootstrap resamples; LMCache's terms (``store``, ``load``, ``lmcache_request``) together, when
the cost they give an average LMCache request is (they compete with each other). Where the
history holds enough vLLM-only intervals (no request went through LMCache: e.g. replicas
without the connector), the compute terms are fitted on those alone and LMCache's terms on the
other intervals' excess over them (two stages): LMCache's cost is then not confounded with the
per-token cost. The band resamples whole intervals (``BOOTSTRAP`` draws, fixed seed): every
figure derived from the model carries the 5th-95th percentile of its draws. The fit reads the
deployment's history (every interval of a look-back, not only the window being priced): a
cache-heavy window alone computes few and alike tokens per request and cannot tell the
per-request part from the per-token part; other hours (misses, unique sessions, other prompt
lengths) can. Intervals much longer than the others (``LONG_INTERVAL``) are left out.

**Not identifiable.** With fewer than ``MIN_ROWS`` intervals, or computed tokens per request
that hardly vary (weighted coefficient of variation under ``MIN_SPREAD``), fixed and per-token
cost cannot be separated: the model says so (``status = "unidentified"``) and names the
measurement that would separate them, and no saving is priced from it.

**Engine time, not timer time.** vLLM times each request's prefill separately. When several
requests prefill in the same engine step their timers all cover that step: the sum counts it
once per request. The iteration-token histogram (``vllm:iteration_tokens_total``) counts engine
steps by size; steps in the buckets up to the one that holds the most requests that can have
decoded together (while its bound stays under a quarter of a mean prefill) are decode-only, the
rest carried prefill. With fewer prefill steps
than requests, the interval's prefill seconds are scaled by ``prefill steps / requests``. Then no interval may claim more than ``interval x
engines`` seconds of prefill (an engine cannot be busier than the clock). Under load a request's
timer also runs while the engine works on other requests' steps (it starts when the scheduler
admits the request), so it over-states that request's own cost even without shared steps: the
share of decode-only steps that carried a single token says how often a request had the engine
alone, and each interval weighs in the fit in proportion to it (at least ``ALONE_FLOOR``): the
fit rests on the deployment's quieter intervals. Decode tokens that share a prefill step are
still charged to that step's prefill (a few tokens per step).

**What the cache saved** (by tier, in the priced window): ``models.prefill_window``.

What this cannot know: prompt lengths within an interval (means stand in), prefill work that
overlaps decode on the GPU, anything the deployment's history did not exercise.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TERMS = ("fixed", "per_token", "attention", "store", "load", "lmcache_request")
UNITS = {"fixed": "s/request", "per_token": "s/token", "attention": "s/token^2",
         "store": "s/stored token", "load": "s/loaded token",
         "lmcache_request": "s/LMCache request"}
OPTIONAL_TERMS = ("attention", "store", "load", "lmcache_request")
LMCACHE_TERMS = ("store", "load", "lmcache_request")
MIN_CONNECTED_SPREAD = 0.1
"""The per-request LMCache term needs the share of requests that went through LMCache to vary
across intervals (standard deviation at least this): e.g. vLLM-only replicas in the history."""
BOOTSTRAP = 200
"""Bootstrap resamples of the intervals."""
SEED = 20240613
"""Fixed seed: the same history always gives the same band."""
BAND = (5.0, 95.0)
"""Percentiles of the bootstrap draws reported as the band."""
SUPPORT = 1.0 - BAND[0] / 100.0
"""An optional term stays when it is positive in at least this share of the resamples (95 %:
its band excludes zero)."""
MIN_ROWS = 3
"""Fewer intervals with requests than this cannot identify fixed vs per-token cost."""
MIN_SPREAD = 0.15
"""Weighted coefficient of variation of computed tokens per request below which fixed and
per-token cost cannot be told apart."""
ALONE_FLOOR = 0.01
"""Least weight (x requests) an interval whose requests always overlapped keeps in the fit."""
LONG_INTERVAL = 10.0
"""Intervals longer than this many times the median (e.g. from a server's start to kvplan's
first scrape of it) are left out of the fit: their per-request means blur everything."""
DECODE_STEP_SHARE = 0.25
"""Engine steps with fewer tokens than this share of a mean prefill count as decode-only."""
IDENTIFY_FIX = ("run `kvplan pilot` twice on the same servers, once with "
                "--scenario unique and once with --scenario shared_prefix (and a few "
                "--prefix-chars values), so that requests compute many and few tokens, then "
                "plan again")


# ---- observations ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """Increases of one target (or one scrape round of a deployment) over one scrape
    interval. ``None`` = not reported by these servers."""

    t_start: float
    """Start (the previous sample), unix seconds."""
    t_end: float
    """End (this sample), unix seconds."""
    requests: float = 0.0
    """Requests whose prefill finished (``vllm:request_prefill_time_seconds_count``)."""
    prefill_seconds: float = 0.0
    """Their summed prefill timers (``..._sum``), seconds."""
    computed_tokens: float = 0.0
    """Their computed prompt tokens (``vllm:request_prefill_kv_computed_tokens_sum``)."""
    prompt_tokens: float | None = None
    """Their prompt tokens (``vllm:request_prompt_tokens_sum``)."""
    cached_tokens: float | None = None
    """Cached prompt tokens counted by vLLM's iteration counters
    (``vllm:prompt_tokens_cached_total``); used when ``prompt_tokens`` is missing."""
    external_tokens: float | None = None
    """Of the cached ones, supplied by the KV connector (LMCache)
    (``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}``)."""
    stored_tokens: float | None = None
    """Tokens LMCache stored (``lmcache_mp_l1_write_chunks_total`` x chunk size)."""
    lookup_seconds: float | None = None
    """Time vLLM spent in LMCache lookups (``vllm:lmcache_mp_lookup_duration_seconds_sum``):
    measured, it blocks the scheduler before the request's prefill starts."""
    lookups: float | None = None
    """LMCache lookups vLLM made (``..._lookup_duration_seconds_count``): requests that went
    through LMCache."""
    engines: int = 0
    """vLLM engines reporting in the interval."""
    inference_seconds: float | None = None
    """Summed running-phase timers (``vllm:request_inference_time_seconds_sum``)."""
    generation_tokens: float | None = None
    """Output tokens (``vllm:generation_tokens_total``)."""
    step_buckets: tuple[tuple[float, float], ...] = ()
    """Cumulative (le, steps) of ``vllm:iteration_tokens_total`` increases."""
    targets: tuple[str, ...] = ()
    """Targets summed into this row."""
    reset: bool = False
    """A counter restarted inside the interval."""

    @property
    def seconds(self) -> float:
        return max(0.0, self.t_end - self.t_start)

    @property
    def request_cached(self) -> float:
        """Cached tokens of the requests counted here (P - T), else the iteration counter."""
        if self.prompt_tokens is not None:
            return max(0.0, self.prompt_tokens - self.computed_tokens)
        return max(0.0, self.cached_tokens or 0.0)

    @property
    def request_prompt(self) -> float:
        return self.computed_tokens + self.request_cached

    @property
    def external_share(self) -> float:
        """Share of cached tokens the connector supplied (0 when unknown or none)."""
        if not self.cached_tokens or self.external_tokens is None:
            return 0.0
        return min(1.0, max(0.0, self.external_tokens / self.cached_tokens))

    def max_decode_batch(self) -> float:
        """Most requests that can have decoded together in one step of this interval: the
        requests that finished in it, or twice the mean number running (running-phase timers /
        interval), whichever is larger."""
        running = 0.0
        if self.inference_seconds is not None and self.seconds > 0:
            running = 2.0 * self.inference_seconds / (self.seconds * max(self.engines, 1))
        return max(1.0, self.requests / max(self.engines, 1), math.ceil(running))

    def alone_share(self) -> float:
        """How often a request had the engine to itself: the share of decode-only steps that
        carried a single token (1 when the histogram is missing: assume no concurrency)."""
        if not self.step_buckets or self.requests <= 0:
            return 1.0
        buckets = sorted(self.step_buckets)
        steps = self.prefill_steps() or 0.0
        decode = buckets[-1][1] - steps
        single = next((c for le, c in buckets if le >= 1.0), 0.0)
        return min(1.0, single / decode) if decode > 0 else 1.0

    def decode_batch(self) -> float | None:
        """Mean requests per decode-only engine step: (output tokens - requests, the first
        token of each coming from its prefill step) / decode-only steps; None without the
        iteration-token histogram or output tokens."""
        if not self.step_buckets or self.generation_tokens is None or self.requests <= 0:
            return None
        decode_steps = sorted(self.step_buckets)[-1][1] - (self.prefill_steps() or 0.0)
        if decode_steps <= 0:
            return None
        return max(1.0, (self.generation_tokens - self.requests) / decode_steps)

    def exposure(self) -> float:
        """Chance that the engine had nothing else to run while a request waited on the cache
        layer: ``exp(-(B - 1))`` with ``B`` the mean decode batch (the other requests running
        taken as Poisson with mean ``B - 1``); 1 when unknown."""
        b = self.decode_batch()
        return 1.0 if b is None else math.exp(-(b - 1.0))

    def prefill_steps(self) -> float | None:
        """Engine steps that carried prefill tokens (see module docstring), or None."""
        if not self.step_buckets or self.requests <= 0:
            return None
        limit = DECODE_STEP_SHARE * self.computed_tokens / self.requests
        batch = self.max_decode_batch()
        buckets = sorted(self.step_buckets)
        total = buckets[-1][1]
        bound = next((le for le, _ in buckets if le >= batch), None)
        if bound is None or bound > limit:  # decode batches as large as prefills: the smaller
            bound = max((le for le, _ in buckets if le <= min(batch, limit)), default=None)
        decode = next((c for le, c in buckets if le == bound), 0.0) if bound is not None else 0.0
        return max(0.0, total - decode)


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


def engine_prefill_seconds(iv: Interval) -> tuple[float, float, bool]:
    """(engine prefill seconds, co-batching factor, capped) of one interval: the summed
    timers scaled by prefill steps / requests when requests shared steps, then at most
    ``interval x engines``."""
    y = iv.prefill_seconds
    steps = iv.prefill_steps()
    factor = 1.0
    if steps is not None and 0 < steps < iv.requests:
        factor = steps / iv.requests
    y *= factor
    cap = iv.seconds * max(iv.engines, 1)
    capped = cap > 0 and y > cap
    return (min(y, cap) if cap > 0 else y), factor, capped


# ---- the fitted model ------------------------------------------------------------------------
@dataclass(frozen=True)
class CostPart:
    """One fitted part of the prefill cost, with its band."""

    name: str
    """fixed, per_token, attention, store or load."""
    value: float
    """Central value (the fit on all intervals)."""
    low: float
    """5th percentile of the bootstrap draws."""
    high: float
    """95th percentile."""
    unit: str
    """Engine-seconds per request / token / token^2."""


@dataclass(frozen=True)
class PrefillCostModel:
    """Prefill cost per request in engine-seconds (see module docstring)."""

    status: str
    """``fitted``, ``unidentified``, ``no_data`` or ``given`` (a planning preset's)."""
    parts: tuple[CostPart, ...]
    """The terms in the model, in ``TERMS`` order (empty when not fitted)."""
    history: str
    """Which history the fit used (deployment, span, rows, requests)."""
    rows: int = 0
    """Intervals (scrape rounds) with requests that entered the fit."""
    requests: float = 0.0
    """Requests in those intervals."""
    reason: str = ""
    """Why the model is not fitted, when it is not."""
    fix: str = ""
    """The measurement that would fix it."""
    rel_rms: float | None = None
    """Weighted root-mean-square residual of the per-request means, relative to their
    weighted mean (how well the model explains the history)."""
    notes: tuple[str, ...] = ()
    """Caveats produced while fitting."""
    draws: tuple[tuple[float, ...], ...] = field(default=(), repr=False)
    """Bootstrap coefficient vectors in ``TERMS`` order (for bands of derived figures)."""
    source: str = "fitted"
    """``fitted`` (from metrics) or ``planning_preset``."""

    @property
    def identified(self) -> bool:
        return self.status in ("fitted", "given")

    def coef(self) -> dict[str, float]:
        """Central value per term (0 for terms not in the model)."""
        out = {t: 0.0 for t in TERMS}
        out.update({p.name: p.value for p in self.parts})
        return out

    def coef_draws(self) -> list[dict[str, float]]:
        """The bootstrap draws as dicts (the central value alone when there are none)."""
        if not self.draws:
            return [self.coef()]
        return [dict(zip(TERMS, d)) for d in self.draws]

    def part(self, name: str) -> CostPart | None:
        return next((p for p in self.parts if p.name == name), None)

    def marginal_seconds_per_token(self, position: float = 0.0) -> float:
        """Engine-seconds to compute one more token at ``position`` (per-token + attention)."""
        c = self.coef()
        return c["per_token"] + c["attention"] * position

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "source": self.source, "history": self.history,
                "rows": self.rows, "requests": self.requests, "reason": self.reason,
                "fix": self.fix, "rel_rms": self.rel_rms, "notes": list(self.notes),
                "parts": {p.name: {"value": p.value, "low": p.low, "high": p.high,
                                   "unit": p.unit} for p in self.parts}}

    @classmethod
    def given(cls, *, per_token: float, fixed: float = 0.0, attention: float = 0.0,
              source: str = "planning_preset", history: str = "") -> PrefillCostModel:
        """A model with known parts (a planning preset's, or a test's): no band."""
        vals = {"fixed": fixed, "per_token": per_token, "attention": attention}
        parts = tuple(CostPart(t, v, v, v, UNITS[t]) for t, v in vals.items()
                      if t in ("fixed", "per_token") or v)
        return cls("given", parts, history or source, source=source)


def _design(rows: Sequence[Interval], terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray,
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


def _nnls_gram(G: np.ndarray, h: np.ndarray, yy: float) -> np.ndarray:
    """Exact NNLS from the normal equations (G = X'WX, h = X'Wy, yy = y'Wy): the best
    feasible least-squares solution over every subset of columns (the NNLS optimum is the
    unconstrained solution on its own positive set, so it is among them)."""
    k = len(h)
    best, best_x = yy, np.zeros(k)
    for mask in range(1, 1 << k):
        cols = [j for j in range(k) if mask >> j & 1]
        sub = G[np.ix_(cols, cols)]
        try:
            xs = np.linalg.solve(sub, h[cols])
        except np.linalg.LinAlgError:
            xs = np.linalg.lstsq(sub, h[cols], rcond=None)[0]
        if np.any(xs < 0) or not np.all(np.isfinite(xs)):
            continue
        x = np.zeros(k)
        x[cols] = xs
        rss = yy - 2 * x @ h + x @ G @ x
        if rss < best - 1e-12 * max(1.0, abs(best)):
            best, best_x = rss, x
    return best_x


def _fit(X: np.ndarray, y: np.ndarray, w: np.ndarray, counts: np.ndarray | None = None
         ) -> np.ndarray:
    """Weighted NNLS (columns scaled to unit weighted RMS for conditioning)."""
    ww = w if counts is None else w * counts
    scale = np.sqrt((ww[:, None] * X * X).sum(axis=0) / max(ww.sum(), 1e-300))
    scale[scale == 0] = 1.0
    Xs = X / scale
    G = Xs.T @ (ww[:, None] * Xs)
    h = Xs.T @ (ww * y)
    yy = float((ww * y * y).sum())
    return _nnls_gram(G, h, yy) / scale


HUBER_K = 1.5
"""Residuals beyond this many robust standard deviations weigh less (Huber weights)."""


def _huber(X: np.ndarray, y: np.ndarray, w: np.ndarray, iterations: int = 3) -> np.ndarray:
    """Huber weights (1 for ordinary intervals, less for outliers) by iteratively reweighted
    NNLS on relative residuals (timer noise is relative: a busy moment stretches a long prefill
    as much as a short one): scale = 1.4826 x the median absolute weighted relative residual."""
    h = np.ones_like(w)
    for _ in range(iterations):
        pred = X @ _fit(X, y, w * h)
        r = (y - pred) / np.maximum(np.abs(pred), 1e-12) * np.sqrt(w)
        scale = 1.4826 * float(np.median(np.abs(r)))
        if scale <= 0:
            break
        h = np.minimum(1.0, HUBER_K * scale / np.maximum(np.abs(r), 1e-300))
    return h


def percentile(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q))


def fit_prefill_cost(intervals: Iterable[Interval], *, history: str,
                     bootstrap: int = BOOTSTRAP, seed: int = SEED,
                     group_rounds: bool = True) -> PrefillCostModel:
    """Fit the prefill cost model on ``intervals`` (one row per target and scrape interval;
    grouped into scrape rounds unless ``group_rounds`` is False). ``history`` says which
    history they are (shown with every figure derived from the model)."""
    raw = list(intervals)
    rows_all = rounds(raw) if group_rounds else raw
    notes: list[str] = []
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
    req = float(sum(r.requests for r in rows))
    if not rows:
        return PrefillCostModel("no_data", (), history, 0, 0.0,
                                reason="no interval with prefilled requests and prefill timing "
                                       "(vllm:request_prefill_time_seconds, "
                                       "vllm:request_prefill_kv_computed_tokens) in the history",
                                fix=IDENTIFY_FIX, notes=tuple(notes))
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
    t_mean = np.array([r.computed_tokens / r.requests for r in rows])
    w = np.array([r.requests * max(r.alone_share(), ALONE_FLOOR) for r in rows])
    m = float((w * t_mean).sum() / w.sum())
    cv = float(math.sqrt((w * (t_mean - m) ** 2).sum() / w.sum()) / m) if m > 0 else 0.0
    if len(rows) < MIN_ROWS or cv < MIN_SPREAD:
        why = (f"only {len(rows)} interval(s) with requests" if len(rows) < MIN_ROWS else
               f"computed tokens per request hardly vary across the {len(rows)} intervals "
               f"({m:,.0f} +- {cv:.0%})")
        return PrefillCostModel(
            "unidentified", (), history, len(rows), req,
            reason=f"cannot separate the per-request from the per-token prefill cost: {why}",
            fix=IDENTIFY_FIX, notes=tuple(notes))

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
    # vLLM-only intervals (no request went through LMCache, nothing stored) fix the compute
    # model on their own where they can; LMCache's terms are then fitted on the excess of the
    # other intervals over it (two stages). Otherwise one joint fit.
    plain = np.array([not r.lookups and not r.stored_tokens and not
                      (r.external_share > 0 and r.request_cached > 0) for r in rows])
    lm_cand = [t for t in candidates if t in LMCACHE_TERMS]
    two_stage = False
    if lm_cand and plain.sum() >= MIN_ROWS and (~plain).sum() >= 1:
        tp, wp = t_mean[plain], w[plain]
        mp = float((wp * tp).sum() / wp.sum())
        cvp = float(math.sqrt((wp * (tp - mp) ** 2).sum() / wp.sum()) / mp) if mp > 0 else 0.0
        two_stage = cvp >= MIN_SPREAD
    if two_stage:
        notes.append(f"compute cost fitted on the {int(plain.sum())} interval(s) whose requests "
                     f"did not go through LMCache; LMCache's cost on the excess of the other "
                     f"{int((~plain).sum())}")
    est = _Estimator(rows, candidates, plain if two_stage else None)
    probe = est.bootstrap(bootstrap, seed)
    terms = [t for t in candidates if t not in LMCACHE_TERMS]
    if "attention" in terms:
        support = float(np.mean(probe[:, candidates.index("attention")] > 0))
        if support < SUPPORT:
            terms.remove("attention")
    if lm_cand:
        # LMCache's terms compete with each other (a request that stores chunks also went
        # through LMCache): judge them together, by the cost they give an average LMCache
        # request of the history, and let the fit split it
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
    terms = [t for t in TERMS if t in terms]
    est = _Estimator(rows, terms, plain if two_stage and any(t in LMCACHE_TERMS for t in terms)
                     else None)
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
    parts = tuple(CostPart(t, float(beta[j]), percentile(draws[:, j], BAND[0]),
                           percentile(draws[:, j], BAND[1]), UNITS[t]) for j, t in enumerate(terms))
    full = np.zeros((len(draws), len(TERMS)))
    for j, t in enumerate(terms):
        full[:, TERMS.index(t)] = draws[:, j]
    if beta[terms.index("per_token")] == 0 and "attention" not in terms:
        notes.append("the fit put no cost on computed tokens: every prefill second is "
                     "per-request; cached tokens are then worth nothing")
    return PrefillCostModel("fitted", parts, history, len(rows), req, rel_rms=rel_rms,
                            notes=tuple(notes), draws=tuple(map(tuple, full)))


class _Estimator:
    """The fit of ``terms`` on ``rows``: one weighted NNLS, or -- with ``plain`` (a mask of
    vLLM-only rows) -- the compute terms on those rows, then LMCache's terms on the other rows'
    excess over them. Huber weights are computed once per stage; ``bootstrap`` resamples rows."""

    def __init__(self, rows: Sequence[Interval], terms: Sequence[str], plain: np.ndarray | None):
        self.X, self.y, w = _design(rows, terms)
        self.terms = list(terms)
        self.plain = plain
        self.comp = [j for j, t in enumerate(terms) if t not in LMCACHE_TERMS]
        self.lm = [j for j, t in enumerate(terms) if t in LMCACHE_TERMS]
        if plain is None or not self.lm:
            self.plain = None
            self.h = _huber(self.X, self.y, w)
        else:
            self.h = np.ones_like(w)
            Xp = self.X[np.ix_(plain, self.comp)]
            self.h[plain] = _huber(Xp, self.y[plain], w[plain])
            beta_c = _fit(Xp, self.y[plain], (w * self.h)[plain])
            resid = self.y - self.X[:, self.comp] @ beta_c
            conn = ~plain
            self.h[conn] = _huber(self.X[np.ix_(conn, self.lm)], resid[conn], w[conn])
        self.w = w * self.h

    def fit(self, counts: np.ndarray | None = None) -> np.ndarray:
        if self.plain is None:
            return _fit(self.X, self.y, self.w, counts)
        c = np.ones_like(self.w) if counts is None else counts
        p, q = self.plain, ~self.plain
        beta = np.zeros(len(self.terms))
        if (c[p] > 0).sum() == 0:
            return _fit(self.X, self.y, self.w, counts)
        beta[self.comp] = _fit(self.X[np.ix_(p, self.comp)], self.y[p], self.w[p], c[p])
        resid = self.y - self.X[:, self.comp] @ beta[self.comp]
        if (c[q] > 0).sum():
            beta[self.lm] = _fit(self.X[np.ix_(q, self.lm)], resid[q], self.w[q], c[q])
        return beta

    def bootstrap(self, draws: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        n = len(self.y)
        out = np.empty((draws, len(self.terms)))
        for i in range(draws):
            out[i] = self.fit(np.bincount(rng.integers(0, n, n), minlength=n).astype(float))
        return out
