"""The estimator under the prefill cost fit: the design matrix of per-request means, exact
weighted non-negative least squares, Huber weights on relative residuals and the bootstrap over
intervals, in one stage or two (compute terms on vLLM-only rows, LMCache's terms on the others'
excess). What the terms mean: ``kvplan.models.prefill.fit``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .interval import Interval
from .table import IntervalTable

LMCACHE_TERMS = ("store", "load", "lmcache_request")
ALONE_FLOOR = 0.01
"""Least weight (x requests) an interval whose requests always overlapped keeps in the fit."""
HUBER_K = 1.5
"""Residuals beyond this many robust standard deviations weigh less (Huber weights)."""


def design(rows: Sequence[Interval] | IntervalTable, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray,
                                                                                     np.ndarray]:
    """Per-request means: X (rows x terms), y (engine prefill seconds per request), w."""
    r = IntervalTable.of(rows)
    n = r.requests
    t, cached = r.computed_tokens / n, r.request_cached / n
    p = t + cached
    cols = {"fixed": np.ones(len(r)), "per_token": t, "attention": (p * p - cached * cached) / 2.0,
            "store": np.nan_to_num(r.stored_tokens) / n,
            "load": cached * r.external_share,
            "lmcache_request": np.minimum(1.0, np.nan_to_num(r.lookups) / n)}
    X = np.column_stack([cols[k] for k in terms]) if terms else np.empty((len(r), 0))
    y = r.engine_prefill_seconds()[0] / n
    w = n * np.maximum(r.alone_share(), ALONE_FLOOR)
    return X.astype(float).reshape(len(r), len(terms)), y.astype(float), w.astype(float)


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


def nnls_fit(X: np.ndarray, y: np.ndarray, w: np.ndarray, counts: np.ndarray | None = None
         ) -> np.ndarray:
    """Weighted NNLS (columns scaled to unit weighted RMS for conditioning)."""
    ww = w if counts is None else w * counts
    scale = np.sqrt((ww[:, None] * X * X).sum(axis=0) / max(ww.sum(), 1e-300))
    scale[scale == 0] = 1.0
    Xs = X / scale
    G = Xs.T @ (ww[:, None] * Xs)
    h = Xs.T @ (ww * y)
    yy = float((ww * y * y).sum())
    beta: np.ndarray = _nnls_gram(G, h, yy) / scale
    return beta


def huber_weights(X: np.ndarray, y: np.ndarray, w: np.ndarray, iterations: int = 3) -> np.ndarray:
    """Huber weights (1 for ordinary intervals, less for outliers) by iteratively reweighted
    NNLS on relative residuals (timer noise is relative: a busy moment stretches a long prefill
    as much as a short one): scale = 1.4826 x the median absolute weighted relative residual."""
    h = np.ones_like(w)
    for _ in range(iterations):
        pred = X @ nnls_fit(X, y, w * h)
        r = (y - pred) / np.maximum(np.abs(pred), 1e-12) * np.sqrt(w)
        scale = 1.4826 * float(np.median(np.abs(r)))
        if scale <= 0:
            break
        h = np.minimum(1.0, HUBER_K * scale / np.maximum(np.abs(r), 1e-300))
    return h


class Estimator:
    """The fit of ``terms`` on ``rows``: one weighted NNLS, or -- with ``plain`` (a mask of
    vLLM-only rows) -- the compute terms on those rows, then LMCache's terms on the other rows'
    excess over them. Huber weights are computed once per stage; ``bootstrap`` resamples rows."""

    def __init__(self, rows: Sequence[Interval] | IntervalTable, terms: Sequence[str], plain: np.ndarray | None):
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
