"""Import request traces with prefix-chunk hashes into DuckDB, and read them back for replay.

Two formats, one JSON object per line:

* **LMCache multi-process lookup-hash logs** (``lmcache server --lookup-hash-log-dir DIR``,
  LMCache 0.5.6, ``lmcache/v1/mp_observability/subscribers/logging/lookup_hash.py``): files
  ``lookup_hashes_<YYYYmmdd_HHMMSS>_<n>.jsonl``, one line per lookup with ``timestamp`` (unix
  seconds), ``request_id``, ``model_name``, ``chunk_size`` (tokens), ``seq_len`` (prompt
  tokens), ``dtypes``, ``shapes`` (the KV tensors of one chunk) and ``chunk_hashes`` (hex
  strings, full chunks only, in prompt order).
* **The Mooncake trace format** (FAST'25 release): ``timestamp`` (ms from the trace start),
  ``input_length``, ``output_length`` (tokens) and ``hash_ids`` (one id per 512-token block,
  the partial last block included). Only full blocks are kept, as LMCache caches only full
  chunks: the partial tail is a miss under both.

Every file is validated whole before anything is written; an error names the file and the
line (:class:`kvplan.collectors.parse.PayloadError`). Re-importing is a no-op: each file's imported
length and the sha256 of those bytes are recorded; a file seen again unchanged is skipped, a
file that has grown since (the log LMCache is still writing) is imported from where the last
import stopped, and a file whose imported part changed is refused (:class:`ConflictError`).
A last line without its newline is left for the next import unless it is complete JSON.

KV bytes per chunk come from ``shapes``/``dtypes`` (LMCache's rule: the sum over tensors of
elements x dtype bytes, from the first line) or from ``bytes_per_chunk`` (the option wins).
"""

from __future__ import annotations

import hashlib
import warnings
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvplan.collectors.parse import PayloadError
from kvplan.collectors.store import ConflictError
from kvplan.collectors.trace_parse import (
    FORMATS,
    LMCACHE_GLOB,
    MOONCAKE_BLOCK,
    ParsedFile,
    TraceError,
    detect_format,
    expand_paths,
    parse_file,
)
from kvplan.models.cache import sim as cachesim
from kvplan.models.core.errors import KvplanError
from kvplan.models.core.timeutil import utcnow
from kvplan.sql.db import Database


@dataclass(frozen=True)
class FileResult:
    file: str
    status: str  # imported | extended | unchanged
    requests: int
    partial_tail: bool = False
    instance: str = ""


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


