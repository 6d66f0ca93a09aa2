"""Streaming readers of request logs, one JSON object a line, plain or gzip (told by the file's
first bytes). Every error is a ``PayloadError`` naming the file and the line.

Line formats, told apart per line:

* **OpenAI chat-completions bodies** (``messages``, optional ``tools``, ``tool_choice``,
  ``chat_template_kwargs``, ``add_generation_prompt``, ``continue_final_message``, ``model``,
  ``cache_salt``, ``max_tokens`` / ``max_completion_tokens``);
* **OpenAI Batch API input lines** (``custom_id``, ``method``, ``url``, ``body``): the body is
  read as a chat (``/v1/chat/completions``) or completions (``/v1/completions``) body;
* **completions bodies** (``prompt``: a string, or a list of token ids used as is; a list of
  several prompts is refused: log one request a line);
* **Alibaba Bailian traces** (ATC'25: ``chat_id``, ``parent_chat_id``, ``timestamp`` in seconds,
  ``input_length``, ``output_length``, ``type``, ``turn``, ``hash_ids`` of 16-token blocks) and
  **Mooncake traces** (``timestamp`` in ms, ``input_length``, ``output_length``, ``hash_ids``
  of 512-token blocks): no text, block ids only.

**Arrival time**, optional, from the first of these top-level fields a line has:
``arrival_time``, ``timestamp``, ``created`` (also inside a Batch line's ``body``): an ISO 8601
string (no zone = UTC) or a number of unix seconds (a number above 1e11 is read as
milliseconds). Mooncake's ``timestamp`` is milliseconds from the trace start. Without a time,
file order is arrival order. Within a file, times must not go backwards (a log written as
requests arrived); several files are merged by time when every line has one, else read one
after the other in the order given.

**Session**, optional: ``session_id`` or ``conversation_id`` (top level, in a Batch line's body,
or in ``metadata``), and a Bailian trace's ``parent_chat_id``: which conversation a request is
part of (``--sample-sessions`` keeps whole conversations by it).

Images, audio and other non-text content parts are refused: vLLM mixes multimodal item hashes
into block keys, which kvplan does not reproduce.
"""

from __future__ import annotations

import gzip
import heapq
import io
import json
import os
import pickle
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ...models.core.errors import KvplanError
from ...models.core.timeutil import parse_time
from ..scrape.payload import PayloadError

MAX_LINE_BYTES = 8 * 2**20
"""Longest request line read: 8 MiB (a 1M-token prompt as text is about 4 MB). Rendering and
tokenizing a line takes about 180 bytes of memory per byte of its text (measured with the fast
tokenizer, bench/results/prompts.md), so the bound holds a run's peak near 1.7 GB; a longer line
is a bad line (skipped within the budget, named by file:line)."""
TIME_FIELDS = ("arrival_time", "timestamp", "created")
BAILIAN_BLOCK = 16
MOONCAKE_BLOCK = 512
MAX_SKIPPED = 100
"""Bad lines a run skips, each reported with its file and line; one more fails the run."""
MAX_BLOCK_ID = 2**63 - 1
"""Largest ``hash_ids`` value (stored as a signed 64-bit key)."""
SESSION_FIELDS = ("session_id", "conversation_id")
"""Fields naming a request's conversation, read at a line's top level, in its ``body`` or in
either's ``metadata`` object (a string or an integer; the first found)."""


class Skipped:
    """The lines a run skipped (``MAX_SKIPPED`` at most): a line that is not a request, and an
    unfinished last line (no newline yet: a log still being written), kept apart."""

    def __init__(self, source: str = "prompts") -> None:
        self.source = source
        self.errors: list[KvplanError] = []
        self.unfinished: list[str] = []

    def add(self, e: KvplanError) -> None:
        self.errors.append(e)
        if len(self.errors) > MAX_SKIPPED:
            first = "; ".join(str(x) for x in self.errors[:3])
            raise PayloadError(self.source, f"more than {MAX_SKIPPED} bad lines: not a request log? (first: {first})")

    def notes(self) -> list[str]:
        out = []
        if self.errors:
            out.append(f"{len(self.errors)} bad line(s) skipped (at most {MAX_SKIPPED}): "
                       + "; ".join(str(e) for e in self.errors[:5]) + (" ..." if len(self.errors) > 5 else ""))
        if self.unfinished:
            out.append("an unfinished last line (no newline yet: the log is still being written) left for the "
                       "next run: " + ", ".join(self.unfinished))
        return out


