"""Ingest a deployment's series from Prometheus (or Thanos/Mimir) as exact step increases.

What is fetched: RAW samples, with range-vector instant queries
``{__name__=~"<family names>", <selector>}[<chunk + lookback>]`` evaluated at the chunk
end, one query per family. (A ``query_range`` would resample: it repeats or drops raw
samples, and ``increase()``/``histogram_quantile()`` extrapolate or precompute; neither can
be summed back into an exact window later.)

What is stored, per chunk (t0, t1] of whole steps, in ONE transaction that first deletes
what an earlier ingestion of the same range wrote (re-running a range never duplicates):

* counters and histogram parts: per series and step, the sum of the increases between
  consecutive raw samples (p, c) whose later sample c lies in the step (``prom_increments``),
  with the rule of the ``increments()`` macro: a drop is a reset (the increase is the new
  value) unless the series' ``_created`` is known and unchanged (or went backwards), which is
  a broken or replaced target and counts nothing; a series' ``_created`` time after p is a
  zero point (the process restarted);
  samples further apart than ``lookback`` are a gap, not an increase. The sample before t0
  (within ``lookback``) is fetched too, so the first pair of a chunk is not lost;
* gauges: the last raw value inside each step, at the step end (``samples``);
* gaps: Prometheus failing (the whole chunk) or a target with no sample for longer than
  ``gap_after`` (``gaps``); never zeros;
* a ledger row (``prom_chunks``).

Targets: Prometheus ``job``/``instance`` -> a ``targets`` row named ``job/instance``;
``model_name``, ``engine`` and ``le`` as in the scrape path, other labels in ``labels``.
Credentials go to the HTTP session only: never to DuckDB, logs or error messages.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice

import numpy as np
import pyarrow as pa

from ...models.core.errors import KvplanError
from ...models.core.redact import redact
from ...models.core.timeutil import aware_utc, from_epoch_ms, utcnow
from ...models.inputs.settings import DeploymentConfig, PrometheusConfig
from ...models.inputs.settings_checks import duration_s
from ...models.metrics.catalog import FAMILIES
from ...sql.db import Database
from ..scrape.parse import detect_kind
from ..scrape.parse_checks import router_of
from ..scrape.store import ensure_target
from .client import PromClient, PromError, iso
from .fleet import LOST, fetch_fleet_chunk, fleet_gaps, fleet_names, fleet_rows
from .rows import Chunk, Rows, build_rows, family_query, split_name, target_name
from .rules import RULE_STEP_S
from .step_math import Raw, silent_stretches

log = logging.getLogger("kvplan.prometheus")

# -- one chunk ---------------------------------------------------------------------------
def fetch_chunk(client: PromClient, selector: str, t0: int, t1: int, lookback: int) -> Chunk:
    """Every family's raw samples in [t0 - lookback, t1] (ms), one family query after the
    other, each decoded as a stream. A failed query fails the chunk."""
    range_s = math.ceil((t1 - t0 + lookback) / 1000)
    chunk = Chunk(t0, t1)
    try:
        for f in FAMILIES:
            chunk.series.extend(client.range_vector(family_query(f, selector, range_s), t1 / 1000))
    except PromError as e:
        chunk.series, chunk.error = [], redact(str(e))
    return chunk


def in_order(fetch: Callable[[int, int], Chunk], bounds: list[tuple[int, int]], in_flight: int) -> Iterator:
    """``fetch`` of every chunk, at most ``in_flight`` running at once, yielded in order: the
    chunks wait to be written at most ``in_flight`` deep, so memory is bounded by that many
    chunks, not by the range."""
    with ThreadPoolExecutor(max(1, in_flight), thread_name_prefix="prom-chunk") as pool:
        pending: deque = deque()
        it = iter(bounds)
        for b in islice(it, in_flight):
            pending.append(pool.submit(fetch, *b))
        while pending:
            ch = pending.popleft().result()
            nxt = next(it, None)
            if nxt is not None:
                pending.append(pool.submit(fetch, *nxt))
            yield ch


def _cat(parts: list, dtype) -> np.ndarray:
    return np.concatenate(parts) if parts else np.array([], dtype=dtype)


def _ts(ms: np.ndarray) -> pa.Array:
    return pa.array(ms.astype("datetime64[ms]").astype("datetime64[us]"), pa.timestamp("us"))


def write_chunk(db: Database, dep_id: int, chunk: Chunk, rows: Rows | None, gaps: list[tuple],
                step_s: int, selector: str) -> tuple[int, int]:
    """Replace whatever (t0, t1] held for this deployment with this chunk, in one
    transaction. A failed chunk keeps an earlier successful ingestion of the range."""
    t0, t1 = from_epoch_ms(chunk.t0), from_epoch_ms(chunk.t1)
    span = {"deployment_id": dep_id, "t_from": t0, "t_to": t1}
    with db.write() as con:
        if chunk.error is not None:
            if Database.scalar(con, "chunk_ingested_ok", **span):
                return 0, 0
            Database.run(con, "delete_gaps", **span)
            Database.run(con, "delete_prom_chunks", **span)
            Database.run(con, "insert_gap", **span, target=None, reason=chunk.error)
            Database.run(con, "insert_prom_chunk", **span, step_s=step_s, selector=selector, ok=False,
                         error=chunk.error, n_series=0, n_raw=0, n_increments=0, n_gauges=0)
            return 0, 0
        assert rows is not None  # a chunk without an error comes with its rows
        for name in ("delete_prom_increments", "delete_prom_gauges", "delete_gaps", "delete_prom_chunks"):
            Database.run(con, name, **span)
        series_tbl = pa.table({**rows.series, "series_id": pa.array(rows.series["series_id"], pa.int64()),
                               "target_id": pa.array(rows.series["target_id"], pa.int32()),
                               "model_name": pa.array(rows.series["model_name"], pa.string()),
                               "engine": pa.array(rows.series["engine"], pa.string()),
                               "le": pa.array(rows.series["le"], pa.float64())})
        inc_ts = _cat(rows.inc["ts"], np.int64)
        inc_tbl = pa.table({"series_id": _cat(rows.inc["series_id"], np.int64), "ts": _ts(inc_ts),
                            "step_s": pa.array(np.full(inc_ts.size, step_s, dtype=np.int32)),
                            "delta": _cat(rows.inc["delta"], np.float64),
                            "pairs": _cat(rows.inc["pairs"], np.int64).astype(np.int32),
                            "resets": _cat(rows.inc["resets"], np.int64).astype(np.int32)})
        g_ts = _cat(rows.gauge["ts"], np.int64)
        gauge_tbl = pa.table({"series_id": _cat(rows.gauge["series_id"], np.int64), "ts": _ts(g_ts),
                              "value": _cat(rows.gauge["value"], np.float64),
                              "created": pa.array([None] * g_ts.size, pa.float64())})
        con.register("kv_series", series_tbl)
        con.register("kv_inc", inc_tbl)
        con.register("kv_gauge", gauge_tbl)
        con.execute("INSERT INTO series SELECT * FROM kv_series "
                    "WHERE series_id NOT IN (SELECT series_id FROM series)")
        con.execute("INSERT INTO prom_increments SELECT * FROM kv_inc")
        con.execute("INSERT INTO samples SELECT * FROM kv_gauge")
        for target, a, b, reason in gaps:
            Database.run(con, "insert_gap", deployment_id=dep_id, target=target, t_from=from_epoch_ms(a),
                         t_to=from_epoch_ms(b), reason=reason)
        Database.run(con, "insert_prom_chunk", **span, step_s=step_s, selector=selector, ok=True, error=None,
                     n_series=len(rows.series["series_id"]), n_raw=chunk.n_raw, n_increments=inc_ts.size,
                     n_gauges=g_ts.size)
    return inc_ts.size, g_ts.size


# -- a range -----------------------------------------------------------------------------
@dataclass
class IngestResult:
    deployment: str
    t_from: datetime
    t_to: datetime
    chunks: int = 0
    failed: int = 0
    raw_samples: int = 0
    increments: int = 0
    gauges: int = 0
    gaps: int = 0
    far_pairs: int = 0  # increases not counted: samples further apart than lookback
    refused_samples: int = 0  # raw: samples a direct import would refuse (NaN, inf, negative, > 2**53);
    # aggregated: the step ends at which a series' latest counter sample was one (left out of the sums)
    refused_examples: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    mode: str = "raw"
    engines_max: int = 0  # aggregated: most engines reporting in one step
    refused: dict[str, str] = field(default_factory=dict)
    """Targets not stored, and why (a router's or gateway's series, not an engine's)."""

    @property
    def lost(self) -> str | None:
        """What this ingestion leaves out (aggregated mode), for the CLI and logs."""
        return None if self.mode == "raw" else LOST

    @property
    def rows(self) -> int:
        return self.increments + self.gauges


def chunk_bounds(t_from: datetime, t_to: datetime, step_s: int, chunk_s: int) -> Iterator[tuple[int, int]]:
    """Step-aligned chunks (ms) covering (t_from, t_to]: t_from rounded down, t_to up."""
    step, size = step_s * 1000, chunk_s * 1000
    a = int(t_from.timestamp() * 1000) // step * step
    b = -(-int(t_to.timestamp() * 1000) // step) * step
    while a < b:
        yield a, min(b, (a // size + 1) * size)
        a = min(b, (a // size + 1) * size)


def _without_routers(series: list[Raw], res: IngestResult) -> list[Raw]:
    """The series of every target that is not a router or gateway (``parse_checks.router_of``, the same
    rule as the scrape path): a production-stack router's vllm:* gauges named like counters would
    otherwise be stored as an engine's. Refused targets are logged and listed in ``res.refused``."""
    fams: dict[str, dict[str, str]] = {}
    for s in series:
        fams.setdefault(target_name(s.labels), {})[split_name(s.name)[0]] = ""
    refused = {t: found[0] for t, f in fams.items() if (found := router_of(f)) is not None}
    for t, what in refused.items():
        if t not in res.refused:
            log.warning("deployment %s: target %s is %s, not an engine: not stored (point kvplan at the "
                        "engines' own /metrics)", res.deployment, t, what)
            res.refused[t] = what
    return [s for s in series if target_name(s.labels) not in refused] if refused else series


def _raw_targets(series: list[Raw]) -> dict[str, tuple[str, dict]]:
    by_target: dict[str, tuple[dict, dict]] = {}
    for s in series:
        fams = by_target.setdefault(target_name(s.labels), ({}, s.labels))[0]
        fams[split_name(s.name)[0]] = ""
    return {name: (detect_kind(fams) or "unknown", labels) for name, (fams, labels) in by_target.items()}


def _ensure_targets(db: Database, deployment: str, targets: dict[str, tuple[str, dict]]) -> tuple[int, dict[str, int]]:
    """Targets (name -> kind, labels holding job/instance) and the deployment, created as needed."""
    ids = {}
    with db.write() as con:
        for name, (kind, labels) in targets.items():
            ids[name] = ensure_target(con, deployment, name, kind, None)
            if Database.scalar(con, "scraped_target", target_id=ids[name]):
                raise KvplanError(f"deployment {deployment!r}: target {name!r} already holds direct scrapes; "
                                 "ingest Prometheus data into another deployment")
            Database.run(con, "insert_prom_target", target_id=ids[name], job=labels.get("job"),
                         instance=labels.get("instance") or "")
        row = Database.run(con, "get_deployment_id", name=deployment).fetchone()
        dep_id = row[0] if row else Database.scalar(con, "insert_deployment", name=deployment)
    return dep_id, ids


def ingest_range(db: Database, cfg: PrometheusConfig, deployment: DeploymentConfig, t_from: datetime,
                 t_to: datetime, *, step: str | None = None, chunk: str | None = None,
                 client: PromClient | None = None,
                 on_chunk: Callable[[int, int, IngestResult], None] | None = None) -> IngestResult:
    """Ingest (t_from, t_to] of one deployment, chunk by chunk, ``prometheus.max_concurrency``
    chunks fetched at once (written in order, one transaction each). Safe to re-run; a range
    re-ingested in the other mode replaces what the first wrote."""
    step_s = int(duration_s(step or cfg.step))
    chunk_s = int(duration_s(chunk or cfg.chunk))
    if chunk_s % step_s:
        raise KvplanError(f"chunk {chunk or cfg.chunk} is not a multiple of step {step or cfg.step}", source="--chunk")
    aggregated = deployment.prometheus_mode == "aggregated"
    if aggregated and deployment.prometheus_sums == "rules" and step_s % RULE_STEP_S:
        raise KvplanError(f"step {step or cfg.step} is not a multiple of the rule pack's minute "
                          f"(deployments[{deployment.name}].prometheus_sums = \"rules\")", source="--step")
    lookback, gap_after = int(duration_s(cfg.lookback) * 1000), int(duration_s(cfg.gap_after) * 1000)
    client = client or PromClient(cfg)
    res = IngestResult(deployment.name, t_from, t_to, mode=_mode(deployment))
    bounds = list(chunk_bounds(t_from, t_to, step_s, chunk_s))
    if aggregated:
        def fetch(a: int, b: int):
            return fetch_fleet_chunk(client, deployment, step_s, lookback // 1000, a, b)
    else:
        def fetch(a: int, b: int):
            return fetch_chunk(client, deployment.prometheus_selector, a, b, lookback)
    seen: set[str] = set()
    for i, ch in enumerate(in_order(fetch, bounds, cfg.max_concurrency)):
        if not aggregated:
            ch.series = _without_routers(ch.series, res)
        targets = fleet_names(ch) if aggregated else _raw_targets(ch.series)
        dep_id, ids = _ensure_targets(db, deployment.name, targets)
        gaps: list[tuple] = []
        rows = None
        if ch.error is None:
            if aggregated:
                rows = Rows()
                engine_steps = fleet_rows(ch, ids, rows)
                for name, n in sorted(ch.refused.items()):
                    res.refused_samples += n
                    if len(res.refused_examples) < 3:
                        res.refused_examples.append(f"{name}: {n} step end(s) whose latest sample was left out of "
                                                    f"the sums ({ch.refused_query})")
                gaps += fleet_gaps(engine_steps, seen, ch.t0, ch.t1, step_s * 1000, gap_after)
                seen |= engine_steps.keys()
                res.engines_max = max([res.engines_max] + [int(v.max()) for q, r in ch.parts
                                       if q.family.startswith("kvplan:") and q.kind != "lmcache_mp"
                                       for v in (r.v,) if v.size])
            else:
                gaps += _silent(ch, seen, gap_after)
                rows = build_rows(ch, ids, step_s * 1000, lookback)
                res.far_pairs += rows.far
                res.refused_samples += rows.refused
                res.refused_examples += rows.refused_examples[:3 - len(res.refused_examples)]
            if not ch.series:
                gaps.append((None, ch.t0, ch.t1, f"no series matched {{{deployment.prometheus_selector}}} at "
                                                 f"{client.safe_url}" + (" (aggregated)" if aggregated else "")))
        else:
            res.failed += 1
            res.errors.append(ch.error)
            log.error("deployment %s: chunk %s..%s failed: %s", deployment.name, iso(ch.t0 / 1000),
                      iso(ch.t1 / 1000), ch.error)
        n_inc, n_g = write_chunk(db, dep_id, ch, rows, gaps, step_s, deployment.prometheus_selector)
        res.chunks += 1
        res.raw_samples += ch.n_raw
        res.increments += n_inc
        res.gauges += n_g
        res.gaps += len(gaps) + (ch.error is not None)
        if on_chunk:
            on_chunk(i + 1, len(bounds), res)
    if res.refused_samples:
        log.warning("deployment %s: %d samples %s: not finite, negative or above 2**53 (a direct import "
                    "refuses them too), e.g. %s", deployment.name, res.refused_samples,
                    "not stored" if res.mode == "raw" else f"left out of the {res.mode} sums",
                    "; ".join(res.refused_examples))
    if res.far_pairs:
        log.warning("deployment %s: %d increases not counted because consecutive samples were more than "
                    "prometheus.lookback (%s) apart; if Prometheus scrapes less often than that, raise "
                    "lookback (and gap_after) above the scrape interval", deployment.name, res.far_pairs,
                    cfg.lookback)
    return res


def _mode(d: DeploymentConfig) -> str:
    return "raw" if d.prometheus_mode == "raw" else f"aggregated ({d.prometheus_sums})"


def _silent(ch: Chunk, seen: set[str], gap_after: int) -> list[tuple]:
    """Targets silent for longer than gap_after in the chunk; ``seen`` grows by its targets."""
    times: dict[str, list] = {}
    for s in ch.series:
        times.setdefault(target_name(s.labels), []).append(s.t)
    gaps = []
    for tname in sorted(seen | times.keys()):
        ts = np.concatenate(times.get(tname, [np.array([], np.int64)]))
        for a, b in silent_stretches(ts, ch.t0, ch.t1, gap_after, tname in seen):
            gaps.append((tname, a, b, "no samples in Prometheus (target down or not scraped)"))
    seen |= times.keys()
    return gaps


def ingest_window(t_from: datetime, t_to: datetime) -> tuple[datetime, datetime]:
    """UTC-aware bounds, the end capped at now (no gaps recorded for the future)."""
    return aware_utc(t_from), min(aware_utc(t_to), utcnow())


