"""Deployments, price books, fleet size, month windows and gauge rollups in DuckDB.

Reads take a ``source`` (``Database`` or ``Snapshot``); the writers (``save_pricebook``,
``save_facts``, ``rollup_gauges_day``) take the ``Database`` and run one short write
transaction each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime

from ...models.core.errors import KvplanError
from ...models.core.timeutil import DAY, aware_utc, month_start, next_month
from ...models.inputs.deployment import DeploymentFacts
from ...models.inputs.planning import PlanningInputs, prices_from_table
from ...models.inputs.pricebook import PriceBook
from ...models.inputs.settings import DeploymentSettings as DeploymentSettings
from ...models.inputs.settings import deployment_settings as deployment_settings
from ...models.metrics.spans import as_instant
from ...sql.db import Database, Source


def deployments_with_data(source: Source) -> list[dict]:
    """Deployments with data (direct scrapes or Prometheus chunks); ``first_ts``/``last_ts``
    aware UTC."""
    out = []
    for d in source.fetch("dashboard_deployments"):
        if d["last_ts"] is None:
            continue
        out.append(dict(d, first_ts=aware_utc(d["first_ts"]), last_ts=aware_utc(d["last_ts"])))
    return out


def require_deployment(source: Source, deployment: str) -> None:
    """``KvplanError`` listing the known names when the database holds no such deployment."""
    known = set(deployment_names(source))
    if deployment not in known:
        raise KvplanError(f"no deployment {deployment!r} in {source.path} "
                          f"(known: {', '.join(sorted(known)) or 'none'})", source="--deployment")


# -- price book ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prices:
    """The price book and planning inputs in force for a deployment, and where they came from."""

    pricebook: PriceBook
    planning: PlanningInputs
    origin: str


def load_pricebook(source: Source, deployment: str, defaults: dict | None = None) -> Prices:
    """The deployment's saved price book, else the saved default ('*'), else ``defaults``
    (the config file's ``[prices]`` table: price-book and planning fields), else the
    documented defaults. A saved row that no longer validates is an error naming it."""
    rows = source.fetch("get_pricebook", deployment=deployment)
    if not rows:
        if defaults:
            pb, pl = split_prices(defaults, "[prices]")
            return Prices(pb, pl, "config file [prices]")
        return Prices(PriceBook(), PlanningInputs(), "defaults")
    r = rows[0]
    where = f"price book saved for {r['deployment']!r}"
    planning = json.loads(r["planning"])
    planning.pop("current_gpus", None)  # before 2026-12 the fleet size was a planning input
    try:
        pb, pl = PriceBook.from_dict(json.loads(r["pricebook"])), PlanningInputs.from_dict(planning)
    except KvplanError as e:
        raise KvplanError(f"{e} (re-save it on the Cost & decision page)", source=where) from None
    return Prices(pb, pl, f"saved for {r['deployment']!r} at {r['updated_at']:%Y-%m-%d %H:%M} UTC")


def split_prices(values: dict, where: str) -> tuple[PriceBook, PlanningInputs]:
    """The config's ``[prices]`` as a price book and planning inputs; errors name ``where``."""
    try:
        return prices_from_table(values)
    except KvplanError as e:
        raise KvplanError(str(e), source=where) from None


def save_pricebook(db: Database, deployment: str, pricebook: PriceBook, planning: PlanningInputs) -> None:
    with db.write() as con:
        Database.run(con, "put_pricebook", deployment=deployment, pricebook=json.dumps(pricebook.to_dict()),
                     planning=json.dumps(planning.to_dict()))


def save_price_form(db: Database, deployment: str, pricebook_values: dict, planning_values: dict) -> Prices:
    """Validate the price-book form (``KvplanError`` naming the field) and save it."""
    pb, pl = PriceBook.from_dict(pricebook_values), PlanningInputs.from_dict(planning_values)
    save_pricebook(db, deployment, pb, pl)
    return Prices(pb, pl, "saved")


# -- deployment facts (what the metrics cannot know) ---------------------------------------------
@dataclass(frozen=True)
class Facts:
    """The deployment facts in force for a deployment, and where they came from."""

    facts: DeploymentFacts
    origin: str


def load_facts(source: Source, deployment: str, cfg: DeploymentSettings | None = None) -> Facts:
    """The facts saved for ``deployment`` on the dashboard, else the config's
    ``[deployments.facts]`` table (with ``gpus_per_engine`` as the tensor-parallel size when the
    table does not give the parallelism), else the defaults (one GPU per engine, no FLOP
    estimators). A saved row that no longer validates is an error naming it."""
    cfg = cfg or DeploymentSettings()
    rows = source.fetch("get_facts", deployment=deployment)
    if rows:
        r = rows[0]
        try:
            facts = DeploymentFacts.from_dict(json.loads(r["facts"]))
        except KvplanError as e:
            raise KvplanError(f"{e} (re-save them on the Cost & decision page)",
                              source=f"deployment facts saved for {deployment!r}") from None
        return Facts(facts, f"saved for {deployment!r} at {r['updated_at']:%Y-%m-%d %H:%M} UTC")
    return Facts(cfg.facts, cfg.facts_origin)


def save_facts(db: Database, deployment: str, values: dict) -> DeploymentFacts:
    """Validate the deployment-facts form (``KvplanError`` naming the field) and save it."""
    facts = DeploymentFacts.from_dict(values)
    with db.write() as con:
        Database.run(con, "put_facts", deployment=deployment, facts=json.dumps(facts.to_dict()))
    return facts


# -- windows of a month ---------------------------------------------------------------------------
def month_window(source: Source, deployment: str, month: str) -> tuple[datetime, datetime]:
    """[first, last] data point of ``deployment`` inside the UTC month 'YYYY-MM' (aware UTC).
    ``KvplanError`` when the month is malformed or holds no data (names what exists)."""
    start = month_start(month, "--month")
    end = next_month(start)
    deps = {d["deployment"]: d for d in deployments_with_data(source)}
    d = deps.get(deployment)
    if d is None:
        raise KvplanError(f"no deployment {deployment!r} with data in {source.path} "
                          f"(known: {', '.join(sorted(deps)) or 'none'})", source="--deployment")
    t_from, t_to = max(start, d["first_ts"]), min(end, d["last_ts"])
    if t_to <= t_from:
        raise KvplanError(f"deployment {deployment!r} has no data in {month} (data: "
                          f"{d['first_ts']:%Y-%m-%d %H:%M} .. {d['last_ts']:%Y-%m-%d %H:%M} UTC)", source="--month")
    return t_from, t_to


def data_months(source: Source, deployment: str) -> list[str]:
    """'YYYY-MM' of every month holding data of the deployment, newest first."""
    d = next((x for x in deployments_with_data(source) if x["deployment"] == deployment), None)
    if d is None:
        return []
    out, m = [], d["first_ts"].replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    while m <= d["last_ts"]:
        out.append(f"{m:%Y-%m}")
        m = next_month(m)
    return out[::-1]


# -- gauge rollups (the nightly job) --------------------------------------------------------------
def rollup_gauges_day(db: Database, deployment: str, day: date | datetime) -> int:
    """Summarise one UTC day of a deployment's gauges into ``gauge_rollups`` (replacing what
    was there). The nightly job calls it beside ``rollup_day``. Returns rows written."""
    d0 = as_instant(day)
    with db.write() as con:
        row = Database.run(con, "get_deployment_id", name=deployment).fetchone()
        if row is None:
            raise KvplanError(f"no deployment {deployment!r} in {db.path}", source="deployment")
        Database.run(con, "delete_gauge_rollups_day", deployment_id=row[0], day=d0)
        Database.run(con, "rollup_gauges_day", deployment_id=row[0], t_from=d0, t_to=d0 + DAY)
        return Database.scalar(con, "count_gauge_rollups_day", deployment_id=row[0], day=d0)


def deployment_names(source: Source) -> list[str]:
    """Every deployment the database knows (with data or not)."""
    return [r["deployment"] for r in source.fetch("deployments")]


def deployment_span(source: Source, deployment: str) -> tuple[float, float] | None:
    """The unix seconds of the deployment's first and last sample (None: no sample)."""
    rows = source.fetch("deployment_span", deployment=deployment)
    if not rows or rows[0]["t0"] is None:
        return None
    return float(rows[0]["t0"]), float(rows[0]["t1"])


def cache_config_rows(source: Source, deployment: str) -> list[dict]:
    """The deployment's ``vllm:cache_config_info`` series, newest first (``target``, ``labels`` as
    JSON text)."""
    return source.fetch("cache_config_info", deployment=deployment)
