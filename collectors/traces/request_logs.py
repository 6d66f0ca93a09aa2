"""Request logs as a trace (issue 26, item 8): ``kvplan import-trace --format requests`` renders
and tokenizes each logged request as vLLM does (``collectors/requests/``: the reader and the
renderer of ``kvplan prompts check``), hashes its full chunks (``models/prompts/hashing``: chained
as vLLM's blocks and LMCache's chunks are) and stores one trace row per request: the chunk
keys, the prompt length, the arrival time, the model name, the Batch ``custom_id`` (or a
Bailian ``chat_id``) and the cache instance. The cache-size curve, shared vs private caches and
the TTFT what-if then read it as they read an LMCache lookup-hash log: a deployment that runs
vLLM alone gets every what-if from its request logs.

**Never prompt text.** The text and token ids live in memory for one request; what is stored is
sha256 digests of (parent digest, token ids), the lengths and the times. Nothing here logs or
prints a prompt; an error names the file and line, never its content.

* ``chunk_size``: tokens a key covers (default 256, LMCache's ``chunk_size``: the what-if models
  a cache tier of LMCache's kind; take the engine's ``block_size`` for vLLM's own cache).
  A trailing partial chunk gets no key (LMCache's lookups count full chunks only).
* Arrival times: the reader's (``arrival_time``, ``timestamp`` or ``created``; collectors/requests/
  read.py). A file without them is in file order, one second apart from 0 (as a Mooncake trace
  starts at 0): rates and the TTFT what-if then need a window of real times, and the import says so.
* Trace lines (Mooncake, Bailian: block ids, no text) go through the same path when their block
  divides ``chunk_size``: a chunk's key chains the ids of its blocks.
* KV bytes per chunk: the option, else from the model's ``config.json`` in the tokenizer directory
  (2 x layers x KV heads x head dim x dtype bytes x chunk tokens; not for MLA models).
* Re-importing an unchanged file is a no-op; a plain file that has grown since is imported from
  the line where the last import stopped; any other change is refused. Every file is read and
  validated first (nothing written unless every line parses); then requests are rendered, hashed
  and stored a batch at a time, each batch in one transaction with the file's progress, so memory
  is one batch and an import stopped part-way (a crash, a template error) goes on from there.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

from ...models.core.errors import KvplanError
from ...models.core.timeutil import utcnow
from ...models.prompts.hashing import ROOT, ExtraKeys, block_hashes, hash_block
from ...sql.db import Database
from ..requests.read import LogRequest, Skipped, open_lines, read_file
from ..requests.render import Renderer, RequestRefused
from ..scrape.payload import PayloadError
from ..scrape.store import ConflictError
from .lines import MAX_BYTES_PER_CHUNK, MAX_CHUNK_TOKENS, ParsedFile
from .paths import INSTANCE_MAX
from .stored import FileResult, ImportResult, insert_requests, one_row, trace_state

DEFAULT_CHUNK = 256
"""LMCache's default ``chunk_size``."""
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8": 1,
               "int8": 1}
_READ = 2**20
IN_PROGRESS = ""
"""A file's sha256 while its import is under way (rows stored up to its ``lines``)."""


def expand_request_paths(paths: list[Path], instance: str | None) -> list[tuple[Path, str]]:
    """Each request-log file with its cache instance: ``instance`` when given, else the name of
    the directory it lies in; a directory gives its files in name order."""
    if instance is not None and (not instance.strip() or len(instance) > INSTANCE_MAX):
        raise KvplanError(f"must be a name of 1 to {INSTANCE_MAX} characters", source="instance")
    out: list[tuple[Path, str]] = []
    for p in map(Path, paths):
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
            if not files:
                raise PayloadError(str(p), "directory holds no file")
            out += [(f, instance or p.name) for f in files]
        elif p.is_file():
            out.append((p, instance or p.parent.name))
        else:
            raise PayloadError(str(p), "no such file or directory")
    seen: set[tuple[str, str]] = set()
    for f, name in out:
        if (name, f.name) in seen:
            raise PayloadError(str(f), f"two files named {f.name} in instance {name!r}: an instance's "
                               "files are told apart by name")
        seen.add((name, f.name))
    return out


