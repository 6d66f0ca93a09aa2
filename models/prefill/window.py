"""The window being priced and what the cache saved in it, by tier.

``PricedWindow`` sums a window's per-interval increases (``kvplan.models.prefill.fit.Interval``) into
what the plan prices: the span the data covers, requests, prompt / computed / cached tokens by
tier, the attention sums, the busiest hour and bootstrap resamples of hit rate and load.
``tier_savings`` applies a fitted ``PrefillCostModel`` to it. ``MeasuredAB`` is a measured
A/B that overrides the model.

**What the cache saved.** A cached token is priced at its marginal cost: ``per_token`` plus
its attention, never the average cost per computed token (which carries the fixed part). For
an interval with ``D`` device-cached and ``E`` connector-cached tokens (device first in the
prefix):

    device  = per_token x D + attention x D^2 / (2n)
    lmcache = per_token x E + attention x ((D+E)^2 - D^2) / (2n)
              -  load x E  -  store x S  -  lmcache_request x lookups  -  lookup seconds

vLLM's own prefix cache comes with vLLM: its part is free. LMCache's part carries its
overhead (storing every chunk it keeps, loading what it serves, and the lookups vLLM times
itself: ``vllm:lmcache_mp_lookup_duration_seconds``, which hold up the scheduler before a
request's prefill starts). Lookups and stores cost engine time only when the engine has nothing
else to run: both are weighted by ``exp(-(B - 1))``, ``B`` the mean number of requests per
decode-only step (the other requests running taken as Poisson with mean ``B - 1``): 1 for one
request at a time, nearly 0 under load, where they overlap other requests' steps. LMCache's
part can be negative.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..core.vocabulary import Tier
from .fit import BAND, PrefillCostModel, draw_percentile
from .interval import Interval
from .table import IntervalTable, none_as_zero, seq_sum


# ---- the priced window --------------------------------------------------------------------
@dataclass(frozen=True)
class PricedWindow:
    """The window being priced, summed from its intervals (see ``from_intervals``)."""

    asked_seconds: float
    """Length of the range asked for."""
    covered_seconds: float
    """Seconds of it the data covers (union of the vLLM targets' scrape intervals)."""
    requests: float
    """Requests of the vLLM targets over the window."""
    prompt_tokens: float
    """Their prompt tokens."""
    computed_tokens: float
    """Prompt tokens vLLM computed in prefill (not served from a cache)."""
    device_cached: float
    """Cached tokens from vLLM's own prefix cache."""
    external_cached: float
    """Cached tokens the connector (LMCache) supplied."""
    stored_tokens: float
    """Tokens LMCache stored."""
    device_attention: float
    """sum over intervals of D^2 / (2n), token^2."""
    cached_attention: float
    """sum of C^2 / (2n), token^2 (C = D + E)."""
    prompt_attention: float
    """sum of P^2 / (2n), token^2."""
    engines: int
    """Most vLLM engines reporting in one interval."""
    prefill_engine_seconds: float
    """The window's own prefill timers as engine time (co-batching scaled, capped)."""
    generation_tokens: float = 0.0
    """Output tokens."""
    engine_busy_seconds: float | None = None
    """Upper bound of the engines' busy time: per interval min(running-phase timers,
    interval x engines). ``None`` when not reported."""
    lookup_seconds: float = 0.0
    """Engine time lost to LMCache lookups: per interval the lookup time vLLM measured x the
    chance the engine had nothing else to run (``Interval.exposure``)."""
    store_exposure: float = 1.0
    """Share of LMCache's stores the engine waited for (stores weighted by the same chance:
    under load they overlap other requests' steps)."""
    exposed_lookups: float = 0.0
    """Requests that went through LMCache, weighted by the same chance."""
    resamples: tuple[tuple[float, float], ...] = ()
    """(hit rate, request-rate factor) of ``RESAMPLES`` bootstrap resamples of the window's
    intervals (seeded): how much the measured hit rate and load move with the sample. The
    decision's flip probability draws from them."""
    peak_hour_requests_per_s: float | None = None
    """Request rate of the busiest UTC hour (requests / seconds of it the data covers; hours
    covered for less than ``PEAK_HOUR_MIN_COVER_S`` are left out unless none is longer);
    ``None`` when the window has no requests."""

    @property
    def coverage(self) -> float:
        return self.covered_seconds / self.asked_seconds if self.asked_seconds > 0 else 0.0

    @property
    def cached_tokens(self) -> float:
        return self.device_cached + self.external_cached

    @classmethod
    def from_intervals(cls, intervals: Iterable[Interval] | IntervalTable, *, t_from: float, t_to: float
                       ) -> PricedWindow:
        """Sum the intervals that lie inside [t_from, t_to] (unix seconds): the vLLM targets'
        covered span and busiest hour from the intervals, everything else from the scrape rounds
        (``IntervalTable.rounds``), summed over columns in row order."""
        every = IntervalTable.of(intervals)
        inside = (every.t_end > t_from) & (every.t_start >= t_from - 1e-6) & (every.t_end <= t_to + 1e-6)
        raw = every if inside.all() else every.take(inside)  # the history's own rounds when it is the window
        vllm_rows = raw.take(raw.engines > 0)
        spans = merge_spans(zip(np.maximum(vllm_rows.t_start, t_from).tolist(),
                                np.minimum(vllm_rows.t_end, t_to).tolist(), strict=True))
        covered = sum(b - a for a, b in spans)
        peak = _peak_hour_rate(vllm_rows, spans)
        r = raw.rounds()
        boot = _resample(r)
        stored = none_as_zero(r.stored_tokens)
        exposure = r.exposure()
        cap = r.seconds * np.maximum(r.engines, 1)
        has_running = ~np.isnan(r.inference_seconds)
        running = np.minimum(r.inference_seconds, cap)
        lookup_s, lookups = none_as_zero(r.lookup_seconds), none_as_zero(r.lookups)
        busy_rows = r.requests > 0
        n = np.where(busy_rows, r.requests, 1.0)
        c = r.request_cached
        e = c * r.external_share
        d = c - e
        p = r.request_prompt

        def busy(x: np.ndarray) -> float:  # summed over the rows with requests, in order
            return seq_sum(np.where(busy_rows, x, 0.0))

        return cls(asked_seconds=max(0.0, t_to - t_from), covered_seconds=covered,
                   requests=busy(r.requests), prompt_tokens=busy(p), computed_tokens=busy(r.computed_tokens),
                   device_cached=busy(d), external_cached=busy(e), stored_tokens=seq_sum(stored),
                   device_attention=busy(d * d / (2 * n)), cached_attention=busy(c * c / (2 * n)),
                   prompt_attention=busy(p * p / (2 * n)), engines=int(max(0, r.engines.max(initial=0))),
                   prefill_engine_seconds=busy(r.engine_prefill_seconds()[0]),
                   generation_tokens=seq_sum(none_as_zero(r.generation_tokens)),
                   engine_busy_seconds=seq_sum(running[has_running]) if has_running.any() else None,
                   lookup_seconds=seq_sum(np.where(lookup_s != 0, lookup_s * exposure, 0.0)),
                   store_exposure=(seq_sum(stored * exposure) / seq_sum(stored)) if seq_sum(stored) > 0 else 1.0,
                   exposed_lookups=seq_sum(np.where(lookups != 0, lookups * exposure, 0.0)),
                   peak_hour_requests_per_s=peak, resamples=boot)

    def at_hit_rate(self, hit_rate: float) -> PricedWindow:
        """The same traffic as if ``hit_rate`` of prompt tokens had been cached (the tiers in
        today's proportions, stores in proportion to computed tokens; the attention sums scale
        with the square of the cached tokens)."""
        if not 0.0 <= hit_rate <= 1.0:
            raise ValueError(f"hit_rate: must be in [0, 1]; got {hit_rate!r}")
        cached_now = self.cached_tokens
        cached = self.prompt_tokens * hit_rate
        k = cached / cached_now if cached_now > 0 else 0.0
        dev_share = self.device_cached / cached_now if cached_now > 0 else 1.0
        comp = self.prompt_tokens - cached
        stored = self.stored_tokens * comp / self.computed_tokens if self.computed_tokens else 0.0
        if cached_now > 0:
            dev_att, cached_att = self.device_attention * k * k, self.cached_attention * k * k
        else:  # no cached tokens today: assume one mean prefix per request
            n = max(self.requests, 1.0)
            cached_att = cached * cached / (2 * n)
            dev_att = cached_att
        return replace(self, computed_tokens=comp, device_cached=cached * dev_share,
                       external_cached=cached * (1 - dev_share), stored_tokens=stored,
                       device_attention=dev_att, cached_attention=cached_att)


RESAMPLES = 200
RESAMPLE_SEED = 7


def resample_hit_and_load(rows: Sequence[Interval] | IntervalTable, draws: int = RESAMPLES,
                          seed: int = RESAMPLE_SEED) -> tuple[tuple[float, float], ...]:
    """Bootstrap the window's intervals (with requests and prompt tokens): per resample the
    token-weighted hit rate and the mean requests per interval relative to the window's. Empty
    with fewer than 2 such intervals."""
    return _resample(IntervalTable.of(rows), draws, seed)


def _resample(rows: IntervalTable, draws: int = RESAMPLES, seed: int = RESAMPLE_SEED
              ) -> tuple[tuple[float, float], ...]:
    use = (rows.requests > 0) & (rows.request_prompt > 0)
    if use.sum() < 2:
        return ()
    cached, prompt, req = rows.request_cached[use], rows.request_prompt[use], rows.requests[use]
    idx = np.random.default_rng(seed).integers(0, len(req), size=(draws, len(req)))
    hit = cached[idx].sum(axis=1) / prompt[idx].sum(axis=1)
    load = req[idx].mean(axis=1) / req.mean()
    return tuple((float(h), float(k)) for h, k in zip(hit, load, strict=True))


def merge_spans(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Time spans merged where they overlap or touch, in time order: the time the data covers."""
    merged: list[list[float]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


PEAK_HOUR_MIN_COVER_S = 600.0
"""An hour covered by less data than this does not compete for the busiest hour (a few
seconds at an hour's edge would give a rate from a handful of requests)."""


def peak_hour_rate(rows: Sequence[Interval] | IntervalTable, spans: Sequence[tuple[float, float]]) -> float | None:
    """Requests per second of the busiest UTC hour: each interval's requests are spread over the
    hours it spans in proportion to time (a missed scrape makes one interval of two); an hour's
    rate divides by the seconds of it the data covers (``spans``, the vLLM targets' intervals,
    merged). Hours covered for less than ``PEAK_HOUR_MIN_COVER_S`` compete
    only when no hour is covered longer."""
    return _peak_hour_rate(IntervalTable.of(rows), spans)


def _hours(a: float, b: float) -> Iterator[tuple[int, float]]:
    """(UTC hour, seconds of [a, b) in it) for every hour [a, b) touches."""
    h = int(a // 3600)
    while h * 3600 < b:
        yield h, max(0.0, min(b, (h + 1) * 3600) - max(a, h * 3600))
        h += 1


def _peak_hour_rate(rows: IntervalTable, spans: Sequence[tuple[float, float]]) -> float | None:
    use = (rows.requests > 0) & (rows.t_end > rows.t_start)
    a, b, n = rows.t_start[use], rows.t_end[use], rows.requests[use]
    if not len(a):
        return None
    # every (interval, hour it spans), interval by interval and hour by hour: the order the
    # requests of an hour are added in (np.add.at adds in index order)
    first = np.floor_divide(a, 3600)
    k = int((np.floor_divide(b, 3600) - first).max()) + 1
    h = first[:, None] + np.arange(k)[None, :]
    inside = h * 3600 < b[:, None]
    sec = np.maximum(0.0, np.minimum(b[:, None], (h + 1) * 3600) - np.maximum(a[:, None], h * 3600))
    share = n[:, None] * sec / (b - a)[:, None]
    hours, share = h[inside].astype(np.int64), share[inside]
    keys, at = np.unique(hours, return_inverse=True)
    reqs = np.zeros(len(keys))
    np.add.at(reqs, at, share)
    cover: dict[int, float] = {}
    for x, y in merge_spans(spans):
        for hour, s in _hours(x, y):
            cover[hour] = cover.get(hour, 0.0) + s
    rates = {hr: v / cover[hr] for hr, v in zip(keys.tolist(), reqs.tolist(), strict=True) if cover.get(hr, 0.0) > 0}
    long = {hr: v for hr, v in rates.items() if cover[hr] >= PEAK_HOUR_MIN_COVER_S}
    pick = long or rates
    return max(pick.values()) if pick else None


# ---- what the cache saved ---------------------------------------------------------------------
@dataclass(frozen=True)
class Band:
    """A figure with its band (engine-seconds unless said otherwise)."""

    value: float
    """The central figure."""
    low: float
    """Low end of its band."""
    high: float
    """High end of its band."""

    def scaled(self, k: float) -> Band:
        lo, hi = sorted((self.low * k, self.high * k))
        return Band(self.value * k, lo, hi)

    def to_dict(self) -> dict[str, float]:
        return {"value": self.value, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class TierSavings:
    """Prefill the cache saved in one window, by tier, in engine-seconds (x GPUs per engine
    for GPU-seconds)."""

    device: Band
    """vLLM's own prefix cache (free: it comes with vLLM)."""
    lmcache_gross: Band
    """Compute the tokens LMCache supplied would have cost."""
    lmcache_overhead: Band
    """LMCache's cost: lookups (measured), storing chunks and loading hits (fitted); positive."""
    lmcache: Band
    """LMCache's net part: gross - overhead (can be negative)."""
    total: Band
    """device + lmcache."""
    gross: Band
    """device + lmcache_gross: every cached token's compute, before LMCache's overhead."""
    with_reuse: Band
    """Modelled prefill engine time of the window as it ran."""
    without_reuse: Band
    """Modelled prefill engine time had nothing been cached (no LMCache either)."""
    cap_factor: float = 1.0
    """< 1 when the model claimed more prefill time than the engines had: every figure was
    scaled by it."""


def _tier_values(c: dict[str, float], w: PricedWindow) -> dict[str, float]:
    b, a = c["per_token"], c["attention"]
    device = b * w.device_cached + a * w.device_attention
    gross = b * w.external_cached + a * (w.cached_attention - w.device_attention)
    overhead = (c["load"] * w.external_cached + c["store"] * w.stored_tokens * w.store_exposure
                + c["lmcache_request"] * w.exposed_lookups + w.lookup_seconds)
    with_reuse = (c["fixed"] * w.requests + b * w.computed_tokens
                  + a * (w.prompt_attention - w.cached_attention) + overhead)
    without = c["fixed"] * w.requests + b * w.prompt_tokens + a * w.prompt_attention
    return {Tier.DEVICE: device, "lmcache_gross": gross, "lmcache_overhead": overhead,
            Tier.LMCACHE: gross - overhead, "total": device + gross - overhead,
            "gross": device + gross,
            "with_reuse": with_reuse, "without_reuse": without}


def tier_savings(cost_model: PrefillCostModel, window: PricedWindow) -> TierSavings | None:
    """What the cache saved in ``window`` by tier (None when the model is not identified).
    If the model says the window's prefill took more than ``covered x engines`` seconds, every
    figure is scaled down to that (the engines cannot have been busier than the clock)."""
    if not cost_model.identified:
        return None
    central = _tier_values(cost_model.coef(), window)
    cap = window.covered_seconds * max(window.engines, 1)
    k = 1.0
    if cap > 0 and central["with_reuse"] > cap:
        k = cap / central["with_reuse"]
    draws = [_tier_values(d, window) for d in cost_model.coef_draws()]

    def band(name: str) -> Band:
        vals = np.array([d[name] for d in draws])
        return Band(float(central[name] * k), draw_percentile(vals, BAND[0]) * k, draw_percentile(vals, BAND[1]) * k)

    return TierSavings(device=band(Tier.DEVICE), lmcache_gross=band("lmcache_gross"),
                       lmcache_overhead=band("lmcache_overhead"), lmcache=band(Tier.LMCACHE),
                       total=band("total"), gross=band("gross"), with_reuse=band("with_reuse"),
                       without_reuse=band("without_reuse"), cap_factor=k)


# ---- measured beats modelled -------------------------------------------------------------------
@dataclass(frozen=True)
class MeasuredAB:
    """A measured A/B of one workload: engine time with reuse off and on (``kvplan pilot``
    pairs, or kvplan.deploy.local.recorders.ab). Where it exists it replaces the model, labelled "measured"."""

    label: str
    """What was measured, e.g. "pilot pair 'chat-ab' (runs 12 off, 13 on), 8x H100"."""
    off_engine_seconds: float
    """Engine time the workload took with reuse off."""
    on_engine_seconds: float
    """... with reuse on."""
    on_cached_tokens: float
    """Prompt tokens the reuse-on run served from cache."""
    engine_seconds_source: str
    """How engine time was measured (e.g. "worker CPU seconds (/proc)")."""

    def __post_init__(self) -> None:
        for name in ("off_engine_seconds", "on_engine_seconds", "on_cached_tokens"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"MeasuredAB.{name}: must be a finite number >= 0; got {v!r}")

    @property
    def saved_engine_seconds(self) -> float:
        """off - on (negative when reuse cost more than it saved)."""
        return self.off_engine_seconds - self.on_engine_seconds

    @property
    def saved_per_cached_token(self) -> float | None:
        """Engine-seconds saved per cached token of the reuse-on run."""
        if self.on_cached_tokens <= 0:
            return None
        return self.saved_engine_seconds / self.on_cached_tokens
