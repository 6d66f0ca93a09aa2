"""The DuckDB file: migrations, named queries and who may open it when.

* Migrations are ``sql/migrations/NNN_name.sql``, each applied in one transaction and
  recorded in ``schema_migrations``.
* Queries are named blocks in ``sql/queries/*.sql`` (``-- name: x`` then a comment
  docstring, aiosql style), loaded once, run with named parameters only.
* Sharing the file: DuckDB lets ONE process open a file read-write, or several open it
  read-only, never both. kvplan never holds a connection between operations: a writer
  (collector, import) opens, writes one short transaction and closes; a reader (dashboard,
  CLI) opens read-only, runs its queries and closes. Whoever finds the file locked retries
  with a bounded back-off (``lock_timeout_s``) and then fails with an error that says who
  holds the lock.
* Fairness: a stream of overlapping readers would otherwise starve a writer (the file is
  never free). Writers queue at a turnstile (an flock on ``<file>.writer-lock``) before they
  open the file; readers pass through it before they open theirs. Once a writer waits, new
  readers wait behind it for one short transaction, and the writer waits only for the
  reads already running (see tests/test_concurrency.py for the measured bound).
* A writer of several transactions (a long import) lets readers in between them: readers hold a
  shared flock on ``<file>.reader-lock`` until their connection is open, and the writer waits
  for it to be free (capped) before its next transaction (``let_readers_in``).
* Readers never migrate: ``require_current`` checks, read-only, that the file holds this code's
  migrations and macro files (``sql/macros``, the exact-increase rule), and names
  ``kvplan migrate`` when it does not. ``migrate`` refuses a file a newer kvplan wrote.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import duckdb

from ..models.core.errors import KvplanError
from ..models.core.timeutil import naive_utc

T = TypeVar("T")

HERE = Path(__file__).parent
MIGRATIONS = HERE / "migrations"
MACROS = HERE / "macros"
QUERIES = HERE / "queries"

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


class DatabaseError(KvplanError):
    """A database problem a user can act on (names the file)."""


@dataclass(frozen=True)
class Query:
    name: str
    doc: str
    sql: str
    file: str


@cache
def queries() -> dict[str, Query]:
    """Every named query under sql/queries, by name."""
    out: dict[str, Query] = {}
    for path in sorted(QUERIES.glob("*.sql")):
        text = path.read_text()
        marks = list(_NAME.finditer(text))
        for m, nxt in zip(marks, marks[1:] + [None], strict=True):
            body = text[m.end(): nxt.start() if nxt else len(text)].strip("\n")
            doc_lines: list[str] = []
            sql_lines: list[str] = []
            for line in body.splitlines():
                if not sql_lines and line.startswith("--"):
                    doc_lines.append(line.lstrip("-").strip())
                else:
                    sql_lines.append(line)
            name = m.group(1)
            if name in out:
                raise DatabaseError(f"{path.name}: query {name!r} defined twice")
            out[name] = Query(name, " ".join(doc_lines), "\n".join(sql_lines).strip().rstrip(";"), path.name)
    return out


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) of every migration file, in order."""
    out = []
    for path in sorted(MIGRATIONS.glob("*.sql")):
        version = int(path.name.split("_", 1)[0])
        out.append((version, path.stem, path.read_text()))
    return out


def code_version() -> int:
    """The newest migration this code knows."""
    return migrations()[-1][0]


def macros() -> list[tuple[str, str, str]]:
    """(file name, sha256, sql) of every macro file (``sql/macros/*.sql``, the exact-increase
    rule), in order. Applied after the numbered migrations whenever the text changed."""
    out = []
    for path in sorted(MACROS.glob("*.sql")):
        text = path.read_text()
        out.append((path.name, hashlib.sha256(text.encode()).hexdigest(), text))
    return out


def _is_lock_error(e: Exception) -> bool:
    """Another process holds the file (or, inside this process, another thread holds it
    open in the other mode): both pass once that connection closes."""
    msg = str(e)
    return ("Could not set lock" in msg or "Conflicting lock" in msg
            or "different configuration than existing connections" in msg)


_HELD = threading.local()  # paths whose turnstile this thread holds (writes may nest)