@dataclass
class LogRequest:
    """One request of a log, as read. ``kind``: ``chat``, ``completion`` (``prompt`` text or
    ``prompt_ids``) or ``blocks`` (a trace's ``block_ids`` of ``block_tokens`` each)."""

    source: str
    line: int
    kind: str
    arrival: float | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[Any] | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    documents: list[Any] | None = None
    """The body's ``documents`` (RAG templates render them; vLLM passes them to the template)."""
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    prompt: str | None = None
    prompt_ids: list[int] | None = None
    model: str | None = None
    cache_salt: str | None = None
    output_tokens: int | None = None
    output_source: str | None = None
    """Where ``output_tokens`` came from: ``logged`` (the response's ``usage.completion_tokens``, a
    trace's ``output_length``), ``max_tokens`` (the request's bound, taken as the length), None."""
    block_ids: list[int] | None = None
    block_tokens: int = 0
    input_length: int = 0
    chat_id: str | None = None
    parent_chat_id: str | None = None
    """A Bailian trace's ``parent_chat_id`` (the request this turn follows; None or "-1": a first turn)."""
    session: str | None = None
    """The line's session field (``SESSION_FIELDS``, top level, in a Batch line's body or in
    ``metadata``): which conversation the request belongs to, when the log says (``--sample-sessions``)."""
    custom_id: str | None = None
    """A Batch API line's ``custom_id`` (kept to match per-request predictions with responses)."""
    measured_prompt_tokens: int | None = None
    measured_cached_tokens: int | None = None
    """What the engine reported beside the request, when a gateway logged its response:
    ``usage.prompt_tokens`` and ``usage.prompt_tokens_details.cached_tokens`` (vLLM fills the
    latter with ``--enable-prompt-tokens-details``); ``prompts check --measured`` compares them."""

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


BULKY = ("messages", "tools", "chat_template_kwargs", "documents", "prompt", "prompt_ids", "block_ids")
"""A request's fields that hold what it sends (the others are a few numbers and names)."""
LIGHT = tuple(f.name for f in fields(LogRequest) if f.name not in BULKY)


class SlimRequest(LogRequest):
    """A request read by another process (``forked.py``), which sent it with its render: its
    light fields as read, its ``BULKY`` ones pickled, unpickled the first time one is used (most
    requests never need them in the check's process: their render came with them), and its
    conversation's key (``prepare.conversation``). Every field reads as it was read
    (``dataclasses.replace`` included)."""

    @classmethod
    def of(cls, light: tuple[Any, ...], bulky: bytes | None, conversation: object) -> SlimRequest:
        """``bulky`` None: a request sent without what it sends (:func:`light`), for keying only;
        reading one of its ``BULKY`` fields is an error."""
        r = cls.__new__(cls)
        d = r.__dict__
        d.update(zip(LIGHT, light, strict=True))
        d["_bulky"] = bulky
        d["_conversation"] = conversation
        return r

    def _bulk(self) -> dict[str, Any]:
        d = self.__dict__
        b = d.get("_b")
        if b is None:
            if "_bulky" in d and d["_bulky"] is None:
                raise RuntimeError(f"{self.where}: a request sent without its messages (keying only)")
            raw = d.pop("_bulky", None)
            b = d["_b"] = pickle.loads(raw) if raw is not None else {}  # {}: made by __init__ (replace)
        return b


def _bulky_field(name: str) -> property:
    return property(lambda self: self._bulk()[name], lambda self, v: self._bulk().__setitem__(name, v))


for _name in BULKY:
    setattr(SlimRequest, _name, _bulky_field(_name))


