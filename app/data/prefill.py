"""What the prefill cost model reads from DuckDB: per-interval increases, the history it is
fitted on, the priced window, and measured A/B pairs.

* ``prefill_table`` -- one row per target and scrape interval, as columns
  (``kvplan.models.prefill.table.IntervalTable``): raw edges from the named query
  ``prefill_intervals``, whole stored days from ``prefill_rollup_rows`` read as Arrow columns;
  ``prefill_intervals`` -- the same rows as ``kvplan.models.prefill.interval.Interval`` objects;
* ``describe_history`` -- one line saying which history a fit used;
* ``measured_ab`` -- the latest measured A/B pair of a deployment (runs with ``reuse`` off/on
  and ``engine_seconds``), which overrides the model;
* ``plan_measurement`` -- all of it as one ``kvplan.models.prefill.savings.PrefillMeasurement`` for
  ``kvplan.models.decision.plan``: the window as the plan prices it (the span the data covers inside the range
  asked for, by cache tier) and the cost model fitted on every interval of a look-back ending at
  the window's end (the deployment's history, not only the window), saying which.

Each function opens the database read-only for as long as its query takes (``kvplan.sql.db``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...models.core.timeutil import DAY, aware_utc, ceil_day, floor_day, naive_utc
from ...models.inputs.deployment import DeploymentFacts
from ...models.metrics import catalog as c
from ...models.metrics.spans import plan_spans
from ...models.metrics.spellings import cached_rule
from ...models.prefill.fit import PrefillCostModel, fit_prefill_cost
from ...models.prefill.interval import Interval
from ...models.prefill.measurement import PrefillMeasurement, price_window
from ...models.prefill.table import IntervalTable, seq_sum
from ...models.prefill.window import MeasuredAB
from ...sql.db import Source, queries, remember

DEFAULT_LOOKBACK = timedelta(days=7)
"""History the cost model is fitted on: the week before the priced window's end."""

NAMES = c.PREFILL_NAMES
"""Sample names the prefill cost model reads."""


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
    model's intervals are read raw. ``prefill_table``'s rows as ``Interval`` objects."""
    return prefill_table(db, deployment, t_from, t_to, model_name, chunk_tokens=chunk_tokens).intervals()


def prefill_table(db: Source, deployment: str, t_from: datetime, t_to: datetime,
                  model_name: str | None = None, *,
                  chunk_tokens: int = DeploymentFacts().lmcache_chunk_tokens) -> IntervalTable:
    """``prefill_intervals`` as columns (``kvplan.models.prefill.table``), what the fit and the
    priced window compute on: the stored days (34,560 rows at 90 days x 16 targets) are read
    as Arrow columns, without a Python object per value; the raw edges (a day or two at most)
    through the named query's rows. Read once per snapshot for the same arguments."""
    t_from, t_to = aware_utc(t_from), aware_utc(t_to)
    return remember(db, ("prefill_table", deployment, t_from, t_to, model_name, chunk_tokens),
                    lambda: _read_table(db, deployment, t_from, t_to, model_name, chunk_tokens))


def _read_table(db: Source, deployment: str, t_from: datetime, t_to: datetime, model_name: str | None,
                chunk_tokens: int) -> IntervalTable:
    days = [] if model_name is not None else [r["day"] for r in db.fetch(
        "prefill_rolled_days", deployment=deployment, d_from=ceil_day(t_from), d_to=floor_day(t_to))]
    spans = plan_spans(days, t_from, t_to)
    parts: list[tuple[datetime, pa.Table]] = []  # (where its interval ends begin, rows)
    for lb, after, end in spans.raw:
        if not _has_points(db, deployment, after, end):  # no interval can end there
            continue
        if model_name is None and lb == after == floor_day(after) and end == after + DAY \
                and _edge_stored(db, deployment, after):  # a whole first day as read alone, stored
            parts.append((after, _arrow(db, "prefill_edge_rollup_rows", deployment=deployment, day=naive_utc(after))))
            continue
        rows = db.fetch("prefill_intervals", deployment=deployment, t_lookback=naive_utc(lb),
                        t_after=naive_utc(after), t_to=naive_utc(end), model_name=model_name, names=NAMES)
        parts.append((after, pa.Table.from_pylist(rows, schema=ROW_SCHEMA) if rows else ROW_SCHEMA.empty_table()))
    if spans.rolled:
        parts.append((spans.rolled[0], _arrow(db, "prefill_rollup_rows", deployment=deployment,
                                              d_from=naive_utc(spans.rolled[0]), d_to=naive_utc(spans.rolled[1]))))
    parts.sort(key=lambda p: p[0])  # each part ordered by (t_end, target), their ends apart: in order
    tables = [t.select(ROW_SCHEMA.names).cast(ROW_SCHEMA) for _, t in parts] or [ROW_SCHEMA.empty_table()]
    return _table(pa.concat_tables(tables), chunk_tokens)


