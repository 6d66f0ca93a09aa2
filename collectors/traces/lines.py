"""One request-trace line read and bounded: the bounds every value is held to (``MAX_*``), the
KV layout of a chunk (``kv_bytes_per_chunk``), ``ParsedFile`` (validated lines, columnar), the
JSON line reader, the format of a file, and the LMCache lookup-hash and Mooncake line parsers.
Errors are ``PayloadError`` naming the file and the line."""

from __future__ import annotations

import json
import math
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from ..scrape.payload import PayloadError

DTYPE_BYTES = {  # LMCache's table (tools/cache_simulator/simulator.py::_DTYPE_BYTES)
    "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int8": 1, "int32": 4, "int64": 8,
}
_INT64_MAX = 2**63 - 1
MAX_LINE_BYTES = 16 * 2**20
"""Longest trace line read (16 MiB: a 10M-token prompt in 256-token chunks is ~2.7 MB of hashes)."""
MAX_TOKENS = 100_000_000
"""Most prompt or output tokens one request may have (100M: ten times the longest context window
of 2025)."""
MAX_CHUNK_TOKENS = 1_000_000
"""Largest chunk (LMCache's chunk_size; its default is 256)."""
MAX_BYTES_PER_CHUNK = 2**40
"""Largest KV of one chunk (1 TiB)."""
MAX_TIMESTAMP_S = 4_102_444_800.0
"""2100-01-01 in unix seconds: a later LMCache timestamp is milliseconds or junk."""
MAX_TEXT = 4096
"""Longest request_id / model_name kept."""


def kv_bytes_per_chunk(shapes: list, dtypes: list) -> int | None:
    """Bytes of one chunk's KV tensors; ``None`` when empty or a dtype is unknown.

    LMCache 0.5.6's server logs torch's names (``torch.bfloat16``), which its own simulator's
    table does not know (it then needs ``--kv-bytes-per-chunk``); the prefix is dropped here."""
    if not shapes or not dtypes or len(shapes) != len(dtypes):
        return None
    total = 0
    for shape, dt in zip(shapes, dtypes, strict=True):
        dt = dt.removeprefix("torch.")
        if dt not in DTYPE_BYTES:
            return None
        total += math.prod(shape) * DTYPE_BYTES[dt]
    return total or None


@dataclass
class ParsedFile:
    """Validated lines of one file (or one batch of them), columnar. A batch's ``bytes``,
    ``lines`` and ``sha256`` say how far into the file it ends (the file's progress after it)."""

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

    @property
    def refs(self) -> int:
        return self.offsets[-1]


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"the key {k!r} is given twice")
        out[k] = v
    return out