def slimmed(r: LogRequest, conversation: object) -> tuple[tuple[Any, ...], bytes, object]:
    """What :meth:`SlimRequest.of` makes ``r`` again from (its light fields, its bulky ones
    pickled, its conversation's key), to send to another process."""
    d = r.__dict__
    return light(r, conversation)[0], pickle.dumps({k: d[k] for k in BULKY}, protocol=pickle.HIGHEST_PROTOCOL), \
        conversation


def light(r: LogRequest, conversation: object) -> tuple[tuple[Any, ...], None, object]:
    """What :meth:`SlimRequest.of` makes a request for keying of (its light fields and its
    conversation's key, not what it sends): the fix pass's rewritten requests (``forked.py``),
    the kept ones (``kept.py``)."""
    d = r.__dict__
    return tuple(d[k] for k in LIGHT), None, conversation


FIFO_WAIT_S = 60.0
"""How long a named pipe (a FIFO, ``<(zcat ...)``) may wait for its writer before the run fails."""


def open_stream(path: Path, wait_s: float = FIFO_WAIT_S) -> io.BufferedReader:
    """``path`` opened for reading; a FIFO that no process opens for writing within ``wait_s`` is
    an error naming it (opening it would block forever)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["f"] = open(path, "rb")  # noqa: SIM115 (the caller closes it)
        except OSError as e:
            box["e"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(wait_s)
    if t.is_alive():  # blocked in open(): release it by opening the other end, then refuse
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        t.join(5)
        if "f" in box:
            box["f"].close()
        raise PayloadError(str(path), f"nothing wrote to this pipe within {wait_s:g} s")
    if "e" in box:
        e = box["e"]
        raise PayloadError(str(path), f"cannot read: {e.strerror or e}") from None
    return box["f"]


@contextmanager
def spooled(paths: Sequence[Path], wait_s: float = FIFO_WAIT_S) -> Iterator[list[Path]]:
    """``paths`` as files that can be read twice: a pipe, a FIFO or ``/dev/stdin`` is copied once
    into a temporary file (disk, not memory; removed on exit), a regular file is used as it is."""
    with tempfile.TemporaryDirectory(prefix="kvplan-spool-") as tmp:
        out = []
        for i, p in enumerate(paths):
            try:
                regular = stat.S_ISREG(os.stat(p).st_mode)
            except OSError as e:
                raise PayloadError(str(p), f"cannot read: {e.strerror or e}") from None
            if regular:
                out.append(p)
                continue
            copy = Path(tmp) / f"{i}-{p.name or 'stream'}"
            with open_stream(p, wait_s) as src, open(copy, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            out.append(copy)
        yield out


def open_lines(path: Path, skipped: Skipped | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text) of a plain or gzip file, streamed; blank lines skipped. A pipe is read
    once, as a stream (``spooled`` makes a copy for a second pass). A line longer than
    ``MAX_LINE_BYTES`` is read past in pieces (never held) and, with ``skipped``, recorded there
    and skipped, else refused."""
    raw = open_stream(path)
    with raw:
        magic = raw.peek(2)[:2]
        fh: io.BufferedIOBase = gzip.GzipFile(fileobj=raw) if magic == b"\x1f\x8b" else raw
        n = 0
        try:
            while True:
                b = fh.readline(MAX_LINE_BYTES + 1)
                if not b:
                    return
                n += 1
                if len(b) > MAX_LINE_BYTES:
                    size = len(b)
                    while not b.endswith(b"\n"):
                        b = fh.readline(2**20)
                        if not b:
                            break
                        size += len(b)
                    e = PayloadError(str(path), f"line of {size / 2**20:.1f} MiB is longer than the "
                                     f"{MAX_LINE_BYTES // 2**20} MiB kvplan reads (tokenizing takes about 180 bytes "
                                     "of memory per byte of text)", n)
                    if skipped is None:
                        raise e
                    skipped.add(e)
                    continue
                try:
                    text = b.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise PayloadError(str(path), f"not UTF-8 (byte {e.start})", n) from None
                if text.strip():
                    yield n, text
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            raise PayloadError(str(path), f"cannot read (corrupt gzip?): {e}", n + 1) from None