ROW_SCHEMA = pa.schema(
    [("target", pa.string()), ("t_start", pa.timestamp("us")), ("t_end", pa.timestamp("us")),
     ("engines", pa.float64()), ("requests", pa.float64()), ("prefill_seconds", pa.float64()),
     ("computed_tokens", pa.float64()), ("prompt_tokens", pa.float64()), ("cached_tokens", pa.float64()),
     ("external_tokens", pa.float64()), ("by_source_tokens", pa.float64()), ("local_hit_tokens", pa.float64()),
     ("prefix_hits", pa.float64()), ("external_hits", pa.float64()), ("external_queries", pa.float64()),
     ("lm_inproc_hits", pa.float64()), ("inference_seconds", pa.float64()), ("generation_tokens", pa.float64()),
     ("lmcache_write_chunks", pa.float64()), ("lookup_seconds", pa.float64()), ("lookups", pa.float64()),
     ("step_buckets", pa.list_(pa.struct([("le", pa.float64()), ("n", pa.float64())]))), ("reset", pa.bool_())])
"""The columns of a ``prefill_intervals`` / ``prefill_rollup_rows`` row the reader uses."""


def _has_points(db: Source, deployment: str, t_after: datetime, t_to: datetime) -> bool:
    """``window.span_has_points`` (the same memo key: read once per snapshot for both)."""
    a, b = aware_utc(t_after), aware_utc(t_to)
    return remember(db, ("span_has_points", deployment, a, b),
                    lambda: bool(db.fetch("span_has_points", deployment=deployment, t_after=a, t_to=b)[0]["found"]))


def _edge_stored(db: Source, deployment: str, day: datetime) -> bool:
    """``window.edge_day_stored`` (the same memo key: read once per snapshot for both)."""
    d = aware_utc(day)
    return remember(db, ("edge_day_stored", deployment, d),
                    lambda: bool(db.fetch("edge_day_stored", deployment=deployment, day=d)[0]["found"]))


def _arrow(db: Source, query: str, **params: Any) -> pa.Table:
    """A named query's result as an Arrow table, through the source's own connection
    (``Database.read`` / ``Snapshot.read``); a source without one gives its rows."""
    read = getattr(db, "read", None)
    if read is None:
        rows = db.fetch(query, **params)
        return pa.Table.from_pylist(rows, schema=ROW_SCHEMA) if rows else ROW_SCHEMA.empty_table()
    with read() as con:
        return con.sql(queries()[query].sql, params=params).to_arrow_table()


def _table(t: pa.Table, chunk_tokens: int) -> IntervalTable:
    """The intervals of ``prefill_intervals``' rows (its rules, over columns): a row without a
    start is no interval; an LMCache row (no requests) is its stored tokens, when it has write
    chunks; a vLLM row needs its computed tokens (``_computed_and_cached_cols``)."""
    t = t.filter(pc.is_valid(t["t_start"]))
    if not _in_order(t):  # by (t_end, target), as one read returns them (a stable sort)
        t = t.take(pc.sort_indices(t, sort_keys=[("t_end", "ascending"), ("target", "ascending")]))
    col = {name: t[name].to_numpy(zero_copy_only=False).astype(float) for name in ROW_SCHEMA.names
           if ROW_SCHEMA.field(name).type == pa.float64()}
    end_us = t["t_end"].cast(pa.int64()).to_numpy()
    start_us = t["t_start"].cast(pa.int64()).to_numpy()
    target = t["target"].to_pylist()
    reset = t["reset"].fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    les, buckets, has = _buckets(t["step_buckets"])
    nan = np.isnan
    vllm = ~nan(col["requests"])
    computed, cached = _computed_and_cached_cols(col)
    keep = np.where(vllm, ~nan(computed), ~nan(col["lmcache_write_chunks"]))
    ext = col["external_tokens"].copy()
    ext[nan(ext) & nan(col["by_source_tokens"]) & ~nan(col["external_queries"])] = 0.0
    inproc = nan(ext) & nan(col["external_hits"]) & ~nan(col["lm_inproc_hits"])
    ext[inproc] = col["lm_inproc_hits"][inproc]
    none = np.full(len(t), np.nan)

    def v(x: np.ndarray) -> np.ndarray:  # a vLLM row's value, None (NaN) on an LMCache row
        return np.where(vllm, x, np.nan)

    def z(x: np.ndarray) -> np.ndarray:  # float(x or 0.0) on a vLLM row, 0 on an LMCache row
        return np.where(vllm, np.nan_to_num(x, nan=0.0), 0.0)

    table = IntervalTable(
        t_start=start_us / 1e6, t_end=end_us / 1e6, requests=z(col["requests"]),
        prefill_seconds=z(col["prefill_seconds"]), computed_tokens=z(computed), prompt_tokens=v(col["prompt_tokens"]),
        cached_tokens=v(cached), external_tokens=v(ext),
        stored_tokens=np.where(vllm, none, col["lmcache_write_chunks"] * chunk_tokens),
        lookup_seconds=v(col["lookup_seconds"]), lookups=v(col["lookups"]),
        engines=np.where(vllm, np.maximum(np.nan_to_num(col["engines"], nan=0.0).astype(np.int64), 1), 0),
        inference_seconds=v(col["inference_seconds"]), generation_tokens=v(col["generation_tokens"]),
        les=les, buckets=np.where(vllm[:, None], buckets, 0.0), has=has & vllm[:, None],
        targets=tuple((x,) for x in target), reset=reset)
    return table if keep.all() else table.take(keep)


