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

import json
import logging
import math
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pyarrow as pa
import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from kvplan.collectors.parse import detect_kind, router_of
from kvplan.collectors.prom_math import Raw, silent_stretches, step_gauges, step_increments
from kvplan.collectors.relabel import model_label
from kvplan.collectors.scrape import redact_url
from kvplan.collectors.settings import DeploymentConfig, PrometheusConfig, duration_s
from kvplan.collectors.store import ensure_target, series_id
from kvplan.models.core.errors import KvplanError
from kvplan.models.core.redact import redact
from kvplan.models.core.timeutil import aware_utc, from_epoch_ms, from_epoch_s, utcnow
from kvplan.models.metrics.catalog import FAMILIES
from kvplan.sql.db import Database

log = logging.getLogger("kvplan.prometheus")

_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
             "gauge": ("",)}
_OWN_LABELS = ("__name__", "instance", "job", "model_name", "engine", "le")


class PromError(KvplanError):
    """A Prometheus query that failed; the message names the URL and the query."""


def family_query(family: str, selector: str, range_s: int) -> str:
    names = "|".join(family + s for s in _SUFFIXES[FAMILIES[family]])
    sel = f",{selector}" if selector else ""
    return f'{{__name__=~"{names}"{sel}}}[{range_s}s]'


def split_name(name: str) -> tuple[str, str, bool]:
    """(family, type, is_created) of a sample name kvplan asked for."""
    for fam, typ in FAMILIES.items():
        for suffix in _SUFFIXES[typ]:
            if name == fam + suffix:
                return fam, typ, suffix == "_created"
    raise KeyError(name)


class PromClient:
    """Range-vector instant queries with the configured auth and TLS. ``str()`` and every
    error show the URL without credentials."""

    def __init__(self, cfg: PrometheusConfig):
        if not cfg.url:
            raise PromError("no Prometheus URL configured (prometheus.url / KVPLAN_PROMETHEUS__URL)")
        self.url = cfg.url.rstrip("/")
        self.safe_url = redact_url(self.url)
        self.timeout_s = cfg.timeout_s
        session = requests.Session()
        session.verify = cfg.ca_file if cfg.ca_file else cfg.verify_tls
        headers = {}
        if cfg.bearer_token is not None:
            headers["Authorization"] = f"Bearer {cfg.bearer_token.get_secret_value()}"
        auth = (cfg.username, cfg.password.get_secret_value() if cfg.password else "") if cfg.username else None
        # a query that timed out is not retried (it would time out again); refused
        # connections and 429/5xx answers are
        retry = Retry(total=cfg.retries, read=False, backoff_factor=0.5, status_forcelist=(429, 500, 502, 503, 504),
                      allowed_methods=("GET", "POST"), raise_on_status=False)
        self._api = PrometheusConnect(self.url, headers=headers, auth=auth, retry=retry, session=session,
                                      timeout=cfg.timeout_s, method="POST")

    def __repr__(self) -> str:
        return f"PromClient({self.safe_url})"

    def range_vector(self, query: str, at: float) -> list[dict]:
        """The raw samples of a range-vector query evaluated at unix time ``at``."""
        where = f"{self.safe_url}/api/v1/query {query!r} at {_iso(at)}"
        try:
            result = self._api.custom_query(query, params={"time": f"{at:.3f}"})
        except requests.Timeout:
            raise PromError(f"{where}: no answer within {self.timeout_s:g}s (timeout)") from None
        except (ValueError, KeyError, TypeError) as e:  # not JSON, or JSON without data.result
            raise PromError(f"{where}: malformed response ({type(e).__name__}: {_short(e)})") from None
        except requests.ConnectionError as e:
            raise PromError(f"{where}: cannot connect ({_errno(e)})") from None
        except requests.RequestException as e:
            raise PromError(f"{where}: {type(e).__name__}: {_short(e)}") from None
        except PrometheusApiClientException as e:
            raise PromError(f"{where}: {_short(e)}") from None
        if not isinstance(result, list) or not all(
                isinstance(r, dict) and isinstance(r.get("metric"), dict) and isinstance(r.get("values"), list)
                for r in result):
            raise PromError(f"{where}: malformed response (expected a matrix of series with 'values')")
        return result


