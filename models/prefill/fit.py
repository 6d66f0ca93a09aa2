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
rest carried prefill. With fewer prefill steps than requests, the interval's prefill seconds
are scaled by ``prefill steps / requests``. Then no interval may claim more than ``interval x
engines`` seconds of prefill (an engine cannot be busier than the clock). Under load a request's
timer also runs while the engine works on other requests' steps (it starts when the scheduler
admits the request), so it over-states that request's own cost even without shared steps: the
share of decode-only steps that carried a single token says how often a request had the engine
alone, and each interval weighs in the fit in proportion to it (at least ``ALONE_FLOOR``): the
fit rests on the deployment's quieter intervals. Decode tokens that share a prefill step are
still charged to that step's prefill (a few tokens per step).

**What the cache saved** (by tier, in the priced window): ``kvplan.models.prefill.window``.

What this cannot know: prompt lengths within an interval (means stand in), prefill work that
overlaps decode on the GPU, anything the deployment's history did not exercise.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from .interval import Interval
from .nnls import ALONE_FLOOR, LMCACHE_TERMS, Estimator
from .table import IntervalTable, seq_sum

TERMS = ("fixed", "per_token", "attention", "store", "load", "lmcache_request")
UNITS = {"fixed": "s/request", "per_token": "s/token", "attention": "s/token^2",
         "store": "s/stored token", "load": "s/loaded token",
         "lmcache_request": "s/LMCache request"}
OPTIONAL_TERMS = ("attention", "store", "load", "lmcache_request")
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
LONG_INTERVAL = 10.0
"""Intervals longer than this many times the median (e.g. from a server's start to kvplan's
first scrape of it) are left out of the fit: their per-request means blur everything."""
IDENTIFY_FIX = ("run `kvplan pilot` twice on the same servers, once with "
                "--scenario unique and once with --scenario shared_prefix (and a few "
                "--prefix-chars values), so that requests compute many and few tokens, then "
                "plan again")


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


class CostStatus(StrEnum):
    """Whether the cost model could be fitted (a ``StrEnum``: JSON reads ``"fitted"`` as before)."""

    FITTED = "fitted"
    UNIDENTIFIED = "unidentified"
    NO_DATA = "no_data"
    GIVEN = "given"
    """A planning preset's (or a test's) known parts."""


@dataclass(frozen=True)
class PrefillCostModel:
    """Prefill cost per request in engine-seconds (see module docstring)."""

    status: CostStatus
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
        return self.status in (CostStatus.FITTED, CostStatus.GIVEN)

    def coef(self) -> dict[str, float]:
        """Central value per term (0 for terms not in the model)."""
        out = {t: 0.0 for t in TERMS}
        out.update({p.name: p.value for p in self.parts})
        return out

    def coef_draws(self) -> list[dict[str, float]]:
        """The bootstrap draws as dicts (the central value alone when there are none)."""
        if not self.draws:
            return [self.coef()]
        return [dict(zip(TERMS, d, strict=True)) for d in self.draws]

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
        return cls(CostStatus.GIVEN, parts, history or source, source=source)


