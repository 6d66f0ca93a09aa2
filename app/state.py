"""Shared dashboard state: the settings, the database handle and the deployment / model /
time-range selectors every page uses. Only Streamlit glue lives here."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from zoneinfo import ZoneInfo, available_timezones

import streamlit as st

from ..models.core.vocabulary import Tier
from ..models.inputs.settings import Settings
from ..sql.db import Database
from .config import load_settings
from .data.store import DeploymentSettings, deployment_settings, deployments_with_data
from .data.window import model_names as store_model_names

if TYPE_CHECKING:
    from streamlit.elements.vega_charts import AltairChart

    from ..models.decision.plan import PlanResult
    from ..models.decision.verdict import Decision
    from .charts import Timeline

T = TypeVar("T")


def settings() -> Settings:
    """The same settings the CLI reads (``KVPLAN_CONFIG`` / ``kvplan.toml``, ``KVPLAN_*``
    environment, secret files); ``kvplan dashboard`` passes its --db and --config on."""
    return _settings(os.environ.get("KVPLAN_CONFIG"), os.environ.get("KVPLAN_DB"))


@st.cache_resource(show_spinner=False)
def _settings(config: str | None, db: str | None) -> Settings:
    return load_settings()


@st.cache_resource
def database(path: str, lock_timeout_s: float) -> Database:
    """One Database per file for the whole server. It holds no connection (each query opens
    the file read-only and closes it), so it is safe to share across sessions and threads."""
    return Database(path, lock_timeout_s=lock_timeout_s)


def db() -> Database:
    """The database, checked to hold this kvplan's schema and increase rule (read-only: the
    dashboard never migrates; a file not migrated yet, or written by a newer kvplan, is an
    error that says what to run)."""
    s = settings()
    d = database(str(s.db), s.lock_timeout_s)
    _require_current(str(d.path), d.data_version(), _db=d)
    return d


@st.cache_resource(max_entries=4, show_spinner=False)
def _require_current(path: str, version: tuple, *, _db: Database) -> bool:
    """Once per file version (an error is not cached: the next run checks again)."""
    _db.require_current()
    return True


def view(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(source, *args, **kwargs)`` for a view function of ``kvplan.app.views`` (or
    ``kvplan.app.gaps.timeline``), read through ONE connection (``Database.snapshot``) and cached
    until the database file changes (``Database.data_version``: size and mtime of the file
    and its WAL), for every session of the server: a page shown again with the same selection
    and unchanged data is not read again. Views return frozen dataclasses the pages only read."""
    d = db()
    return _view(str(d.path), d.data_version(), f"{fn.__module__}.{fn.__qualname__}", args,
                 tuple(sorted(kwargs.items())), _fn=fn, _db=d)


@st.cache_resource(max_entries=128, ttl=3600, show_spinner=False)
def _view(path: str, version: tuple, name: str, args: tuple, kwargs: tuple, *, _fn, _db: Database):
    with _db.snapshot() as src:
        return _fn(src, *args, **dict(kwargs))


def cfg(deployment: str) -> DeploymentSettings:
    """What the config says about ``deployment`` (GPUs, GPUs per engine, default prices)."""
    return deployment_settings(settings(), deployment)


@st.cache_data(ttl=15, show_spinner=False)
def deployments(path: str) -> list[dict]:
    """Deployments with data, from direct scrapes or Prometheus ingestion."""
    return deployments_with_data(db())


@st.cache_data(ttl=15, show_spinner=False)
def model_names(path: str, deployment: str) -> list[str]:
    return store_model_names(db(), deployment)


