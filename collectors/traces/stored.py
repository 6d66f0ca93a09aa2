"""What an import has stored: the trace's row, each file's progress (bytes, lines, sha256 of the part
taken) and its requests. Shared by the two importers, ``ingest`` (LMCache and Mooncake traces) and
``request_logs`` (request logs hashed at import), so neither imports the other's internals."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ...sql.db import Database
from ..scrape.store import ConflictError
from .lines import ParsedFile


@dataclass(frozen=True)
class FileResult:
    file: str
    status: str  # imported | extended | unchanged
    requests: int
    partial_tail: bool = False
    instance: str = ""
    notes: tuple[str, ...] = ()
    """Lines skipped (each named by file:line, within ``requests.read.MAX_SKIPPED``)."""


@dataclass(frozen=True)
class ImportResult:
    deployment: str
    trace: str
    trace_id: int
    format: str
    bytes_per_chunk: int | None
    files: tuple[FileResult, ...]

    @property
    def requests(self) -> int:
        return sum(f.requests for f in self.files)


def trace_state(con: duckdb.DuckDBPyConnection, deployment: str, trace_name: str, kind: str,
                 inst: dict[Path, str]) -> tuple[dict | None, dict[Path, dict]]:
    """The trace's row (None: new) and what earlier imports took of each file of its instance.
    A file imported before traces had instances (instance '') whose imported part is unchanged is
    the same file: the import adopts it rather than importing it again (once per file name)."""
    row = one_row(con, "trace_by_name", deployment=deployment, name=trace_name)
    state: dict[Path, dict] = {}
    if row is not None:
        if row["format"] != kind:
            raise ConflictError(f"trace {trace_name!r} of deployment {deployment!r} holds "
                                f"{row['format']} lines, not {kind}", source=str(next(iter(inst))))
        adopted: set[str] = set()
        for f, name in inst.items():
            prev = one_row(con, "trace_file", trace_id=row["trace_id"], instance=name, file=f.name)
            if prev is None and f.name not in adopted:
                legacy = one_row(con, "trace_file", trace_id=row["trace_id"], instance="", file=f.name)
                if legacy is not None and _head_sha(f, legacy["bytes"]) == legacy["sha256"]:
                    prev = legacy
                    adopted.add(f.name)
            if prev is None:
                prev = _imported_as(con, row["trace_id"], f, name)
                if prev is not None:  # the same file, imported before under another instance: stays there
                    inst[f] = prev["instance"]
            if prev is not None:
                state[f] = {k: prev[k] for k in ("bytes", "lines", "sha256", "instance")}
    return row, state


def _imported_as(con: Any, trace_id: int, f: Path, instance: str) -> dict | None:
    """The row of an earlier import of this very file under another instance (same name, and
    its imported bytes are this file's first bytes): a file is identified by its content, not by
    the directory or --instance it was reached under."""
    cur = Database.run(con, "trace_file_elsewhere", trace_id=trace_id, instance=instance, file=f.name)
    cols = [d[0] for d in cur.description]
    for r in cur.fetchall():
        prev = dict(zip(cols, r, strict=True))
        if prev["instance"] and prev["bytes"] and _head_sha(f, prev["bytes"]) == prev["sha256"]:
            return prev
    return None


def _head_sha(f: Path, n: int) -> str | None:
    """sha256 of the first ``n`` bytes of ``f`` (read in 1 MiB blocks; None: shorter)."""
    h = hashlib.sha256()
    left = n
    with open(f, "rb") as fh:
        while left > 0:
            b = fh.read(min(left, 1 << 20))
            if not b:
                return None
            h.update(b)
            left -= len(b)
    return h.hexdigest()


def _lmcache_keys(con, trace_id: int, hex_keys: list[str]) -> np.ndarray:
    """Keys of a batch's hex hashes: new hashes get the next keys in order of first appearance
    (in DuckDB, so the hash -> key map never has to fit in Python's memory)."""
    batch_hashes = pa.table({"ord": pa.array(np.arange(len(hex_keys), dtype=np.int64)),  # noqa: F841 (DuckDB)
                             "hash": pa.array(hex_keys, pa.string())})
    con.execute("""
        INSERT INTO trace_chunk_keys
        SELECT $trace_id, n.hash,
               (SELECT count(*) FROM trace_chunk_keys WHERE trace_id = $trace_id)
                 + row_number() OVER (ORDER BY n.first) - 1
        FROM (SELECT b.hash, min(b.ord) AS first FROM batch_hashes b
              WHERE b.hash NOT IN (SELECT hash FROM trace_chunk_keys WHERE trace_id = $trace_id)
              GROUP BY b.hash) n""", {"trace_id": trace_id})
    got = con.execute("""
        SELECT k.key FROM batch_hashes b JOIN trace_chunk_keys k ON k.trace_id = $trace_id AND k.hash = b.hash
        ORDER BY b.ord""", {"trace_id": trace_id}).fetchnumpy()["key"]
    return np.asarray(got, dtype=np.int64)


def insert_requests(con: duckdb.DuckDBPyConnection, trace_id: int, p: ParsedFile, instance: str) -> None:
    if p.format in ("lmcache", "requests"):  # hex digests: keyed per trace
        keys = _lmcache_keys(con, trace_id, p.hex_keys) if p.hex_keys else np.zeros(0, np.int64)
    else:
        keys = np.frombuffer(p.int_keys, dtype=np.int64) if len(p.int_keys) else np.zeros(0, np.int64)
    n = p.requests
    lists = pa.LargeListArray.from_arrays(pa.array(np.frombuffer(p.offsets, dtype=np.int64)), pa.array(keys))
    reqs = pa.table({  # noqa: F841 (read by DuckDB by name)
        "trace_id": pa.array(np.full(n, trace_id, np.int64)),
        "file": pa.array([p.path.name] * n, pa.string()),
        "line": pa.array(np.frombuffer(p.line_no, dtype=np.int64)),
        "ts": pa.array(np.frombuffer(p.ts, dtype=np.float64)),
        "request_id": pa.array(p.request_id, pa.string()),
        "model_name": pa.array(p.model_name, pa.string()),
        "chunk_size": pa.array(np.frombuffer(p.chunk_size, dtype=np.int64)),
        "seq_len": pa.array(np.frombuffer(p.seq_len, dtype=np.int64)),
        "output_len": pa.array(p.output_len, pa.int64()),
        "chunk_keys": lists,
        "instance": pa.array([instance] * n, pa.string()),
    })
    con.execute("INSERT INTO trace_requests (trace_id, file, line, ts, request_id, model_name, chunk_size, "
                "seq_len, output_len, chunk_keys, instance) SELECT * FROM reqs")


def one_row(con: duckdb.DuckDBPyConnection, query: str, **params: Any) -> dict | None:
    cur = Database.run(con, query, **params)
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([d[0] for d in cur.description], row, strict=True))