def _time(v: Any, src: str, n: int, name: str) -> float:
    if isinstance(v, bool) or v is None:
        raise PayloadError(src, f"{name} must be ISO 8601 or unix seconds; got {v!r}", n)
    if isinstance(v, (int, float)):
        try:
            t = float(v)
        except OverflowError:  # an integer of hundreds of digits
            raise PayloadError(src, f"{name} out of range: {str(v)[:20]}... ({len(str(v))} digits)", n) from None
        if not t == t or t < 0 or t > 1e15:
            raise PayloadError(src, f"{name} out of range: {v!r}", n)
        return t / 1000.0 if t > 1e11 else t
    if isinstance(v, str):
        try:
            return parse_time(v, name).timestamp()
        except Exception:
            try:
                return _time(float(v), src, n, name)
            except ValueError:
                raise PayloadError(src, f"{name} is not ISO 8601 or unix seconds: {v[:40]!r}", n) from None
    raise PayloadError(src, f"{name} must be ISO 8601 or unix seconds; got a {type(v).__name__}", n)


def _arrival(obj: dict[str, Any], src: str, n: int) -> float | None:
    for k in TIME_FIELDS:
        if k in obj and obj[k] is not None:
            return _time(obj[k], src, n, k)
    return None


def _int(v: Any, src: str, n: int, name: str, lo: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or v > 100_000_000:
        raise PayloadError(src, f"{name} must be an integer from {lo} to 100,000,000; got {str(v)[:40]!r}", n)
    return v


def _messages(v: Any, src: str, n: int) -> list[dict[str, Any]]:
    if not isinstance(v, list) or not v:
        raise PayloadError(src, "messages must be a non-empty list", n)
    out = []
    for i, m in enumerate(v):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise PayloadError(src, f"messages[{i}] must be an object with a role", n)
        c = m.get("content")
        if isinstance(c, list):
            texts = []
            for j, part in enumerate(c):
                if not isinstance(part, dict):
                    raise PayloadError(src, f"messages[{i}].content[{j}] must be an object", n)
                if part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise PayloadError(src, f"messages[{i}].content[{j}] is {part.get('type')!r}: only text is "
                                       "supported (multimodal inputs change vLLM's block keys)", n)
                texts.append(part["text"])
            m = {**m, "content": "\n".join(texts)}  # vLLM's "string" content format joins text parts
        elif c is None:
            # OpenAI's shape of an assistant turn that calls tools (and of an empty turn): vLLM
            # parses null content as no parts and its "string" content format joins them to "".
            m = {**m, "content": ""}
        elif not isinstance(c, str):
            raise PayloadError(src, f"messages[{i}].content must be a string, a list of parts or null", n)
        out.append(m)
    return out


def _body(obj: dict[str, Any], src: str, n: int, arrival: float | None, url: str | None = None) -> LogRequest:
    out_tokens = obj.get("max_completion_tokens", obj.get("max_tokens"))
    common: dict[str, Any] = dict(
        source=src, line=n, arrival=arrival,
        model=obj.get("model") if isinstance(obj.get("model"), str) else None,
        output_tokens=_int(out_tokens, src, n, "max_tokens", 1) if out_tokens is not None else None,
        output_source="max_tokens" if out_tokens is not None else None)
    salt = obj.get("cache_salt")
    if salt is not None and not isinstance(salt, str):
        raise PayloadError(src, "cache_salt must be a string", n)
    common["cache_salt"] = salt
    if "messages" in obj and (url is None or "chat" in url):
        tools = obj.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise PayloadError(src, "tools must be a list", n)
        kw = obj.get("chat_template_kwargs") or {}
        if not isinstance(kw, dict):
            raise PayloadError(src, "chat_template_kwargs must be an object", n)
        docs = obj.get("documents")
        if docs is not None and not isinstance(docs, list):
            raise PayloadError(src, "documents must be a list", n)
        return LogRequest(kind="chat", messages=_messages(obj["messages"], src, n), tools=tools or None,
                          chat_template_kwargs=kw, documents=docs or None,
                          add_generation_prompt=bool(obj.get("add_generation_prompt", True)),
                          continue_final_message=bool(obj.get("continue_final_message", False)), **common)
    if "prompt" in obj:
        p = obj["prompt"]
        if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
            p = p[0]
        if isinstance(p, str):
            return LogRequest(kind="completion", prompt=p, **common)
        if isinstance(p, list) and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**31 for t in p):
            if not p:
                raise PayloadError(src, "prompt is an empty list", n)
            return LogRequest(kind="completion", prompt_ids=list(p), **common)
        raise PayloadError(src, "prompt must be a string or a list of token ids (one prompt a line)", n)
    raise PayloadError(src, "not a request: no messages, prompt, body or hash_ids", n)


