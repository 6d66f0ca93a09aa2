"""Get payloads in: scrape a live /metrics URL, or import a saved one.

Like Prometheus, a failed scrape (down, slow, not metrics) is recorded as a failed scrape
of that target at that time: the gap shows, and the next scrape goes ahead. Nothing from a
rejected payload is stored.

Bounds: a scrape has a TOTAL deadline (``scrape_timeout_s``: connect, headers and body
together; a server trickling a byte a second is cut off at the deadline) and a body cap
(``scrape_max_bytes``, default 16 MiB: the body is streamed and reading stops at the cap, so
memory stays bounded); either is a recorded gap naming the setting. Saved files over the cap
are not read.

Identity: a scraped target is its whole URL (``host:port`` for the usual ``/metrics`` path,
``host:port/path`` otherwise). Saved snapshots named ``NAME@TIME.prom`` are target NAME at
TIME, so ``import-metrics vllm-0@2026-11-30T11:00Z.prom vllm-0@2026-11-30T11:05Z.prom``
needs no ``--at``; a batch import is all or nothing.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from ...models.core.errors import KvplanError
from ...models.core.redact import redact
from ...models.core.timeutil import aware_utc, utcnow
from ...sql.db import Database
from .parse import parse_payload
from .payload import Payload, PayloadError
from .store import (
    ConflictError,
    StoreResult,
    check_payload,
    insert_payload,
    payload_sha256,
    store_failure,
    store_payload,
)


@dataclass(frozen=True)
class Target:
    """One /metrics endpoint of a deployment."""

    name: str
    url: str
    kind: str | None = None  # forced kind; None = detect from content


class ScrapeError(KvplanError):
    """A scrape that failed; the message names the URL."""


def redact_url(url: str) -> str:
    """A URL without user:password and without the values of secret query parameters
    (``?token=``, ``?access_token=``, ``?api_key=`` ...), safe for logs and the database."""
    parts = urlsplit(url)
    query = redact(parts.query) if parts.query else parts.query
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, query, parts.fragment))
    if query != parts.query:
        return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))
    return url


def default_target_name(url: str) -> str:
    """A target is its whole URL: ``host:port`` for the usual ``/metrics`` path (so existing
    targets keep their name), else ``host:port/path?query``: two endpoints on one host and
    port are two targets. Credentials are never part of it (nor a secret query parameter's
    value: ``?token=<redacted>``)."""
    parts = urlsplit(url)
    host = f"{parts.hostname}:{parts.port}" if parts.port else (parts.hostname or url)
    if parts.path in ("", "/", "/metrics") and not parts.query:
        return host
    return host + parts.path + (f"?{redact(parts.query)}" if parts.query else "")


DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_BYTES = 16 * 2**20


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n} bytes"


def fetch(url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, client: httpx.Client | None = None,
          headers: dict | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[str, str | None, float]:
    """GET a /metrics URL within a TOTAL deadline of ``timeout_s`` (connect, headers and
    body together, not per read) and at most ``max_bytes`` of (decoded) body, streamed:
    memory stays bounded by the cap. Returns (body, content type, seconds). Raises
    ScrapeError naming the URL and the limit (``scrape_timeout_s`` / ``scrape_max_bytes``)."""
    safe = redact_url(url)
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    late = ScrapeError(f"{safe}: no complete answer within {timeout_s:g}s (scrape_timeout_s, a total deadline)")
    own = client is None
    client = client or httpx.Client(follow_redirects=True)
    fired = threading.Event()
    timer = None
    try:
        with client.stream("GET", url, headers=headers or {}, timeout=timeout_s) as r:
            if r.status_code != 200:
                raise ScrapeError(f"{safe}: HTTP {r.status_code} {r.reason_phrase}")
            # past the headers, the body's reads get what is left of the deadline: a timer
            # shuts the socket down then, so a server trickling a byte a second cannot hold on
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise late
            sock = _socket_of(r)
            if sock is not None:
                timer = threading.Timer(remaining, _shutdown, (sock, fired))
                timer.daemon = True
                timer.start()
            chunks, size = [], 0
            try:
                for chunk in r.iter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise ScrapeError(f"{safe}: body larger than {_size(max_bytes)} (scrape_max_bytes); "
                                          "reading stopped there")
                    if time.monotonic() > deadline:
                        raise late
                    chunks.append(chunk)
            except httpx.HTTPError:
                if fired.is_set() or time.monotonic() > deadline:
                    raise late from None
                raise
            if fired.is_set():
                raise late
            body = b"".join(chunks)
            ctype = r.headers.get("content-type")
            encoding = r.charset_encoding or "utf-8"
    except httpx.TimeoutException:
        raise late from None
    except httpx.HTTPError as e:
        raise ScrapeError(f"{safe}: {type(e).__name__}: {redact(str(e))}") from None
    finally:
        if timer is not None:
            timer.cancel()
        if own:
            client.close()
    try:
        text = body.decode(encoding)
    except (UnicodeDecodeError, LookupError) as e:
        raise ScrapeError(f"{safe}: body is not {encoding} text ({e}): not a /metrics payload") from None
    return text, ctype, time.monotonic() - t0


def _socket_of(response: httpx.Response):
    stream = response.extensions.get("network_stream")
    try:
        return stream.get_extra_info("socket") if stream is not None else None
    except Exception:  # a transport without sockets (tests' MockTransport)
        return None


def _shutdown(sock, fired: threading.Event) -> None:
    fired.set()
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def scrape_target(db: Database, deployment: str, target: Target, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                  client: httpx.Client | None = None, at: datetime | None = None,
                  max_bytes: int = DEFAULT_MAX_BYTES) -> StoreResult:
    """Scrape one target and store the result (a payload, or a recorded failure)."""
    ts = at or utcnow()
    safe = redact_url(target.url)
    t0 = time.monotonic()
    try:
        body, ctype, elapsed = fetch(target.url, timeout_s=timeout_s, client=client, max_bytes=max_bytes)
        payload = parse_payload(body, safe, content_type=ctype, kind=target.kind, at=ts)
    except (ScrapeError, PayloadError) as e:
        return store_failure(db, deployment=deployment, target=target.name, kind=target.kind or "unknown",
                             ts=ts, error=str(e), source="scrape", url=safe,
                             duration_s=time.monotonic() - t0)
    return store_payload(db, deployment=deployment, target=target.name, ts=ts, payload=payload,
                         sha256=payload_sha256(body), source="scrape", url=safe, duration_s=elapsed)


EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
"""Scrape times before this are refused (vLLM did not exist; a typo such as year 0001)."""
AHEAD = timedelta(days=1)
"""Scrape times more than this after now are refused (a snapshot cannot come from the future)."""


def check_time(ts: datetime, source: str) -> datetime:
    """A scrape time (``--at`` or NAME@TIME) between 2000-01-01 and now + 1 day."""
    latest = utcnow() + AHEAD
    if not EARLIEST <= ts <= latest:
        raise PayloadError(source, f"time {ts.isoformat()} is outside {EARLIEST:%Y-%m-%d} .. {latest:%Y-%m-%d %H:%M} "
                                   "UTC (a scrape cannot predate 2000 or lie more than a day ahead)")
    return ts


def read_payload(path: Path, kind: str | None = None, at: datetime | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[str, Payload]:
    """Read and validate a saved payload of at most ``max_bytes`` (``scrape_max_bytes``).
    Returns (text, Payload); raises PayloadError naming the file (and line)."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise PayloadError(str(path), f"{size:,} bytes is larger than {_size(max_bytes)} (scrape_max_bytes): "
                                          "not read")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise PayloadError(str(path), f"not UTF-8 text (byte {e.start}): not a /metrics payload") from None
    except OSError as e:
        raise PayloadError(str(path), e.strerror or str(e)) from None
    return text, parse_payload(text, str(path), kind=kind, at=at)