def weighted_spread(x: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """(weighted mean, weighted coefficient of variation) of ``x``."""
    m = float((w * x).sum() / w.sum())
    cv = float(math.sqrt((w * (x - m) ** 2).sum() / w.sum()) / m) if m > 0 else 0.0
    return m, cv


def fit_prefill_cost(intervals: Iterable[Interval] | IntervalTable, *, history: str,
                     bootstrap: int = BOOTSTRAP, seed: int = SEED,
                     group_rounds: bool = True) -> PrefillCostModel:
    """Fit the prefill cost model on ``intervals`` (one row per target and scrape interval, as
    ``Interval`` objects or one ``IntervalTable``; grouped into scrape rounds unless
    ``group_rounds`` is False). ``history`` says which history they are (shown with every figure
    derived from the model).

    Stages: the rows that can enter; notes on their timers; can the history identify the
    model at all; the candidate terms; one stage or two; which optional terms the bootstrap
    supports; the final fit and its band. Every stage runs over the table's columns."""
    raw = IntervalTable.of(intervals)
    notes: list[str] = []
    rows = _usable_rows(raw.rounds() if group_rounds else raw, notes)
    if not len(rows):
        return PrefillCostModel(CostStatus.NO_DATA, (), history, 0, 0.0,
                                reason="no interval with prefilled requests and prefill timing "
                                       "(vllm:request_prefill_time_seconds, "
                                       "vllm:request_prefill_kv_computed_tokens) in the history",
                                fix=IDENTIFY_FIX, notes=tuple(notes))
    _timer_notes(rows, notes)
    t_mean = rows.computed_tokens / rows.requests
    w = rows.requests * np.maximum(rows.alone_share(), ALONE_FLOOR)
    unidentified = _unidentified(rows, t_mean, w, history, notes)
    if unidentified is not None:
        return unidentified
    candidates = _candidate_terms(rows, t_mean, notes)
    plain = _two_stage_mask(rows, candidates, t_mean, w, notes)
    terms = _supported_terms(rows, candidates, plain, bootstrap, seed, notes)
    return _final_fit(rows, terms, plain, history, bootstrap, seed, notes)


def _usable_rows(rows_all: IntervalTable, notes: list[str]) -> IntervalTable:
    """Rows with prefilled requests, prefill timing and computed tokens, no counter restart,
    and not much longer than the others."""
    r = rows_all
    rows = r.take((r.requests >= 1) & (r.prefill_seconds > 0) & (r.computed_tokens > 0) & ~r.reset)
    lengths = np.sort(rows.seconds)
    if len(lengths):
        limit = LONG_INTERVAL * float(lengths[len(lengths) // 2])
        long_rows = rows.seconds > limit
        if long_rows.any():
            notes.append(f"{int(long_rows.sum())} interval(s) longer than {LONG_INTERVAL:g}x the median "
                         f"({limit:,.0f} s) left out of the fit (e.g. a server's start to its first "
                         "scrape)")
            rows = rows.take(~long_rows)
    skipped_reset = int((r.reset & (r.requests >= 1)).sum())
    if skipped_reset:
        notes.append(f"{skipped_reset} interval(s) with a counter restart left out")
    return rows


def _timer_notes(rows: IntervalTable, notes: list[str]) -> None:
    """What the rows' timers stand for: shared engine steps, claims capped at the clock,
    requests that overlapped."""
    _, factor, capped_rows = rows.engine_prefill_seconds()
    shared = int((factor < 1).sum())
    capped = int(capped_rows.sum())
    if shared:
        notes.append(f"{shared} interval(s) prefilled several requests per engine step "
                     "(iteration-token histogram): their timers were scaled to engine time")
    if capped:
        notes.append(f"{capped} interval(s) claimed more prefill seconds than interval x "
                     "engines: capped at the engines' time")
    overlapped = int((rows.alone_share() < 0.5).sum())
    if overlapped:
        notes.append(f"{overlapped} of {len(rows)} interval(s) ran requests concurrently (most "
                     "decode steps carried several requests): a request's prefill timer then "
                     "spans other requests' steps, so each interval weighs in proportion to how "
                     "often a request had the engine alone")
    if overlapped == len(rows):
        notes.append("every interval ran requests concurrently: the fit rests on overlapping "
                     "timers and leans high; a low-concurrency pilot (one user) would pin it")


def _unidentified(rows: IntervalTable, t_mean: np.ndarray, w: np.ndarray, history: str,
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
        CostStatus.UNIDENTIFIED, (), history, len(rows), seq_sum(rows.requests),
        reason=f"cannot separate the per-request from the per-token prefill cost: {why}",
        fix=IDENTIFY_FIX, notes=tuple(notes))


def _connected(rows: IntervalTable) -> np.ndarray:
    """Rows whose cached tokens the connector (LMCache) supplied in part."""
    return (rows.external_share > 0) & (rows.request_cached > 0)


def _candidate_terms(rows: IntervalTable, t_mean: np.ndarray, notes: list[str]) -> list[str]:
    """fixed and per_token always; the optional terms whose inputs the history holds."""
    candidates = ["fixed", "per_token"]
    has_cached = bool((rows.request_cached > 0).any())
    if has_cached or len({round(x) for x in t_mean.tolist()}) > 2:
        candidates.append("attention")
    if (np.nan_to_num(rows.stored_tokens) > 0).any():
        candidates.append("store")
    if _connected(rows).any():
        candidates.append("load")
    shares = np.minimum(1.0, np.nan_to_num(rows.lookups) / rows.requests)
    if shares.any():
        if shares.std() >= MIN_CONNECTED_SPREAD:
            candidates.append("lmcache_request")
        else:
            notes.append("every interval's requests went through LMCache alike: a per-request "
                         "LMCache cost (beyond the lookups vLLM times) cannot be told from the "
                         "fixed cost and stays in it; history with vLLM-only replicas separates "
                         "them")
    return candidates


def _two_stage_mask(rows: IntervalTable, candidates: Sequence[str], t_mean: np.ndarray,
                    w: np.ndarray, notes: list[str]) -> np.ndarray | None:
    """The vLLM-only rows (no request went through LMCache, nothing stored) when they can fix
    the compute model on their own (LMCache's terms are then fitted on the other rows' excess
    over it: two stages); None for one joint fit."""
    plain: np.ndarray = ((np.nan_to_num(rows.lookups) == 0) & (np.nan_to_num(rows.stored_tokens) == 0)
                         & ~_connected(rows))
    if not any(t in LMCACHE_TERMS for t in candidates) or plain.sum() < MIN_ROWS or (~plain).sum() < 1:
        return None
    if weighted_spread(t_mean[plain], w[plain])[1] < MIN_SPREAD:
        return None
    notes.append(f"compute cost fitted on the {int(plain.sum())} interval(s) whose requests "
                 f"did not go through LMCache; LMCache's cost on the excess of the other "
                 f"{int((~plain).sum())}")
    return plain


def _supported_terms(rows: IntervalTable, candidates: list[str], plain: np.ndarray | None,
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


def _final_fit(rows: IntervalTable, terms: list[str], plain: np.ndarray | None, history: str,
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
    return PrefillCostModel(CostStatus.FITTED, parts, history, len(rows), seq_sum(rows.requests),
                            rel_rms=rel_rms, notes=tuple(notes), draws=tuple(map(tuple, full)))


def draw_percentile(a: np.ndarray, q: float) -> float:
    """The ``q``-th percentile of bootstrap draws (numpy's linear interpolation)."""
    return float(np.percentile(a, q))
