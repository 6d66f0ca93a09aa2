"""Dashboard pages through Streamlit's AppTest, on real DuckDB files built from exposition
text through the real parser and store; assertions are on content (numbers, badges,
warnings, chart data), not on 'no exception'. The scenario and its hand-worked numbers are
in tests/test_app_fixtures.py."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from kvplan.app.data.store import load_pricebook, save_pricebook
from kvplan.app.report import fmt
from kvplan.app.views.runs import runs_view
from kvplan.models.inputs.planning import PlanningInputs
from kvplan.models.inputs.pricebook import PriceBook
from tests.test_app_fixtures import DEPLOYMENT, MEASURED_ON, hour, scenario_db, scenario_expected, scenario_plan
from tests.test_store_stats import one, put

APP = str(Path(__file__).resolve().parents[1] / "app" / "streamlit_app.py")
PAGES = ["overview", "cache", "latency", "cost", "runs", "collection", "report"]
EXP = scenario_expected()


def run_app(monkeypatch, db_path, page: str = "overview") -> AppTest:
    monkeypatch.setenv("KVPLAN_DB", str(db_path))
    t = AppTest.from_file(APP, default_timeout=120)
    if page != "overview":
        t.switch_page(f"pages/{page}.py")
    t.run()
    assert not t.exception, t.exception
    return t


def metrics(t: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in t.metric}


def charts(t: AppTest) -> dict[str, pd.DataFrame]:
    """Every Altair chart on the page: its title -> the data it plots (all layers)."""
    out = {}
    for c in t.get("vega_lite_chart"):
        spec = json.loads(c.proto.spec)
        frames = [pa.ipc.open_stream(io.BytesIO(d.data.data)).read_all().to_pandas() for d in c.proto.datasets]
        title = spec.get("title")
        title = title.get("text") if isinstance(title, dict) else title
        out[title] = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return out


def chart(t: AppTest, starts: str) -> pd.DataFrame:
    found = [df for title, df in charts(t).items() if title and title.startswith(starts)]
    assert found, f"no chart titled {starts!r} in {list(charts(t))}"
    return found[0]


@pytest.fixture
def scen(tmp_path):
    return scenario_db(tmp_path)


# ---- small hand-built windows (tests/test_store_stats.py helpers) ---------------------------
def test_overview_shows_window_numbers(db, monkeypatch):
    put(db, 0, one(0, 0, [0, 0, 0]))
    put(db, 1, one(10, 100, [2, 4, 4]))
    put(db, 2, one(70, 200, [4, 9, 10]))
    t = run_app(monkeypatch, db.path)
    m = metrics(t)
    assert m["Prefix-cache hit rate"] == "35.0%"
    assert m["Requests"] == "10"
    # over all data: buckets 0.1:4, 1.0:9, +Inf:10 -> p50 rank 5 -> 0.1 + 0.9 * 1/5 = 0.28 s
    assert m["TTFT p50"] == "280 ms"
    assert m["TTFT p99"].endswith("(≥, in +Inf bucket)")
    assert any("no upper bound" in w.value for w in t.warning)
    assert m["LMCache hit rate (external)"] == "not reported"
    # two minutes and ten requests: not enough to price anything
    assert any(":orange-badge[NEED_DATA]" in md.value for md in t.markdown)
    assert m["Monthly benefit"] == "n/a"


def test_overview_empty_database_says_what_to_do(db, monkeypatch):
    t = run_app(monkeypatch, db.path)
    assert any("kvplan scrape" in i.value for i in t.info)
    assert not t.metric


@pytest.mark.parametrize("page", PAGES)
def test_every_page_has_the_empty_state(db, monkeypatch, page):
    t = run_app(monkeypatch, db.path, page)
    assert any("kvplan import-metrics" in i.value for i in t.info)
    assert not t.metric and not t.get("vega_lite_chart")


def test_missing_database_is_an_error_not_a_traceback(tmp_path, monkeypatch):
    t = run_app(monkeypatch, tmp_path / "nope.duckdb")
    assert any("no such database" in e.value for e in t.error)


def test_model_selector_filters(db, monkeypatch):
    put(db, 0, one(0, 0, [0, 0, 0], model_name="a") | one(0, 0, [0, 0, 0], model_name="b"))
    put(db, 1, one(10, 100, [1, 1, 1], model_name="a") | one(0, 100, [1, 1, 1], model_name="b"))
    t = run_app(monkeypatch, db.path)
    assert metrics(t)["Prefix-cache hit rate"] == "5.0%"
    t.sidebar.selectbox(key="model_name").select("b").run()
    assert metrics(t)["Prefix-cache hit rate"] == "0.0%"


def test_a_bad_saved_price_book_is_an_error_naming_the_field(scen, monkeypatch):
    with scen.write() as con:
        con.execute("INSERT INTO pricebooks VALUES ('prod', '{\"usd_per_gpu_hour\": -3}', '{}', current_timestamp)")
    t = run_app(monkeypatch, scen.path)
    assert any("PriceBook.usd_per_gpu_hour" in e.value for e in t.error)


# ---- the scenario: two nodes, two days -------------------------------------------------------
def test_overview_numbers_plan_and_badge(scen, monkeypatch):
    t = run_app(monkeypatch, scen.path)
    m = metrics(t)
    assert m["Prefix-cache hit rate"] == EXP["hit_all"]
    assert m["LMCache hit rate (external)"] == EXP["external_all"]
    assert (m["TTFT p50"], m["TTFT p99"]) == (EXP["ttft_p50"], EXP["ttft_p99"])
    assert m["Requests"] == EXP["requests_all"]
    assert m["Hit rate (all tiers)"] == "75.0%"  # (1000 + 200 and 1600 + 200 of 2000) / 2
    assert m["GPUs"] == "4"
    # the page's plan equals the plan of the traffic as built, worked out by hand (fixtures)
    ref = scenario_plan(0, 48)
    assert m["Monthly benefit"] == fmt.usd(ref.monthly_benefit_usd)
    assert m["Benefit band"] == fmt.usd_band(ref.monthly_benefit_low_usd, ref.monthly_benefit_high_usd)
    badge = [md.value for md in t.markdown if "-badge[" in md.value]
    assert badge == [f"#### :{fmt.BADGE_COLORS[ref.decision.kind]}-badge[{ref.decision.kind}] {ref.decision.reason}"]
    # p99 0.475 s vs the default 2 s target
    assert [x.delta for x in t.metric if x.label == "TTFT p99"] == ["-1.525 s vs 2 s SLO"]


def test_overview_time_range_changes_the_numbers(scen, monkeypatch):
    t = run_app(monkeypatch, scen.path)
    before = metrics(t)["Monthly benefit"]
    t.sidebar.selectbox(key="range").select("last 24 hours").run()
    m = metrics(t)
    assert m["Prefix-cache hit rate"] == EXP["hit_day2"]
    assert m["LMCache hit rate (external)"] == EXP["external_day2"]
    assert m["Requests"] == EXP["requests_day2"]
    assert m["Monthly benefit"] == fmt.usd(scenario_plan(24, 48).monthly_benefit_usd)
    # LMCache's part is all the plan prices and it is the same both days (200 tokens per request
    # at 50 us/token), so the benefit stays; vLLM's own (free) prefix cache saved more on day 2:
    # 400 requests/h x 1600 device tokens x 50 us = 32 GPU-s/h; month = 730.56 h -> 6.49 GPU-h
    assert m["Monthly benefit"] == before
    assert m["vLLM cache saves, GPU-h/mo"] == "6.49"
    assert m["LMCache adds (net), GPU-h/mo"] == "0.81"  # 400 x 200 x 50 us x 730.56 / 3600


def test_overview_tiers_cost_per_token_and_cost_model(scen, monkeypatch):
    """Hand-worked from the scenario (tests/test_app_fixtures.py): prefill = 0.035 s/request +
    50 us x computed token, 4 engines x 100 requests/h, 48 h."""
    t = run_app(monkeypatch, scen.path)
    m = metrics(t)
    # device tokens: day 1 1000, day 2 1600 per request on average -> 400 x 24 x 2600 x 50 us
    # = 1,248 GPU-s in 48 h -> x 730.56 / 48 / 3600 = 5.28 GPU-h/month
    assert m["vLLM cache saves, GPU-h/mo"] == "5.28"
    assert m["LMCache adds (net), GPU-h/mo"] == "0.81"
    # $ per 1M prompt tokens at the default price book's GPU-hour: prefill GPU-s per prompt token
    # with reuse (0.035 s / 2000 tokens + 50 us x computed share (2000 - 1300 - 200) / 2000) and
    # without (0.035 / 2000 + 50 us)
    usd_s = PriceBook().effective_usd_per_gpu_hour() / 3600
    with_reuse = (0.035 / 2000 + 5e-5 * 500 / 2000) * usd_s * 1e6
    without = (0.035 / 2000 + 5e-5) * usd_s * 1e6
    assert m["$/1M prompt, with / without"] == f"{fmt.usd_cents(with_reuse)} / {fmt.usd_cents(without)}"
    line = " ".join(c.value for c in t.caption)
    assert "Priced span: 48.0 h of data (100% of the range asked for)" in line
    assert "fixed 35 ms/request" in line and "per_token 50 us/token" in line


def test_overview_charts_plot_the_buckets(scen, monkeypatch):
    t = run_app(monkeypatch, scen.path)
    hits = chart(t, "Hit rate by cache tier")
    # plotted at "t", the bucket start on the wall clock of the picked zone (UTC by default)
    device = hits[hits["tier"] == "vLLM prefix cache (device)"].set_index("t")["hit_rate"].dropna()
    assert device[device.index < pd.Timestamp("2026-11-03", tz="UTC")].round(6).unique().tolist() == [0.5]
    assert device[device.index > pd.Timestamp("2026-11-03 01:00", tz="UTC")].round(6).unique().tolist() == [0.8]
    ttft = chart(t, "Time to first token")
    p99 = ttft[(ttft["quantile"] == "p99") & ttft["value"].notna()]
    assert set(p99["value"].round(6)) == {0.475} and set(p99["lower"]) == {0.25} and set(p99["upper"]) == {0.5}
    assert 2.0 in set(ttft["slo"].dropna())  # the SLO rule of the planning inputs


def test_cache_page_tiers_tokens_l1_and_request_weighted(scen, monkeypatch):
    t = run_app(monkeypatch, scen.path, "cache")
    m = metrics(t)
    assert m["vLLM prefix cache (device)"] == EXP["hit_all"]
    assert m["KV connector (external, e.g. LMCache)"] == EXP["external_all"]
    assert m["LMCache MP L1 (CPU memory)"] == EXP["l1_all"]
    assert m["LMCache MP L2 (disk / remote)"] == "0.0%"
    assert m["L1 usage (latest, highest server)"] == "56.0%"  # 0.1 + 0.02 x 23 at the last hour
    tokens = t.dataframe[0].value.set_index("tier (source)")
    assert tokens.loc["device", "tokens"] == f"{4 * 100 * (24 * 1000 + 24 * 1600):,}"
    assert tokens.loc["host", "share of cached"] == "13.3%"  # 200 of 1,500 per request on average
    assert any("not in vLLM's or LMCache's metrics" in i.value for i in t.info)
    runs = t.dataframe[-1].value.set_index("run")
    assert runs["requests with cached tokens"].tolist() == ["100.0%", "0.0%"]
    l1 = chart(t, "LMCache L1 usage")
    assert l1["mean"].max() == pytest.approx(0.56) and set(l1["series"].dropna()) == {
        "node1-lmcache {backend=cpu,l1_tag=default}", "node2-lmcache {backend=cpu,l1_tag=default}"}
    cached = chart(t, "Cached prompt tokens")
    assert cached.groupby("source")["tokens"].sum()["host"] == 4 * 100 * 48 * 200


def test_cache_page_says_not_reported_for_missing_tiers(db, monkeypatch):
    put(db, 0, one(0, 0, [0, 0, 0]))
    put(db, 1, one(10, 100, [1, 1, 1]))
    t = run_app(monkeypatch, db.path, "cache")
    m = metrics(t)
    assert m["vLLM prefix cache (device)"] == "10.0%"
    assert m["LMCache MP L1 (CPU memory)"] == "not reported"
    assert any("lmcache_mp_l1_usage_ratio" in i.value for i in t.info)


def test_latency_page_quantiles_buckets_and_slo_snapping(scen, monkeypatch):
    t = run_app(monkeypatch, scen.path, "latency")
    m = metrics(t)
    assert (m["TTFT p50"], m["TTFT p99"]) == (EXP["ttft_p50"], EXP["ttft_p99"])
    assert m["SLO bound used"] == "2.5 s" and m["SLO attainment"] == "100.0%"
    assert any("snapped to the nearest bound, 2.5 s" in i.value for i in t.info)
    # 0.9 x 0.02 + 0.1 x 0.17 + 50 us x mean computed tokens (400, 1200, 100, 300 by hour: 500)
    assert m["Prefill mean"] == "60 ms"
    assert m["Decode mean"] == "400 ms"
    table = t.dataframe[0].value.set_index("quantile")
    assert table.loc["TTFT p99", "lies in"] == "bucket 0.25..0.5 s"
    phases = chart(t, "Prefill vs Decode")
    # both phases are plotted (.dropna: the gap band layer). Streamlit may ship a dataset another
    # chart of the page also uses (seen when views come from the cache), so this is a subset check
    assert {"prefill", "decode"} <= set(phases["metric"].dropna())
    # a target on a bucket bound is exact: 90 of every 100 requests are under 0.25 s
    save_pricebook(scen, DEPLOYMENT, PriceBook(), PlanningInputs(ttft_p99_slo_seconds=0.25))
    t = run_app(monkeypatch, scen.path, "latency")
    assert metrics(t)["SLO attainment"] == "90.0%" and metrics(t)["SLO bound used"] == "0.25 s"
    assert not t.info and any("bucket bound: exact" in c.value for c in t.caption)


def test_latency_page_decode_speed_tpot_itl_and_the_tpot_slo(scen, monkeypatch):
    t = run_app(monkeypatch, scen.path, "latency")
    m = metrics(t)
    assert (m["TPOT p50"], m["TPOT p99"]) == (EXP["tpot_p50"], EXP["tpot_p99"])
    assert (m["ITL p50"], m["ITL p99"]) == (EXP["itl_p50"], EXP["itl_p99"])
    assert (m["TPOT mean"], m["ITL mean"]) == (EXP["tpot_mean"], EXP["itl_mean"])
    # the default 0.1 s TPOT target is a bucket bound: exact, and every request (26.7 ms) meets it
    assert m["TPOT SLO bound used"] == "0.1 s" and m["TPOT SLO attainment"] == "100.0%"
    assert [x.delta for x in t.metric if x.label == "TPOT p99"] == ["-0.050 s vs 0.1 s SLO"]  # 49.75 - 100 ms
    table = t.dataframe[0].value.set_index("quantile")
    assert table.loc["TPOT p99", "lies in"] == EXP["tpot_bucket"]
    assert table.loc["ITL p50", "lies in"] == EXP["itl_p50_bucket"]
    assert table.loc["ITL p99", "lies in"] == EXP["itl_p99_bucket"]
    tpot = chart(t, "Time per output token")
    p99 = tpot[(tpot["quantile"] == "p99") & tpot["value"].notna()]
    assert set(p99["value"].round(8)) == {EXP["tpot_p99_s"]} and set(p99["lower"]) == {0.025}
    assert set(p99["upper"]) == {0.05} and 0.1 in set(tpot["slo"].dropna())  # the TPOT SLO rule
    itl = chart(t, "Inter-token latency")
    p99 = itl[(itl["quantile"] == "p99") & itl["value"].notna()]
    assert set(p99["value"].round(8)) == {EXP["itl_p99_s"]} and set(p99["lower"]) == {0.075}
    # a target between bounds is snapped: 0.03 s -> 0.025 s, which no request (26.7 ms) meets
    save_pricebook(scen, DEPLOYMENT, PriceBook(), PlanningInputs(tpot_p99_slo_seconds=0.03))
    t = run_app(monkeypatch, scen.path, "latency")
    m = metrics(t)
    assert m["TPOT SLO bound used"] == "0.025 s" and m["TPOT SLO attainment"] == "0.0%"
    assert [x.delta for x in t.metric if x.label == "TPOT p99"] == ["+0.020 s vs 0.03 s SLO"]
    assert any("not a bucket bound of vLLM's TPOT histogram; snapped to the nearest bound, 0.025 s" in c.value
               for c in t.caption)
    assert m["SLO bound used"] == "2.5 s"  # the TTFT target is its own


def test_latency_page_says_not_reported_without_tpot_and_itl(db, monkeypatch):
    put(db, 0, one(0, 0, [0, 0, 0]))
    put(db, 1, one(10, 100, [2, 4, 4]))
    t = run_app(monkeypatch, db.path, "latency")
    assert "TPOT p50" not in metrics(t) and metrics(t)["TTFT p50"] == "100 ms"  # rank 2 of 4: the top of (0, 0.1]
    assert any("vllm:request_time_per_output_token_seconds (TPOT)" in i.value for i in t.info)
    assert not [title for title in charts(t) if title and title.startswith(("Time per output", "Inter-token"))]


def test_latency_page_warns_when_a_quantile_lands_in_inf(db, monkeypatch):
    put(db, 0, one(0, 0, [0, 0, 0]))
    put(db, 1, one(10, 100, [2, 4, 4]))
    put(db, 2, one(70, 200, [4, 9, 10]))
    t = run_app(monkeypatch, db.path, "latency")
    assert metrics(t)["TTFT p99"] == "1000 ms (≥, in +Inf bucket)"
    warnings = [w.value for w in t.warning]
    assert any(w.startswith("TTFT p99 over the window lands in the +Inf bucket: it is above 1 s") for w in warnings)
    assert any("TTFT p99 lands in +Inf in" in w for w in warnings)
    ttft = chart(t, "Time to first token")
    assert ttft["in_inf"].fillna(False).astype(bool).any()


def test_cost_page_waterfall_capacity_tornado(scen, monkeypatch):
    pb, pl = PriceBook(ops_hours_per_month=0.0), PlanningInputs(growth_rate_per_month=0.3)
    save_pricebook(scen, DEPLOYMENT, pb, pl)
    t = run_app(monkeypatch, scen.path, "cost")
    ref = scenario_plan(0, 48, pb, pl)
    m = metrics(t)
    assert m["Monthly benefit"] == fmt.usd(ref.monthly_benefit_usd)
    assert m["Needed with reuse"] == fmt.gpus(ref.gpus_needed_with_reuse)
    wf = chart(t, "Monthly benefit: the four terms")
    bars = wf.dropna(subset=["term"]).drop_duplicates("term").set_index("term")
    assert list(bars.index) == [r.label for r in ref.waterfall]
    assert bars["usd"].tolist() == pytest.approx([r.usd for r in ref.waterfall])
    cap = chart(t, "Capacity projection")
    assert cap["month"].max() == 23 and set(cap["setup"].dropna()) == {"with reuse", "without reuse"}
    tornado = chart(t, "Sensitivity")
    assert set(tornado["input"].dropna()) == {r.name for r in ref.sensitivity}


def test_cost_page_price_book_edit_changes_the_dollars_and_errors_name_the_field(scen, monkeypatch):
    t = run_app(monkeypatch, scen.path, "cost")
    before = metrics(t)["Monthly benefit"]
    # the scenario's 4 engines are needed with and without reuse (no GPU to give back, so the freed
    # prefill is not credited): the benefit is minus the ops time, 4 h x $100 -> 4 h x $50
    assert before == "-$400"
    t.number_input(key="pb_prod_usd_per_ops_hour").set_value(50.0)
    [b for b in t.button if b.label == "Save price book"][0].click().run()
    assert [s.value for s in t.success] == ["Price book saved for 'prod'."]
    after = metrics(t)["Monthly benefit"]
    assert load_pricebook(scen, DEPLOYMENT).pricebook.usd_per_ops_hour == 50.0
    ref = scenario_plan(0, 48, PriceBook(usd_per_ops_hour=50.0))
    assert after == fmt.usd(ref.monthly_benefit_usd) == "-$200"
    t.number_input(key="pb_prod_usd_per_gpu_hour").set_value(-1.0)
    [b for b in t.button if b.label == "Save price book"][0].click().run()
    assert [e.value for e in t.error] == ["Not saved: PriceBook.usd_per_gpu_hour: must be >= 0 and <= 1000 $/GPU-hour; "
                                          "got -1.0"]
    t.number_input(key="pb_prod_usd_per_gpu_hour").set_value(2.5)
    t.number_input(key="pl_prod_horizon_months").set_value(0)
    [b for b in t.button if b.label == "Save price book"][0].click().run()
    assert any("PlanningInputs.horizon_months" in e.value for e in t.error)
    assert metrics(t)["Monthly benefit"] == after  # nothing invalid was saved


def test_cost_page_shows_the_presets_as_presets(scen, monkeypatch):
    t = run_app(monkeypatch, scen.path, "cost")
    labels = [e.label for e in t.expander]
    assert len(labels) == 2 and all(label.startswith("PLANNING PRESET · ") for label in labels)
    assert any("not measurements of your deployment" in w.value for w in t.warning)
    assert any("9,652 ms unique sessions vs 3,773 ms shared prefix" in str(df.value.values) for df in t.dataframe)


def test_runs_page_compares_side_by_side_with_provenance(scen, monkeypatch):
    t = run_app(monkeypatch, scen.path, "runs")
    runs = {r["label"]: r for r in runs_view(scen, DEPLOYMENT).runs}
    u, s = runs["unique sessions"], runs["shared prefix"]
    m = metrics(t)
    assert m["total time"] == f"{u['wall_s'] / s['wall_s']:.1f}x shorter"
    assert m["TTFT p50"] == f"{u['ttft_p50_s'] / s['ttft_p50_s']:.1f}x lower"
    assert m["tok/s p50 per user"] == f"{s['tokens_per_s_p50'] / u['tokens_per_s_p50']:.1f}x higher"
    assert m["aggregate throughput"] == f"{s['aggregate_tokens_per_s'] / u['aggregate_tokens_per_s']:.1f}x higher"
    table = t.dataframe[0].value
    assert set(table["measured on"]) == {MEASURED_ON}
    assert any(MEASURED_ON in c.value for c in t.caption)
    assert any("CPU-scale" in w.value for w in t.warning)
    # swapping the pair flips the ratios
    t.selectbox(key="run_a").select_index(0).run()
    t.selectbox(key="run_b").select_index(1).run()
    assert metrics(t)["total time"] == f"{u['wall_s'] / s['wall_s']:.1f}x longer"


def test_runs_page_without_runs_says_how_to_record_them(scen, monkeypatch):
    with scen.write() as con:
        con.execute("DELETE FROM run_requests")
        con.execute("DELETE FROM runs")
    t = run_app(monkeypatch, scen.path, "runs")
    assert any("kvplan pilot" in i.value and "--measured-on" in i.value for i in t.info)


def test_collection_page_targets_errors_scheduler_and_gaps(scen, monkeypatch):
    t = run_app(monkeypatch, scen.path, "collection")
    m = metrics(t)
    assert (m["Targets"], m["Scrapes"], m["Failed scrapes"], m["Days rolled up"]) == ("4", "196", "1", "0")
    frames = [d.value for d in t.dataframe]
    targets = frames[0].set_index("target")
    assert targets.loc["node2-vllm", "failed"] == 1
    assert targets.loc["node2-vllm", "last error"] == "http://node2:8000/metrics: connection refused"
    assert targets.loc["node1-lmcache", "last scrape (UTC)"] == "2026-11-04 00:00:00"
    runs = next(f for f in frames if "job" in f.columns)
    assert set(runs["job"]) == {"nightly", "scrape"} and "rolled up 2026-11-02" in set(runs["message"])
    gaps = next(f for f in frames if "reason" in f.columns)
    assert gaps["target"].tolist() == ["node2-vllm"] and gaps["from (UTC)"].tolist() == ["2026-11-03 05:30:00"]
    failed = frames[-1]
    assert failed["time (UTC)"].tolist() == ["2026-11-03 06:00:00"]


def test_report_page_numbers_and_downloads(scen, monkeypatch):
    t = run_app(monkeypatch, scen.path, "report")
    m = metrics(t)
    ref = scenario_plan(0, 48, since=-1)  # the whole month: from the engines' start (tests/test_report.py)
    assert m["Decision"] == ref.decision.kind
    assert m["Monthly benefit"] == fmt.usd(ref.monthly_benefit_usd)
    assert (m["Prefix-cache hit rate"], m["TTFT p50"], m["TTFT p99"]) == (
        EXP["hit_all"], EXP["ttft_p50"], EXP["ttft_p99"])
    assert [b.label for b in t.get("download_button")] == ["Download PDF", "Download HTML"]
    assert t.selectbox(key="report_month").value == "2026-11"
    src = t.get("iframe")[0].proto.src
    import base64

    html = base64.b64decode(src.split(",", 1)[1]).decode()
    assert "Capacity report: prod, 2026-11" in html and EXP["hit_all"] in html


def test_long_window_reads_rollups_and_shows_the_same_numbers(scen, monkeypatch):
    from tests.test_app_fixtures import rollup

    t = run_app(monkeypatch, scen.path)
    before = metrics(t)
    rollup(scen, DEPLOYMENT, hour(0))
    rollup(scen, DEPLOYMENT, hour(24))
    t = run_app(monkeypatch, scen.path)
    assert "from the nightly rollups" in t.caption[0].value
    after = metrics(t)
    assert after == before
    # the collection page counts the rolled-up days
    t = run_app(monkeypatch, scen.path, "collection")
    assert metrics(t)["Days rolled up"] == "2"


def test_cost_page_saves_deployment_facts_and_the_plan_uses_them(scen, monkeypatch):
    from kvplan.app.data.store import load_facts

    t = run_app(monkeypatch, scen.path, "cost")
    assert metrics(t)["GPUs today"] == "4"
    t.number_input(key="df_prod_tensor_parallel").set_value(0)
    [b for b in t.button if b.label == "Save deployment facts"][0].click().run()
    assert any("DeploymentFacts.tensor_parallel: must be >= 1" in e.value for e in t.error)
    t.number_input(key="df_prod_tensor_parallel").set_value(2)
    t.number_input(key="df_prod_gpu_peak_flops").set_value(989e12)
    [b for b in t.button if b.label == "Save deployment facts"][0].click().run()
    assert [s.value for s in t.success] == ["Deployment facts saved for 'prod'."]
    got = load_facts(scen, DEPLOYMENT).facts
    assert (got.tensor_parallel, got.gpu_peak_flops, got.model_params) == (2, 989e12, None)
    assert metrics(t)["GPUs today"] == "8"  # 4 engines x tensor parallel 2


def test_cost_page_capacity_paths_over_the_horizon(scen, monkeypatch):
    """The scenario's busiest hour is 400 requests / 3600 s; one GPU holds it with or without reuse,
    so both paths give back the 3 spare GPUs (shrink) and buy nothing over 24 months. Costs by
    hand: 1 GPU x $2.5 x 730.56 h x 24 = $43,834; with reuse + $400 ops x 24 = $53,434."""
    t = run_app(monkeypatch, scen.path, "cost")
    m = metrics(t)
    assert (m["Sized by"], m["GPUs per replica"], m["Busiest hour"]) == ("queueing", "1", "0.11 req/s")
    assert m["Decision flips in"] == "0.0%"
    paths = t.dataframe[[i for i, d in enumerate(t.dataframe) if "path" in d.value.columns][0]].value
    assert paths["purchases"].tolist() == ["no purchase within the horizon"] * 2
    assert paths["cost over the horizon"].tolist() == ["$43,834", "$53,434"]
    flips = " ".join(md.value for md in t.markdown if "would change if" in md.value)
    assert "no hit rate would do it at today's load: the prefill the cache saves frees no GPU" in flips
    badge = [md.value for md in t.markdown if "-badge[" in md.value][0]
    assert "NOT_WORTH_IT" in badge
    assert "0.81 GPU-hours/month of prefill it saves (before its own cost) free no GPU" in badge


def test_cost_page_sizes_from_a_stored_load_sweep(scen, monkeypatch):
    """With a sweep pair stored (tests/test_sweep.py's helpers), the plan is sized by measured
    goodput, the page shows the curves and both goodputs, and says they are CPU-scale."""
    from kvplan.collectors.loadgen.sweep import save_sweep
    from tests.test_sweep import even, side

    off = side("off", [(2, even(2, 0.5)), (4, even(4, 1.0)), (8, even(8, 3.0))])  # misses the 2 s SLO at 8
    on = side("on", [(2, even(2, 0.03)), (4, even(4, 0.04)), (8, even(8, 0.05))])
    for s in (off, on):
        save_sweep(scen, DEPLOYMENT, s, pair="p1", measured_on=MEASURED_ON)
    t = run_app(monkeypatch, scen.path, "cost")
    assert metrics(t)["Sized by"] == "goodput"
    assert any(k and "sweep" in k.lower() for k in charts(t)), list(charts(t))
    table = [d.value for d in t.dataframe if "goodput (req/s)" in d.value.columns][0]
    assert table["side"].tolist() == ["without reuse", "with reuse"]
    assert table["limited by"].tolist()[0] == "ttft_p99"
    assert any("CPU-scale seconds, not GPU results" in c.value for c in t.caption)


def test_a_bad_saved_fact_can_be_undone_from_the_cost_page(scen, monkeypatch):
    # a row saved before the facts had upper bounds (total_model_params = 1e308 saved from the form):
    # every page failed ("kvplan hit a bug on this page (OverflowError)") and the Cost page, rendering no
    # form, could not undo it. Now the row is refused when read, naming it, and the form is still there
    from kvplan.app.data.store import load_facts
    from kvplan.sql.db import Database

    with scen.write() as con:
        Database.run(con, "put_facts", deployment=DEPLOYMENT, facts=json.dumps({"total_model_params": 1e308}))
    t = run_app(monkeypatch, scen.path, "overview")
    assert any("deployment facts saved for 'prod'" in e.value and "total_model_params" in e.value for e in t.error)
    assert not any("hit a bug" in e.value for e in t.error)
    t = run_app(monkeypatch, scen.path, "cost")
    assert any("re-save them on the Cost & decision page" in e.value for e in t.error)
    t.number_input(key="df_prod_total_model_params").set_value(8e9)
    [b for b in t.button if b.label == "Save deployment facts"][0].click().run()
    assert [s.value for s in t.success] == ["Deployment facts saved for 'prod'."]
    assert load_facts(scen, DEPLOYMENT).facts.total_model_params == 8e9
    assert metrics(t)["GPUs today"] == "4"  # the plan is back