def load_line(line: str, path: Path, n: int) -> object:
    """One JSON line; every way ``json`` can fail (syntax, a key twice, a 5,000-digit integer,
    deep nesting) is a ``PayloadError`` naming the file and the line."""
    try:
        return json.loads(line, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise PayloadError(str(path), f"not JSON: {e.msg} (column {e.colno})", n) from None
    except ValueError as e:  # a duplicate key, or an integer beyond Python's digit limit
        raise PayloadError(str(path), f"not a usable JSON line: {e}", n) from None
    except RecursionError:
        raise PayloadError(str(path), "not a usable JSON line: nested too deeply", n) from None


def detect_format(path: Path) -> str | None:
    """``lmcache`` or ``mooncake`` from the first non-blank line; None: no line yet (a log
    LMCache has just opened)."""
    with open(path, "rb") as fh:
        for n, raw in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if len(raw) > MAX_LINE_BYTES:
                raise PayloadError(str(path), f"line longer than {MAX_LINE_BYTES // 2**20} MiB", n)
            line = raw.decode("utf-8", errors="replace")
            if not line.strip():
                continue
            obj = load_line(line, Path(path), n)
            if isinstance(obj, dict) and "chunk_hashes" in obj:
                return "lmcache"
            if isinstance(obj, dict) and "hash_ids" in obj:
                return "mooncake"
            raise PayloadError(str(path), "neither an LMCache lookup-hash line (chunk_hashes) "
                               "nor a Mooncake trace line (hash_ids)", n)
    return None


def _int(obj: dict, key: str, path: Path, n: int, minimum: int = 0, maximum: int = _INT64_MAX) -> int:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise PayloadError(str(path), f"{key!r} must be an integer, got {str(v)[:40]!r}", n)
    if v < minimum or v > maximum:
        raise PayloadError(str(path), f"{key!r} = {v} is out of range ({minimum} .. {maximum:,})", n)
    return v


def _seconds(obj: dict, key: str, path: Path, n: int, scale: float, unit: str) -> float:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise PayloadError(str(path), f"{key!r} must be a finite number, got {str(v)[:40]!r}", n)
    s = float(v) / scale
    if not 0.0 <= s <= MAX_TIMESTAMP_S:
        raise PayloadError(str(path), f"{key!r} = {v} is not {unit} between 1970 and 2100"
                           + (" (milliseconds?)" if s > MAX_TIMESTAMP_S else ""), n)
    return s


def _text(obj: dict, key: str, path: Path, n: int) -> str | None:
    v = obj.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or len(v) > MAX_TEXT:
        raise PayloadError(str(path), f"{key!r} must be a string of at most {MAX_TEXT} characters", n)
    return v


def _layout(obj: dict, out: ParsedFile, n: int) -> None:
    path = out.path
    shapes, dtypes = obj.get("shapes", []), obj.get("dtypes", [])
    if not isinstance(shapes, list) or not all(
            isinstance(s, list) and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= _INT64_MAX
                                        for x in s) for s in shapes):
        raise PayloadError(str(path), "'shapes' must be a list of integer lists", n)
    if not isinstance(dtypes, list) or not all(isinstance(d, str) for d in dtypes):
        raise PayloadError(str(path), "'dtypes' must be a list of strings", n)
    bpc = kv_bytes_per_chunk(shapes, dtypes)
    if bpc is None:
        return
    if bpc > MAX_BYTES_PER_CHUNK:
        raise PayloadError(str(path), f"shapes/dtypes give {bpc:.4g} bytes per chunk, beyond "
                           f"{MAX_BYTES_PER_CHUNK:,} (1 TiB)", n)
    if out.bytes_per_chunk is None:
        out.bytes_per_chunk = bpc
    elif bpc != out.bytes_per_chunk:
        raise PayloadError(str(path), f"shapes/dtypes give {bpc} bytes per chunk, earlier "
                           f"lines {out.bytes_per_chunk}: one trace holds one KV layout "
                           "(import models separately)", n)


def parse_lmcache_line(obj: dict, out: ParsedFile, n: int) -> None:
    path = out.path
    for key in ("timestamp", "chunk_size", "seq_len", "chunk_hashes"):
        if key not in obj:
            raise PayloadError(str(path), f"missing field {key!r}", n)
    ts = _seconds(obj, "timestamp", path, n, 1.0, "unix seconds")
    chunk_size = _int(obj, "chunk_size", path, n, minimum=1, maximum=MAX_CHUNK_TOKENS)
    seq_len = _int(obj, "seq_len", path, n, maximum=MAX_TOKENS)
    hashes = obj["chunk_hashes"]
    if not isinstance(hashes, list) or not all(isinstance(h, str) and 0 < len(h) <= 256 for h in hashes):
        raise PayloadError(str(path), "'chunk_hashes' must be a list of hash strings", n)
    if len(hashes) * chunk_size > seq_len:
        raise PayloadError(str(path), f"{len(hashes)} chunks of {chunk_size} tokens exceed "
                           f"seq_len {seq_len} (chunk_hashes cover full chunks only)", n)
    request_id, model = _text(obj, "request_id", path, n), _text(obj, "model_name", path, n)
    _layout(obj, out, n)
    out.ts.append(ts)
    out.request_id.append(request_id)
    out.model_name.append(model)
    out.chunk_size.append(chunk_size)
    out.seq_len.append(seq_len)
    out.output_len.append(None)
    out.hex_keys.extend(hashes)
    out.offsets.append(len(out.hex_keys))


def parse_mooncake_line(obj: dict, out: ParsedFile, n: int, block: int) -> None:
    path = out.path
    for key in ("timestamp", "input_length", "hash_ids"):
        if key not in obj:
            raise PayloadError(str(path), f"missing field {key!r}", n)
    ts = _seconds(obj, "timestamp", path, n, 1000.0, "milliseconds")
    seq_len = _int(obj, "input_length", path, n, maximum=MAX_TOKENS)
    output_len = _int(obj, "output_length", path, n, maximum=MAX_TOKENS) if "output_length" in obj else None
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