def snapshot_name(path: Path) -> tuple[str, datetime | None]:
    """(target, time) of a saved payload: ``NAME@TIME.prom`` (TIME in ISO 8601, e.g.
    ``vllm-0@2026-11-30T11:00:00Z.prom`` or ``vllm-0@20261130T110000Z.prom``; UTC if no zone)
    gives NAME and TIME; any other name gives its stem and no time."""
    stem = path.name.rsplit(".", 1)[0] if "." in path.name else path.name
    name, sep, when = stem.rpartition("@")
    if not sep or not name:
        return stem, None
    try:
        ts = datetime.fromisoformat(when.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise PayloadError(str(path), f"{when!r} after '@' is not an ISO 8601 time: name snapshots "
                                      "NAME@TIME.prom, e.g. vllm-0@2026-11-30T11:00:00Z.prom") from None
    return name, aware_utc(ts)


def resolve_imports(items: list[tuple[Path, datetime | None, str | None]]) -> list[tuple[Path, datetime, str]]:
    """Each saved payload's (path, time, target). The time is ``--at``, or the file's
    ``NAME@TIME`` (both at once is refused). The target is ``--target``, or NAME, or the
    file's stem; two files of one batch that would land on the same target and time from
    different folders are named ``folder/name`` instead of collapsing into one target."""
    out: list[list[Any]] = []  # [path, time, target or None, name]; the name may gain its folder
    for path, at, target in items:
        name, when = snapshot_name(path)
        if at is not None and when is not None and at != when:
            raise PayloadError(str(path), f"the file name says {when.isoformat()} and --at says {at.isoformat()}: "
                                          "drop --at, or rename the file")
        ts = at or when
        if ts is None:
            raise PayloadError(str(path), "no time: pass --at, or name the file NAME@TIME.prom "
                                          "(e.g. vllm-0@2026-11-30T11:00:00Z.prom)")
        check_time(ts, str(path))
        out.append([path, ts, target, name])
    seen: dict[tuple, list] = {}
    for row in out:
        if row[2] is None:
            seen.setdefault((row[3], row[1]), []).append(row)
    for rows in seen.values():
        if len({r[0].parent.resolve() for r in rows}) > 1:
            for r in rows:
                r[3] = f"{r[0].parent.name}/{r[3]}"
    keys: dict[tuple, Path] = {}
    for path, ts, target, name in out:
        key = (target or name, ts)
        if key in keys and keys[key].resolve() != path.resolve():
            raise PayloadError(str(path), f"{keys[key]} is also target {key[0]!r} at {ts.isoformat()}: "
                                          "one target has one payload per time (give each snapshot its own "
                                          "time: NAME@TIME.prom)")
        keys[key] = path
    return [(path, ts, target or name) for path, ts, target, name in out]


IMPORT_TRANSACTION_S = 0.5
"""How long one transaction of a batch import writes before it commits and lets readers in."""


def import_files(db: Database, deployment: str, items: list[tuple[Path, datetime | None, str | None]],
                 kind: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> list[StoreResult]:
    """Import saved payloads ``(path, time or None, target or None)`` (see
    :func:`resolve_imports`), all or nothing: every file is read and validated first (one bad
    file stores nothing), and checked against what is stored (another payload already stored
    for its target and time: a conflict stores nothing either). Then they are written in
    transactions of about ``IMPORT_TRANSACTION_S`` each, closing the file between them and
    letting waiting readers in (``Database.let_readers_in``): an import of hundreds of files
    never keeps a reader (``kvplan stats``, the dashboard) out for longer than one of them.
    Only a conflicting payload another process stores for the same target and time while the
    import runs can stop it half-way; the error says so, and importing the same files again
    then stores the rest (a file already stored is a no-op)."""
    parsed = [(path, at, target, *read_payload(path, kind, at, max_bytes))
              for path, at, target in resolve_imports(items)]
    results: list[StoreResult] = []
    committed = 0
    if db.path.exists():
        try:
            with db.read() as con:
                for _path, at, target, text, payload in parsed:
                    check_payload(con, deployment=deployment, target=target, ts=at, sha256=payload_sha256(text),
                                  source=payload.source)
        except ConflictError as e:
            raise ConflictError(f"{e}; nothing from this batch of {len(parsed)} file(s) was stored") from None
    try:
        while len(results) < len(parsed):
            with db.batch() as con, Database.transaction(con):
                start = time.monotonic()
                for _path, at, target, text, payload in parsed[len(results):]:
                    results.append(insert_payload(con, deployment=deployment, target=target, ts=at,
                                                  payload=payload, sha256=payload_sha256(text), source="import"))
                    if time.monotonic() - start > IMPORT_TRANSACTION_S:
                        break
            committed = len(results)
            db.let_readers_in()
    except ConflictError as e:
        raise ConflictError(f"{e}; another writer stored it while this import ran: {committed} of the "
                            f"{len(parsed)} file(s) were stored before it, the rest not (import the same files "
                            "again to store the rest: stored files are skipped)") from None
    return results


def import_file(db: Database, deployment: str, path: Path, at: datetime, *, target: str | None = None,
                kind: str | None = None) -> StoreResult:
    """Import one saved /metrics text as a scrape of ``target`` (default: the file's stem)
    at ``at``. Raises PayloadError naming the file and line; stores nothing then."""
    return import_files(db, deployment, [(path, at, target)], kind=kind)[0]
