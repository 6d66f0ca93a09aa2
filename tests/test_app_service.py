"""The dashboard's data layer (kvplan.app.data, kvplan.app.views) and the pure helpers under it
(kvplan.models.metrics.spans, kvplan.models.metrics.slo, kvplan.models.metrics.serving,
kvplan.models.metrics.runs): rollup-backed windows give the raw-sample numbers, SLO snapping,
topology, runs comparison, price-form validation."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.data import plan, store, window
from kvplan.app.views.collection import topology_view
from kvplan.app.views.runs import runs_view
from kvplan.models.core.errors import KvplanError
from kvplan.models.core.timeutil import DAY
from kvplan.models.inputs.planning import PLANNING_FIELDS, PlanningInputs
from kvplan.models.metrics import spans
from kvplan.models.metrics.runs import compare_runs
from kvplan.models.metrics.slo import slo_attainment
from kvplan.models.metrics.spans import plan_spans
from kvplan.models.metrics.window import TTFT, Increase
from kvplan.sql.db import Database
from tests.test_app_fixtures import DEPLOYMENT, hour, rollup, scenario_db
from tests.test_store_stats import CREATED, one, put

N = datetime(2026, 11, 1, tzinfo=UTC)


def d(day: int, h: float = 0) -> datetime:
    return N + timedelta(days=day - 1, hours=h)


# ---- how a window is split -------------------------------------------------------------------
def test_spans_without_rollups_are_one_raw_span():
    s = plan_spans([], d(1, 10), d(6, 5))
    assert s.rolled is None and s.raw == ((d(1, 10), d(1, 10), d(6, 5)),)


def test_spans_use_the_longest_run_of_whole_rolled_days_inside_the_window():
    # a rolled day looks back a day (EDGE_LOOKBACK) for each series' earlier point, so a run
    # begins at the first midnight at least a day after the window starts
    assert spans.EDGE_LOOKBACK == DAY
    days = [d(x).date() for x in (1, 2, 3, 4, 7)]  # day 7 is outside the windows below
    s = plan_spans(days, d(0, 10), d(6, 5))  # day 1 begins 14 h in: too soon; day 2 is the first
    assert s.rolled == (d(2), d(5))
    assert s.raw == ((d(0, 10), d(0, 10), d(2)), (d(4), d(5), d(6, 5)))  # the tail looks back a day
    s = plan_spans([d(x).date() for x in (2, 4, 5)], d(0, 10), d(6, 5))
    assert s.rolled == (d(4), d(6))
    assert plan_spans(days, d(2, 1), d(2, 23)).rolled is None  # no whole day inside
    s = plan_spans(days, d(2), d(5))  # aligned: day 2's straddling pairs begin before the window
    assert s.rolled == (d(3), d(5)) and s.raw == ((d(2), d(2), d(3)),)
    s = plan_spans(days, d(1, 1), d(5))  # day 2 begins 23 h in: read raw
    assert s.rolled == (d(3), d(5)) and s.raw == ((d(1, 1), d(1, 1), d(3)),)


# ---- rollups give the raw numbers -----------------------------------------------------------
def _irregular_history(db) -> None:
    """Scrapes every 50 minutes for 3.5 days starting 2026-11-30 10:00 (tests/test_store_stats
    time base), traffic changing every scrape, a server restart on day 2."""
    hits = queries = 0
    ttft = [0, 0, 0]
    created = CREATED
    restart = 40
    for i in range(101):
        if i == restart:  # the process restarted just before this scrape: counters from 0
            hits = queries = 0
            ttft = [0, 0, 0]
            created = (T + timedelta(minutes=50 * i - 10)).timestamp()
        q = 100 + 7 * (i % 11)
        queries += q
        hits += (i * 13) % q
        ttft = [ttft[0] + i % 3, ttft[1] + i % 3 + 2, ttft[2] + i % 3 + 3]
        put(db, 50 * i, one(hits, queries, ttft, created=created))


T = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """(raw db, the same db with its whole days rolled up)."""
    base = tmp_path_factory.mktemp("history")
    raw = Database(base / "raw.duckdb")
    raw.migrate()
    _irregular_history(raw)
    shutil.copy(raw.path, base / "rolled.duckdb")
    rolled = Database(base / "rolled.duckdb")
    for day in range(1, 4):
        rollup(rolled, "d", T.replace(hour=0) + timedelta(days=day))
    return raw, rolled


WINDOWS = [(T, T + timedelta(minutes=50 * 100)),                            # all data
           (T + timedelta(hours=7), T + timedelta(days=3, hours=1, minutes=13)),  # ragged both ends
           (T.replace(hour=0) + DAY, T.replace(hour=0) + 3 * DAY),           # day-aligned
           (T + timedelta(hours=20), T + timedelta(hours=44))]               # one day, rolled day inside?


@pytest.mark.parametrize("w", range(len(WINDOWS)))
def test_a_window_read_from_rollups_counts_what_the_raw_samples_count(history, w):
    raw, rolled = history
    t0, t1 = WINDOWS[w]
    ref = window.stats(raw, "d", t0, t1)
    win = window.load_window(rolled, "d", t0, t1)
    if t1 - t0 >= 2 * DAY:
        assert win.rolled_days >= 1, "a window this long must read whole days from the rollups"
    s = win.stats
    assert (s.prefix_cache_hits, s.prefix_cache_queries, s.requests) == \
        (ref.prefix_cache_hits, ref.prefix_cache_queries, ref.requests)
    assert s.ttft_p50_s == pytest.approx(ref.ttft_p50_s) and s.ttft_p99_s == pytest.approx(ref.ttft_p99_s)
    assert s.counter_resets == ref.counter_resets
    # and without rollups the hybrid reader is the raw reader
    assert window.load_window(raw, "d", t0, t1).stats.prefix_cache_hits == ref.prefix_cache_hits


def test_the_prefill_intervals_read_from_stored_days_are_the_raw_ones(tmp_path):
    # the plan prices a window and fits its cost model interval by interval; the nightly job
    # stores each day's intervals (prefill_rollups) so that a long window does not scan raw
    # samples. Read before the rollups (raw) and after (stored days, raw edges): the same intervals.
    import dataclasses
    import math

    from kvplan.app.data.prefill import prefill_intervals

    db = scenario_db(tmp_path, runs=False, collection=False)  # 2 nodes, hourly scrapes, 48 h
    windows = [(hour(-24), hour(48)), (hour(-24), hour(40)), (hour(3.5), hour(47))]
    raw = [prefill_intervals(db, DEPLOYMENT, a, b) for a, b in windows]
    assert all(len(r) > 40 for r in raw[:2]) and any(iv.requests > 0 and iv.prefill_seconds > 0 for iv in raw[0])
    for day in (0, 24):
        rollup(db, DEPLOYMENT, hour(day))
    with db.read() as con:
        stored = con.execute("SELECT day, intervals FROM prefill_rollup_days ORDER BY day").fetchall()
    assert [n for _, n in stored] == [sum(1 for iv in raw[0] if hour(d) < datetime.fromtimestamp(iv.t_end, UTC)
                                          <= hour(d + 24)) for d in (0, 24)]

    def close(u, v):
        if isinstance(u, tuple):
            return len(u) == len(v) and all(close(x, y) for x, y in zip(u, v, strict=True))
        if isinstance(u, float) and isinstance(v, float):
            return math.isclose(u, v, rel_tol=1e-12, abs_tol=1e-9)  # the sums' order, nothing else
        return u == v

    for (a, b), before in zip(windows, raw, strict=True):
        after = prefill_intervals(db, DEPLOYMENT, a, b)
        assert len(after) == len(before), (a, b)
        for x, y in zip(after, before, strict=True):
            assert close(dataclasses.astuple(x), dataclasses.astuple(y)), (x, y)
    # the stored days are what the first two windows read: doubled there, doubled in the answer
    with db.write() as con:
        con.execute("UPDATE prefill_rollups SET requests = 2 * requests")
    total = [sum(iv.requests for iv in prefill_intervals(db, DEPLOYMENT, a, b)) for a, b in windows]
    before = [sum(iv.requests for iv in r) for r in raw]
    assert total[0] == pytest.approx(2 * before[0]) and before[1] < total[1] < 2 * before[1]
    assert total[2] == pytest.approx(before[2])  # no whole day a day after its start: raw


def test_daily_chart_points_from_rollups_equal_the_raw_ones(history):
    raw, rolled = history
    t0, t1 = WINDOWS[0]
    a = window.window_buckets(raw, "d", t0, t1, step_s=600)
    b = window.window_buckets(rolled, "d", t0, t1, step_s=600)
    assert [x.start for x in a] == [x.start for x in b] and len(a) == 4  # the 4 UTC days touched
    assert all(x.start.hour == 0 for x in b)
    for x, y in zip(a, b, strict=True):
        assert x.stats().prefix_cache_hits == y.stats().prefix_cache_hits
        assert x.stats().requests == y.stats().requests
    total = window.stats(raw, "d", t0, t1)
    assert sum(x.stats().prefix_cache_queries for x in b) == total.prefix_cache_queries


def test_short_windows_chart_raw_buckets_of_step_seconds(history):
    raw, _ = history
    pts = window.window_buckets(raw, "d", T, T + timedelta(hours=5), step_s=3000)
    assert [p.start - T for p in pts] == [timedelta(seconds=3000 * i) for i in range(6)]


def test_gauges_read_from_gauge_rollups_equal_raw(tmp_path, monkeypatch):
    raw = scenario_db(tmp_path)
    monkeypatch.setattr(spans, "DAILY_POINTS_FROM", DAY)
    before = window.gauge_points(raw, DEPLOYMENT, hour(0), hour(48), 600)
    assert store.rollup_gauges_day(raw, DEPLOYMENT, hour(0)) == 2 * 2 + 2 * 2 + 2 * 2
    after = window.gauge_points(raw, DEPLOYMENT, hour(0), hour(48), 600)
    def key(r):
        return (r["bucket"], r["target"], r["name"], r["labels"], r["engine"])
    assert [key(r) for r in before] == [key(r) for r in after]
    for x, y in zip(before, after, strict=True):
        assert (x["mean"], x["max"], x["last"]) == pytest.approx((y["mean"], y["max"], y["last"]))
    l1 = [r for r in after if r["name"] == "lmcache_mp_l1_usage_ratio" and r["bucket"] == hour(0)]
    # day 1: scrapes at hours 0..23, usage 0.1 + 0.02 x (h - 1) from hour 1 (0 at hour 0)
    assert l1[0]["max"] == pytest.approx(0.1 + 0.02 * 22) and l1[0]["n"] == 24


# ---- SLO attainment --------------------------------------------------------------------------
def ttft_rows(counts: dict[float, float]) -> list[Increase]:
    return [Increase(name=f"{TTFT}_bucket", increase=c, le=le) for le, c in counts.items()]


def test_slo_is_snapped_to_the_nearest_bucket_bound_and_says_so():
    rows = ttft_rows({0.1: 10, 0.25: 50, 0.5: 90, 1.0: 99, float("inf"): 100})
    s = slo_attainment(rows, 0.3)
    assert (s.bound_s, s.share, s.requests, s.snapped) == (0.25, 0.5, 100, True)
    assert "snapped to the nearest bound, 0.25 s" in s.note
    s = slo_attainment(rows, 0.5)
    assert (s.bound_s, s.share, s.snapped) == (0.5, 0.9, False) and "exact" in s.note
    assert slo_attainment(rows, 60).bound_s == 1.0
    assert slo_attainment([], 2.0).share is None


def test_tpot_slo_reads_the_tpot_histogram_not_the_ttft_one():
    from kvplan.models.metrics.catalog import TPOT
    from kvplan.models.metrics.slo import tpot_slo_attainment

    # the same window: TTFT all above 0.1 s, TPOT 80 of 100 requests at or under 0.1 s
    rows = ttft_rows({0.1: 0, 1.0: 100, float("inf"): 100}) + [
        Increase(name=f"{TPOT}_bucket", increase=c, le=le) for le, c in
        {0.05: 30, 0.075: 60, 0.1: 80, 0.15: 95, float("inf"): 100}.items()]
    s = tpot_slo_attainment(rows, 0.1)  # the default target: a bucket bound
    assert (s.bound_s, s.share, s.requests, s.snapped, s.metric) == (0.1, 0.8, 100, False, "TPOT")
    s = tpot_slo_attainment(rows, 0.06)  # nearest bound 0.05
    assert (s.bound_s, s.share, s.snapped) == (0.05, 0.3, True)
    assert s.note == "SLO 0.06 s is not a bucket bound of vLLM's TPOT histogram; snapped to the nearest bound, 0.05 s"
    assert tpot_slo_attainment(ttft_rows({1.0: 1, float("inf"): 1}), 0.1).note == "no TPOT histogram in this window"
    assert slo_attainment(rows, 0.1).share == 0.0  # TTFT: unchanged


# ---- deployments, engines, topology ----------------------------------------------------------
def test_engines_in_window_agree_with_the_raw_engines_query(tmp_path):
    db = scenario_db(tmp_path)
    for t0, t1 in ((hour(0), hour(48)), (hour(29), hour(31))):
        raw = db.fetch("engines", deployment=DEPLOYMENT, t_from=t0, t_to=t1)
        assert window.engines_in_window(db, DEPLOYMENT, t0, t1) == len(raw) == 4
    assert window.engines_in_window(db, DEPLOYMENT, hour(100), hour(101)) == 0


def test_topology_says_shared_or_private(tmp_path, db):
    t = topology_view(scenario_db(tmp_path), DEPLOYMENT, hour(0), hour(48))
    assert t.verdict.startswith("Shared cache: 2 LMCache multi-process server(s) serve 4 vLLM engine(s) on 2 server(s)")
    assert [(n["host"], n["vllm_servers"], n["engines"], n["lmcache_mp"], n["kv_connector"]) for n in t.nodes] == [
        ("node1", 1, 2, 1, True), ("node2", 1, 2, 1, True)]
    put(db, 0, one(0, 0, [0, 0, 0], engine="0") | one(0, 0, [0, 0, 0], engine="1"))
    t = topology_view(db, "d", datetime(2026, 1, 1), datetime(2027, 1, 1))
    assert t.verdict.startswith("Private caches: 2 vLLM engine(s) on 1 server(s)")
    assert t.nodes[0]["host"] == "unknown (imported payloads)"


def test_prometheus_only_deployments_are_listed(db):
    with db.write() as con:
        con.execute("INSERT INTO deployments (name) VALUES ('prom')")
        con.execute("INSERT INTO prom_chunks (deployment_id, t_from, t_to, step_s, selector, ok, error, n_series, "
                    "n_raw, n_increments, n_gauges) VALUES "
                    "(1, '2026-11-01 00:00', '2026-11-01 01:00', 60, 'job=\"x\"', true, NULL, 3, 10, 10, 0), "
                    "(1, '2026-11-01 01:00', '2026-11-01 02:00', 60, 'x', false, 'down', 0, 0, 0, 0)")
    (dep,) = store.deployments_with_data(db)
    assert (dep["deployment"], dep["first_ts"], dep["last_ts"], dep["chunks"], dep["failed_chunks"]) == (
        "prom", datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 1, 1, tzinfo=UTC), 1, 1)


def test_month_window_clips_to_the_data_and_names_what_exists(tmp_path):
    db = scenario_db(tmp_path)
    assert store.month_window(db, DEPLOYMENT, "2026-11") == (hour(0), hour(48))
    assert store.data_months(db, DEPLOYMENT) == ["2026-11"]
    with pytest.raises(KvplanError, match=r"no data in 2026-10 \(data: 2026-11-02 00:00 \.\. 2026-11-04 00:00 UTC\)"):
        store.month_window(db, DEPLOYMENT, "2026-10")
    with pytest.raises(KvplanError, match="--month: '11/2026' is not a month like 2026-11"):
        store.month_window(db, DEPLOYMENT, "11/2026")
    with pytest.raises(KvplanError, match=r"no deployment 'x'.*known: prod"):
        store.month_window(db, "x", "2026-11")


# ---- runs --------------------------------------------------------------------------------------
def test_compare_runs_reproduces_the_articles_ratios():
    unique = {"wall_s": 16.1, "ttft_p50_s": 9.652, "ttft_p99_s": None, "tokens_per_s_p50": 15.9,
              "aggregate_tokens_per_s": 199, "requests_with_cache_share": None, "failed": 0}
    shared = {"wall_s": 5.2, "ttft_p50_s": 3.773, "ttft_p99_s": None, "tokens_per_s_p50": 73.6,
              "aggregate_tokens_per_s": 740, "requests_with_cache_share": None, "failed": 0}
    rows = {r["metric"]: r for r in compare_runs(unique, shared)}
    got = {k: round(rows[k]["factor"], 1) for k in ("total time", "TTFT p50", "tok/s p50 per user",
                                                     "aggregate throughput")}
    assert got == {"total time": 3.1, "TTFT p50": 2.6, "tok/s p50 per user": 4.6, "aggregate throughput": 3.7}
    assert rows["TTFT p99"]["factor"] is None and rows["failed requests"]["factor"] is None


def test_runs_view_request_weighted_shares_and_cpu_flag(tmp_path):
    v = runs_view(scenario_db(tmp_path), DEPLOYMENT)
    by = {r["label"]: r for r in v.runs}
    assert by["shared prefix"]["requests_with_cache_share"] == 1.0
    assert by["shared prefix"]["cached_token_share"] == pytest.approx(0.896)
    assert by["unique sessions"]["requests_with_cache_share"] == 0.0
    assert all(r["cpu_scale"] for r in v.runs)
    a, b = v.default_pair()
    assert (a["scenario"], b["scenario"]) == ("unique", "shared_prefix")


# ---- the price-book form ------------------------------------------------------------------------
def test_planning_fields_cover_and_document_every_planning_input():
    from dataclasses import fields

    assert [s.name for s in PLANNING_FIELDS] == [f.name for f in fields(PlanningInputs)]
    assert all(s.help for s in PLANNING_FIELDS)
    assert {s.name for s in PLANNING_FIELDS if not s.unit} == {"realisation", "growth_source"}  # choices
    # every number has an upper bound: no form value can hang a plan
    assert all(s.maximum is not None for s in PLANNING_FIELDS if s.kind in ("int", "float"))


@pytest.mark.parametrize("values,message", [
    ({"horizon_months": 0}, r"PlanningInputs.horizon_months: must be >= 1 and <= 120 months; got 0"),
    ({"horizon_months": 10_000_000}, r"PlanningInputs.horizon_months: must be >= 1 and <= 120 months"),
    ({"horizon_months": 1.5}, "PlanningInputs.horizon_months: expected a whole number"),
    ({"prefill_capacity_share": 0.0}, r"PlanningInputs.prefill_capacity_share: must be > 0 and <= 1"),
    ({"headroom_fill_fraction": 1.5}, r"PlanningInputs.headroom_fill_fraction: must be >= 0 and <= 1"),
    ({"growth_rate_per_month": 1e6}, r"PlanningInputs.growth_rate_per_month: must be >= -0.99 and <= 2"),
    ({"ttft_p99_slo_seconds": float("nan")}, "PlanningInputs.ttft_p99_slo_seconds: expected a finite number"),
    ({"tpot_p99_slo_seconds": 0}, r"PlanningInputs.tpot_p99_slo_seconds: must be > 0 and <= 3600 s"),
    ({"realisation": "sell"}, "PlanningInputs.realisation: must be one of"),
    ({"colour": 1}, r"PlanningInputs.colour: unknown field \(known: ttft_p99_slo_seconds"),
    ({"current_gpus": 8}, r"PlanningInputs.current_gpus: unknown field"),  # a deployment fact now
])
def test_planning_form_errors_name_the_field(values, message):
    with pytest.raises(KvplanError, match=message):
        PlanningInputs.from_dict(values)


def test_planning_form_accepts_what_widgets_return():
    p = PlanningInputs.from_dict({"horizon_months": 12.0, "growth_rate_per_month": 0})
    assert (p.horizon_months, p.growth_rate_per_month) == (12, 0.0)
    assert isinstance(p.horizon_months, int) and isinstance(p.growth_rate_per_month, float)


def test_save_price_form_saves_only_valid_books(tmp_path):
    db = scenario_db(tmp_path)
    with pytest.raises(KvplanError, match="PriceBook.gpus_per_node"):
        store.save_price_form(db, DEPLOYMENT, {"gpus_per_node": 0}, {})
    assert store.load_pricebook(db, DEPLOYMENT).origin == "defaults"
    store.save_price_form(db, DEPLOYMENT, {"usd_per_gpu_hour": 4}, {"ttft_p99_slo_seconds": 1.0})
    got = store.load_pricebook(db, DEPLOYMENT)
    assert (got.pricebook.usd_per_gpu_hour, got.planning.ttft_p99_slo_seconds) == (4.0, 1.0)
    assert got.origin.startswith("saved for 'prod'")


def test_config_prices_are_the_default_book_and_a_saved_one_wins(tmp_path):
    db = scenario_db(tmp_path)
    got = store.load_pricebook(db, DEPLOYMENT, {"usd_per_gpu_hour": 7.5, "horizon_months": 6})
    assert (got.pricebook.usd_per_gpu_hour, got.planning.horizon_months, got.origin) == (7.5, 6, "config file [prices]")
    with pytest.raises(KvplanError, match=r"\[prices\]: PriceBook.usd_per_gpu_hour: must be >= 0"):
        store.load_pricebook(db, DEPLOYMENT, {"usd_per_gpu_hour": -1})
    store.save_price_form(db, DEPLOYMENT, {"usd_per_gpu_hour": 4}, {})
    assert store.load_pricebook(db, DEPLOYMENT, {"usd_per_gpu_hour": 7.5}).pricebook.usd_per_gpu_hour == 4.0


def test_a_book_saved_with_the_old_current_gpus_field_still_loads(tmp_path):

    db = scenario_db(tmp_path)
    with db.write() as con:
        Database.run(con, "put_pricebook", deployment=DEPLOYMENT, pricebook=json.dumps({"usd_per_gpu_hour": 3.0}),
                     planning=json.dumps({"horizon_months": 12, "current_gpus": 8}))
    got = store.load_pricebook(db, DEPLOYMENT)
    assert (got.pricebook.usd_per_gpu_hour, got.planning.horizon_months) == (3.0, 12)


@pytest.mark.parametrize("kwargs,gpus,origin", [
    ({}, 4, "vLLM engines seen in the window (4) x 1 GPU(s) per engine"),
    ({"gpus_per_engine": 8}, 32, "vLLM engines seen in the window (4) x 8 GPU(s) per engine"),
    ({"configured_gpus": 16, "gpus_per_engine": 8}, 16, "config deployments.N.gpus"),
    ({"configured_gpus": 16, "override": 3}, 3, "given on the command line (--gpus)"),
])
def test_one_rule_decides_the_fleet_size(kwargs, gpus, origin):
    f = plan.fleet(4, **kwargs)
    assert (f.gpus, f.origin) == (gpus, origin)


def test_saved_facts_override_the_config_and_scale_the_plan_by_gpus_per_engine(tmp_path):
    """Tensor parallel 2: every engine-second is 2 GPU-seconds. The scenario's 48 h (hand-worked,
    tests/test_app_fixtures.py): LMCache supplied 400 requests/h x 48 h x 200 tokens at 50 us =
    192 engine-s; vLLM's own cache 400 x 24 x (1000 + 1600) x 50 us = 1,248 engine-s."""
    from kvplan.app.data.plan import plan_range
    from kvplan.app.data.store import DeploymentSettings, load_facts, save_facts
    from kvplan.models.inputs.deployment import DeploymentFacts

    db = scenario_db(tmp_path)
    cfg = DeploymentSettings(facts=DeploymentFacts(tensor_parallel=4), facts_origin="config deployments.0.facts")
    assert load_facts(db, DEPLOYMENT, cfg).facts.tensor_parallel == 4
    one = plan_range(db, DEPLOYMENT, hour(0), hour(48)).to_dict()
    assert one["saved_by_tier"]["lmcache"]["value"] == pytest.approx(192.0)
    assert one["saved_by_tier"]["device"]["value"] == pytest.approx(1248.0)
    assert one["current_gpus"] == 4
    with pytest.raises(KvplanError, match="DeploymentFacts.tensor_parallel"):
        save_facts(db, DEPLOYMENT, {"tensor_parallel": 0})
    save_facts(db, DEPLOYMENT, {"tensor_parallel": 2})
    got = load_facts(db, DEPLOYMENT, cfg)
    assert got.facts.tensor_parallel == 2 and got.origin.startswith(f"saved for {DEPLOYMENT!r}")
    two = plan_range(db, DEPLOYMENT, hour(0), hour(48), cfg=cfg).to_dict()
    assert two["current_gpus"] == 8  # 4 engines x 2 GPUs (saved facts beat the config's 4)
    assert two["saved_by_tier"]["lmcache"]["value"] == pytest.approx(384.0)
    assert two["saved_by_tier"]["device"]["value"] == pytest.approx(2496.0)
    assert two["saved_prefill_gpu_seconds"] == pytest.approx(2 * one["saved_prefill_gpu_seconds"])
    assert any("deployment facts: saved for" in a for a in two["assumptions"])