class _Turnstile:
    """Writers hold an exclusive flock on ``<file>.writer-lock`` while they open, write and
    close; readers take and drop a shared one before opening. Without the lock file (a
    read-only directory) it does nothing: the DuckDB lock retries still apply."""

    def __init__(self, db_path: Path):
        self.path = db_path.with_name(db_path.name + ".writer-lock")
        self.readers = db_path.with_name(db_path.name + ".reader-lock")

    def _open(self, path: Path | None = None) -> int | None:
        for flags in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):
            try:
                return os.open(path or self.path, flags, 0o666)
            except OSError:
                continue
        return None

    def _take(self, fd: int, mode: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.002)

    @contextmanager
    def writer(self, timeout_s: float) -> Iterator[None]:
        held: set[Path] = getattr(_HELD, "paths", set())
        fd = None if self.path in held else self._open()
        if fd is None:
            yield
            return
        try:
            if not self._take(fd, fcntl.LOCK_EX, timeout_s):
                raise DatabaseError(f"{self.path.with_suffix('')}: another writer kept it for over "
                                    f"{timeout_s:.0f}s")
            _HELD.paths = held | {self.path}
            yield
        finally:
            _HELD.paths = held
            os.close(fd)  # releases the lock

    @contextmanager
    def connecting(self, timeout_s: float) -> Iterator[None]:
        """A reader holds a shared flock on ``<file>.reader-lock`` from before the turnstile
        until its connection is open: how a writer that writes in several transactions (a long
        import) sees that readers wait for the file (:meth:`let_readers_in`)."""
        fd = None if self.path in getattr(_HELD, "paths", set()) else self._open(self.readers)
        if fd is None:
            yield
            return
        try:
            self._take(fd, fcntl.LOCK_SH, timeout_s)  # only a writer's check excludes it, briefly
            yield
        finally:
            os.close(fd)

    def let_readers_in(self, cap_s: float) -> None:
        """Between two transactions of one writer (holding no lock): wait until no reader is
        waiting for the file (an exclusive flock on the reader lock is free: every waiting reader
        has opened it), for at most ``cap_s``, so a long import lets the readers in between its
        transactions instead of racing them for the file. The readers then read while the writer
        waits for the file as any writer does; the cap keeps arriving readers from starving it."""
        fd = self._open(self.readers)
        if fd is not None:
            try:
                if self._take(fd, fcntl.LOCK_EX, cap_s):
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def pass_reader(self, timeout_s: float) -> None:
        if self.path in getattr(_HELD, "paths", set()):
            return
        fd = self._open()
        if fd is not None:
            try:
                self._take(fd, fcntl.LOCK_SH, timeout_s)  # on timeout: go on, DuckDB's retry decides
            finally:
                os.close(fd)


