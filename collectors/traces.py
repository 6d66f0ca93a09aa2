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
line (:class:`collectors.parse.PayloadError`). Re-importing is a no-op: each file's imported
length and the sha256 of those bytes are recorded; a file seen again unchanged is skipped, a
file that has grown since (the log LMCache is still writing) is imported from where the last
import stopped, and a file whose imported part changed is refused (:class:`ConflictError`).
A last line without its newline is left for the next import unless it is complete JSON.

KV bytes per chunk come from ``shapes``/``dtypes`` (LMCache's rule: the sum over tensors of
elements x dtype bytes, from the first line) or from ``bytes_per_chunk`` (the option wins).
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from array import array
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collectors.parse import PayloadError
from collectors.store import ConflictError
from models import cachesim
from models.errors import KvplanError
from sql.db import Database

FORMATS = ("lmcache", "mooncake")
LMCACHE_GLOB = "lookup_hashes_*.jsonl"
MOONCAKE_BLOCK = 512
DTYPE_BYTES = {  # LMCache's table (tools/cache_simulator/simulator.py::_DTYPE_BYTES)
    "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int8": 1, "int32": 4, "int64": 8,
}
_INT64_MAX = 2**63 - 1


class TraceError(KvplanError):
    """A trace request kvplan cannot serve (no trace, unknown name, missing bytes/chunk)."""


def kv_bytes_per_chunk(shapes: list, dtypes: list) -> int | None:
    """Bytes of one chunk's KV tensors; ``None`` when empty or a dtype is unknown.

    LMCache 0.5.6's server logs torch's names (``torch.bfloat16``), which its own simulator's
    table does not know (it then needs ``--kv-bytes-per-chunk``); the prefix is dropped here."""
    if not shapes or not dtypes or len(shapes) != len(dtypes):
        return None
    total = 0
    for shape, dt in zip(shapes, dtypes):
        dt = dt.removeprefix("torch.")
        if dt not in DTYPE_BYTES:
            return None
        total += math.prod(shape) * DTYPE_BYTES[dt]
    return total or None


@dataclass
class ParsedFile:
    """The validated new lines of one file, columnar."""

    path: Path
    format: str
    sha256: str
    bytes: int
    lines: int
    start_line: int
    line_no: array = field(default_factory=lambda: array("q"))
    ts: array = field(default_factory=lambda: array("d"))
    request_id: list = field(default_factory=list)
    model_name: list = field(default_factory=list)
    chunk_size: array = field(default_factory=lambda: array("q"))
    seq_len: array = field(default_factory=lambda: array("q"))
    output_len: list = field(default_factory=list)
    offsets: array = field(default_factory=lambda: array("q", [0]))
    int_keys: array = field(default_factory=lambda: array("q"))
    hex_keys: list = field(default_factory=list)
    bytes_per_chunk: int | None = None
    partial_tail: bool = False

    @property
    def requests(self) -> int:
        return len(self.line_no)