def parse_line(obj: Any, src: str, n: int) -> LogRequest:
    """One decoded JSON line as a request."""
    if not isinstance(obj, dict):
        raise PayloadError(src, f"a line must be a JSON object; got {type(obj).__name__}", n)
    if "hash_ids" in obj:
        ids = obj["hash_ids"]
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                and 0 <= i <= MAX_BLOCK_ID for i in ids):
            raise PayloadError(src, "hash_ids must be a list of integers from 0 to 2^63-1", n)
        bailian = "chat_id" in obj
        block = BAILIAN_BLOCK if bailian else MOONCAKE_BLOCK
        length = _int(obj.get("input_length"), src, n, "input_length", 1)
        if len(ids) < length // block:
            raise PayloadError(src, f"hash_ids has {len(ids)} ids, fewer than input_length {length} fills "
                               f"({length // block} blocks of {block})", n)
        ts = obj.get("timestamp")
        arrival = None if ts is None else (_time(ts, src, n, "timestamp") if bailian
                                           else _int(ts, src, n, "timestamp") / 1000.0)
        out = obj.get("output_length")
        parent = obj.get("parent_chat_id") if bailian else None
        return LogRequest(source=src, line=n, kind="blocks", arrival=arrival, block_ids=ids, block_tokens=block,
                          input_length=length, chat_id=str(obj.get("chat_id")) if bailian else None,
                          parent_chat_id=str(parent) if parent is not None else None,
                          output_tokens=_int(out, src, n, "output_length", 0) or None if out is not None else None,
                          output_source="logged" if out is not None else None)
    if "body" in obj and "url" in obj:
        body = obj["body"]
        if not isinstance(body, dict):
            raise PayloadError(src, "body must be an object", n)
        url = obj["url"]
        if not isinstance(url, str) or not ("/chat/completions" in url or url.endswith("/completions")):
            raise PayloadError(src, f"url {str(url)[:60]!r}: only /v1/chat/completions and /v1/completions", n)
        r = _body(body, src, n, _arrival(obj, src, n) or _arrival(body, src, n), url)
        _logged_output(r, obj, src, n)
        if isinstance(obj.get("custom_id"), str):
            r.custom_id = obj["custom_id"][:256]
        r.session = _session(obj) or _session(body)
        return r
    r = _body(obj, src, n, _arrival(obj, src, n))
    _logged_output(r, obj, src, n)
    r.session = _session(obj)
    return r


def _session(obj: dict[str, Any]) -> str | None:
    """The first of ``SESSION_FIELDS`` that ``obj`` or its ``metadata`` holds, as a string (at
    most 256 characters); None when there is none (or it is not a string or an integer)."""
    meta = obj.get("metadata")
    for holder in (obj, meta if isinstance(meta, dict) else {}):
        for k in SESSION_FIELDS:
            v = holder.get(k)
            if isinstance(v, str) and v or isinstance(v, int) and not isinstance(v, bool):
                return str(v)[:256]
    return None


