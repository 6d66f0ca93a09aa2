"""What every ``kvplan`` command shares: options, consoles, settings, the database, errors.

Command modules import from here, never from ``kvplan.app.cli`` (the package registers them).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, ParamSpec, TypeVar

import typer
from rich.console import Console

from ...models.core.errors import KvplanError
from ...models.core.redact import redact
from ...models.core.timeutil import parse_time as _parse_time
from ...models.core.vocabulary import Routing
from ...models.inputs.settings import Settings
from ...sql.db import Database
from ..config import load_settings

err = Console(stderr=True)
out = Console()

DbOpt = Annotated[Path | None, typer.Option("--db", help="DuckDB file (env KVPLAN_DB; default ./kvplan.duckdb).")]
ConfigOpt = Annotated[Path | None, typer.Option("--config",
                                                help="TOML config (env KVPLAN_CONFIG; default ./kvplan.toml).")]


def finite(value: float | None) -> float | None:
    """Typer callback: a float option must be a finite number (``nan``/``inf`` pass range checks)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number; got {value}")
    return value


def positive(value: float | None) -> float | None:
    """Typer callback: a finite number above 0."""
    checked = finite(value)
    if checked is not None and not checked > 0:
        raise typer.BadParameter(f"must be a number above 0; got {value}")
    return value


def routing_option(value: str) -> str:
    """Typer callback: a routing in any accepted spelling, as its one name (``Routing``)."""
    try:
        return Routing.parse(value).value
    except KvplanError as e:
        raise typer.BadParameter(e.message) from None


SEED_MAX = 2**32 - 1
"""Seeds are 32-bit: every option that takes one is bounded by it."""


def fail(message: str) -> NoReturn:
    """End the command with ``message`` and exit code 2 (an input the user can fix)."""
    err.print(f"[red]error:[/red] {redact(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


P = ParamSpec("P")
R = TypeVar("R")


def user_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """The one place a command's ``KvplanError`` becomes a message and exit code 2; any other
    exception is a bug and keeps its traceback. ``kvplan.app.cli`` wraps every command with it."""
    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except KvplanError as e:
            fail(str(e))
    return run


def json_text(obj: Any, **kw: Any) -> str:
    """``obj`` as strict JSON (RFC 8259): a non-finite float (inf, nan) is ``null``, never the
    ``Infinity`` / ``NaN`` Python writes by default, which JSON parsers refuse."""
    import json
    import math

    def clean(v):
        if isinstance(v, float):
            return v if math.isfinite(v) else None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(obj), allow_nan=False, **kw)


def parse_time(value: str, what: str) -> datetime:
    """ISO 8601 as aware UTC (no zone means UTC; an offset is converted)."""
    return _parse_time(value, what)


def parse_window(from_: str, to: str) -> tuple[datetime, datetime]:
    """--from / --to as aware UTC times; --to must come after --from."""
    t0, t1 = parse_time(from_, "--from"), parse_time(to, "--to")
    if t1 <= t0:
        raise KvplanError(f"must be after --from ({from_})", source=f"--to ({to})")
    return t0, t1


def refuse_overwriting(output: Path, option: str, inputs: Iterable[tuple[str, Path | None]]) -> None:
    """Nothing a command writes may be one of its inputs: ``output`` is refused when it is the same
    file as an input (``os.path.samefile``: a symlink or hard link to it counts), before anything is
    opened for writing, so a mistyped option can never truncate the log it was about to read."""
    if not output.exists():
        return
    for what, path in inputs:
        if path is None or not path.exists():
            continue
        try:
            same = os.path.samefile(output, path)
        except OSError:
            continue
        if same:
            raise KvplanError(f"is the same file as the input {what} {path}: refusing to overwrite it",
                              source=f"{option} {output}")


def settings(config: Path | None, db: Path | None) -> Settings:
    return load_settings(config, db=db)


def open_writer(s: Settings) -> Database:
    """The database for a command that writes: created if missing, migrated under the writer lock."""
    db = Database(s.db, lock_timeout_s=s.lock_timeout_s)
    db.migrate()
    return db


def open_reader(s: Settings) -> Database:
    """The database for a command that only reads: it must exist (a mistyped --db is refused, never
    created) and hold this kvplan's schema; it is opened read-only and never migrated, so a reader
    never waits for, or holds, the writer lock (a long import does not stop it)."""
    db = Database(s.db, lock_timeout_s=s.lock_timeout_s)
    db.require_current()
    return db