def is_request_log(path: Path) -> bool:
    """A file whose first line is a request (chat, completions or Batch API body) or a Bailian
    trace line (``chat_id`` with ``hash_ids``): what ``--format auto`` imports as requests."""
    if not Path(path).is_file():
        return False
    for _, text in open_lines(Path(path)):
        try:
            obj = json.loads(text)
        except ValueError:
            return False
        return isinstance(obj, dict) and (any(k in obj for k in ("messages", "prompt", "body"))
                                          or ("hash_ids" in obj and "chat_id" in obj))
    return False


def model_bytes_per_chunk(tokenizer: str | Path, chunk_size: int) -> int | None:
    """KV bytes of one chunk from ``config.json`` beside the tokenizer (None: no config, an MLA
    model, or a field missing)."""
    f = Path(tokenizer) / "config.json"
    try:
        cfg = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    cfg = cfg.get("text_config", cfg) if isinstance(cfg, dict) else {}
    try:
        if cfg.get("kv_lora_rank"):
            return None  # MLA: one latent per token, not K and V per head
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
        dtype = str(cfg.get("dtype") or cfg.get("torch_dtype") or "").removeprefix("torch.")
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    if dtype not in DTYPE_BYTES:
        return None
    n = 2 * layers * kv_heads * head_dim * DTYPE_BYTES[dtype] * chunk_size
    return n if 0 < n <= MAX_BYTES_PER_CHUNK else None


def _sha(f: Path, upto: int | None = None) -> tuple[str, int]:
    h = hashlib.sha256()
    n = 0
    with open(f, "rb") as fh:
        while upto is None or n < upto:
            b = fh.read(_READ if upto is None else min(_READ, upto - n))
            if not b:
                break
            h.update(b)
            n += len(b)
    return h.hexdigest(), n


