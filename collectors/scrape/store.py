"""Write scrapes into DuckDB: one scrape = one transaction, and the same scrape twice is
a no-op.

A scrape is identified by (deployment, target, time). Importing a payload for a
(target, time) that already holds the same payload (same SHA-256) changes nothing;
a different payload for it is refused. Samples go in with one bulk insert from an Arrow
table, inside the same transaction as the scrape row, so a crash mid-write leaves either
the whole scrape or nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

import duckdb
import pyarrow as pa

from ...models.core.errors import KvplanError
from ...models.core.fields import name_problem
from ...models.core.redact import redact
from ...models.core.timeutil import naive_utc
from ...sql.db import Database
from .payload import Payload


class ConflictError(KvplanError):
    """A different payload is already stored for this target and time."""


@dataclass(frozen=True)
class StoreResult:
    target: str
    ts: datetime
    status: str  # stored | duplicate | failed-recorded
    samples: int
    warnings: tuple[str, ...] = ()
    """What the parser flagged in the payload (stored with the scrape too)."""


def series_id(target_id: int, name: str, model_name: str | None, engine: str | None,
              le: float | None, labels: tuple) -> int:
    key = json.dumps([target_id, name, model_name, engine, le if le is None else repr(le), labels],
                     separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big", signed=True)


def check_name(name: str, what: str) -> str:
    """Deployment and target names (``kvplan.models.core.fields.name_problem``): non-empty, no
    surrounding blanks, at most 200 characters, no control or invisible formatting character."""
    why = name_problem(name)
    if why is not None:
        raise KvplanError(f"{name!r} is not a usable name: {why} (a name is non-empty, without leading or trailing "
                          "blanks, control or invisible formatting characters such as bidi overrides, at most 200 "
                          "characters)", source=what)
    return name


def ensure_target(con: duckdb.DuckDBPyConnection, deployment: str, target: str, kind: str, url: str | None) -> int:
    check_name(deployment, "--deployment")
    check_name(target, "target")
    row = Database.run(con, "get_deployment_id", name=deployment).fetchone()
    dep_id = row[0] if row else Database.scalar(con, "insert_deployment", name=deployment)
    row = Database.run(con, "get_target", deployment_id=dep_id, name=target).fetchone()
    if row is None:
        return Database.scalar(con, "insert_target", deployment_id=dep_id, name=target, kind=kind, url=url)
    if row[1] != kind or (url and row[2] != url):
        Database.run(con, "update_target", target_id=row[0], kind=kind, url=url)
    return row[0]


def payload_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def store_payload(db: Database, *, deployment: str, target: str, ts: datetime, payload: Payload,
                  sha256: str, source: str, url: str | None = None,
                  duration_s: float | None = None) -> StoreResult:
    """Store one parsed payload as a successful scrape of ``target`` at ``ts``, in its own
    connection and transaction."""
    with db.write() as con:
        return insert_payload(con, deployment=deployment, target=target, ts=ts, payload=payload,
                              sha256=sha256, source=source, url=url, duration_s=duration_s)


def insert_payload(con: duckdb.DuckDBPyConnection, *, deployment: str, target: str, ts: datetime, payload: Payload,
                   sha256: str, source: str, url: str | None = None, duration_s: float | None = None) -> StoreResult:
    """The work of :func:`store_payload` on an open connection, inside the caller's
    transaction (``Database.write`` or ``Database.transaction`` in a ``Database.batch``)."""
    ts = naive_utc(ts)
    target_id = ensure_target(con, deployment, target, payload.kind, url)
    existing = Database.run(con, "get_scrape", target_id=target_id, ts=ts).fetchone()
    if existing is not None:
        if existing[2] == sha256:
            return StoreResult(target, ts, "duplicate", 0)
        raise _conflict(payload.source, deployment, target, ts, existing[1])
    Database.run(con, "insert_scrape", target_id=target_id, ts=ts, ok=True, error=None,
                 duration_s=duration_s, source=source, payload_sha256=sha256,
                 n_samples=len(payload.samples), warnings=redact("\n".join(payload.warnings)) or None)
    ids, names, families, types, models, engines, les, labels = [], [], [], [], [], [], [], []
    values, created = [], []
    for s in payload.samples:
        ids.append(series_id(target_id, s.name, s.model_name, s.engine, s.le, s.labels))
        names.append(s.name)
        families.append(s.family)
        types.append(s.type)
        models.append(s.model_name)
        engines.append(s.engine)
        les.append(s.le)
        labels.append(json.dumps(dict(s.labels), sort_keys=True, separators=(",", ":")))
        values.append(s.value)
        created.append(s.created)
    series_tbl = pa.table({  # noqa: F841 (read by DuckDB by name)
        "series_id": pa.array(ids, pa.int64()), "target_id": pa.array([target_id] * len(ids), pa.int32()),
        "name": names, "family": families, "type": types, "model_name": pa.array(models, pa.string()),
        "engine": pa.array(engines, pa.string()), "le": pa.array(les, pa.float64()), "labels": labels,
    })
    sample_tbl = pa.table({  # noqa: F841
        "series_id": pa.array(ids, pa.int64()), "ts": pa.array([ts] * len(ids), pa.timestamp("us")),
        "value": pa.array(values, pa.float64()), "created": pa.array(created, pa.float64()),
    })
    con.execute("INSERT INTO series SELECT * FROM series_tbl "
                "WHERE series_id NOT IN (SELECT series_id FROM series)")
    con.execute("INSERT INTO samples SELECT * FROM sample_tbl")
    return StoreResult(target, ts, "stored", len(payload.samples), tuple(payload.warnings))


def check_payload(con: duckdb.DuckDBPyConnection, *, deployment: str, target: str, ts: datetime, sha256: str,
                  source: str) -> None:
    """Raise the ``ConflictError`` :func:`insert_payload` would, without writing anything: a
    batch checks every file before it stores the first."""
    ts = naive_utc(ts)
    dep = Database.run(con, "get_deployment_id", name=deployment).fetchone()
    row = Database.run(con, "get_target", deployment_id=dep[0], name=target).fetchone() if dep else None
    existing = Database.run(con, "get_scrape", target_id=row[0], ts=ts).fetchone() if row else None
    if existing is not None and existing[2] != sha256:
        raise _conflict(source, deployment, target, ts, existing[1])


def _conflict(source: str, deployment: str, target: str, ts: datetime, ok: bool) -> ConflictError:
    return ConflictError(f"{source}: deployment {deployment!r} target {target!r} already has a "
                         f"{'different payload' if ok else 'failed scrape'} at {ts.isoformat()}Z; "
                         "refusing to overwrite it")


def store_failure(db: Database, *, deployment: str, target: str, kind: str, ts: datetime,
                  error: str, source: str, url: str | None = None,
                  duration_s: float | None = None) -> StoreResult:
    """Record a failed scrape (target down, timeout, bad payload): a gap, never zeros."""
    with db.write() as con:
        return insert_failure(con, deployment=deployment, target=target, kind=kind, ts=ts, error=error,
                              source=source, url=url, duration_s=duration_s)


def insert_failure(con: duckdb.DuckDBPyConnection, *, deployment: str, target: str, kind: str, ts: datetime,
                   error: str, source: str, url: str | None = None, duration_s: float | None = None) -> StoreResult:
    """The work of :func:`store_failure` inside the caller's transaction."""
    ts = naive_utc(ts)
    target_id = ensure_target(con, deployment, target, kind, url)
    if Database.run(con, "get_scrape", target_id=target_id, ts=ts).fetchone() is None:
        Database.run(con, "insert_scrape", target_id=target_id, ts=ts, ok=False, error=redact(error),
                     duration_s=duration_s, source=source, payload_sha256=None, n_samples=0, warnings=None)
    return StoreResult(target, ts, "failed-recorded", 0)