def _errno(e: Exception) -> str:
    """The OS reason inside requests' long ConnectionError text (which repeats the query)."""
    m = re.search(r"\[Errno -?\d+\][^'\")]*", str(e))
    return m.group(0).strip() if m else _short(e, 200)


def _short(e: Exception, n: int = 300) -> str:
    s = str(e)
    return s if len(s) <= n else s[:n] + "..."


def _iso(t: float) -> str:
    return from_epoch_s(t).isoformat().replace("+00:00", "Z")


# -- one chunk ---------------------------------------------------------------------------
@dataclass
class Chunk:
    """What one chunk (t0, t1] produced, before it is written."""

    t0: int
    t1: int
    series: list[Raw] = field(default_factory=list)
    error: str | None = None

    @property
    def n_raw(self) -> int:
        return sum(int(((s.t > self.t0) & (s.t <= self.t1)).sum()) for s in self.series)


def fetch_chunk(client: PromClient, selector: str, t0: int, t1: int, lookback: int,
                pool: ThreadPoolExecutor) -> Chunk:
    """Every family's raw samples in [t0 - lookback, t1] (ms). A failed query fails the chunk."""
    range_s = math.ceil((t1 - t0 + lookback) / 1000)
    queries = [family_query(f, selector, range_s) for f in FAMILIES]
    chunk = Chunk(t0, t1)
    try:
        for result in pool.map(lambda q: client.range_vector(q, t1 / 1000), queries):
            chunk.series.extend(Raw.from_result(r) for r in result)
    except PromError as e:
        chunk.series, chunk.error = [], redact(str(e))
    return chunk


def target_name(labels: dict[str, str]) -> str:
    return "/".join(x for x in (labels.get("job"), labels.get("instance")) if x) or "(no job/instance)"


def _rest(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in _OWN_LABELS))


def _le(labels: dict[str, str]) -> float | None:
    return float(labels["le"]) if "le" in labels else None


def _created_index(series: list[Raw]) -> dict[tuple, Raw]:
    out = {}
    for s in series:
        fam, _, is_created = split_name(s.name)
        if is_created:
            out[(target_name(s.labels), fam, tuple(sorted((k, v) for k, v in s.labels.items()
                                                          if k not in ("__name__", "le"))))] = s
    return out


def _created_at(c: Raw | None, t: np.ndarray) -> np.ndarray:
    """The _created value (ms) in force at each time of ``t`` (the latest at or before it)."""
    if c is None or c.t.size == 0:
        return np.full(t.shape, np.nan)
    i = np.searchsorted(c.t, t, side="right") - 1
    return np.where(i >= 0, c.v[np.maximum(i, 0)] * 1000.0, np.nan)


@dataclass
class Rows:
    """Column lists of one chunk, ready for Arrow."""

    series: dict[str, list] = field(default_factory=lambda: {k: [] for k in (
        "series_id", "target_id", "name", "family", "type", "model_name", "engine", "le", "labels")})
    inc: dict[str, list] = field(default_factory=lambda: {k: [] for k in (
        "series_id", "ts", "delta", "pairs", "resets")})
    gauge: dict[str, list] = field(default_factory=lambda: {k: [] for k in ("series_id", "ts", "value")})
    far: int = 0  # pairs of samples further apart than lookback: not counted


