"""One deployment's increases over a window, and per time bucket for the charts.

Long windows read whole UTC days from the nightly rollups (``daily_rollups``; gauges:
``gauge_rollups``) and only the partial days at their edges from raw samples, as planned by
``kvplan.models.metrics.spans.plan_spans``; the result counts exactly the pairs a raw read would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, cast

from ...models.core.errors import KvplanError
from ...models.core.timeutil import DAY, aware_utc, ceil_day, floor_day
from ...models.metrics import catalog as c
from ...models.metrics import window as mw
from ...models.metrics.catalog import CHART_NAMES, GAUGE_LABELS, NOTE_GAUGES, RUNNING, TTFT, count_name
from ...models.metrics.spans import Spans, as_instant, chart_step, longest_run, plan_spans
from ...models.metrics.spellings import CACHED_DAY, CACHED_RULE_NAMES, cached_of_interval_rows, stretch_answer
from ...models.metrics.window import Increase, WindowStats, window_stats
from ...models.metrics.window_notes import null_reasons
from ...sql.db import Source, remember


@dataclass(frozen=True)
class Window:
    """The increases of one deployment over [t_from, t_to] and what they say."""

    deployment: str
    model_name: str | None
    t_from: datetime
    t_to: datetime
    rows: tuple[Increase, ...]
    stats: WindowStats
    spans: Spans

    @property
    def seconds(self) -> float:
        return (self.t_to - self.t_from).total_seconds()

    @property
    def rolled_days(self) -> int:
        return self.spans.rolled_days

    @property
    def source_note(self) -> str:
        """Where the numbers were read from (shown under the charts and in the report)."""
        if self.spans.rolled is None or not self.rolled_days:
            return "read from raw samples"
        a, b = self.spans.rolled
        return (f"{self.rolled_days} whole day(s) {a:%Y-%m-%d}..{b - DAY:%Y-%m-%d} from the nightly "
                "rollups, the partial days at the edges from raw samples")


def rolled_days(source: Source, deployment: str, t_from: datetime, t_to: datetime,
                query: str = "dashboard_rolled_days") -> list[date | datetime]:
    """The whole UTC days in [t_from, t_to] that ``query`` says the nightly job stored (daily
    increases by default; ``gauge_rolled_days``, ``prefill_rolled_days``)."""
    return [r["day"] for r in source.fetch(query, deployment=deployment, d_from=ceil_day(t_from),
                                           d_to=floor_day(t_to))]


def span_has_points(source: Source, deployment: str, t_after: datetime, t_to: datetime) -> bool:
    """Whether a raw span (pairs ending in (t_after, t_to]) can hold a pair: the deployment has
    a sample or an ingested Prometheus step there (named query ``span_has_points``). Every pair
    ends at a sample inside the span (a series' _created zero point and its birth point come
    before that series' own samples in the span), or is a step; so a span without one holds
    none, and its readers skip its scan (the window past the end of the data: a month whose
    data stops before its last day, whose tail would scan a whole day of look-back for no
    pair). Read once per snapshot."""
    a, b = aware_utc(t_after), aware_utc(t_to)
    return remember(source, ("span_has_points", deployment, a, b),
                    lambda: bool(source.fetch("span_has_points", deployment=deployment, t_after=a,
                                              t_to=b)[0]["found"]))


def edge_day_stored(source: Source, deployment: str, day: datetime) -> bool:
    """Whether the nightly job stored what a raw read of the UTC day alone gives (named query
    ``edge_day_stored``; ``edge_rollups``, ``prefill_edge_rollups``, migration 015): a window
    starting at the day's midnight (a month) then reads its first day from them, the same rows as
    the raw read (``span_increases_and_buckets``, ``prefill_intervals`` of (day, day, day + 1),
    every model). Days rolled up before the migration are read raw. Read once per snapshot."""
    d = aware_utc(day)
    return remember(source, ("edge_day_stored", deployment, d),
                    lambda: bool(source.fetch("edge_day_stored", deployment=deployment, day=d)[0]["found"]))


def load_window(source: Source, deployment: str, t_from: datetime, t_to: datetime,
                model_name: str | None = None) -> Window:
    """Increases over [t_from, t_to]: whole rolled-up days from ``daily_rollups``, the
    edges from raw samples. For regular scrapes this counts exactly the pairs
    ``window_increases`` counts (a pair longer than ``EDGE_LOOKBACK``, a day, across the start
    of a rolled day or the end of the run is the only difference). Cached prompt
    tokens are read per target and scrape interval (``cached_of_spans``): the rule is chosen per
    target and per stretch of its life, as ``kvplan stats`` and the plan choose it. Read once
    per snapshot for the same arguments (``sql.db.remember``)."""
    t_from, t_to = aware_utc(t_from), aware_utc(t_to)
    return remember(source, ("load_window", deployment, t_from, t_to, model_name),
                    lambda: _read_window(source, deployment, t_from, t_to, model_name))


def _read_window(source: Source, deployment: str, t_from: datetime, t_to: datetime,
                 model_name: str | None) -> Window:
    spans = plan_spans(rolled_days(source, deployment, t_from, t_to), t_from, t_to)
    rows: list[Increase] = []
    for lb, after, end in spans.raw:
        if not span_has_points(source, deployment, after, end):
            continue
        rows += [Increase(**r) for r in source.fetch("span_increases", deployment=deployment, t_lookback=lb,
                                                     t_after=after, t_to=end, model_name=model_name)]
    if spans.rolled:
        rows += [Increase(**r) for r in source.fetch("daily_increases", deployment=deployment,
                                                     t_from=spans.rolled[0], t_to=spans.rolled[1],
                                                     model_name=model_name)]
    rows, cached = cached_of_spans(source, deployment, spans, rows, model_name)
    return Window(deployment, model_name, t_from, t_to, tuple(rows),
                  _noted_stats(source, deployment, t_from, t_to, model_name, rows, spans, cached), spans)


def _noted_stats(source: Source, deployment: str, t_from: datetime, t_to: datetime, model_name: str | None,
                 rows: list[Increase], spans: Spans, cached: tuple[float | None, str] | None = None) -> WindowStats:
    """``window_stats`` with notes: why every figure is null (no increase at all), and stored
    rows the raw edges left out (rolled-up days were summed by the same guarded macro). The
    gauges kvplan reads only for notes and lifetime figures (``catalog.NOTE_GAUGES``: vLLM V0's
    lifetime hit rate, SGLang's per-batch hit rate, LMCache in-process gauges) are passed along."""
    st = window_stats(rows, note_gauges(source, deployment, t_from, t_to, model_name), cached)
    if not rows:
        st.notes += why_empty(source, deployment, t_from, t_to, model_name)
    for _lb, after, end in spans.raw:
        st.notes += data_notes(source, deployment, after, end, model_name)
    return st


def note_gauges(source: Source, deployment: str, t_from: datetime, t_to: datetime, model_name: str | None = None
                ) -> dict[str, float]:
    """Gauge family -> the mean over its series of their last value in the window, for the
    families ``window_stats`` notes (never a window's rate): named query ``note_gauges``, which
    reads only those series' samples."""
    last: dict[str, list[float]] = {}
    for r in source.fetch("note_gauges", deployment=deployment, t_from=t_from, t_to=t_to, model_name=model_name,
                          names=list(NOTE_GAUGES)):
        last.setdefault(r["name"], []).append(float(r["last"]))
    return {k: sum(v) / len(v) for k, v in last.items()}


def window_increases(source: Source, deployment: str, t_from: datetime, t_to: datetime,
                     model_name: str | None = None) -> list[Increase]:
    """Raw per-series increases over [t_from, t_to] (no rollups): the reference reading."""
    return [Increase(**r) for r in source.fetch("window_increases", deployment=deployment, t_from=t_from,
                                                t_to=t_to, model_name=model_name)]


def stats(source: Source, deployment: str, t_from: datetime, t_to: datetime,
          model_name: str | None = None) -> WindowStats:
    """The headline numbers of one deployment over [t_from, t_to] (``kvplan stats``), with
    notes on what was left out and why a figure is missing."""
    check_model(source, deployment, model_name)
    rows = window_increases(source, deployment, t_from, t_to, model_name)
    return _noted_stats(source, deployment, t_from, t_to, model_name, rows, Spans(None, ((t_from, t_from, t_to),)),
                        cached=cached_by_interval(source, deployment, t_from, t_to, model_name))


def cached_by_interval(source: Source, deployment: str, t_from: datetime, t_to: datetime,
                       model_name: str | None = None) -> tuple[float | None, str]:
    """Cached prompt tokens over [t_from, t_to] with the rule chosen per target and per scrape
    interval (``spellings.cached_per_stretch``): what the plan's prefill intervals count too."""
    rows = source.fetch("cached_intervals", deployment=deployment, t_from=t_from, t_to=t_to,
                        model_name=model_name, names=list(CACHED_RULE_NAMES))
    return stretch_answer(*cached_of_interval_rows(rows, Increase))


_CACHED_COLUMNS = ("target", "t_end", "name", "family", "model_name", "engine", "le", "labels", "increase")
"""The columns of a ``cached_intervals_span`` row."""


def cached_of_spans(source: Source, deployment: str, spans: Spans, rows: list[Increase],
                    model_name: str | None, *, read: dict[tuple[datetime, datetime, datetime], list[dict]] | None = None
                    ) -> tuple[list[Increase], tuple[float | None, str]]:
    """The rows without the rolled-up days' cached-tokens sample, and the window's cached prompt
    tokens with the rule per target and scrape interval, as ``kvplan stats`` reads them: the raw
    edges' intervals read here (the few sample names of the rule; ``read``: the ``cached_intervals_span``
    rows of spans already read, by ``span_increases_and_buckets``), the rolled-up days' figures
    from the nightly rollup (``spellings.CACHED_DAY``, stored per day by ``rollup_day``). Days
    rolled up before the rollup stored it are read raw (correct, slower)."""
    day_rows = [r for r in rows if r.name == CACHED_DAY]
    rows = [r for r in rows if r.name != CACHED_DAY]
    scope = "model" if model_name else "all"
    mine = [(lab, r) for lab, r in ((json.loads(r.labels or "{}"), r) for r in day_rows) if lab.get("scope") == scope]
    from_rollup = bool(spans.rolled) and sum(r.pairs or 0 for _, r in mine) >= spans.rolled_days
    raw_spans = list(spans.raw)
    if spans.rolled and not from_rollup:  # rolled up before the rollups stored it: read those days raw
        a, b = spans.rolled
        raw_spans.append((a - DAY, a, b))
    raw: list[dict] = []
    for lb, after, end in raw_spans:
        if read is not None and (lb, after, end) in read:
            raw += read[(lb, after, end)]
            continue
        if not span_has_points(source, deployment, after, end):
            continue
        raw += source.fetch("cached_intervals_span", deployment=deployment, t_lookback=lb, t_after=after, t_to=end,
                            model_name=model_name, names=list(CACHED_RULE_NAMES))
    total, how, found, unknown = cached_of_interval_rows(raw, Increase)
    if from_rollup:
        total += sum(r.increase for _, r in mine)
        found = found or any(lab.get("found") == "1" for lab, _ in mine)
        unknown = unknown or any(lab.get("known") == "0" for lab, _ in mine)
        how = "; ".join(sorted({how} - {""} | ({"the nightly rollups"} if mine else set())))
    return rows, stretch_answer(total, how, found, unknown)


def data_notes(source: Source, deployment: str, t_from: datetime, t_to: datetime,
               model_name: str | None = None) -> list[str]:
    """Stored rows the analysis left out (bad_samples): reported, never raised."""
    rows = source.fetch("bad_samples", deployment=deployment, t_from=t_from, t_to=t_to, model_name=model_name)
    return [f"warning: {r['name']}: {r['n']} stored sample(s) not used ({r['bad_values']} impossible value(s), "
            f"{r['bad_created']} impossible _created time(s))" for r in rows]


def check_model(source: Source, deployment: str, model_name: str | None) -> None:
    """A ``--model`` the deployment's data does not have is an error naming the ones it has."""
    if model_name is None:
        return
    known = model_names(source, deployment)
    if model_name not in known:
        raise KvplanError(f"no model {model_name!r} in deployment {deployment!r} (known: "
                          f"{', '.join(map(repr, known)) or 'none: no model_name label'})", source="--model")


def why_empty(source: Source, deployment: str, t_from: datetime, t_to: datetime,
              model_name: str | None = None) -> list[str]:
    """Why a window gave no increase at all, so every figure is null: no data in the window,
    one scrape per target, or a model not in the data."""
    per_target = source.fetch("scrape_count_in_window", deployment=deployment, t_from=t_from, t_to=t_to)
    span = next((d for d in source.fetch("deployments") if d["deployment"] == deployment), None)
    return null_reasons({r["target"]: r["ok"] for r in per_target},
                        (span["first_scrape"], span["last_scrape"]) if span else None, model_name,
                        model_names(source, deployment))


@dataclass(frozen=True)
class TimeBucket:
    """The summed increases of the chart names in one time bucket."""

    start: datetime
    rows: tuple[Increase, ...]
    _stats: WindowStats | None = field(default=None, init=False, repr=False, compare=False)

    def stats(self) -> WindowStats:
        """``window_stats`` of the bucket, computed once (the Cache view's cached tokens and its
        tier points both ask; read it, don't change it)."""
        if self._stats is None:
            object.__setattr__(self, "_stats", window_stats(list(self.rows)))
        return cast(WindowStats, self._stats)


def _daily_rows(source: Source, deployment: str, rolled: tuple[datetime, datetime], model_name: str | None,
                names: list[str]) -> list[dict]:
    """Whole rolled-up days as chart rows, one bucket per UTC day."""
    return [dict(r, bucket=r["day"]) for r in source.fetch("daily_series", deployment=deployment, t_from=rolled[0],
                                                           t_to=rolled[1], model_name=model_name, names=names)]


def _buckets(raw: list[dict]) -> list[TimeBucket]:
    """Chart rows (bucket, name, increase, le, labels) grouped into time buckets, in time order."""
    by: dict[datetime, list[Increase]] = {}
    instant: dict[date | datetime, datetime] = {}  # each bucket value converted once
    for r in raw:
        b = r["bucket"]
        at = instant.get(b)
        if at is None:
            at = instant[b] = as_instant(b)
        by.setdefault(at, []).append(Increase(name=r["name"], increase=r["increase"], le=r["le"], labels=r["labels"]))
    return [TimeBucket(b, tuple(by[b])) for b in sorted(by)]


def window_buckets(source: Source, deployment: str, t_from: datetime, t_to: datetime, step_s: int,
                   model_name: str | None = None, names: list[str] | None = None) -> list[TimeBucket]:
    """The chart names' increases per time bucket (start, start + step]. Windows of
    ``DAILY_POINTS_FROM`` or more get one bucket per UTC day, rolled-up days read from
    ``daily_rollups``; shorter ones are read from raw samples at ``step_s``."""
    f, t = aware_utc(t_from), aware_utc(t_to)
    names = names or CHART_NAMES
    step = chart_step(f, t, step_s)
    raw: list[dict] = []
    if step == 86400:
        spans = plan_spans(rolled_days(source, deployment, f, t), f, t)
        for lb, after, end in spans.raw:
            if not span_has_points(source, deployment, after, end):
                continue
            raw += source.fetch("span_buckets", deployment=deployment, t_lookback=lb, t_after=after, t_to=end,
                                model_name=model_name, step_s=step, origin=floor_day(after), names=names)
        if spans.rolled:
            raw += _daily_rows(source, deployment, spans.rolled, model_name, names)
    else:
        raw = source.fetch("span_buckets", deployment=deployment, t_lookback=f, t_after=f, t_to=t,
                           model_name=model_name, step_s=step, origin=f, names=names)
    return _buckets(raw)


def load_window_and_buckets(source: Source, deployment: str, t_from: datetime, t_to: datetime, step_s: int,
                            model_name: str | None = None,
                            names: list[str] | None = None, *, buckets_from: datetime | None = None,
                            buckets_to: datetime | None = None) -> tuple[Window, list[TimeBucket]]:
    """``load_window`` and ``window_buckets`` in one pass: a raw edge both read (always for
    daily points over the same window, and for short windows without rolled-up days) has its
    sample pairs scanned once (``span_increases_and_buckets``) instead of twice; the rolled-up
    days as in each. The buckets span [``buckets_from``, ``buckets_to``], by default the window
    (the report's charts span the data inside its month, its figures the whole month). Same
    rows as the two calls; the window is kept for ``load_window`` in the same snapshot."""
    f, t = aware_utc(t_from), aware_utc(t_to)
    bf, bt = aware_utc(buckets_from or f), aware_utc(buckets_to or t)
    names = names or CHART_NAMES
    step = chart_step(bf, bt, step_s)
    spans = plan_spans(rolled_days(source, deployment, f, t), f, t)
    bspans = None
    if step == 86400:  # the buckets' raw edges, each with its buckets' origin (as window_buckets reads them)
        bspans = spans if (bf, bt) == (f, t) else plan_spans(rolled_days(source, deployment, bf, bt), bf, bt)
        edges = {(lb, after, end): floor_day(after) for lb, after, end in bspans.raw}
    else:
        edges = {(bf, bf, bt): bf}
    if not any(span in edges for span in spans.raw):  # nothing both read: the two reads
        return (load_window(source, deployment, f, t, model_name),
                window_buckets(source, deployment, bf, bt, step_s, model_name, names))
    rows: list[Increase] = []
    got: dict[tuple[datetime, datetime, datetime], list[dict]] = {}  # an edge's bucket rows, read with the window's
    cached_rows: dict[tuple[datetime, datetime, datetime], list[dict]] = {}  # and its cached_intervals_span rows
    for lb, after, end in spans.raw:
        if not span_has_points(source, deployment, after, end):
            continue
        if (lb, after, end) not in edges:
            rows += [Increase(**r) for r in source.fetch("span_increases", deployment=deployment, t_lookback=lb,
                                                         t_after=after, t_to=end, model_name=model_name)]
            continue
        mine = got.setdefault((lb, after, end), [])
        in_cached = cached_rows.setdefault((lb, after, end), [])
        stored = (model_name is None and step == 86400 and lb == after == floor_day(after) and end == after + DAY
                  and edge_day_stored(source, deployment, after))
        read = (source.fetch("edge_rollup_rows", deployment=deployment, day=after, names=names,
                             cached_names=list(CACHED_RULE_NAMES)) if stored else
                source.fetch("span_increases_and_buckets", deployment=deployment, t_lookback=lb, t_after=after,
                             t_to=end, model_name=model_name, step_s=step, origin=edges[(lb, after, end)],
                             names=names, cached_names=list(CACHED_RULE_NAMES)))
        for r in read:
            part = r.pop("part")
            bucket = r.pop("bucket")
            if part == "cached":
                in_cached.append({k: r[k] for k in _CACHED_COLUMNS})
                continue
            for k in ("target", "t_end", "engine"):
                del r[k]
            if part == "window":
                rows.append(Increase(**r))
            else:
                mine.append(dict(r, bucket=bucket))
    if spans.rolled:
        rows += [Increase(**r) for r in source.fetch("daily_increases", deployment=deployment,
                                                     t_from=spans.rolled[0], t_to=spans.rolled[1],
                                                     model_name=model_name)]
    raw: list[dict] = []
    for (lb, after, end), origin in edges.items():
        if (lb, after, end) in got:
            raw += got[(lb, after, end)]
        elif span_has_points(source, deployment, after, end):
            raw += source.fetch("span_buckets", deployment=deployment, t_lookback=lb, t_after=after, t_to=end,
                                model_name=model_name, step_s=step, origin=origin, names=names)
    if bspans is not None and bspans.rolled:
        raw += _daily_rows(source, deployment, bspans.rolled, model_name, names)
    rows, cached = cached_of_spans(source, deployment, spans, rows, model_name, read=cached_rows)
    stats = _noted_stats(source, deployment, f, t, model_name, rows, spans, cached)
    win = remember(source, ("load_window", deployment, f, t, model_name),
                   lambda: Window(deployment, model_name, f, t, tuple(rows), stats, spans))
    return win, _buckets(raw)


def gauge_points(source: Source, deployment: str, t_from: datetime, t_to: datetime, step_s: int,
                 model_name: str | None = None, names: list[str] | None = None) -> list[dict]:
    """Gauge mean / max / last per time bucket, target and series (daily from
    ``gauge_rollups`` over long windows, else raw samples). ``bucket`` is aware UTC."""
    f, t = aware_utc(t_from), aware_utc(t_to)
    names = names or list(GAUGE_LABELS)
    step = chart_step(f, t, step_s)
    end = t + timedelta(microseconds=1)  # the last sample at t_to is inside the window
    if step != 86400:
        out = source.fetch("span_gauges", deployment=deployment, t_from=f, t_to=end, model_name=model_name,
                           step_s=step, origin=f, names=names)
    else:
        run = longest_run(rolled_days(source, deployment, f, t, "gauge_rolled_days"), ceil_day(f), floor_day(t))
        parts = [(f, end)] if run is None else [(f, run[0]), (run[1], end)]
        out = []
        for a, b in parts:
            if b > a:
                out += source.fetch("span_gauges", deployment=deployment, t_from=a, t_to=b, model_name=model_name,
                                    step_s=step, origin=floor_day(a), names=names)
        if run:
            out += source.fetch("daily_gauges", deployment=deployment, d_from=run[0], d_to=run[1],
                                model_name=model_name, names=names)
    for r in out:
        r["bucket"] = as_instant(r["bucket"])
    return sorted(out, key=lambda r: (r["bucket"], r["target"], r["name"], r["labels"], r["model_name"] or "",
                                      r["engine"] or ""))


def engines_in_window(source: Source, deployment: str, t_from: datetime, t_to: datetime) -> int:
    """vLLM engines (target x engine) with data in the window, without reading raw samples."""
    t_from, t_to = aware_utc(t_from), aware_utc(t_to)
    return remember(source, ("engines_in_window", deployment, t_from, t_to),
                    lambda: len(source.fetch("dashboard_engines", deployment=deployment, t_from=t_from, t_to=t_to)))


def peak_running_per_engine(source: Source, deployment: str, t_from: datetime, t_to: datetime,
                            model_name: str | None = None) -> float | None:
    """The most requests one vLLM engine ran at once in the window (``vllm:num_requests_running``,
    the highest sample of any engine): the concurrency one replica must hold KV for (the replica
    memory check). None when the gauge is not reported."""
    rows = gauge_points(source, deployment, t_from, t_to, 3600, model_name, names=[RUNNING])
    peaks = [r["max"] for r in rows if r.get("max") is not None]
    return float(max(peaks)) if peaks else None


TREND_LOOKBACK = timedelta(days=90)
"""How far back the measured growth trend reads whole days."""


def daily_requests(source: Source, deployment: str, first_ts: datetime, t_to: datetime,
                   model_name: str | None = None) -> list[tuple[float, float]]:
    """(day number, requests) of every whole UTC day of the deployment's data up to ``t_to``
    (at most ``TREND_LOOKBACK``), for ``kvplan.models.capacity.growth.measured_growth``: rolled-up days from the
    nightly rollups, others from raw samples."""
    end = floor_day(t_to)
    start = max(ceil_day(first_ts), end - TREND_LOOKBACK)
    if end - start < DAY:
        return []
    buckets = window_buckets(source, deployment, start, end, 86400, model_name, names=[count_name(TTFT)])
    return [((b.start - start) / DAY, float(b.stats().requests or 0.0)) for b in buckets]


def model_names(source: Source, deployment: str) -> list[str]:
    """The ``model_name`` values the deployment's series carry."""
    return [r["model_name"] for r in source.fetch("models", deployment=deployment)]


def measured_of(w: Window, engines: int) -> dict[str, Any]:
    """What the deployment measured over a loaded window: hit rate, requests, TTFT mean, p50, p99
    (and its bucket), the TTFT bounds, and its ``engines`` (vLLM engines with data in it)."""
    rows = list(w.rows)
    n = mw.total(rows, c.count_name(c.TTFT))
    s = mw.total(rows, c.sum_name(c.TTFT))
    st = w.stats
    buckets = mw.histogram_buckets(rows, c.TTFT)
    return {
        "hit_rate": st.lmcache_lookup_hit_rate, "requests": n,
        "ttft_mean_s": (s / n) if n and s is not None else None,  # no TTFT sum in the window: unknown
        "ttft_p50_s": st.ttft_p50_s, "ttft_p99_s": st.ttft_p99_s,
        "ttft_p99_bucket_s": ([st.ttft_p99.lower, st.ttft_p99.upper] if st.ttft_p99 is not None else None),
        "ttft_bounds": sorted({le for le, _ in buckets}),
        "engines": engines,
    }
