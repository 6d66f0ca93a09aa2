"""The prefill cost model's reader (kvplan.app.data.prefill) on recorded real payloads: per-interval
increases add up to the window's, LMCache stores and connector tokens land in their intervals,
the covered span, measured A/B pairs."""

from datetime import timedelta

import pytest

from kvplan.app.data.prefill import measured_ab, plan_measurement, prefill_intervals
from kvplan.app.data.window import stats
from kvplan.collectors.loadgen.runs import save_run
from kvplan.collectors.loadgen.workload import RequestResult, RunResult, Workload
from kvplan.models.inputs.deployment import DeploymentFacts
from kvplan.sql.db import Database
from tests.recorded import import_case


@pytest.fixture
def db(tmp_path):
    d = Database(tmp_path / "k.duckdb")
    d.migrate()
    return d


@pytest.mark.parametrize("case", ["shared_vs_unique", "restart", "two_servers", "multi_engine", "no_lmcache"])
def test_intervals_add_up_to_the_window(db, case):
    ss = import_case(db, case, "dep")
    t0, t1 = ss[0].at, ss[-1].at
    ivs = prefill_intervals(db, "dep", t0, t1)
    s = stats(db, "dep", t0, t1)
    assert sum(r.requests for r in ivs) == pytest.approx(s.prefill_requests or 0)
    assert sum(r.computed_tokens for r in ivs) == pytest.approx(s.prefill_computed_tokens or 0)
    assert sum(r.prefill_seconds for r in ivs) == pytest.approx(s.prefill_seconds_sum or 0)
    assert sum(r.cached_tokens or 0 for r in ivs) == pytest.approx(s.cached_prompt_tokens or 0)
    for r in ivs:
        assert r.t_start < r.t_end


def test_lmcache_stores_and_connector_tokens(db):
    ss = import_case(db, "two_servers", "dep")
    ivs = prefill_intervals(db, "dep", ss[0].at, ss[-1].at)
    lm = [r for r in ivs if r.targets == ("lmcache",)]
    assert lm and all(r.engines == 0 and r.requests == 0 for r in lm)
    # LMCache stored whole 256-token chunks
    assert sum(r.stored_tokens for r in lm) > 0
    assert sum(r.stored_tokens for r in lm) % 256 == 0
    # the second server got turn 2's prefix from LMCache (README of the fixtures: 1,024 tokens)
    assert sum(r.external_tokens or 0 for r in ivs) == pytest.approx(1024)
    ivs512 = prefill_intervals(db, "dep", ss[0].at, ss[-1].at, chunk_tokens=512)
    assert sum(r.stored_tokens or 0 for r in ivs512) == 2 * sum(r.stored_tokens for r in lm)


def test_multi_engine_counts_engines(db):
    ss = import_case(db, "multi_engine", "dep")
    ivs = [r for r in prefill_intervals(db, "dep", ss[0].at, ss[-1].at) if r.targets != ("lmcache",)]
    assert {r.engines for r in ivs} == {2}


def test_priced_window_covers_only_the_data(db):
    ss = import_case(db, "shared_vs_unique", "dep")
    t0, t1 = ss[0].at, ss[-1].at
    w = plan_measurement(db, "dep", t0 - timedelta(days=1), t1 + timedelta(days=1)).window
    assert w.asked_seconds == pytest.approx((t1 - t0).total_seconds() + 2 * 86400)
    # from the servers' start (their counters' _created: 0 then) to the last scrape, not 2 days
    span = (t1 - t0).total_seconds()
    assert span <= w.covered_seconds <= span + 5
    assert w.requests == 40


def test_a_short_recording_is_not_identifiable_and_says_so(db):
    ss = import_case(db, "shared_vs_unique", "dep")
    m = plan_measurement(db, "dep", ss[0].at, ss[-1].at, lookback=ss[-1].at - ss[0].at).cost_model
    assert m.status == "unidentified"
    assert "'dep' history" in m.history and "40 requests" in m.history
    meas = plan_measurement(db, "dep", ss[0].at, ss[-1].at, facts=DeploymentFacts(tensor_parallel=4))
    assert meas.tensor_parallel_size == 4 and meas.cost_model.status == "unidentified"


def _run(cached: int) -> RunResult:
    r = RequestResult(0, 0, "http://x", 1.7e9, 0.1, 0.2, 1000, 8, 40.0, True, cached_tokens=cached)
    return RunResult("shared_prefix", 1.7e9, 1.7e9 + 10, Workload(), [r], "m", ["http://x"])


def test_measured_ab_pair(db):
    assert measured_ab(db, "dep") is None
    save_run(db, "dep", _run(0), measured_on="8x H100", reuse="off", engine_seconds=12.0,
             engine_seconds_source="wall time", ab_pair="p1")
    save_run(db, "dep", _run(900), measured_on="8x H100", reuse="on", engine_seconds=9.0,
             engine_seconds_source="wall time", ab_pair="p1", cached_tokens=800.0)
    ab = measured_ab(db, "dep")
    assert ab.saved_engine_seconds == pytest.approx(3.0)
    assert ab.on_cached_tokens == 800.0  # what the servers reported beats the clients' usage
    assert "p1" in ab.label and ab.engine_seconds_source == "wall time"
    with pytest.raises(ValueError, match="reuse"):
        save_run(db, "dep", _run(0), measured_on="x", reuse="maybe")