def detect_format(path: Path) -> str:
    """``lmcache`` or ``mooncake`` from the first non-blank line."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise PayloadError(str(path), f"not JSON: {e.msg}", n) from None
            if isinstance(obj, dict) and "chunk_hashes" in obj:
                return "lmcache"
            if isinstance(obj, dict) and "hash_ids" in obj:
                return "mooncake"
            raise PayloadError(str(path), "neither an LMCache lookup-hash line (chunk_hashes) "
                               "nor a Mooncake trace line (hash_ids)", n)
    raise PayloadError(str(path), "empty file: no trace line")


def _int(obj: dict, key: str, path: Path, n: int, minimum: int = 0) -> int:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise PayloadError(str(path), f"{key!r} must be an integer, got {v!r}", n)
    if v < minimum or v > _INT64_MAX:
        raise PayloadError(str(path), f"{key!r} = {v} is out of range (>= {minimum})", n)
    return v


def _number(obj: dict, key: str, path: Path, n: int) -> float:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise PayloadError(str(path), f"{key!r} must be a finite number, got {v!r}", n)
    return float(v)


def _parse_lmcache_line(obj: dict, out: ParsedFile, n: int) -> None:
    path = out.path
    for key in ("timestamp", "chunk_size", "seq_len", "chunk_hashes"):
        if key not in obj:
            raise PayloadError(str(path), f"missing field {key!r}", n)
    ts = _number(obj, "timestamp", path, n)
    chunk_size = _int(obj, "chunk_size", path, n, minimum=1)
    seq_len = _int(obj, "seq_len", path, n)
    hashes = obj["chunk_hashes"]
    if not isinstance(hashes, list) or not all(isinstance(h, str) and h for h in hashes):
        raise PayloadError(str(path), "'chunk_hashes' must be a list of hash strings", n)
    if len(hashes) * chunk_size > seq_len:
        raise PayloadError(str(path), f"{len(hashes)} chunks of {chunk_size} tokens exceed "
                           f"seq_len {seq_len} (chunk_hashes cover full chunks only)", n)
    for key in ("request_id", "model_name"):
        if key in obj and not isinstance(obj[key], str):
            raise PayloadError(str(path), f"{key!r} must be a string", n)
    shapes, dtypes = obj.get("shapes", []), obj.get("dtypes", [])
    if not isinstance(shapes, list) or not all(
            isinstance(s, list) and all(isinstance(x, int) and x >= 0 for x in s) for s in shapes):
        raise PayloadError(str(path), "'shapes' must be a list of integer lists", n)
    if not isinstance(dtypes, list) or not all(isinstance(d, str) for d in dtypes):
        raise PayloadError(str(path), "'dtypes' must be a list of strings", n)
    bpc = kv_bytes_per_chunk(shapes, dtypes)
    if bpc is not None:
        if out.bytes_per_chunk is None:
            out.bytes_per_chunk = bpc
        elif bpc != out.bytes_per_chunk:
            raise PayloadError(str(path), f"shapes/dtypes give {bpc} bytes per chunk, earlier "
                               f"lines {out.bytes_per_chunk}: one trace holds one KV layout "
                               "(import models separately)", n)
    out.ts.append(ts)
    out.request_id.append(obj.get("request_id"))
    out.model_name.append(obj.get("model_name"))
    out.chunk_size.append(chunk_size)
    out.seq_len.append(seq_len)
    out.output_len.append(None)
    out.hex_keys.extend(hashes)
    out.offsets.append(len(out.hex_keys))


def _parse_mooncake_line(obj: dict, out: ParsedFile, n: int, block: int) -> None:
    path = out.path
    for key in ("timestamp", "input_length", "hash_ids"):
        if key not in obj:
            raise PayloadError(str(path), f"missing field {key!r}", n)
    ts = _number(obj, "timestamp", path, n) / 1000.0
    seq_len = _int(obj, "input_length", path, n)
    output_len = _int(obj, "output_length", path, n) if "output_length" in obj else None
    ids = obj["hash_ids"]
    if not isinstance(ids, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and 0 <= h <= _INT64_MAX for h in ids):
        raise PayloadError(str(path), "'hash_ids' must be a list of non-negative integers", n)
    full = seq_len // block
    if not full <= len(ids) <= -(-seq_len // block):
        raise PayloadError(str(path), f"{len(ids)} hash_ids for input_length {seq_len}: expected "
                           f"one per {block}-token block ({full} full blocks)", n)
    out.ts.append(ts)
    out.request_id.append(None)
    out.model_name.append(None)
    out.chunk_size.append(block)
    out.seq_len.append(seq_len)
    out.output_len.append(output_len)
    out.int_keys.extend(ids[:full])
    out.offsets.append(len(out.int_keys))


def parse_file(path: Path, fmt: str, *, skip_bytes: int = 0, skip_lines: int = 0,
               block: int = MOONCAKE_BLOCK) -> ParsedFile:
    """Validate the lines of ``path`` after ``skip_bytes`` (whole file by default)."""
    data = Path(path).read_bytes()
    body = data[skip_bytes:]
    cut = body.rfind(b"\n") + 1
    tail = body[cut:]
    complete = body[:cut]
    take_tail = False
    if tail.strip():
        try:
            json.loads(tail)
            take_tail = True
        except (json.JSONDecodeError, UnicodeDecodeError):
            take_tail = False  # still being written: the next import takes it
    chunk = body if take_tail else complete
    out = ParsedFile(path=Path(path), format=fmt, sha256="", bytes=skip_bytes + len(chunk),
                     lines=skip_lines, start_line=skip_lines + 1,
                     partial_tail=bool(tail.strip()) and not take_tail)
    text_lines = chunk.split(b"\n")
    if text_lines and text_lines[-1] == b"":
        text_lines.pop()
    for i, raw in enumerate(text_lines):
        n = skip_lines + i + 1
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise PayloadError(str(path), "not UTF-8 text", n) from None
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise PayloadError(str(path), f"not JSON: {e.msg} (column {e.colno})", n) from None
        if not isinstance(obj, dict):
            raise PayloadError(str(path), "a trace line must be a JSON object", n)
        if fmt == "lmcache":
            _parse_lmcache_line(obj, out, n)
        else:
            _parse_mooncake_line(obj, out, n, block)
        out.line_no.append(n)
    out.lines = skip_lines + len(text_lines)
    out.sha256 = hashlib.sha256(data[:out.bytes]).hexdigest()
    return out


def expand_paths(paths: list[Path]) -> list[Path]:
    """Files as given; a directory gives its ``lookup_hashes_*.jsonl`` (name order)."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob(LMCACHE_GLOB))
            if not found:
                raise PayloadError(str(p), f"directory holds no {LMCACHE_GLOB} file")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise PayloadError(str(p), "no such file or directory")
    names = [f.name for f in files]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise PayloadError(str(files[0].parent), f"two files named {sorted(dup)[0]}: a trace's "
                           "files are told apart by name")
    return files


