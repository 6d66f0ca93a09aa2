"""The what-if where users see it: `kvplan import-trace`, `kvplan whatif --json`, the view's
numbers against the model, the What-if page (AppTest) and the report section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.report import fmt
from kvplan.app.report.whatif import render_section, whatif_section
from kvplan.app.views.whatif import WhatIfQuery, whatif
from kvplan.collectors.traces import ingest as traces
from kvplan.models.cache import pools, sim

runner = CliRunner()
APP = str(Path(__file__).resolve().parents[1] / "app" / "streamlit_app.py")
BPC = 2**20  # 1 MiB per chunk of 4 tokens (a made-up layout: 2 x [4096, 64] int16... any)


def lm_line(ts, rid, hashes, chunk_size=4):
    return json.dumps({"timestamp": ts, "request_id": rid, "model_name": "m", "chunk_size": chunk_size,
                       "seq_len": len(hashes) * chunk_size + 2, "dtypes": ["int8"],
                       "shapes": [[BPC]], "chunk_hashes": hashes})


def trace_dir(tmp_path: Path) -> Path:
    """Four users who each re-send their growing conversation 5 times (multi-turn), plus one
    shared system chunk: reuse needs about 4 x 6 chunks to be kept."""
    d = tmp_path / "logs"
    d.mkdir()
    lines, t = [], 1.7e9
    for turn in range(5):
        for u in range(4):
            hashes = ["0xsys"] + [f"0x{u}{k}" for k in range(turn + 1)]
            lines.append(lm_line(t, f"u{u}t{turn}", hashes))
            t += 1.0
    (d / "lookup_hashes_20261201_000000_000000.jsonl").write_text("\n".join(lines) + "\n")
    return d


@pytest.fixture
def loaded(db, tmp_path):
    traces.import_trace(db, "dep", [trace_dir(tmp_path)])
    return db


def test_view_numbers_are_the_models(loaded):
    d = whatif(loaded, "dep", WhatIfQuery(ranks=2, configured_gb=5 * BPC / 1e9, seconds_per_cached_token=0.01,
               tokens_per_month=1e9))
    trace, _ = traces.load_trace(loaded, "dep")
    curve = sim.lru_curve(trace)
    assert d.infinite_hit_rate == pytest.approx(curve.infinite_hit_rate)
    for p in d.points:
        assert p.hit_rate == pytest.approx(float(curve.hit_rate(p.capacity_chunks)))
        assert p.capacity_gb == pytest.approx(p.capacity_chunks * BPC / 1e9)
        assert p.capacity_tokens == p.capacity_chunks * 4
    assert d.configured is not None and d.configured.capacity_chunks == 5
    assert d.trace.full_chunk_tokens == trace.references * 4 < d.trace.total_tokens
    s = d.shared_vs_private
    assert s.capacity_chunks == 5 and s.ranks == 2
    rr = next(p for p in s.private if p.routing == "round_robin")
    assert rr.hit_rate == pytest.approx(pools.topology(trace, 2, "round_robin").private_hit_rate(5))
    assert d.dollars is not None and d.best_capacity_gb == d.dollars.best.capacity_gb
    assert d.dollars.usd_per_gpu_hour == 2.5  # the default price book
    assert d.tiers is None
    t2 = whatif(loaded, "dep", WhatIfQuery(ranks=2, configured_gb=2 * BPC / 1e9, l2_gb=6 * BPC / 1e9)).tiers
    assert t2 is not None and t2.l1_chunks == 2 and t2.l2_chunks == 6
    both = curve.hit_tokens(8)
    assert t2.l1_hit_tokens + t2.l2_hit_tokens == both and t2.l1_hit_tokens >= curve.hit_tokens(2)
    # the JSON is the same answer, key for key (to_dict is --json's)
    j = d.to_dict()
    assert j["configured"]["capacity_chunks"] == 5 and j["dollars"]["best"]["capacity_gb"] == d.best_capacity_gb
    assert [p["routing"] for p in j["shared_vs_private"]["private"]] == list(pools.ROUTINGS)
    assert set(j["shared_vs_private"]["points"][0]) == {"capacity_chunks", "capacity_gb", "shared", *pools.ROUTINGS}
    assert "today" in j and j["latency"] == [] and j["finding"] is None  # no metrics: no TTFT half


def test_cli_import_and_whatif_json(tmp_path):
    db = tmp_path / "k.duckdb"
    logs = trace_dir(tmp_path)
    r = runner.invoke(app, ["import-trace", "--deployment", "dep", "--db", str(db), str(logs)])
    assert r.exit_code == 0, r.output
    assert "20 new request(s)" in r.output.replace("\n", " ")
    r = runner.invoke(app, ["import-trace", "--deployment", "dep", "--db", str(db), str(logs)])
    assert "unchanged" in r.output
    r = runner.invoke(app, ["whatif", "--deployment", "dep", "--db", str(db), "--json", "--ranks", "2",
                            "--seconds-per-token", "0.01", "--tokens-per-month", "1e9"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert {"points", "infinite_hit_rate", "shared_vs_private", "best_capacity_gb"} <= d.keys()
    assert set(d["points"][0]) >= {"capacity_tokens", "capacity_gb", "hit_rate"}
    assert 0 < d["infinite_hit_rate"] < 1 and d["best_capacity_gb"] > 0
    r = runner.invoke(app, ["whatif", "--deployment", "dep", "--db", str(db), "--ranks", "2"])
    assert r.exit_code == 0 and "infinite-capacity hit rate" in r.output


def test_cli_errors_are_one_line(tmp_path):
    db = tmp_path / "k.duckdb"
    bad = tmp_path / "lookup_hashes_x.jsonl"
    bad.write_text(lm_line(1.0, "a", ["0x1"]) + "\n{oops\n")
    r = runner.invoke(app, ["import-trace", "--deployment", "dep", "--db", str(db), str(bad)])
    assert r.exit_code == 2 and "lookup_hashes_x.jsonl:2" in r.output
    r = runner.invoke(app, ["whatif", "--deployment", "nope", "--db", str(db)])
    assert r.exit_code == 2 and "no trace" in r.output


def test_report_section(loaded):
    d = whatif(loaded, "dep", WhatIfQuery(ranks=2, configured_gb=5 * BPC / 1e9, seconds_per_cached_token=0.01,
               tokens_per_month=1e9))
    html = render_section(d)
    assert "Cache size and topology what-if" in html and "<svg" in html
    assert fmt.pct(d.infinite_hit_rate) in html
    assert "private, prefix affinity" in html and "Best:" in html
    assert "No request trace" in whatif_section(loaded, "other")


def test_whatif_page(loaded, monkeypatch):
    monkeypatch.setenv("KVPLAN_DB", str(loaded.path))
    t = AppTest.from_file(APP, default_timeout=120)
    t.switch_page("pages/whatif.py")
    t.run()
    assert not t.exception, t.exception
    m = {x.label: x.value for x in t.metric}
    trace, _ = traces.load_trace(loaded, "dep")
    assert m["Infinite-capacity hit rate"] == f"{sim.lru_curve(trace).infinite_hit_rate:.1%}"
    titles = [json.loads(c.proto.spec).get("title") for c in t.get("vega_lite_chart")]
    titles = [x.get("text") if isinstance(x, dict) else x for x in titles]
    assert any(x and x.startswith("Hit rate against cache capacity") for x in titles)
    assert any(x and x.startswith("One shared pool against 8 private caches") for x in titles)
    # no GPU-seconds per token known (no metrics): dollars are explained, not invented
    assert any("GPU-seconds per token" in i.value for i in t.info)
    t.number_input(key="whatif_spt").set_value(0.01).run()
    assert not t.exception
    assert "Best capacity" in {x.label for x in t.metric}


def test_whatif_page_without_traces(db, monkeypatch):
    monkeypatch.setenv("KVPLAN_DB", str(db.path))
    t = AppTest.from_file(APP, default_timeout=120)
    t.switch_page("pages/whatif.py")
    t.run()
    assert not t.exception
    assert any("kvplan import-trace" in i.value for i in t.info)


def test_configured_size_and_prices_come_from_the_deployments_settings(loaded):
    """Without --configured-gb the cache size is the price book's cache_tier_gb_cpu, and with no
    book saved that is the config's [prices] table: the same source the plan reads."""
    from kvplan.app.data.store import DeploymentSettings

    assert whatif(loaded, "dep", WhatIfQuery(ranks=2)).configured is None  # the documented default book has 0 GB
    d = whatif(loaded, "dep", WhatIfQuery(ranks=2), cfg=DeploymentSettings(prices={"cache_tier_gb_cpu": 3 * BPC / 1e9}))
    assert d.configured is not None and d.configured.capacity_chunks == 3
    assert any("cache_tier_gb_cpu" in n for n in d.notes)