def _in_order(t: pa.Table) -> bool:
    """The rows are in (t_end, target) order already (the parts of one read are)."""
    end = t["t_end"].cast(pa.int64()).to_numpy()
    step = np.diff(end)
    if (step < 0).any():
        return False
    ties = np.flatnonzero(step == 0).tolist()
    if not ties:
        return True
    target = t["target"].to_pylist()
    return all(target[i] <= target[i + 1] for i in ties)


def _buckets(lists: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's iteration-token histogram {bound: steps} (a bound listed twice summed, in
    list order; a null bound left out) as (bounds, rows x bounds, present)."""
    arr = lists.combine_chunks() if lists.num_chunks != 1 else lists.chunk(0)
    n = len(arr)
    lens = pc.fill_null(pc.list_value_length(arr), 0).to_numpy()
    flat = pc.list_flatten(arr)
    le = flat.field("le").to_numpy(zero_copy_only=False).astype(float)
    steps = flat.field("n").to_numpy(zero_copy_only=False).astype(float)
    row = np.repeat(np.arange(n), lens)
    ok = ~np.isnan(le)
    les = np.unique(le[ok])
    j = np.searchsorted(les, le[ok])
    buckets = np.zeros((n, len(les)))
    np.add.at(buckets, (row[ok], j), steps[ok])
    has = np.zeros((n, len(les)), bool)
    has[row[ok], j] = True
    return les, buckets, has


def _computed_and_cached_cols(c: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(computed prompt tokens, cached prompt tokens) of each interval row, NaN for unknown.
    Computed tokens are vLLM's ``request_prefill_kv_computed_tokens`` (0.13+); where a release
    lacks them they are prompt - cached, the cached tokens read by the rule ``stats`` uses
    (``models.metrics.spellings.cached_rule``, row by row: one rule for every reader); where
    neither is known the interval is left out (NaN): never prompt - 0, which made every prompt
    token "cached" (a hit rate of 1.0)."""
    def opt(x: np.ndarray) -> list[float | None]:
        return [None if v != v else v for v in x.tolist()]

    by_source = np.where(np.isnan(c["by_source_tokens"]), np.nan,
                         np.nan_to_num(c["local_hit_tokens"]) + np.nan_to_num(c["external_tokens"]))
    rule = zip(opt(c["cached_tokens"]), opt(by_source), opt(c["prefix_hits"]), opt(c["external_hits"]),
               opt(c["lm_inproc_hits"]), strict=True)
    cached = np.array([np.nan if (v := cached_rule(*args)[0]) is None else v for args in rule], float)
    prompt = c["prompt_tokens"]
    with np.errstate(invalid="ignore"):
        derived = np.where(np.isnan(cached) | np.isnan(prompt), np.nan, np.maximum(0.0, prompt - cached))
    return np.where(np.isnan(c["computed_tokens"]), derived, c["computed_tokens"]), cached