def test_kvplan_plan_prints_tiers_cost_per_token_and_the_json_keys(tmp_path):
    """The issue's JSON keys, and the human output's tier lines, on the scenario (hand-worked in
    tests/test_app_pages.py: 5.28 and 0.81 GPU-h/month; 48 h covered of the 48 h asked)."""



    db = scenario_db(tmp_path)
    args = ["plan", "--deployment", DEPLOYMENT, "--from", hour(0).isoformat(), "--to", hour(48).isoformat(),
            "--db", str(db.path)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "saved by vLLM prefix cache: 5.28 GPU-h/month" in r.output
    assert "saved by LMCache, net of its overhead: 0.81 GPU-h/month" in r.output
    assert "$ per 1M prompt tokens: $0.02 with reuse, $0.05 without" in r.output
    d = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert d["window_seconds"] == 48 * 3600 and d["coverage"] == 1.0
    assert d["saved_prefill_gpu_seconds"] == pytest.approx(192.0 + 1248.0)  # device + LMCache, engine-s x 1 GPU
    assert d["prefill_cost_model"]["parts"]["per_token"]["value"] == pytest.approx(5e-5)
    assert d["prefill_cost_model"]["parts"]["fixed"]["value"] == pytest.approx(0.035)
    assert set(d["saved_by_tier"]) == {"device", "lmcache"}
    assert d["peak_hour_requests_per_s"] == pytest.approx(400 / 3600)  # 4 engines x 100 requests every hour
    # the capacity keys: one GPU holds the busiest hour either way; both paths give back 3 GPUs and buy
    # nothing; 1 GPU x $2.5 x 730.56 h x 24 months = $43,833.60, + $400 ops x 24 with reuse
    assert (d["capacity_method"], d["gpus_per_replica"]) == ("queueing_fallback", 1)
    assert d["purchase_schedule_without_reuse"] == d["purchase_schedule_with_reuse"] == []
    assert d["horizon_cost_usd"] == pytest.approx({"baseline": 43_833.6, "reuse": 53_433.6})
    assert d["flip_probability"] == 0.0 and d["decision"] == "NOT_WORTH_IT"
    assert d["usd_per_1m_prompt_tokens_with_reuse"] < d["usd_per_1m_prompt_tokens_without_reuse"]
    # a 30-day range over the same 48 h prices the same 48 h (never diluted)
    wide = json.loads(CliRunner().invoke(app, ["plan", "--deployment", DEPLOYMENT, "--from", hour(0).isoformat(),
                                                "--to", hour(30 * 24).isoformat(), "--db", str(db.path),
                                                "--json"]).stdout)
    assert wide["window_seconds"] == 48 * 3600 and wide["coverage"] == pytest.approx(48 / 720)
    assert wide["saved_prefill_gpu_seconds"] == pytest.approx(d["saved_prefill_gpu_seconds"])
    assert wide["monthly_benefit_usd"] == pytest.approx(d["monthly_benefit_usd"])


def test_growth_from_the_measured_trend_needs_whole_days(tmp_path):
    """The scenario holds 2 whole days: no trend, the typed growth stays and the plan says why."""
    from kvplan.app.data.plan import plan_range

    db = scenario_db(tmp_path)
    store.save_pricebook(db, DEPLOYMENT, store.PriceBook(), PlanningInputs(growth_source="measured_trend",
                                                                          growth_rate_per_month=0.05))
    p = plan_range(db, DEPLOYMENT, hour(0), hour(48))
    assert p.inputs.planning.growth_rate_per_month == 0.05
    assert any("growth: +5.0%/month from the planning inputs (no measured trend: it needs 14 whole days" in a
               for a in p.assumptions)
    assert window.daily_requests(db, DEPLOYMENT, hour(0), hour(48)) == [(0.0, 9600.0), (1.0, 9600.0)]


# -- hostile or careless inputs --------------------------------------------------------------
def test_form_refuses_huge_planning_values(db):
    from kvplan.app.data.store import save_price_form

    with pytest.raises(Exception) as e:
        save_price_form(db, "d", {}, {"horizon_months": 10_000_000})
    assert "horizon_months" in str(e.value)
