"""Shared dashboard state: the database handle and the deployment / model / time-range
selectors every page uses. Only Streamlit glue lives here."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import streamlit as st

from app import service
from sql.db import Database, DatabaseError


@st.cache_resource
def database(path: str) -> Database:
    """One Database per file for the whole server. It holds no connection (each query opens
    the file read-only and closes it), so it is safe to share across sessions and threads."""
    return Database(Path(path), lock_timeout_s=10.0)


def db() -> Database:
    return database(os.environ.get("KVPLAN_DB", "kvplan.duckdb"))


@st.cache_data(ttl=15, show_spinner=False)
def deployments(path: str) -> list[dict]:
    return service.deployments(database(path))


@st.cache_data(ttl=15, show_spinner=False)
def models(path: str, deployment: str) -> list[str]:
    return [r["model_name"] for r in database(path).fetch("models", deployment=deployment)]


@dataclass(frozen=True)
class Selection:
    deployment: str
    model: str | None
    t_from: datetime
    t_to: datetime

    @property
    def step_s(self) -> int:
        """About 60 points across the range, never under 10 s."""
        return max(10, int((self.t_to - self.t_from).total_seconds() // 60))


RANGES = {"all data": None, "last 15 minutes": timedelta(minutes=15), "last hour": timedelta(hours=1),
          "last 6 hours": timedelta(hours=6), "last 24 hours": timedelta(days=1),
          "last 7 days": timedelta(days=7), "last 30 days": timedelta(days=30)}


def empty_state() -> None:
    st.info(
        "No metrics yet. Point kvplan at a deployment:\n\n"
        "- live: `kvplan scrape --deployment NAME http://HOST:8000/metrics` (vLLM) and the LMCache "
        "server's `http://HOST:HTTP_PORT/metrics`, or schedule it with `kvplan collect --daemon`;\n"
        "- saved payloads: `kvplan import-metrics --deployment NAME --at 2026-11-30T10:00Z vllm.prom`;\n"
        "- the recorded demo: `kvplan demo --load-only --db kvplan.duckdb`."
    )


def selection() -> Selection | None:
    """Sidebar selectors shared by all pages (kept in session state across pages)."""
    path = os.environ.get("KVPLAN_DB", "kvplan.duckdb")
    try:
        deps = deployments(path)
    except DatabaseError as e:
        st.error(str(e))
        empty_state()
        return None
    deps = [d for d in deps if d["scrapes"]]
    if not deps:
        empty_state()
        return None
    names = [d["deployment"] for d in deps]
    sb = st.sidebar
    name = sb.selectbox("Deployment", names, key="deployment")
    dep = next(d for d in deps if d["deployment"] == name)
    model_opts = ["all models"] + models(path, name)
    model = sb.selectbox("Model", model_opts, key="model")
    rng = sb.selectbox("Time range", list(RANGES), key="range")
    first = dep["first_scrape"]
    last = dep["last_scrape"]
    span = RANGES[rng]
    t_to = last.replace(tzinfo=timezone.utc)
    t_from = first.replace(tzinfo=timezone.utc) if span is None else max(t_to - span, first.replace(tzinfo=timezone.utc))
    sb.caption(f"Data: {first:%Y-%m-%d %H:%M} .. {last:%Y-%m-%d %H:%M} UTC, {dep['scrapes']} scrapes "
               f"({dep['failed']} failed). Ranges end at the last scrape.")
    return Selection(name, None if model == "all models" else model, t_from, t_to)
