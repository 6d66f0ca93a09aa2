"""Import request traces with prefix-chunk hashes into DuckDB, and read them back for replay.

Request logs (chat, completions and Batch API bodies, Bailian traces) are a third source, hashed
at import and stored the same way, never their text: ``request_logs.py``. Two trace formats,
one JSON object per line:

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

Every file is validated whole before anything is written (a first streaming pass); an error
names the file and the line (:class:`kvplan.collectors.scrape.parse.PayloadError`). Files are streamed,
never read whole: the import's own memory is one line (at most 16 MiB) and one batch (at most
8,192 lines and 131,072 chunk references), whatever the file's size; DuckDB adds its index of
the trace's distinct chunk hashes (it grows with distinct chunks, not with the file).
``bench/trace_memory_bench.py`` measures it. Re-importing is a no-op: each file's imported
length and the sha256 of those bytes are recorded; a file seen again unchanged is skipped, a
file that has grown since (the log LMCache is still writing) is imported from where the last
import stopped, and a file whose imported part changed is refused (:class:`ConflictError`).
A last line without its newline is left for the next import unless it is complete JSON.

KV bytes per chunk come from ``shapes``/``dtypes`` (LMCache's rule: the sum over tensors of
elements x dtype bytes, from the first line) or from ``bytes_per_chunk`` (the option wins).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...models.cache import sim
from ...models.core.errors import KvplanError
from ...models.core.timeutil import utcnow
from ...sql.db import Database
from ..scrape.payload import PayloadError
from ..scrape.store import ConflictError
from .lines import MAX_BYTES_PER_CHUNK, ParsedFile, detect_format
from .parse import FORMATS, LMCACHE_GLOB, MOONCAKE_BLOCK, Scan, TraceError, scan_file
from .paths import expand_paths
from .request_logs import DEFAULT_CHUNK, import_request_logs, is_request_log
from .stored import FileResult, ImportResult, insert_requests, one_row, trace_state


def import_trace(db: Database, deployment: str, paths: list[Path], *, name: str | None = None,
                 fmt: str = "auto", bytes_per_chunk: int | None = None,
                 block: int = MOONCAKE_BLOCK, instance: str | None = None,
                 tokenizer: str | Path | None = None, chat_template: Path | None = None,
                 chunk_size: int | None = None) -> ImportResult:
    """Validate every file (a first streaming pass, nothing kept), then store the new lines (a
    second pass, one transaction per batch with the file's progress): nothing is written unless
    every file passed, a crash leaves each file imported up to a batch boundary (the next import
    goes on from there: nothing lost, nothing doubled), and memory is bounded by one line and one
    batch (``trace_parse``), not by the files' size. Each file belongs to a cache instance
    (``instance``, else its directory's name: ``trace_paths.expand_paths``); files are told apart
    by (instance, name). Request logs (``fmt="requests"``, or files whose first line is a chat,
    completions or Batch API body) are rendered with ``tokenizer`` / ``chat_template`` and hashed
    in chunks of ``chunk_size`` tokens: ``request_logs.import_request_logs``."""
    if fmt == "requests" or (fmt == "auto" and paths and all(is_request_log(Path(p)) for p in paths)):
        return import_request_logs(db, deployment, [Path(p) for p in paths], name=name, tokenizer=tokenizer,
                                   chat_template=chat_template, chunk_size=chunk_size or DEFAULT_CHUNK,
                                   bytes_per_chunk=bytes_per_chunk, instance=instance)
    pairs = expand_paths(paths, instance)
    files = [f for f, _ in pairs]
    inst = dict(pairs)
    if not files:
        raise PayloadError("import-trace", "no file given")
    if bytes_per_chunk is not None and not 1 <= bytes_per_chunk <= MAX_BYTES_PER_CHUNK:
        raise KvplanError(f"must be from 1 to {MAX_BYTES_PER_CHUNK:,} (1 TiB); got {bytes_per_chunk}",
                          source="--bytes-per-chunk")
    if fmt not in ("auto", *FORMATS):
        raise KvplanError(f"unknown format {fmt!r}; one of auto, {', '.join(FORMATS)}, requests",
                          source="format")
    detected = {f: (detect_format(f) if fmt == "auto" else fmt) for f in files}
    formats = {f: k for f, k in detected.items() if k is not None}
    empty = [f for f, k in detected.items() if k is None]  # just rotated: taken once they hold a line
    if not formats:
        raise PayloadError(str(files[0]), "empty file: no trace line yet" if len(files) == 1
                           else f"all {len(files)} files are empty: no trace line yet")
    files = [f for f in files if f in formats]
    kinds = set(formats.values())
    if len(kinds) > 1:
        raise PayloadError(str(files[0]), "files of both formats given: import each trace "
                           "separately")
    kind = kinds.pop()
    trace_name = name or ("lmcache" if kind == "lmcache" else files[0].stem)
    with db.read() as con:
        row, state = trace_state(con, deployment, trace_name, kind, inst)
    scans = [_validate(f, kind, state.get(f), trace_name, block) for f in files]
    layouts = {s.bytes_per_chunk for s in scans if s.bytes_per_chunk is not None}
    if row is not None and row["bytes_source"] == "shapes/dtypes" and row["bytes_per_chunk"]:
        layouts.add(row["bytes_per_chunk"])
    if len(layouts) > 1 and bytes_per_chunk is None:
        raise PayloadError(str(files[0]), f"files give different KV bytes per chunk "
                           f"({sorted(layouts)}): one trace holds one KV layout")
    with db.write() as con:
        now, now_state = trace_state(con, deployment, trace_name, kind, inst)
        if (now is None) != (row is None) or now_state != state:  # another import meanwhile: refuse, retry
            raise ConflictError("imported by another process meanwhile: run again", source=str(files[0]))
        if row is None:
            trace_id = Database.scalar(
                con, "insert_trace", deployment=deployment, name=trace_name, format=kind,
                n_bytes_per_chunk=None, bytes_source=None, created_at=utcnow())
            row = {"trace_id": trace_id, "bytes_per_chunk": None, "bytes_source": None}
        trace_id = row["trace_id"]
        bpc, source = row["bytes_per_chunk"], row["bytes_source"]
        if bytes_per_chunk is not None:
            bpc, source = int(bytes_per_chunk), "option"
        elif bpc is None and layouts:
            bpc, source = layouts.pop(), "shapes/dtypes"
        if (bpc, source) != (row["bytes_per_chunk"], row["bytes_source"]):
            Database.run(con, "set_trace_bytes", trace_id=trace_id, n_bytes_per_chunk=bpc,
                         bytes_source=source)
        for f, was in state.items():
            if was["instance"] != inst[f]:  # imported before traces had instances: adopt it
                Database.run(con, "adopt_trace_file_rows", trace_id=trace_id, instance=inst[f], file=f.name)
                Database.run(con, "upsert_trace_file", trace_id=trace_id, instance=inst[f], file=f.name,
                             sha256=was["sha256"], n_bytes=was["bytes"], n_lines=was["lines"],
                             imported_at=utcnow())
                Database.run(con, "drop_legacy_trace_file", trace_id=trace_id, file=f.name)
    for s in scans:
        _store(db, trace_id, s, state.get(s.path), block, inst[s.path])
    return ImportResult(deployment, trace_name, trace_id, kind, bpc, tuple(
        FileResult(s.path.name, "unchanged" if prev is not None and s.bytes == prev["bytes"]
                   and prev["instance"] == inst[s.path] else "extended" if prev is not None else "imported",
                   s.requests, s.partial_tail, inst[s.path])
        for s, prev in ((s, state.get(s.path)) for s in scans)) + tuple(
        FileResult(f.name, "empty (no line yet)", 0, False, inst[f]) for f in empty))


def _validate(f: Path, kind: str, prev: dict | None, trace_name: str, block: int) -> Scan:
    """The first pass over one file: every new line validated, nothing kept; a file whose
    imported part changed is refused."""
    skip_b, skip_l = (prev["bytes"], prev["lines"]) if prev is not None else (0, 0)
    if prev is not None and f.stat().st_size < skip_b:
        raise ConflictError(f"changed since it was imported into trace {trace_name!r} (shorter than the "
                            f"{skip_b} bytes imported)", source=str(f))
    scan = scan_file(f, kind, skip_bytes=skip_b, skip_lines=skip_l, block=block)
    if prev is not None and scan.prefix_sha256 != prev["sha256"]:
        raise ConflictError(f"changed since it was imported into trace {trace_name!r} "
                            f"({prev['bytes']} bytes, sha256 {prev['sha256'][:12]}...)", source=str(f))
    return scan


def _store(db: Database, trace_id: int, scan: Scan, prev: dict | None, block: int, instance: str) -> None:
    """The second pass over one file, up to the length the first pass found: each batch in its own
    transaction with the file's progress (bytes, lines, sha256 of the part taken), so a crash leaves
    a file imported up to a batch boundary and the next import goes on from there; a batch finding
    the progress moved (another import of the same file) is refused."""
    if prev is not None and scan.bytes == prev["bytes"]:
        return
    done = {"bytes": prev["bytes"] if prev is not None else None}

    def write(batch: ParsedFile) -> None:
        with db.write() as con:
            now = one_row(con, "trace_file", trace_id=trace_id, instance=instance, file=scan.path.name)
            if (now["bytes"] if now is not None else None) != done["bytes"]:
                raise ConflictError("imported by another process meanwhile: run again", source=str(scan.path))
            if batch.requests:
                insert_requests(con, trace_id, batch, instance)
            Database.run(con, "upsert_trace_file", trace_id=trace_id, instance=instance, file=scan.path.name,
                         sha256=batch.sha256,
                         n_bytes=batch.bytes, n_lines=batch.lines, imported_at=utcnow())
        done["bytes"] = batch.bytes

    skip_b, skip_l = (prev["bytes"], prev["lines"]) if prev is not None else (0, 0)
    scan_file(scan.path, scan.format, skip_bytes=skip_b, skip_lines=skip_l, block=block, upto=scan.bytes,
              on_batch=write)


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

    @property
    def lookup_times(self) -> bool:
        """The trace's times are LMCache's lookups (logged at a scheduler step, after any wait
        behind the engine's previous prefill), not the requests' arrivals."""
        return self.format == "lmcache"


def load_trace(db: Database, deployment: str, name: str | None = None, *,
               model_name: str | None = None, t_from: float | None = None,
               t_to: float | None = None) -> tuple[sim.Trace, TraceInfo]:
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
        row = one_row(con, "trace_by_name", deployment=deployment, name=name)
        if row is None:
            raise TraceError(f"deployment {deployment!r} has no trace named {name!r}",
                             source="trace")
        if model_name is not None:
            models = [r[0] for r in con.execute("SELECT DISTINCT model_name FROM trace_requests WHERE trace_id = ? "
                                                 "ORDER BY 1", [row["trace_id"]]).fetchall()]
            if model_name not in models:
                raise TraceError(f"trace {name!r} has no requests of model {model_name!r}; its models: "
                                 f"{', '.join(repr(m) for m in models) or 'none named'}", source="--model")
        tbl = _arrow(Database.run(con, "trace_replay", trace_id=row["trace_id"], model_name=model_name,
                                  from_unix_s=t_from, to_unix_s=t_to))
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


def table_to_trace(tbl: pa.Table) -> tuple[sim.Trace, tuple[str, ...]]:
    """Arrow columns ``chunk_keys``, ``seq_len``, ``chunk_size`` (and ``ts``, ``instance`` when
    present) -> a :class:`sim.Trace` and the instance names its ``instance`` indexes."""
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
    return sim.Trace(
        chunk_ids=np.ascontiguousarray(values, dtype=np.int64), offsets=offsets,
        seq_len=tbl.column("seq_len").to_numpy().astype(np.int64),
        chunk_size=tbl.column("chunk_size").to_numpy().astype(np.int64), ts=ts, instance=inst), names


def ingest_trace_dir(db: Database, deployment: str, directory: Path, *,
                     name: str = "lmcache") -> ImportResult | None:
    """The nightly hook: import what is new in an LMCache ``--lookup-hash-log-dir``.

    Files already imported are skipped, the one LMCache is still writing is taken up to its
    last complete line. Returns ``None`` when the directory holds no log yet."""
    directory = Path(directory)
    if not directory.is_dir() or not any(directory.glob(LMCACHE_GLOB)):
        return None
    db.migrate()
    return import_trace(db, deployment, [directory], name=name, fmt="lmcache")