def build_rows(chunk: Chunk, target_ids: dict[str, int], step: int, lookback: int) -> Rows:
    rows = Rows()
    created = _created_index(chunk.series)
    # when each target was scraped, as far as this chunk's series show: a counter absent from
    # one of its target's scrapes and present in the next was 0 at the earlier one (LMCache MP
    # exposes counters only after their first increment, without _created); the same rule as
    # migration 006 applies to direct scrapes
    scraped: dict[str, np.ndarray] = {}
    for s in chunk.series:
        scraped.setdefault(target_name(s.labels), []).append(s.t)
    scraped = {k: np.unique(np.concatenate(v)) for k, v in scraped.items()}
    for s in chunk.series:
        fam, typ, is_created = split_name(s.name)
        if is_created:
            continue
        tname = target_name(s.labels)
        rest = _rest(s.labels)
        sid = series_id(target_ids[tname], s.name, model_label(s.labels.get("model_name")), s.labels.get("engine"),
                        _le(s.labels), rest)
        if typ == "gauge":
            ends, vals = step_gauges(s.t, s.v, chunk.t0, chunk.t1, step)
            if ends.size == 0:
                continue
            rows.gauge["series_id"].append(np.full(ends.size, sid, dtype=np.int64))
            rows.gauge["ts"].append(ends)
            rows.gauge["value"].append(vals)
        else:
            key = (tname, fam, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("__name__", "le"))))
            t, v = s.t, s.v
            times = scraped[tname]
            k = int(np.searchsorted(times, t[0])) - 1 if t.size else -1
            if k >= 0:  # born after the target's scrape at times[k]
                t, v = np.concatenate([times[k:k + 1], t]), np.concatenate([[0.0], v])
            cr = _created_at(created.get(key), t)
            ends, delta, pairs, resets, far = step_increments(t, v, cr, chunk.t0, chunk.t1, step, lookback)
            rows.far += far
            if ends.size == 0:
                continue
            for k, arr in (("series_id", np.full(ends.size, sid, dtype=np.int64)), ("ts", ends),
                           ("delta", delta), ("pairs", pairs), ("resets", resets)):
                rows.inc[k].append(arr)
        se = rows.series
        for k, val in (("series_id", sid), ("target_id", target_ids[tname]), ("name", s.name), ("family", fam),
                       ("type", typ), ("model_name", model_label(s.labels.get("model_name"))),
                       ("engine", s.labels.get("engine")), ("le", _le(s.labels)),
                       ("labels", json.dumps(dict(rest), sort_keys=True, separators=(",", ":")))):
            se[k].append(val)
    return rows


def _cat(parts: list, dtype) -> np.ndarray:
    return np.concatenate(parts) if parts else np.array([], dtype=dtype)


def _ts(ms: np.ndarray) -> pa.Array:
    return pa.array(ms.astype("datetime64[ms]").astype("datetime64[us]"), pa.timestamp("us"))