class Database:
    """A DuckDB file kvplan owns. Cheap to create: it opens connections only inside
    :meth:`read` and :meth:`write`."""

    def __init__(self, path: str | Path, *, lock_timeout_s: float = 30.0):
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s
        self._turnstile = _Turnstile(self.path)

    # -- connections -------------------------------------------------------------------
    def _connect(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.01
        while True:
            try:
                con = duckdb.connect(str(self.path), read_only=read_only)
                # DuckDB draws a progress bar on stdout for a query past 2 s: it broke `--json`
                con.execute("SET enable_progress_bar = false")
                return con
            except (duckdb.IOException, duckdb.ConnectionException) as e:
                if not _is_lock_error(e) or time.monotonic() >= deadline:
                    if _is_lock_error(e):
                        raise DatabaseError(
                            f"{self.path}: still locked by another process after "
                            f"{self.lock_timeout_s:.0f}s ({e})") from None
                    raise DatabaseError(f"{self.path}: cannot open: {e}") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.25)

    @contextmanager
    def write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection inside one transaction: committed on success, rolled
        back on any error, closed either way."""
        with self.batch() as con, self.transaction(con):
            yield con

    @contextmanager
    def batch(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One read-write connection held for a batch of short transactions (a bulk import,
        a backfill chunk): opening and closing the file costs ~20 ms each (close
        checkpoints), which dominates small writes. Readers wait for the whole batch, so
        callers keep a batch to seconds. Use :meth:`transaction` inside it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._turnstile.writer(self.lock_timeout_s):
            con = self._connect(read_only=False)
            try:
                yield con
            finally:
                con.close()

    @staticmethod
    @contextmanager
    def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
        """BEGIN ... COMMIT on an open connection, ROLLBACK on any error."""
        con.execute("BEGIN TRANSACTION")
        try:
            yield con
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    @contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection, closed afterwards so a writer can get the file."""
        if not self.path.exists():
            raise DatabaseError(f"{self.path}: no such database (check --db / KVPLAN_DB; a reader never creates "
                                "one: `kvplan migrate`, `kvplan import-metrics` or `kvplan demo --load-only` do)")
        with self._turnstile.connecting(self.lock_timeout_s):
            self._turnstile.pass_reader(self.lock_timeout_s)
            con = self._connect(read_only=True)
        try:
            yield con
        finally:
            con.close()

    def let_readers_in(self) -> None:
        """For a writer between two of its transactions (outside any batch): the readers that
        wait for the file read first (at most ``lock_timeout_s / 4``; see ``_Turnstile``)."""
        self._turnstile.let_readers_in(self.lock_timeout_s / 4)

    # -- schema ------------------------------------------------------------------------
    def migrate(self) -> list[str]:
        """Apply pending migrations, each in its own transaction, then the macro files whose text
        changed (``sql/macros``). Returns the names of the migrations applied."""
        applied: list[str] = []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._turnstile.writer(self.lock_timeout_s):
            return self._migrate(applied)

    def _migrate(self, applied: list[str]) -> list[str]:
        con = self._connect(read_only=False)
        try:
            con.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                        "version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, "
                        "applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp)")
            done = {r[0] for r in con.execute("SELECT version FROM schema_migrations").fetchall()}
            newest = max(done, default=0)
            if newest > code_version():
                raise DatabaseError(f"{self.path}: written by a newer kvplan (schema {newest}; this kvplan "
                                    f"knows up to {code_version()}); upgrade kvplan to use this file")
            for version, name, sql in migrations():
                if version in done:
                    continue
                con.execute("BEGIN TRANSACTION")
                try:
                    con.execute(sql)
                    con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [version, name])
                    con.execute("COMMIT")
                except Exception as e:
                    con.execute("ROLLBACK")
                    raise DatabaseError(f"{self.path}: migration {name} failed: {e}") from e
                applied.append(name)
            self._apply_macros(con)
        finally:
            con.close()
        return applied

    def _apply_macros(self, con: duckdb.DuckDBPyConnection) -> None:
        """(Re)apply each macro file whose text differs from the one the database recorded in
        ``schema_macros`` (CREATE OR REPLACE): a database migrated by any kvplan version ends
        with this version's rule."""
        con.execute("CREATE TABLE IF NOT EXISTS schema_macros ("
                    "file VARCHAR PRIMARY KEY, sha256 VARCHAR NOT NULL, "
                    "applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp)")
        done = dict(con.execute("SELECT file, sha256 FROM schema_macros").fetchall())
        for file, digest, sql in macros():
            if done.get(file) == digest:
                continue
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(sql)
                con.execute("INSERT OR REPLACE INTO schema_macros (file, sha256) VALUES (?, ?)", [file, digest])
                con.execute("COMMIT")
            except Exception as e:
                con.execute("ROLLBACK")
                raise DatabaseError(f"{self.path}: macros {file} failed: {e}") from e

    def require_current(self) -> None:
        """For a reader, without writing: the file exists and holds this kvplan's schema and
        rule (every migration and macro file applied). Otherwise a ``DatabaseError`` that says
        what to run: ``kvplan migrate`` for a file not yet migrated, a newer kvplan for a file
        a newer one wrote. Readers never migrate (that takes the writer lock)."""
        with self.read() as con:
            tables = {r[0] for r in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'").fetchall()}
            done = ({r[0] for r in con.execute("SELECT version FROM schema_migrations").fetchall()}
                    if "schema_migrations" in tables else set())
            rules = (dict(con.execute("SELECT file, sha256 FROM schema_macros").fetchall())
                     if "schema_macros" in tables else {})
        migrate = f"run `kvplan migrate --db {self.path}` (or any command that writes to it, e.g. import-metrics)"
        if not done:
            raise DatabaseError(f"{self.path}: not a kvplan database, or not migrated yet: {migrate}")
        if max(done) > code_version():
            raise DatabaseError(f"{self.path}: written by a newer kvplan (schema {max(done)}; this kvplan knows "
                                f"up to {code_version()}): upgrade kvplan to read it")
        missing = [name for version, name, _ in migrations() if version not in done]
        stale = [file for file, digest, _ in macros() if rules.get(file) != digest]
        if missing or stale:
            what = ", ".join(missing + [f"macros/{f}" for f in stale])
            raise DatabaseError(f"{self.path}: not migrated to this kvplan's schema ({what} not applied): {migrate}")

    def schema_version(self) -> int:
        with self.read() as con:
            (version,) = con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchall()[0]
            return int(version)

    # -- named queries -----------------------------------------------------------------
    @staticmethod
    def run(con: duckdb.DuckDBPyConnection, query: str, /, **params: Any) -> duckdb.DuckDBPyConnection:
        """Run a named query on an open connection with named parameters."""
        q = queries().get(query)
        if q is None:
            raise KeyError(f"no named query {query!r} in sql/queries")
        used = set(re.findall(r"\$([a-z_][a-z0-9_]*)", q.sql))
        missing = used - params.keys()
        if missing:
            raise TypeError(f"query {query} needs parameter(s) {', '.join(sorted(missing))}")
        return con.execute(q.sql, {k: _param(v) for k, v in params.items() if k in used})

    @staticmethod
    def scalar(con: duckdb.DuckDBPyConnection, query: str, /, **params: Any) -> Any:
        """The first value of the one row a named query returns (an aggregate, an
        ``INSERT ... RETURNING id``); ``DatabaseError`` if it returns no row."""
        row = Database.run(con, query, **params).fetchone()
        if row is None:
            raise DatabaseError(f"query {query} returned no row")
        return row[0]

    def fetch(self, query: str, /, **params: Any) -> list[dict[str, Any]]:
        """Run a named read query in its own read-only connection; rows as dicts."""
        with self.read() as con:
            return _rows(self.run(con, query, **params))

    def data_version(self) -> tuple[int | None, ...]:
        """Changes whenever the file's data may have: (size, mtime) of the file and of its
        write-ahead log. A cache key for what is read from it, found without opening it."""
        out: list[int | None] = []
        for p in (self.path, self.path.with_name(self.path.name + ".wal")):
            try:
                st = p.stat()
                out += [st.st_size, st.st_mtime_ns]
            except FileNotFoundError:
                out += [None, None]
        return tuple(out)

    @contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """One read-only connection for a batch of named queries (a dashboard page run, a
        report): one open instead of one per query, and every query sees the same data."""
        with self.read() as con:
            yield Snapshot(self.path, con)


class Source(Protocol):
    """What the readers (kvplan.app.data, kvplan.app.views) take: a ``Database`` (one read-only
    connection per query) or a ``Snapshot`` (one connection for a batch)."""

    @property
    def path(self) -> Path: ...

    def fetch(self, query: str, /, **params: Any) -> list[dict[str, Any]]: ...


class Snapshot:
    """Named read queries on one open read-only connection (``Database.snapshot``). Has the
    same ``fetch`` and ``path`` as ``Database``, so readers take either."""

    def __init__(self, path: Path, con: duckdb.DuckDBPyConnection) -> None:
        self.path = path
        self._con = con
        self.memo: dict[tuple[Any, ...], Any] = {}
        """Values readers computed from this snapshot, by reader and arguments (``remember``): one
        view of the data, so a command that asks for the same window twice reads it once."""

    def remember(self, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
        """``compute()`` once per ``key`` for the life of the snapshot (its value is read-only)."""
        if key not in self.memo:
            self.memo[key] = compute()
        return cast(T, self.memo[key])

    def fetch(self, query: str, /, **params: Any) -> list[dict[str, Any]]:
        return _rows(Database.run(self._con, query, **params))

    @contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The snapshot's own connection, as ``Database.read`` gives one: a reader written
        against ``read()`` (a trace's columnar replay) runs inside the snapshot."""
        yield self._con


def _param(v: Any) -> Any:
    """Aware datetimes cross into DuckDB's zone-less TIMESTAMP columns as naive UTC."""
    return naive_utc(v) if isinstance(v, datetime) and v.tzinfo is not None else v


def _rows(cur: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def remember(source: Source, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
    """``compute()`` once per ``key`` within a snapshot (``Snapshot.remember``); every time on a
    ``Database``, whose reads each see the data as it is then."""
    return source.remember(key, compute) if isinstance(source, Snapshot) else compute()