def _is_gzip(f: Path) -> bool:
    with open(f, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def _blocks_keys(r: LogRequest, chunk_size: int) -> tuple[list[str], int]:
    """A trace line's chunk keys: each chunk chains the ids of the blocks it covers."""
    if r.block_tokens <= 0 or chunk_size % r.block_tokens:
        raise PayloadError(r.source, f"blocks of {r.block_tokens} tokens do not divide --chunk-size "
                           f"{chunk_size}", r.line)
    per = chunk_size // r.block_tokens
    ids = r.block_ids or []
    full = min(len(ids), r.input_length // r.block_tokens) // per
    keys, prev = [], ROOT
    for c in range(full):
        prev = hash_block(prev, ids[c * per:(c + 1) * per])
        keys.append(prev.hex())
    return keys, r.input_length


class _Hasher:
    """Renders (lazily: only when a log holds text) and hashes one request's full chunks."""

    def __init__(self, tokenizer: str | Path | None, chat_template: Path | None, chunk_size: int):
        self.tokenizer, self.chat_template, self.chunk_size = tokenizer, chat_template, chunk_size
        self._renderer: Renderer | None = None

    def keys(self, r: LogRequest) -> tuple[list[str], int]:
        if r.kind == "blocks":
            return _blocks_keys(r, self.chunk_size)
        if r.kind == "completion" and r.prompt_ids is not None:
            ids = list(r.prompt_ids)
        else:
            if self.tokenizer is None:
                raise KvplanError("request logs with text need the model's tokenizer (--tokenizer DIR)",
                                  source=r.where)
            if self._renderer is None:
                self._renderer = Renderer(self.tokenizer, self.chat_template)
            ids = self._renderer.render(r).ids
        extra = ExtraKeys(cache_salt=r.cache_salt) if r.cache_salt else ExtraKeys()
        return [k.hex() for k in block_hashes(ids, self.chunk_size, extra)], len(ids)


def _complete_size(f: Path) -> int:
    """Bytes up to the end of the file's last whole line: a plain log still being written ends
    in a line without its newline, left for the next import (a gzip file is whole)."""
    size = f.stat().st_size
    if size == 0 or _is_gzip(f):
        return size
    with open(f, "rb") as fh:
        end = size
        while end > 0:
            start = max(0, end - _READ)
            fh.seek(start)
            b = fh.read(end - start)
            i = b.rfind(b"\n")
            if i >= 0:
                return start + i + 1
            end = start
    return 0


def _rows(f: Path, skip_lines: int, hasher: _Hasher, batch_lines: int, skipped: Skipped) -> Iterator[ParsedFile]:
    """The file's requests after line ``skip_lines``, hashed, in batches (text dropped at once).
    A line that cannot be read or rendered is recorded in ``skipped`` (which fails past its budget)."""
    batch = ParsedFile(path=f, format="requests", sha256="", bytes=0, lines=0, start_line=skip_lines + 1)
    ordinal = 0
    for r in read_file(f, skipped):
        ordinal += 1
        if r.line <= skip_lines:
            continue
        try:
            keys, seq_len = hasher.keys(r)
        except (PayloadError, RequestRefused) as e:
            skipped.add(e)
            continue
        batch.line_no.append(r.line)
        batch.ts.append(r.arrival if r.arrival is not None else float(ordinal - 1))
        batch.request_id.append(r.chat_id)
        batch.model_name.append(r.model)
        batch.chunk_size.append(hasher.chunk_size)
        batch.seq_len.append(seq_len)
        batch.output_len.append(r.output_tokens)
        batch.hex_keys.extend(keys)
        batch.offsets.append(len(batch.hex_keys))
        if batch.requests >= batch_lines:
            yield batch
            batch = ParsedFile(path=f, format="requests", sha256="", bytes=0, lines=0, start_line=r.line + 1)
    if batch.requests:
        yield batch


def import_request_logs(db: Database, deployment: str, paths: list[Path], *, name: str | None = None,
                        tokenizer: str | Path | None = None, chat_template: Path | None = None,
                        chunk_size: int = DEFAULT_CHUNK, bytes_per_chunk: int | None = None,
                        instance: str | None = None, batch_lines: int = 4096) -> ImportResult:
    """Import request logs as the trace ``name`` (default ``requests``) of ``deployment`` (module
    doc). Returns a ``traces.ImportResult``; ``timed`` files carry arrival times."""

    if not 1 <= chunk_size <= MAX_CHUNK_TOKENS:
        raise KvplanError(f"must be from 1 to {MAX_CHUNK_TOKENS:,} tokens; got {chunk_size}", source="--chunk-size")
    if bytes_per_chunk is not None and not 1 <= bytes_per_chunk <= MAX_BYTES_PER_CHUNK:
        raise KvplanError(f"must be from 1 to {MAX_BYTES_PER_CHUNK:,} (1 TiB); got {bytes_per_chunk}",
                          source="--bytes-per-chunk")
    pairs = expand_request_paths(paths, instance)
    if not pairs:
        raise PayloadError("import-trace", "no file given")
    inst = dict(pairs)
    trace_name = name or "requests"
    bpc, source = (int(bytes_per_chunk), "option") if bytes_per_chunk is not None else (None, None)
    if bpc is None and tokenizer is not None:
        bpc = model_bytes_per_chunk(tokenizer, chunk_size)
        source = "model config" if bpc else None
    with db.read() as con:
        row, state = trace_state(con, deployment, trace_name, "requests", inst)
    if row is not None:
        stored = _stored_chunk(db, row["trace_id"])
        if stored is not None and stored != chunk_size:
            raise ConflictError(f"trace {trace_name!r} holds chunks of {stored} tokens, not {chunk_size}: "
                                "one trace, one chunk size (import under another --trace name)", source="--chunk-size")
    hasher = _Hasher(tokenizer, chat_template, chunk_size)
    plans: list[tuple[Path, str, int, int | None]] = []
    for f, _ in pairs:
        sha, size = _sha(f, _complete_size(f))
        prev = state.get(f)
        skip: int | None = 0
        if prev is not None and prev["sha256"] == IN_PROGRESS:  # an import stopped part-way: go on
            skip = prev["lines"]
        elif prev is not None:
            if prev["sha256"] == sha and prev["bytes"] == size:
                plans.append((f, sha, size, None))
                continue
            if _is_gzip(f) or size < prev["bytes"] or _sha(f, prev["bytes"])[0] != prev["sha256"]:
                raise ConflictError(f"changed since it was imported into trace {trace_name!r} "
                                    f"({prev['bytes']} bytes, sha256 {prev['sha256'][:12]}...)", source=str(f))
            skip = prev["lines"]
        plans.append((f, sha, size, skip))
    for f, _sha256, _size, skip in plans:  # the first pass: every line read and validated, nothing kept
        if skip is not None:
            for _ in read_file(f, Skipped(str(f))):  # more bad lines than the budget: refused here
                pass
    with db.write() as con:
        now, now_state = trace_state(con, deployment, trace_name, "requests", inst)
        if (now is None) != (row is None) or now_state != state:
            raise ConflictError("imported by another process meanwhile: run again", source=str(pairs[0][0]))
        if now is None:
            trace_id = Database.scalar(con, "insert_trace", deployment=deployment, name=trace_name, format="requests",
                                       n_bytes_per_chunk=bpc, bytes_source=source, created_at=utcnow())
        else:
            trace_id = now["trace_id"]
            if bytes_per_chunk is not None or (now["bytes_per_chunk"] is None and bpc):
                Database.run(con, "set_trace_bytes", trace_id=trace_id, n_bytes_per_chunk=bpc, bytes_source=source)
            elif now["bytes_per_chunk"]:
                bpc = now["bytes_per_chunk"]
    try:
        results = _store_files(db, trace_id, plans, inst, hasher, batch_lines)
    except BaseException:
        if now is None:  # the trace this import created: nothing of it is left behind
            drop_trace(db, trace_id)
        raise
    return ImportResult(deployment, trace_name, trace_id, "requests", bpc, tuple(results))


def drop_trace(db: Database, trace_id: int) -> None:
    """Remove a trace and everything stored under it, in one transaction."""
    with db.write() as con:
        for q in ("drop_trace_requests", "drop_trace_keys", "drop_trace_files", "drop_trace"):
            Database.run(con, q, trace_id=trace_id)


def _store_files(db: Database, trace_id: int, plans: list[tuple[Path, str, int, int | None]], inst: dict[Path, str],
                 hasher: _Hasher, batch_lines: int) -> list[FileResult]:
    """The second pass: each file rendered, hashed and stored a batch at a time (a crash leaves a
    file imported up to a batch boundary, marked in progress: the next import goes on from there)."""
    results = []
    for f, sha, size, skip in plans:
        if skip is None:
            results.append(FileResult(f.name, "unchanged", 0, False, inst[f]))
            continue
        done = {"lines": skip, "n": 0}
        skipped = Skipped(str(f))
        for b in _rows(f, skip, hasher, batch_lines, skipped):  # the second pass: render, hash, store a batch at a time
            with db.write() as con:
                was = one_row(con, "trace_file", trace_id=trace_id, instance=inst[f], file=f.name)
                if (was["lines"] if was else 0) != done["lines"]:
                    raise ConflictError("imported by another process meanwhile: run again", source=str(f))
                insert_requests(con, trace_id, b, inst[f])
                # in progress: no sha256 yet (a later import goes on after the last line stored)
                Database.run(con, "upsert_trace_file", trace_id=trace_id, instance=inst[f], file=f.name,
                             sha256=IN_PROGRESS, n_bytes=0, n_lines=b.line_no[-1], imported_at=utcnow())
            done["lines"], done["n"] = b.line_no[-1], done["n"] + b.requests
        with db.write() as con:
            Database.run(con, "upsert_trace_file", trace_id=trace_id, instance=inst[f], file=f.name, sha256=sha,
                         n_bytes=size, n_lines=done["lines"], imported_at=utcnow())
        results.append(FileResult(f.name, "extended" if skip else "imported", done["n"],
                                  bool(skipped.unfinished) or size < f.stat().st_size, inst[f],
                                  tuple(skipped.notes()[:1] if skipped.errors else ())))
    return results


def _stored_chunk(db: Database, trace_id: int) -> int | None:
    with db.read() as con:
        row = con.execute("SELECT any_value(chunk_size) FROM trace_requests WHERE trace_id = ?", [trace_id]).fetchone()
    return int(row[0]) if row and row[0] is not None else None