# ---- every option in its range, strict JSON ------------------------------------------------
@pytest.mark.parametrize("args, option", [
    (["--ranks", "1000000000"], "--ranks"),           # hung (100,000 ranks took 36 s)
    (["--ranks", "0"], "--ranks"),
    (["--configured-gb", "inf"], "--configured-gb"),  # tracebacks (OverflowError, ValueError)
    (["--capacity-gb", "nan"], "--capacity-gb"),
    (["--l2-gb", "inf"], "--l2-gb"),
    (["--seconds-per-token", "inf"], "--seconds-per-token"),
    (["--tokens-per-month", "nan"], "--tokens-per-month"),
    (["--bytes-per-chunk", "-5"], "--bytes-per-chunk"),
    (["--seconds-per-token", "-1"], "--seconds-per-token"),
    (["--seed", "-1"], "--seed"),
    (["--configured-gb", "-5"], "--configured-gb"),   # accepted silently
    (["--capacity-gb", "-1"], "--capacity-gb"),
    (["--l2-gb", "-3"], "--l2-gb"),
    (["--bytes-per-chunk", "0"], "--bytes-per-chunk"),  # ignored silently
    (["--model", "nope"], "--model"),                 # reported 0 requests
])
def test_whatif_refuses_an_option_out_of_range_naming_it(tmp_path, args, option):
    db = str(tmp_path / "k.duckdb")
    r = runner.invoke(app, ["import-trace", "--db", db, "--deployment", "dep", str(trace_dir(tmp_path))])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["whatif", "--db", db, "--deployment", "dep", *args])
    assert r.exit_code == 2, r.output
    assert option in r.output and "Traceback" not in r.output  # "--model: ..." or Typer's "Invalid value for '--x'"


