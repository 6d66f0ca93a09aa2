"""Read request-trace files (LMCache lookup-hash logs, the Mooncake format) and validate them:
the parsing half of ``kvplan.collectors.traces.ingest`` (which stores and replays them), as
``kvplan.collectors.scrape.parse`` is for ``/metrics`` payloads. Errors name the file and the line.

Files are streamed (``scan_file``), never read whole: a line at a time (at most
``MAX_LINE_BYTES``), validated lines handed on in batches of at most ``BATCH_LINES`` lines and
``BATCH_REFS`` chunk references. Memory is bounded by one line and one batch, whatever the file's
size (reading whole files peaked at about 4x the file).

Every value is bounded where it is read, so that nothing wraps or overflows downstream:
timestamps are seconds between 1970 and 2100 (LMCache: unix seconds; Mooncake: milliseconds from
its start), token counts at most ``MAX_TOKENS`` per request, chunks at most ``MAX_CHUNK_TOKENS``
tokens, a chunk's KV at most ``MAX_BYTES_PER_CHUNK``; a JSON key given twice in one line, an
integer of thousands of digits or nesting deeper than Python's parser takes are refused, naming
the file and the line.

One line's reading and bounds are in trace_lines.py, which files an import takes in
trace_paths.py; this module streams a file (``scan_file``, ``parse_file``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...models.core.errors import KvplanError
from ..scrape.payload import PayloadError
from .lines import (
    MAX_LINE_BYTES,
    ParsedFile,
    load_line,
    parse_lmcache_line,
    parse_mooncake_line,
)

FORMATS = ("lmcache", "mooncake")
LMCACHE_GLOB = "lookup_hashes_*.jsonl"
MOONCAKE_BLOCK = 512
BATCH_LINES = 8192
BATCH_REFS = 131_072
"""A batch is handed on after this many lines or chunk references, whichever comes first."""
_READ = 2**20


class TraceError(KvplanError):
    """A trace request kvplan cannot serve (no trace, unknown name, missing bytes/chunk)."""


@dataclass(frozen=True)
class Scan:
    """What ``scan_file`` read of one file."""

    path: Path
    format: str
    sha256: str
    """Of the file's first ``bytes`` bytes."""
    prefix_sha256: str
    """Of the first ``skip_bytes`` bytes (what an earlier import took)."""
    bytes: int
    """Bytes imported, whole lines only (a complete last line without newline included)."""
    lines: int
    """Lines imported, blank ones included (the line count after this import)."""
    requests: int
    bytes_per_chunk: int | None
    partial_tail: bool
    """An incomplete last line was left for the next import."""


def _hash_prefix(fh, skip_bytes: int, h) -> None:
    left = skip_bytes
    while left > 0:
        chunk = fh.read(min(_READ, left))
        if not chunk:
            break
        h.update(chunk)
        left -= len(chunk)


def scan_file(path: Path, fmt: str, *, skip_bytes: int = 0, skip_lines: int = 0, block: int = MOONCAKE_BLOCK,
              upto: int | None = None, on_batch: Callable[[ParsedFile], None] | None = None) -> Scan:
    """Stream ``path`` from ``skip_bytes`` (an earlier import's length; ``skip_lines`` its line
    count), validating every line and handing ``on_batch`` the validated lines in batches (module
    doc). ``upto``: stop at this byte (the length a first scan found). Long on purpose: the line
    loop, the resume rule and the tail rule read together."""
    path = Path(path)
    whole, prefix = hashlib.sha256(), hashlib.sha256()
    with open(path, "rb") as fh:
        _hash_prefix(fh, skip_bytes, prefix)
        whole = prefix.copy()
        pos, n = skip_bytes, skip_lines
        if skip_bytes > 0:  # an earlier import that took a last line without its newline ends mid-line
            fh.seek(skip_bytes - 1)
            mid_line = fh.read(1) != b"\n"
        else:
            mid_line = False
        batch = ParsedFile(path=path, format=fmt, sha256="", bytes=0, lines=0, start_line=n + 1)
        layout, requests, partial = None, 0, False
        while upto is None or pos < upto:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            if upto is not None and pos + len(raw) > upto:
                raw = raw[: upto - pos]
            if mid_line:  # the rest of the line the earlier import took: only its newline may follow
                mid_line = False
                if raw != b"\n":
                    raise PayloadError(str(path), "the last line imported before has been extended since",
                                       skip_lines)
                whole.update(raw)
                pos += len(raw)
                continue
            n += 1
            if len(raw) > MAX_LINE_BYTES:
                raise PayloadError(str(path), f"line longer than {MAX_LINE_BYTES // 2**20} MiB", n)
            complete = raw.endswith(b"\n")
            if not complete and not raw.strip():  # blanks after the last newline: not a line yet
                n -= 1
                break
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                if not complete:  # a tail cut inside a character: still being written
                    partial, n = True, n - 1
                    break
                raise PayloadError(str(path), "not UTF-8 text", n) from None
            if not complete and line.strip():
                try:
                    json.loads(line)
                except ValueError:
                    partial, n = True, n - 1  # still being written: the next import takes it
                    break
            if line.strip():
                obj = load_line(line, path, n)
                if not isinstance(obj, dict):
                    raise PayloadError(str(path), "a trace line must be a JSON object", n)
                batch.bytes_per_chunk = layout
                if fmt == "lmcache":
                    parse_lmcache_line(obj, batch, n)
                else:
                    parse_mooncake_line(obj, batch, n, block)
                layout = batch.bytes_per_chunk
                batch.line_no.append(n)
                requests += 1
            whole.update(raw)
            pos += len(raw)
            if batch.requests >= BATCH_LINES or batch.refs >= BATCH_REFS:
                if on_batch is not None:
                    batch.bytes, batch.lines, batch.sha256 = pos, n, whole.hexdigest()
                    on_batch(batch)
                batch = ParsedFile(path=path, format=fmt, sha256="", bytes=0, lines=0, start_line=n + 1)
        if on_batch is not None and (batch.requests or pos > skip_bytes):
            batch.bytes, batch.lines, batch.sha256 = pos, n, whole.hexdigest()
            on_batch(batch)  # the last batch, or only the blank lines after the last one
    return Scan(path, fmt, whole.hexdigest(), prefix.hexdigest(), pos, n, requests, layout, partial)


def parse_file(path: Path, fmt: str, *, skip_bytes: int = 0, skip_lines: int = 0,
               block: int = MOONCAKE_BLOCK) -> ParsedFile:
    """The validated lines of ``path`` after ``skip_bytes`` in one ``ParsedFile`` (whole file by
    default; its memory grows with the file: the import streams with ``scan_file`` instead)."""
    out = ParsedFile(path=Path(path), format=fmt, sha256="", bytes=0, lines=0, start_line=skip_lines + 1)

    def take(b: ParsedFile) -> None:
        if not b.requests:
            return
        base = len(out.hex_keys) if fmt == "lmcache" else len(out.int_keys)
        for name in ("line_no", "ts", "request_id", "model_name", "chunk_size", "seq_len", "output_len",
                     "int_keys", "hex_keys"):
            getattr(out, name).extend(getattr(b, name))
        out.offsets.extend(base + o for o in b.offsets[1:])

    s = scan_file(path, fmt, skip_bytes=skip_bytes, skip_lines=skip_lines, block=block, on_batch=take)
    out.sha256, out.bytes, out.lines = s.sha256, s.bytes, s.lines
    out.bytes_per_chunk, out.partial_tail = s.bytes_per_chunk, s.partial_tail
    return out