@dataclass(frozen=True)
class Selection:
    deployment: str
    model_name: str | None
    t_from: datetime
    t_to: datetime
    tz: str = "UTC"
    """IANA zone the time axes and captions speak (the sidebar's 'Time zone'; default UTC)."""

    def local(self, ts: datetime) -> datetime:
        """``ts`` (aware) on the wall clock of the picked zone."""
        return ts.astimezone(ZoneInfo(self.tz))

    @property
    def step_s(self) -> int:
        """About 60 points across the range, never under 10 s, rounded up to a round step
        (1 min, 5 min, 1 h, ...) so that regular scrapes fall evenly into the buckets."""
        raw = max(10, int((self.t_to - self.t_from).total_seconds() // 60))
        return next((s for s in NICE_STEPS if s >= raw), raw)


NICE_STEPS = (10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
RANGES = {"all data": None, "last 15 minutes": timedelta(minutes=15), "last hour": timedelta(hours=1),
          "last 6 hours": timedelta(hours=6), "last 24 hours": timedelta(days=1),
          "last 7 days": timedelta(days=7), "last 30 days": timedelta(days=30)}


@st.cache_resource
def zones() -> list[str]:
    """UTC first, then every IANA zone (the 'Time zone' selector)."""
    return ["UTC"] + sorted(z for z in available_timezones()
                            if "/" in z and not z.startswith(("Etc/", "SystemV/", "posix/", "right/")))


def empty_state() -> None:
    st.info(
        "No metrics yet. Point kvplan at a deployment:\n\n"
        "- live: `kvplan scrape --deployment NAME http://HOST:8000/metrics` (vLLM) and the LMCache "
        "server's `http://HOST:HTTP_PORT/metrics`, or schedule it with `kvplan collect --daemon`;\n"
        "- saved payloads: `kvplan import-metrics --deployment NAME --at 2026-11-30T10:00Z vllm.prom`;\n"
        "- the recorded demo: `kvplan demo --load-only --db kvplan.duckdb`."
    )


def through_navigation() -> None:
    """Make sure the page runs inside the main script's ``st.navigation``.

    Streamlit treats ``app/pages/`` as a (v1) pages directory until some session has run the
    main script: a deep link (``/cost``) opened first after a server start would run the page
    script alone (no navigation menu, no page config). Switch Streamlit to navigation mode and
    rerun, which goes through the main script to the same page."""
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def selection() -> Selection | None:
    """Sidebar selectors shared by all pages (kept in session state across pages)."""
    through_navigation()
    path = str(settings().db)
    if not db().path.exists():
        st.error(f"{path}: no such database")
        empty_state()
        return None
    deps = deployments(path)
    if not deps:
        empty_state()
        return None
    names = [d["deployment"] for d in deps]
    sb = st.sidebar
    name = sb.selectbox("Deployment", names, key="deployment")
    dep = next(d for d in deps if d["deployment"] == name)
    model_opts = ["all models"] + model_names(path, name)
    model_name = sb.selectbox("Model", model_opts, key="model_name")
    rng = sb.selectbox("Time range", list(RANGES), key="range")
    tz = sb.selectbox("Time zone", zones(), key="tz",
                      help="The zone of the time axes and captions (24-hour clock). Stored data is UTC.")
    first, last = dep["first_ts"], dep["last_ts"]
    span = RANGES[rng]
    t_from = first if span is None else max(last - span, first)
    chunks = f", {dep['chunks']} Prometheus chunks ({dep['failed_chunks']} failed)" if dep["chunks"] else ""
    sb.caption(f"Data: {first:%Y-%m-%d %H:%M} .. {last:%Y-%m-%d %H:%M} UTC, {dep['scrapes']} scrapes "
               f"({dep['failed']} failed){chunks}. Ranges end at the last data point.")
    return Selection(name, None if model_name == "all models" else model_name, t_from, last, tz)


def caption(sel: Selection, note: str = "") -> None:
    """The window every number on the page is about."""
    st.caption(f"{sel.deployment} · {sel.model_name or 'all models'} · {sel.local(sel.t_from):%Y-%m-%d %H:%M} .. "
               f"{sel.local(sel.t_to):%Y-%m-%d %H:%M} {sel.tz}" + (f" · {note}" if note else ""))


def timeline(sel: Selection, step_s: int) -> Timeline:
    """How the page's time charts are drawn: the picked zone, the bucket width, the
    window's recorded gaps (failed scrapes, Prometheus gaps)."""
    from .gaps import timeline as tl

    return view(tl, sel.deployment, sel.t_from, sel.t_to, step_s, sel.tz)


def badge(decision: Decision) -> None:
    """The verdict as a coloured badge and its one-sentence reason."""
    from .report.fmt import BADGE_COLORS

    st.markdown(f"#### :{BADGE_COLORS[decision.kind]}-badge[{decision.kind}] {decision.reason}")


def tier_decisions(p: PlanResult) -> None:
    """One decision per cache tier (vLLM's prefix cache: free; LMCache: on its margin), each
    with its monthly benefit and reason (Overview and Cost pages; the report shows the same)."""
    from .report import fmt

    tiers = p.decision_by_tier
    if not tiers:
        return
    c = st.columns(2)
    for i, key in enumerate((Tier.DEVICE, Tier.LMCACHE)):
        t = tiers.get(key)
        if t is None:
            continue
        c[i].metric(f"{t.label} decision", t.kind or "not in this window",
                    delta=None if t.monthly_benefit_usd is None else f"{fmt.usd(t.monthly_benefit_usd)}/month",
                    delta_color="off", help=t.reason)
    st.caption(p.headline)


def prefill_summary(p: PlanResult) -> None:
    """What the cache saved by tier (vLLM's prefix cache: free; LMCache: net, what the decision
    weighs), $ per 1M prompt/output tokens with and without reuse, and the cost model the
    saving rests on (Overview and Cost pages; the report shows the same)."""
    from ..models.decision.plan import tier_attribution
    from .report import fmt

    rows = {r["key"]: r for r in tier_attribution(p)}
    c = st.columns(4)
    for i, key in enumerate((Tier.DEVICE, Tier.LMCACHE)):
        r = rows.get(key)
        label = "vLLM cache saves, GPU-h/mo" if key == Tier.DEVICE else "LMCache adds (net), GPU-h/mo"
        c[i].metric(label, "n/a" if r is None else fmt.number(r["gpu_hours_per_month"]),
                    help=None if r is None else (f"{r['tier']}: {r['note']}; band "
                                                 f"{fmt.number(r['low'])}..{fmt.number(r['high'])} GPU-h/month, "
                                                 f"{fmt.usd(r['usd_per_month'])}/month; {r['source']}."))
    c[2].metric("$/1M prompt, with / without",
                f"{fmt.usd_cents(p.usd_per_1m_prompt_tokens_with_reuse)} / "
                f"{fmt.usd_cents(p.usd_per_1m_prompt_tokens_without_reuse)}",
                help="Prefill GPU cost per million prompt tokens at the price book's GPU-hour, with reuse (as the "
                     "window ran) and without (had nothing been cached). Compare with API prices per 1M input tokens.")
    c[3].metric("$/1M output tokens", fmt.usd_cents(p.usd_per_1m_output_tokens_with_reuse),
                help="Decode GPU time (engine busy time - prefill) per million output tokens; reuse does not "
                "change it.")
    st.caption(fmt.cost_model_line(p))


def chart(c: AltairChart) -> None:
    """An Altair chart across the page; its height is the plot's (legend and axes added),
    not squeezed into it as Streamlit's default autosize 'fit' would."""
    import altair as alt

    st.altair_chart(c.properties(autosize=alt.AutoSizeParams(type="fit-x", contains="padding")), width="stretch")


@st.cache_resource(max_entries=8, show_spinner=False)
def report(path: str, deployment: str, month: str, model_name: str | None, version: tuple) -> tuple[str, dict]:
    """(HTML, headline numbers) of one capacity report, built once per data version (the same
    document ``kvplan report`` writes). ``prewarm_reports`` fills it in the background."""
    from . import report as rep
    from .report import fmt

    d = rep.build(db(), deployment, month, model_name=model_name, cfg=cfg(deployment))  # one snapshot
    s, p = d.overview.window.stats, d.overview.plan
    numbers = {"Decision": p.decision.kind, "Monthly benefit": fmt.usd(p.monthly_benefit_usd),
               "Prefix-cache hit rate": fmt.pct(s.prefix_cache_hit_rate), "TTFT p50": fmt.quantile(s.ttft_p50),
               "TTFT p99": fmt.quantile(s.ttft_p99), "Requests": fmt.count(s.requests)}
    return rep.render_html(d), numbers


def report_version(deployment: str) -> tuple:
    """What a report depends on: any write to the database, and the deployment's settings."""
    return (db().data_version(), cfg(deployment))


def prewarm_reports() -> None:
    """Build the newest month's report of every deployment in a background thread, once per
    data version, so the Report page (the slowest: five charts through vl-convert) opens from
    the cache. Errors are logged, never shown: the page builds the report itself if needed."""
    import logging
    import threading

    from .data.store import data_months

    path = str(settings().db)
    if not Path(path).exists():  # before db(), which refuses a missing file: the pages say so, and the
        return                   # Prompts page needs no database at all
    key = db().data_version()
    if _prewarmed.get(path) == key:
        return
    _prewarmed[path] = key

    def run():
        try:
            for d in deployments_with_data(db()):
                months = data_months(db(), d["deployment"])
                if months:
                    report(path, d["deployment"], months[0], None, report_version(d["deployment"]))
        except Exception:  # the page will say what is wrong when it is opened
            logging.getLogger("kvplan.dashboard").exception("report prewarm failed")

    threading.Thread(target=run, name="kvplan-report-prewarm", daemon=True).start()


_prewarmed: dict[str, tuple] = {}