def describe_history(deployment: str, intervals: list[Interval] | IntervalTable, t_from: datetime,
                     t_to: datetime) -> str:
    """One line saying which history a fit used."""
    table = IntervalTable.of(intervals)
    busy = table.requests > 0
    if not busy.any():
        return (f"{deployment!r}, {aware_utc(t_from):%Y-%m-%d %H:%M}..{aware_utc(t_to):%Y-%m-%d %H:%M} "
                "UTC: no interval with requests")
    req = seq_sum(table.requests[busy])
    first = float(table.t_start[busy].min())
    last = float(table.t_end[busy].max())
    fmt = "%Y-%m-%d %H:%M"
    return (f"{deployment!r} history {datetime.fromtimestamp(first, aware_utc(t_from).tzinfo):{fmt}}.."
            f"{datetime.fromtimestamp(last, aware_utc(t_from).tzinfo):{fmt}} UTC "
            f"({int(busy.sum())} target-intervals with requests, {req:,.0f} requests; look-back "
            f"{(aware_utc(t_to) - aware_utc(t_from)).total_seconds() / 3600:g} h)")


def measured_ab(db: Source, deployment: str) -> MeasuredAB | None:
    """The latest A/B pair stored for ``deployment``: two runs with the same ``ab_pair``,
    ``reuse`` off and on, both with ``engine_seconds``. Cached tokens of the reuse-on run come
    from the clients' usage reports (``run_requests.cached_tokens``)."""
    rows = db.fetch("measured_ab_pairs", deployment=deployment)
    if not rows:
        return None
    r = rows[0]
    if r["on_cached_tokens"] is None:
        return None
    return MeasuredAB(
        label=(f"A/B pair {r['ab_pair']!r} (runs {r['off_run']} off, {r['on_run']} on, "
               f"{r['measured_on']})"),
        off_engine_seconds=float(r["off_engine_seconds"]), on_engine_seconds=float(r["on_engine_seconds"]),
        on_cached_tokens=float(r["on_cached_tokens"]), engine_seconds_source=r["source"] or "unspecified")


def plan_measurement(db: Source, deployment: str, t_from: datetime, t_to: datetime, *,
                     facts: DeploymentFacts | None = None, model_name: str | None = None,
                     lookback: timedelta = DEFAULT_LOOKBACK, stats: Any = None,
                     num_gpus: int | None = None, use_measured_ab: bool = True) -> PrefillMeasurement:
    """Everything ``kvplan.models.decision.plan`` needs about the prefill of [t_from, t_to]: the priced window
    (covered span), the cost model fitted on the look-back ending at ``t_to``, the deployment
    facts, and the latest measured A/B (which overrides the model). ``stats`` (the window's
    ``WindowStats``) adds vLLM's FLOP counter for estimator B. ``num_gpus`` (the fleet, e.g.
    ``kvplan plan --gpus``) overrides the engines seen: engines = num_gpus / GPUs per engine.
    One window on its own; the commands read the history once (``kvplan.app.data.history``) and
    price every window of the command with ``measurement_of``."""
    facts = facts or DeploymentFacts()
    history_from = min(aware_utc(t_from), aware_utc(t_to) - lookback)
    history = prefill_table(db, deployment, history_from, t_to, model_name, chunk_tokens=facts.lmcache_chunk_tokens)
    cost = fit_prefill_cost(history, history=describe_history(deployment, history, history_from, t_to))
    ab = measured_ab(db, deployment) if use_measured_ab else None
    return measurement_of(db, deployment, t_from, t_to, cost, facts=facts, model_name=model_name, stats=stats,
                          num_gpus=num_gpus, measured=ab, history=(history_from, t_to, history))


def measurement_of(db: Source, deployment: str, t_from: datetime, t_to: datetime, cost: PrefillCostModel, *,
                   facts: DeploymentFacts, model_name: str | None = None, stats: Any = None,
                   num_gpus: int | None = None, measured: MeasuredAB | None = None,
                   history: tuple[datetime, datetime, IntervalTable] | None = None) -> PrefillMeasurement:
    """The measurement of [t_from, t_to] priced with an already fitted ``cost`` model: the
    window's intervals are read here, unless ``history`` ((from, to, intervals) already read)
    spans exactly the window."""
    if history is not None and aware_utc(history[0]) == aware_utc(t_from) and aware_utc(history[1]) == aware_utc(t_to):
        ivs = history[2]  # a window as long as the look-back is read once: its intervals are the history's
    else:
        ivs = prefill_table(db, deployment, t_from, t_to, model_name, chunk_tokens=facts.lmcache_chunk_tokens)
    return price_window(ivs, t_from, t_to, cost, facts=facts, stats=stats, num_gpus=num_gpus, measured=measured)