def import_trace(db: Database, deployment: str, paths: list[Path], *, name: str | None = None,
                 fmt: str = "auto", bytes_per_chunk: int | None = None,
                 block: int = MOONCAKE_BLOCK, instance: str | None = None) -> ImportResult:
    """Validate every file, then store the new lines in one transaction (module doc). Each
    file belongs to a cache instance (``instance``, else its directory's name:
    ``trace_parse.expand_paths``). Long on purpose: validation, the per-file resume/conflict
    rules and the one write transaction are read top to bottom, so that nothing is written
    before every file passed."""
    pairs = expand_paths(paths, instance)
    files = [f for f, _ in pairs]
    inst = {f: i for f, i in pairs}
    if not files:
        raise PayloadError("import-trace", "no file given")
    if bytes_per_chunk is not None and bytes_per_chunk <= 0:
        raise KvplanError("must be > 0", source="bytes_per_chunk")
    if fmt not in ("auto", *FORMATS):
        raise KvplanError(f"unknown format {fmt!r}; one of auto, {', '.join(FORMATS)}",
                          source="format")
    formats = {f: (detect_format(f) if fmt == "auto" else fmt) for f in files}
    kinds = set(formats.values())
    if len(kinds) > 1:
        raise PayloadError(str(files[0]), "files of both formats given: import each trace "
                           "separately")
    kind = kinds.pop()
    trace_name = name or ("lmcache" if kind == "lmcache" else files[0].stem)

    with db.read() as con:
        row = _one(con, "trace_by_name", deployment=deployment, name=trace_name)
        state = {}
        if row is not None:
            if row["format"] != kind:
                raise ConflictError(f"trace {trace_name!r} of deployment {deployment!r} holds "
                                    f"{row['format']} lines, not {kind}", source=str(files[0]))
            adopted: set[str] = set()
            for f in files:
                prev = _one(con, "trace_file", trace_id=row["trace_id"], instance=inst[f], file=f.name)
                if prev is None and f.name not in adopted:  # imported before instances existed?
                    legacy = _one(con, "trace_file", trace_id=row["trace_id"], instance="", file=f.name)
                    if legacy is not None and _head_sha(f, legacy["bytes"]) == legacy["sha256"]:
                        prev = legacy
                        adopted.add(f.name)
                if prev is not None:
                    state[f] = prev

    parsed: list[ParsedFile] = []
    results: list[FileResult] = []
    for f in files:
        prev = state.get(f)
        skip_b, skip_l = 0, 0
        if prev is not None:
            if f.stat().st_size < prev["bytes"] or _head_sha(f, prev["bytes"]) != prev["sha256"]:
                raise ConflictError(f"changed since it was imported into trace {trace_name!r} "
                                    f"({prev['bytes']} bytes, sha256 {prev['sha256'][:12]}...)",
                                    source=str(f))
            skip_b, skip_l = prev["bytes"], prev["lines"]
        p = parse_file(f, kind, skip_bytes=skip_b, skip_lines=skip_l, block=block)
        parsed.append(p)
        if prev is not None and p.bytes == prev["bytes"] and prev["instance"] == inst[f]:
            results.append(FileResult(f.name, "unchanged", 0, p.partial_tail, inst[f]))
        else:
            results.append(FileResult(f.name, "extended" if prev else "imported", p.requests,
                                      p.partial_tail, inst[f]))
    layouts = {p.bytes_per_chunk for p in parsed if p.bytes_per_chunk is not None}
    if row is not None and row["bytes_source"] == "shapes/dtypes" and row["bytes_per_chunk"]:
        layouts.add(row["bytes_per_chunk"])
    if len(layouts) > 1 and bytes_per_chunk is None:
        raise PayloadError(str(files[0]), f"files give different KV bytes per chunk "
                           f"({sorted(layouts)}): one trace holds one KV layout")

    with db.write() as con:
        if row is None:
            trace_id = Database.run(
                con, "insert_trace", deployment=deployment, name=trace_name, format=kind,
                n_bytes_per_chunk=None, bytes_source=None, created_at=utcnow()).fetchone()[0]
            row = {"trace_id": trace_id, "bytes_per_chunk": None, "bytes_source": None}
        trace_id = row["trace_id"]
        for f in files:  # someone else imported meanwhile: refuse, retry
            was = state.get(f)
            now = _one(con, "trace_file", trace_id=trace_id, instance=was["instance"] if was else inst[f],
                       file=f.name)
            if (now is None) != (was is None) or (now and now["bytes"] != was["bytes"]):
                raise ConflictError("imported by another process meanwhile: run again",
                                    source=str(f))
        bpc, source = row["bytes_per_chunk"], row["bytes_source"]
        if bytes_per_chunk is not None:
            bpc, source = int(bytes_per_chunk), "option"
        elif bpc is None and layouts:
            bpc, source = layouts.pop(), "shapes/dtypes"
        if (bpc, source) != (row["bytes_per_chunk"], row["bytes_source"]):
            Database.run(con, "set_trace_bytes", trace_id=trace_id, n_bytes_per_chunk=bpc,
                         bytes_source=source)
        keymap = None
        if kind == "lmcache":
            keymap = dict(con.execute(
                "SELECT hash, key FROM trace_chunk_keys WHERE trace_id = ?", [trace_id]).fetchall())
        for f, p in zip(files, parsed, strict=True):
            was = state.get(f)
            if was is not None and was["instance"] != inst[f]:  # imported before instances: adopt it
                Database.run(con, "adopt_trace_file_rows", trace_id=trace_id, instance=inst[f], file=f.name)
                Database.run(con, "drop_legacy_trace_file", trace_id=trace_id, file=f.name)
            if p.requests:
                _insert_requests(con, trace_id, p, keymap, inst[f])
            Database.run(con, "upsert_trace_file", trace_id=trace_id, instance=inst[f], file=p.path.name,
                         sha256=p.sha256, n_bytes=p.bytes, n_lines=p.lines, imported_at=utcnow())
    return ImportResult(deployment, trace_name, trace_id, kind, bpc, tuple(results))


def _insert_requests(con, trace_id: int, p: ParsedFile, keymap: dict | None, instance: str) -> None:
    if p.format == "lmcache":
        start = len(keymap)
        new: dict[str, int] = {}
        keys = array("q")
        for h in p.hex_keys:
            k = keymap.get(h)
            if k is None:
                k = new.get(h)
                if k is None:
                    k = start + len(new)
                    new[h] = k
            keys.append(k)
        if new:
            chunk_map = pa.table({"trace_id": pa.array([trace_id] * len(new), pa.int64()),  # noqa: F841
                                  "hash": list(new.keys()),
                                  "key": pa.array(list(new.values()), pa.int64())})
            con.execute("INSERT INTO trace_chunk_keys SELECT * FROM chunk_map")
            keymap.update(new)
    else:
        keys = p.int_keys
    n = p.requests
    values = pa.array(np.frombuffer(keys, dtype=np.int64) if len(keys) else
                      np.zeros(0, np.int64))
    offsets = pa.array(np.frombuffer(p.offsets, dtype=np.int64).astype(np.int32)
                       if len(keys) < 2**31 else np.frombuffer(p.offsets, dtype=np.int64))
    lists = (pa.ListArray if offsets.type == pa.int32() else pa.LargeListArray).from_arrays(
        offsets, values)
    reqs = pa.table({  # noqa: F841 (read by DuckDB by name)
        "trace_id": pa.array(np.full(n, trace_id, np.int64)),
        "file": pa.array([p.path.name] * n, pa.string()),
        "line": pa.array(np.frombuffer(p.line_no, dtype=np.int64).astype(np.int32)),
        "ts": pa.array(np.frombuffer(p.ts, dtype=np.float64)),
        "request_id": pa.array(p.request_id, pa.string()),
        "model_name": pa.array(p.model_name, pa.string()),
        "chunk_size": pa.array(np.frombuffer(p.chunk_size, dtype=np.int64).astype(np.int32)),
        "seq_len": pa.array(np.frombuffer(p.seq_len, dtype=np.int64).astype(np.int32)),
        "output_len": pa.array(p.output_len, pa.int32()),
        "chunk_keys": lists,
        "instance": pa.array([instance] * n, pa.string()),
    })
    con.execute("INSERT INTO trace_requests (trace_id, file, line, ts, request_id, model_name, chunk_size, "
                "seq_len, output_len, chunk_keys, instance) SELECT * FROM reqs")