def write_chunk(db: Database, dep_id: int, chunk: Chunk, rows: Rows | None, gaps: list[tuple],
                step_s: int, selector: str) -> tuple[int, int]:
    """Replace whatever (t0, t1] held for this deployment with this chunk, in one
    transaction. A failed chunk keeps an earlier successful ingestion of the range."""
    t0, t1 = from_epoch_ms(chunk.t0), from_epoch_ms(chunk.t1)
    span = dict(deployment_id=dep_id, t_from=t0, t_to=t1)
    with db.write() as con:
        if chunk.error is not None:
            if Database.run(con, "chunk_ingested_ok", **span).fetchone()[0]:
                return 0, 0
            Database.run(con, "delete_gaps", **span)
            Database.run(con, "delete_prom_chunks", **span)
            Database.run(con, "insert_gap", **span, target=None, reason=chunk.error)
            Database.run(con, "insert_prom_chunk", **span, step_s=step_s, selector=selector, ok=False,
                         error=chunk.error, n_series=0, n_raw=0, n_increments=0, n_gauges=0)
            return 0, 0
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
            Database.run(con, "insert_gap", deployment_id=dep_id, target=target, t_from=from_epoch_ms(a), t_to=from_epoch_ms(b),
                         reason=reason)
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
    errors: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    """Targets not stored, and why (a router's or gateway's series, not an engine's)."""

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
    """The series of every target that is not a router or gateway (``parse.router_of``, the same
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


def _ensure_targets(db: Database, deployment: str, series: list[Raw]) -> tuple[int, dict[str, int]]:
    by_target: dict[str, tuple[dict, dict]] = {}
    for s in series:
        fams = by_target.setdefault(target_name(s.labels), ({}, s.labels))[0]
        fams[split_name(s.name)[0]] = ""
    ids = {}
    with db.write() as con:
        for name, (fams, labels) in by_target.items():
            ids[name] = ensure_target(con, deployment, name, detect_kind(fams) or "unknown", None)
            if Database.run(con, "scraped_target", target_id=ids[name]).fetchone()[0]:
                raise KvplanError(f"deployment {deployment!r}: target {name!r} already holds direct scrapes; "
                                 "ingest Prometheus data into another deployment")
            Database.run(con, "insert_prom_target", target_id=ids[name], job=labels.get("job"),
                         instance=labels.get("instance") or "")
        row = Database.run(con, "get_deployment_id", name=deployment).fetchone()
        dep_id = row[0] if row else Database.run(con, "insert_deployment", name=deployment).fetchone()[0]
    return dep_id, ids


def ingest_range(db: Database, cfg: PrometheusConfig, deployment: DeploymentConfig, t_from: datetime,
                 t_to: datetime, *, step: str | None = None, chunk: str | None = None,
                 client: PromClient | None = None,
                 on_chunk: Callable[[int, int, IngestResult], None] | None = None) -> IngestResult:
    """Ingest (t_from, t_to] of one deployment, chunk by chunk. Safe to re-run."""
    step_s = int(duration_s(step or cfg.step))
    chunk_s = int(duration_s(chunk or cfg.chunk))
    if chunk_s % step_s:
        raise KvplanError(f"chunk {chunk or cfg.chunk} is not a multiple of step {step or cfg.step}", source="--chunk")
    lookback, gap_after = int(duration_s(cfg.lookback) * 1000), int(duration_s(cfg.gap_after) * 1000)
    client = client or PromClient(cfg)
    res = IngestResult(deployment.name, t_from, t_to)
    bounds = list(chunk_bounds(t_from, t_to, step_s, chunk_s))
    seen: set[str] = set()
    with ThreadPoolExecutor(cfg.concurrency) as pool:
        for i, (t0, t1) in enumerate(bounds):
            ch = fetch_chunk(client, deployment.prometheus_selector, t0, t1, lookback, pool)
            ch.series = _without_routers(ch.series, res)
            dep_id, ids = _ensure_targets(db, deployment.name, ch.series)
            gaps: list[tuple] = []
            if ch.error is None:
                times: dict[str, list] = {}
                for s in ch.series:
                    times.setdefault(target_name(s.labels), []).append(s.t)
                for tname in sorted(seen | times.keys()):
                    ts = np.concatenate(times.get(tname, [np.array([], np.int64)]))
                    for a, b in silent_stretches(ts, t0, t1, gap_after, tname in seen):
                        gaps.append((tname, a, b, "no samples in Prometheus (target down or not scraped)"))
                if not ch.series:
                    gaps.append((None, t0, t1, f"no series matched {{{deployment.prometheus_selector}}} "
                                               f"at {client.safe_url}"))
                seen |= times.keys()
                rows = build_rows(ch, ids, step_s * 1000, lookback)
                res.far_pairs += rows.far
            else:
                rows = None
                res.failed += 1
                res.errors.append(ch.error)
                log.error("deployment %s: chunk %s..%s failed: %s", deployment.name, _iso(t0 / 1000),
                          _iso(t1 / 1000), ch.error)
            n_inc, n_g = write_chunk(db, dep_id, ch, rows, gaps, step_s, deployment.prometheus_selector)
            res.chunks += 1
            res.raw_samples += ch.n_raw
            res.increments += n_inc
            res.gauges += n_g
            res.gaps += len(gaps) + (ch.error is not None)
            if on_chunk:
                on_chunk(i + 1, len(bounds), res)
    if res.far_pairs:
        log.warning("deployment %s: %d increases not counted because consecutive samples were more than "
                    "prometheus.lookback (%s) apart; if Prometheus scrapes less often than that, raise "
                    "lookback (and gap_after) above the scrape interval", deployment.name, res.far_pairs,
                    cfg.lookback)
    return res


def ingest_window(t_from: datetime, t_to: datetime) -> tuple[datetime, datetime]:
    """UTC-aware bounds, the end capped at now (no gaps recorded for the future)."""
    return aware_utc(t_from), min(aware_utc(t_to), utcnow())