def test_whatif_model_names_the_models_the_trace_has(loaded):
    from kvplan.collectors.traces.parse import TraceError

    with pytest.raises(TraceError, match="no requests of model 'nope'; its models: 'm'"):
        whatif(loaded, "dep", WhatIfQuery(model_name="nope"))
    assert whatif(loaded, "dep", WhatIfQuery(model_name="m")).trace.requests == 20


def test_whatif_json_is_strict_json(tmp_path):
    # memory free and the largest seconds per token and volume allowed: the dollars grow huge but stay
    # finite; before the bounds, 1e300 x 1e300 printed `Infinity`, which JSON parsers refuse
    db = str(tmp_path / "k.duckdb")
    runner.invoke(app, ["import-trace", "--db", db, "--deployment", "dep", str(trace_dir(tmp_path))])
    r = runner.invoke(app, ["whatif", "--db", db, "--deployment", "dep", "--json", "--seconds-per-token", "1",
                            "--tokens-per-month", "1e18"])
    assert r.exit_code == 0, r.output

    def refuse(name):
        raise AssertionError(f"{name} is not JSON")
    json.loads(r.output, parse_constant=refuse)


def test_json_text_writes_null_for_non_finite_numbers():
    from kvplan.app.cli.common import json_text

    assert json.loads(json_text({"a": float("inf"), "b": [float("nan"), 1.5]})) == {"a": None, "b": [None, 1.5]}


@pytest.mark.parametrize("change", [dict(capacity_gb=-1.0), dict(configured_gb=float("inf")), dict(l2_gb=float("nan")),
                                    dict(bytes_per_chunk=0), dict(seed=-1), dict(ranks=10**9),
                                    dict(seconds_per_cached_token=-1.0), dict(tokens_per_month=float("inf"))])
def test_the_view_checks_its_options_for_every_caller(loaded, change):
    # the page and the report call the view directly, not through the CLI's option bounds
    from kvplan.models.core.errors import KvplanError

    with pytest.raises(KvplanError, match="must be"):
        whatif(loaded, "dep", WhatIfQuery(**change))