def _head_sha(f: Path, n: int) -> str:
    with open(f, "rb") as fh:
        return hashlib.sha256(fh.read(n)).hexdigest()


def _one(con, query: str, **params) -> dict | None:
    cur = Database.run(con, query, **params)
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([d[0] for d in cur.description], row, strict=True))


# --------------------------------------------------------------------------------------------
# Reading back
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceInfo:
    trace_id: int
    name: str
    format: str
    bytes_per_chunk: int | None
    bytes_source: str | None
    instances: tuple[str, ...] = ()
    """Cache instances in the replayed window, in name order (``Trace.instance`` indexes them)."""


def load_trace(db: Database, deployment: str, name: str | None = None, *,
               model: str | None = None, t_from: float | None = None,
               t_to: float | None = None) -> tuple[cachesim.Trace, TraceInfo]:
    """A stored trace in replay order, columnar (no per-request Python objects): the logs of
    all its cache instances merged by time, each request's time and instance kept.
    ``t_from``/``t_to`` (unix seconds for LMCache logs) keep the requests in [t_from, t_to]."""
    with db.read() as con:
        if name is None:
            rows = Database.run(con, "traces", deployment=deployment).fetchall()
            if not rows:
                raise TraceError(f"deployment {deployment!r} has no trace: run "
                                 "`kvplan import-trace` first", source="trace")
            name = rows[0][1]
        row = _one(con, "trace_by_name", deployment=deployment, name=name)
        if row is None:
            raise TraceError(f"deployment {deployment!r} has no trace named {name!r}",
                             source="trace")
        tbl = _arrow(Database.run(con, "trace_replay", trace_id=row["trace_id"], model=model,
                                  t_from=t_from, t_to=t_to))
    trace, names = table_to_trace(tbl)
    info = TraceInfo(row["trace_id"], row["name"], row["format"], row["bytes_per_chunk"],
                     row["bytes_source"], names)
    return trace, info


def _arrow(cur) -> pa.Table:
    """The result as an Arrow table (DuckDB 2 renamed ``fetch_arrow_table``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "extra copy" advice: fine for one replay read
        fetch = getattr(cur, "to_arrow_table", None) or cur.fetch_arrow_table
        return fetch()


def table_to_trace(tbl: pa.Table) -> tuple[cachesim.Trace, tuple[str, ...]]:
    """Arrow columns ``chunk_keys``, ``seq_len``, ``chunk_size`` (and ``ts``, ``instance`` when
    present) -> a :class:`cachesim.Trace` and the instance names its ``instance`` indexes."""
    keys = tbl.column("chunk_keys").combine_chunks()
    lengths = pc.list_value_length(keys).to_numpy(zero_copy_only=False).astype(np.int64)
    values = pc.list_flatten(keys).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ts = inst = None
    names: tuple[str, ...] = ()
    if "ts" in tbl.column_names:
        ts = tbl.column("ts").to_numpy().astype(np.float64)
    if "instance" in tbl.column_names:
        col = tbl.column("instance").combine_chunks()
        names = tuple(sorted(pc.unique(col).to_pylist()))
        inst = pc.index_in(col, value_set=pa.array(names, pa.string())).to_numpy(
            zero_copy_only=False).astype(np.int64)
    return cachesim.Trace(
        chunk_ids=np.ascontiguousarray(values, dtype=np.int64), offsets=offsets,
        seq_len=tbl.column("seq_len").to_numpy().astype(np.int64),
        chunk_size=tbl.column("chunk_size").to_numpy().astype(np.int64), ts=ts, instance=inst), names


def ingest_trace_dir(db: Database, deployment: str, directory: Path, *,
                     name: str = "lmcache") -> ImportResult | None:
    """The nightly hook: import what is new in an LMCache ``--lookup-hash-log-dir``.

    Files already imported are skipped, the one LMCache is still writing is taken up to its
    last complete line. Returns ``None`` when the directory holds no log yet."""
    directory = Path(directory)
    if not directory.is_dir() or not (any(directory.glob(LMCACHE_GLOB))
                                      or any(directory.glob(f"*/{LMCACHE_GLOB}"))):
        return None
    db.migrate()
    return import_trace(db, deployment, [directory], name=name, fmt="lmcache")
