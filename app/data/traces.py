"""The request traces imported for the what-if: which deployments have one, each trace's row, and
the time a trace spans. Their requests are read by ``collectors.traces.load_trace``."""

from __future__ import annotations

from datetime import datetime
from typing import cast

from ...collectors.traces.ingest import TraceInfo, load_trace
from ...collectors.traces.parse import TraceError
from ...models.cache.sim import Trace
from ...models.core.timeutil import from_epoch_s, month_start, next_month
from ...sql.db import Database, Snapshot, Source

SPAN_MARGIN_S = 10.0
"""The measured span is the trace's first to last request, widened by this much each side (the
requests' completions and the scrapes after them)."""


def trace_deployments(source: Source) -> list[str]:
    """Deployments with at least one imported trace."""
    return [r["deployment"] for r in source.fetch("trace_deployments")]


def traces_of(source: Source, deployment: str) -> list[dict]:
    """The deployment's traces (``name``, ``format``, ``requests``, ...), as the what-if page lists them."""
    return source.fetch("traces", deployment=deployment)


def trace_span(source: Source, trace_id: int) -> tuple[float, float]:
    """First and last arrival of a trace, in its own time unit (0, 0 when it has no time)."""
    (row,) = source.fetch("trace_span", trace_id=trace_id)
    return float(row["t0"] or 0.0), float(row["t1"] or 0.0)


def load_trace_window(source: Database | Snapshot, deployment: str, name: str | None, model_name: str | None,
                      t_from: datetime | None, t_to: datetime | None) -> tuple[Trace, TraceInfo, list[str]]:
    """A trace (``name``; None: the newest), in [t_from, t_to] when given and the trace's times
    are unix times (read through ``source.read()``: a snapshot's own connection), and the notes
    reading it left (a Mooncake trace is replayed whole). ``TraceError`` when it holds no request."""
    db = cast(Database, source)  # load_trace reads through read(), which a Snapshot has too
    notes: list[str] = []
    if t_from is None or t_to is None:
        tr, info = load_trace(db, deployment, name, model_name=model_name)
    else:
        tr, info = load_trace(db, deployment, name, model_name=model_name, t_from=t_from.timestamp(),
                              t_to=t_to.timestamp())
        if info.format == "mooncake":
            notes.append("a Mooncake trace's times start at 0: the window does not apply to it")
            tr, info = load_trace(db, deployment, name, model_name=model_name)
        elif not tr.requests:
            raise TraceError(f"trace {info.name!r} of {deployment!r} has no request in "
                             f"{t_from.isoformat()} .. {t_to.isoformat()}", source="--from/--to")
    if not tr.requests:
        raise TraceError(f"trace {info.name!r} of {deployment!r} holds no request (an import that stopped "
                         "early?): nothing to replay", source="trace")
    return tr, info, notes


def trace_times(tr: Trace) -> tuple[float, float] | None:
    """The trace's first and last request time, when it carries them."""
    return (float(tr.ts[0]), float(tr.ts[-1])) if tr.ts is not None and tr.requests else None


def month_trace(rows: list[dict], deployment: str, month: str) -> str:
    """The trace a month's what-if replays, of the deployment's ``traces_of`` rows: the newest
    with a request in the month, else the newest whose times are not unix times (Mooncake's:
    replayed whole). ``TraceError`` when none."""
    t_from = month_start(month, "--month")
    lo, hi = t_from.timestamp(), next_month(t_from).timestamp()
    if not rows:
        raise TraceError(f"deployment {deployment!r} has no trace: run `kvplan import-trace` first", source="trace")
    timed = [r for r in rows if r["first_ts"] is not None and r["last_ts"] is not None and r["last_ts"] >= 1e8]
    inside = [r for r in timed if r["first_ts"] < hi and r["last_ts"] >= lo]
    timeless = [r for r in rows if r not in timed and r["requests"]]
    picks = inside or timeless
    if not picks:
        raise TraceError(f"no trace of {deployment!r} has a request in {month} (its traces: "
                         + ", ".join(f"{r['name']!r}" for r in rows) + ")", source="--month")
    return str(picks[0]["name"])


def unix_span(t0: float, t1: float) -> bool:
    """True when [t0, t1] are unix times (a Mooncake trace starts at 0) spanning a second or more."""
    return t1 - t0 >= 1 and t0 >= 10**8


def topology_span(tr: Trace, t_from: datetime | None, t_to: datetime | None) -> tuple[datetime, datetime] | None:
    """The span the deployment is measured over: the window, else the trace's first to last
    request widened by ``SPAN_MARGIN_S``; None when the trace's times are not unix times."""
    if t_from is not None and t_to is not None:
        return t_from, t_to
    if tr.ts is None or not tr.requests or float(tr.ts[0]) < 1e8:  # not unix times (Mooncake)
        return None
    return from_epoch_s(float(tr.ts[0]) - SPAN_MARGIN_S), from_epoch_s(float(tr.ts[-1]) + SPAN_MARGIN_S)