@dataclass(frozen=True)
class FileResult:
    file: str
    status: str  # imported | extended | unchanged
    requests: int
    partial_tail: bool = False


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


def _utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def import_trace(db: Database, deployment: str, paths: list[Path], *, name: str | None = None,
                 fmt: str = "auto", bytes_per_chunk: int | None = None,
                 block: int = MOONCAKE_BLOCK) -> ImportResult:
    """Validate every file, then store the new lines in one transaction (module doc)."""
    files = expand_paths(paths)
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
            for f in files:
                prev = _one(con, "trace_file", trace_id=row["trace_id"], file=f.name)
                if prev is not None:
                    state[f.name] = prev

    parsed: list[ParsedFile] = []
    results: list[FileResult] = []
    for f in files:
        prev = state.get(f.name)
        skip_b, skip_l = 0, 0
        if prev is not None:
            size = f.stat().st_size
            with open(f, "rb") as fh:
                head = fh.read(prev["bytes"])
            if size < prev["bytes"] or hashlib.sha256(head).hexdigest() != prev["sha256"]:
                raise ConflictError(f"changed since it was imported into trace {trace_name!r} "
                                    f"({prev['bytes']} bytes, sha256 {prev['sha256'][:12]}...)",
                                    source=str(f))
            skip_b, skip_l = prev["bytes"], prev["lines"]
        p = parse_file(f, kind, skip_bytes=skip_b, skip_lines=skip_l, block=block)
        parsed.append(p)
        if prev is not None and p.bytes == prev["bytes"]:
            results.append(FileResult(f.name, "unchanged", 0, p.partial_tail))
        else:
            results.append(FileResult(f.name, "extended" if prev else "imported", p.requests,
                                      p.partial_tail))
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
                n_bytes_per_chunk=None, bytes_source=None, created_at=_utcnow()).fetchone()[0]
            row = {"trace_id": trace_id, "bytes_per_chunk": None, "bytes_source": None}
        trace_id = row["trace_id"]
        for f, p in zip(files, parsed):  # someone else imported meanwhile: refuse, retry
            now = _one(con, "trace_file", trace_id=trace_id, file=f.name)
            was = state.get(f.name)
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
        for p in parsed:
            if p.requests:
                _insert_requests(con, trace_id, p, keymap)
            Database.run(con, "upsert_trace_file", trace_id=trace_id, file=p.path.name,
                         sha256=p.sha256, n_bytes=p.bytes, n_lines=p.lines, imported_at=_utcnow())
    return ImportResult(deployment, trace_name, trace_id, kind, bpc, tuple(results))


def _insert_requests(con, trace_id: int, p: ParsedFile, keymap: dict | None) -> None:
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
    })
    con.execute("INSERT INTO trace_requests SELECT * FROM reqs")


def _one(con, query: str, **params) -> dict | None:
    cur = Database.run(con, query, **params)
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([d[0] for d in cur.description], row))


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


def list_traces(db: Database, deployment: str) -> list[dict]:
    """Every trace of a deployment with its size (named query ``traces``)."""
    return db.fetch("traces", deployment=deployment)


def load_trace(db: Database, deployment: str, name: str | None = None, *,
               model: str | None = None) -> tuple[cachesim.Trace, TraceInfo]:
    """A stored trace in replay order, columnar (no per-request Python objects)."""
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
        tbl = _arrow(Database.run(con, "trace_replay", trace_id=row["trace_id"], model=model))
    info = TraceInfo(row["trace_id"], row["name"], row["format"], row["bytes_per_chunk"],
                     row["bytes_source"])
    return table_to_trace(tbl), info


def _arrow(cur) -> pa.Table:
    """The result as an Arrow table (DuckDB 2 renamed ``fetch_arrow_table``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "extra copy" advice: fine for one replay read
        fetch = getattr(cur, "to_arrow_table", None) or cur.fetch_arrow_table
        return fetch()


def table_to_trace(tbl: pa.Table) -> cachesim.Trace:
    """Arrow columns ``chunk_keys``, ``seq_len``, ``chunk_size`` -> a :class:`cachesim.Trace`."""
    keys = tbl.column("chunk_keys").combine_chunks()
    lengths = pc.list_value_length(keys).to_numpy(zero_copy_only=False).astype(np.int64)
    values = pc.list_flatten(keys).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return cachesim.Trace(
        chunk_ids=np.ascontiguousarray(values, dtype=np.int64), offsets=offsets,
        seq_len=tbl.column("seq_len").to_numpy().astype(np.int64),
        chunk_size=tbl.column("chunk_size").to_numpy().astype(np.int64))


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
