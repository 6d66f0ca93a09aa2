"""Read request-trace files (LMCache lookup-hash logs, the Mooncake format) and validate them
whole: the parsing half of ``kvplan.collectors.traces`` (which stores and replays them), as
``kvplan.collectors.parse`` is for ``/metrics`` payloads. Errors name the file and the line."""

from __future__ import annotations

import hashlib
import json
import math
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from kvplan.collectors.parse import PayloadError
from kvplan.models.core.errors import KvplanError

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
    for shape, dt in zip(shapes, dtypes, strict=True):
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


INSTANCE_MAX = 200
"""Longest instance name (a directory name or ``--instance``)."""


def _logs_in(d: Path) -> list[Path]:
    return sorted(d.glob(LMCACHE_GLOB))


def expand_paths(paths: list[Path], instance: str | None = None) -> list[tuple[Path, str]]:
    """Each file with the cache instance it belongs to (name order within a directory).

    A file belongs to ``instance`` when given, else to the directory it lies in (its name). A
    directory gives its ``lookup_hashes_*.jsonl``; a directory that holds none but has
    sub-directories that do (one per LMCache server, e.g. ``logs/lmcache-0/``,
    ``logs/lmcache-1/``) gives each of them as its own instance. Files are told apart by
    (instance, name): two LMCache servers started in the same second write files of the same
    name, in different directories."""
    if instance is not None and (not instance.strip() or len(instance) > INSTANCE_MAX):
        raise KvplanError(f"must be a name of 1 to {INSTANCE_MAX} characters", source="instance")
    out: list[tuple[Path, str]] = []
    dirs: dict[str, Path] = {}  # instance -> the directory that named it

    def add(files: list[Path], d: Path) -> None:
        name = instance if instance is not None else d.name
        if instance is None and name in dirs and dirs[name].resolve() != d.resolve():
            raise PayloadError(str(d), f"{dirs[name]} is also a directory named {name!r}: a log's "
                               "directory names its cache instance; import them one at a time "
                               "with --instance")
        dirs.setdefault(name, d)
        out.extend((f, name) for f in files)

    for p in map(Path, paths):
        if p.is_dir():
            found = _logs_in(p)
            if found:
                add(found, p)
                continue
            subs = [s for s in sorted(p.iterdir()) if s.is_dir() and _logs_in(s)]
            if not subs:
                raise PayloadError(str(p), f"directory holds no {LMCACHE_GLOB} file (nor "
                                   "sub-directories of them, one per cache instance)")
            if instance is not None:
                raise PayloadError(str(p), f"holds {len(subs)} instance directories "
                                   f"({', '.join(s.name for s in subs)}): --instance names one")
            for s in subs:
                add(_logs_in(s), s)
        elif p.is_file():
            add([p], p.parent)
        else:
            raise PayloadError(str(p), "no such file or directory")
    seen: set[tuple[str, str]] = set()
    for f, name in out:
        if (name, f.name) in seen:
            raise PayloadError(str(f), f"two files named {f.name} in instance {name!r}: an "
                               "instance's files are told apart by name")
        seen.add((name, f.name))
    return out
