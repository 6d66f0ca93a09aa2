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
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import duckdb

HERE = Path(__file__).parent
MIGRATIONS = HERE / "migrations"
QUERIES = HERE / "queries"

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.M)


class DatabaseError(RuntimeError):
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
        for m, nxt in zip(marks, marks[1:] + [None]):
            body = text[m.end(): nxt.start() if nxt else len(text)].strip("\n")
            doc_lines, sql_lines = [], []
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


def _is_lock_error(e: Exception) -> bool:
    """Another process holds the file (or, inside this process, another thread holds it
    open in the other mode): both pass once that connection closes."""
    msg = str(e)
    return ("Could not set lock" in msg or "Conflicting lock" in msg
            or "different configuration than existing connections" in msg)


class Database:
    """A DuckDB file kvplan owns. Cheap to create: it opens connections only inside
    :meth:`read` and :meth:`write`."""

    def __init__(self, path: str | Path, *, lock_timeout_s: float = 30.0):
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s

    # -- connections -------------------------------------------------------------------
    def _connect(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.01
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=read_only)
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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = self._connect(read_only=False)
        try:
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        finally:
            con.close()

    @contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection, closed afterwards so a writer can get the file."""
        if not self.path.exists():
            raise DatabaseError(f"{self.path}: no such database (run `kvplan demo --load-only` "
                                "or `kvplan import-metrics` first)")
        con = self._connect(read_only=True)
        try:
            yield con
        finally:
            con.close()

    # -- schema ------------------------------------------------------------------------
    def migrate(self) -> list[str]:
        """Apply pending migrations, each in its own transaction. Returns their names."""
        applied: list[str] = []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = self._connect(read_only=False)
        try:
            con.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                        "version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, "
                        "applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp)")
            done = {r[0] for r in con.execute("SELECT version FROM schema_migrations").fetchall()}
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
        finally:
            con.close()
        return applied

    def schema_version(self) -> int:
        with self.read() as con:
            return con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0]

    # -- named queries -----------------------------------------------------------------
    @staticmethod
    def run(con: duckdb.DuckDBPyConnection, query: str, /, **params) -> duckdb.DuckDBPyConnection:
        """Run a named query on an open connection with named parameters."""
        q = queries().get(query)
        if q is None:
            raise KeyError(f"no named query {query!r} in sql/queries")
        used = set(re.findall(r"\$([a-z_][a-z0-9_]*)", q.sql))
        missing = used - params.keys()
        if missing:
            raise TypeError(f"query {query} needs parameter(s) {', '.join(sorted(missing))}")
        return con.execute(q.sql, {k: v for k, v in params.items() if k in used})

    def fetch(self, query: str, /, **params) -> list[dict]:
        """Run a named read query in its own read-only connection; rows as dicts."""
        with self.read() as con:
            cur = self.run(con, query, **params)
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, row)) for row in cur.fetchall()]