def _logged_output(r: LogRequest, obj: dict[str, Any], src: str, n: int) -> None:
    """The output length a gateway logged beside the request (``usage.completion_tokens`` of the
    line, of its ``response``, or of a Batch API output's ``response.body``) over ``max_tokens``,
    which is only a bound; and the prompt and cached tokens the engine reported there."""
    resp = obj.get("response")
    for holder in (obj, resp, resp.get("body") if isinstance(resp, dict) else None):
        usage = holder.get("usage") if isinstance(holder, dict) else None
        if not isinstance(usage, dict):
            continue
        if usage.get("completion_tokens") is not None and r.output_source != "logged":
            r.output_tokens = _int(usage["completion_tokens"], src, n, "usage.completion_tokens", 0) or None
            r.output_source = "logged"
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and details.get("cached_tokens") is not None \
                and r.measured_cached_tokens is None:
            r.measured_cached_tokens = _int(details["cached_tokens"], src, n,
                                            "usage.prompt_tokens_details.cached_tokens", 0)
            if usage.get("prompt_tokens") is not None:
                r.measured_prompt_tokens = _int(usage["prompt_tokens"], src, n, "usage.prompt_tokens", 0)


_SURROGATE_ESCAPE = re.compile(r"\\u[dD]")
"""A ``\\uD...`` escape (a line without one holds no surrogate): one scan of the line, not two."""


def _load(line: str, src: str, n: int) -> Any:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise PayloadError(src, f"not JSON: {e.msg} (column {e.colno})", n) from None
    except (ValueError, RecursionError) as e:
        raise PayloadError(src, f"not a usable JSON line: {e}", n) from None
    if _SURROGATE_ESCAPE.search(line):  # a \uD800-\uDFFF escape: a pair is fine, a lone one is no text
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as e:
            raise PayloadError(src, f"a lone surrogate ({e.object[e.start:e.end]!a}) is not Unicode text: no "
                               "tokenizer takes it", n) from None
        except RecursionError:
            raise PayloadError(src, "nested too deeply", n) from None
    return obj


def read_file(path: Path, skipped: Skipped | None = None) -> Iterator[LogRequest]:
    """The requests of one file, in file order; arrival times must not go backwards. With
    ``skipped``, a bad line is recorded there and skipped (up to ``MAX_SKIPPED``), else it fails."""
    last: float | None = None
    for n, line in open_lines(path, skipped):
        try:
            r = parse_line(_load(line, str(path), n), str(path), n)
        except PayloadError as e:
            if skipped is None:
                raise
            if not line.endswith("\n"):  # only the last line can lack its newline
                skipped.unfinished.append(f"{path}:{n}")
            else:
                skipped.add(e)
            continue
        if r.arrival is not None:
            if last is not None and r.arrival < last:
                raise PayloadError(str(path), "arrival time goes backwards: sort the log by time", n)
            last = r.arrival
        yield r


def distinct_files(paths: Sequence[Path]) -> None:
    """A file given twice (the same path, or a link to it) would be counted twice: refused."""
    seen: list[Path] = []
    for p in paths:
        for q in seen:
            try:
                same = os.path.samefile(p, q)
            except OSError:
                same = False
            if same:
                raise PayloadError(str(p), f"the same file as {q}, given twice: each request would count twice")
        seen.append(p)


def read_requests(paths: Sequence[Path], skipped: Skipped | None = None) -> Iterator[LogRequest]:
    """Every file's requests in arrival order: merged by time when every line has one (a line
    without one, once files are merged, is an error naming it), else file after file. A file
    given twice is refused; ``skipped``: see ``read_file``."""
    if not paths:
        raise PayloadError("prompts", "no file given")
    distinct_files(paths)
    if len(paths) == 1:
        yield from read_file(paths[0], skipped)
        return
    first = [next(read_file(p, Skipped()), None) for p in paths]
    if not all(r is not None and r.arrival is not None for r in first):
        for p in paths:
            yield from read_file(p, skipped)
        return

    def keyed(i: int, p: Path) -> Iterator[tuple[float, int, int, LogRequest]]:
        for k, r in enumerate(read_file(p, skipped)):
            if r.arrival is None:
                raise PayloadError(r.source, "no arrival time, while the files are merged by time", r.line)
            yield r.arrival, i, k, r

    for _, _, _, r in heapq.merge(*(keyed(i, p) for i, p in enumerate(paths))):
        yield r
