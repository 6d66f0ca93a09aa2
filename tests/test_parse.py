"""The parser: what it accepts, and the errors it gives for what it refuses."""

from __future__ import annotations

import pytest

from kvplan.app.cli import app
from kvplan.collectors.scrape.parse import check_content_type, parse_payload
from kvplan.collectors.scrape.payload import PayloadError
from kvplan.collectors.scrape.scrape import import_file
from tests.hostile import AT, CREATED, bucket_line, payload, replace_line, runner
from tests.payloads import vllm_text

GOOD = """\
# HELP vllm:prefix_cache_hits_total Prefix cache hits
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 10.0
# HELP vllm:prefix_cache_hits_created Prefix cache hits
# TYPE vllm:prefix_cache_hits_created gauge
vllm:prefix_cache_hits_created{engine="0",model_name="m"} 1.7e+09
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.5
# TYPE vllm:time_to_first_token_seconds_created gauge
vllm:time_to_first_token_seconds_created{engine="0",model_name="m"} 1.7e+09
"""


def test_good_payload_attaches_created_and_splits_labels():
    p = parse_payload(GOOD, "a.prom")
    assert p.kind == "vllm"
    names = [s.name for s in p.samples]
    assert "vllm:prefix_cache_hits_created" not in names  # never stored as a value
    hits = p.values("vllm:prefix_cache_hits_total")[0]
    assert (hits.value, hits.created, hits.model_name, hits.engine, hits.family) == (
        10.0, 1.7e9, "m", "0", "vllm:prefix_cache_hits")
    buckets = p.values("vllm:time_to_first_token_seconds_bucket")
    assert [b.le for b in buckets] == [0.1, float("inf")]
    assert all(b.created == 1.7e9 for b in buckets)
    assert p.values("vllm:kv_cache_usage_perc")[0].created is None


@pytest.mark.parametrize("text,kind", [
    ('# TYPE lmcache_mp_lookup_hit_tokens_total counter\n'
     'lmcache_mp_lookup_hit_tokens_total{cache_salt="",model_name="m"} 3\n', "lmcache_mp"),
    ('# TYPE lmcache:num_hit_tokens_total counter\nlmcache:num_hit_tokens_total{model_name="m"} 3\n', "lmcache_inproc"),
])
def test_kind_detection(text, kind):
    assert parse_payload(text, "x").kind == kind


def test_forced_kind_and_unknown_payload():
    text = "# TYPE up gauge\nup 1\n"
    with pytest.raises(PayloadError, match="no vLLM .* pass --kind"):
        parse_payload(text, "node.prom")
    assert parse_payload(text, "node.prom", kind="vllm").kind == "vllm"
    with pytest.raises(PayloadError, match="unknown kind 'tgi'"):
        parse_payload(text, "node.prom", kind="tgi")
    assert parse_payload(text, "node.prom", kind="sglang").kind == "sglang"  # an engine kind since issue 21


def err(text, source="f.prom", **kw) -> PayloadError:
    with pytest.raises(PayloadError) as e:
        parse_payload(text, source, **kw)
    return e.value


def test_truncated_line_names_file_and_line():
    text = GOOD + 'vllm:prompt_tokens_total{engine="0",model_na\n'
    e = err(text)
    assert e.source == "f.prom" and e.line == GOOD.count("\n") + 1
    assert str(e).startswith(f"f.prom:{e.line}: cannot parse")


def test_truncated_histogram_is_refused():
    cut = GOOD.split('vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"')[0]
    assert "no le=\"+Inf\" bucket" in str(err(cut))


def test_nan_and_inf_in_counters_are_refused_with_line():
    e = err(GOOD.replace("} 10.0", "} NaN"))
    assert e.line == 3 and "vllm:prefix_cache_hits_total" in str(e) and "finite" in str(e)
    e = err(GOOD.replace("_count{engine=\"0\",model_name=\"m\"} 2.0", "_count{engine=\"0\",model_name=\"m\"} +Inf"))
    assert "finite" in str(e)


def test_nan_gauge_is_dropped_with_a_warning_not_zero():
    p = parse_payload(GOOD.replace("} 0.25", "} NaN"), "f.prom")
    assert p.values("vllm:kv_cache_usage_perc") == []
    assert any("kv_cache_usage_perc" in w for w in p.warnings)


def test_duplicate_series_names_both_lines():
    dup = 'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 11.0\n'
    e = err(GOOD + dup)
    assert "duplicate series vllm:prefix_cache_hits_total" in str(e)
    assert "lines 3, " in str(e) and e.line == GOOD.count("\n") + 1


def test_html_json_and_empty_bodies():
    assert "HTML page" in str(err("<!DOCTYPE html><html><body>login</body></html>", "http://h/metrics"))
    assert "JSON" in str(err('{"status": "ok"}'))
    assert "empty body" in str(err(""))
    assert "empty body" in str(err("\n  \n"))


def test_bucket_counts_must_be_cumulative():
    bad = GOOD.replace('le="0.1",model_name="m"} 1.0', 'le="0.1",model_name="m"} 5.0')
    assert "must be cumulative" in str(err(bad))


def test_content_types():
    assert check_content_type("u", "text/plain; version=0.0.4; charset=utf-8") == "text"
    assert check_content_type("u", "application/openmetrics-text; version=1.0.0") == "openmetrics"
    with pytest.raises(PayloadError, match="http://h:1/metrics: Content-Type 'text/html"):
        parse_payload(GOOD, "http://h:1/metrics", content_type="text/html; charset=utf-8")
    with pytest.raises(PayloadError, match="application/json"):
        check_content_type("u", "application/json")


# -- hostile or careless inputs --------------------------------------------------------------
@pytest.mark.parametrize("value", ["9.9e12", "1e26", "NaN", "-5", "+Inf"])
def test_impossible_created_is_refused_naming_file_line_and_series(db, tmp_path, value):
    p = payload(tmp_path)
    line = replace_line(p, "vllm:prefix_cache_hits_created", value)
    with pytest.raises(PayloadError) as e:
        import_file(db, "d", p, AT)
    msg = str(e.value)
    assert f"{p}:{line}:" in msg and "vllm:prefix_cache_hits_created" in msg and "_created" in msg
    with db.read() as con:
        assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == 0


@pytest.mark.parametrize("value, why", [("-3", "negative"), ("1e308", "above"), ("1.5e16", "above")])
def test_impossible_counter_values_are_refused(db, tmp_path, value, why):
    p = payload(tmp_path)
    line = replace_line(p, "vllm:prefix_cache_queries_total", value)
    with pytest.raises(PayloadError) as e:
        import_file(db, "d", p, AT)
    assert f"{p}:{line}:" in str(e.value) and "vllm:prefix_cache_queries_total" in str(e.value)
    assert why in str(e.value)


def test_hits_above_queries_in_one_payload_are_refused(db, tmp_path):
    p = payload(tmp_path, hits=30, queries=20)
    with pytest.raises(PayloadError) as e:
        import_file(db, "d", p, AT)
    msg = str(e.value)
    assert str(p) in msg and "vllm:prefix_cache_hits_total" in msg and "vllm:prefix_cache_queries_total" in msg
    assert "model_name=\"m\"" in msg


def test_bucket_without_le_names_file_and_line(db, tmp_path):
    p = payload(tmp_path)
    line = bucket_line(p, 'vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m"} 1.0')
    r = runner.invoke(app, ["import-metrics", str(p), "--at", "2026-01-05T12:00:00Z", "--deployment", "d",
                            "--db", str(db.path)])
    assert r.exit_code == 2 and f"{p}:{line}:" in r.output and "without an le" in r.output, r.output


def test_openmetrics_with_underscored_vllm_names_is_mapped_with_a_warning(db, tmp_path):
    from kvplan.collectors.scrape.parse import parse_payload

    text = vllm_text({("m", "0"): {"created": CREATED, "hits": 1, "queries": 2, "ttft": [1, 2, 2]}})
    text = text.replace("vllm:", "vllm_")
    p = parse_payload(text, "x.prom")
    assert p.kind == "vllm" and any(s.name == "vllm:prefix_cache_hits_total" for s in p.samples)
    assert any("vllm_" in w and "vllm:" in w for w in p.warnings)


def test_nan_summary_quantiles_are_accepted(db, tmp_path):
    p = payload(tmp_path)
    p.write_text(p.read_text() + "# TYPE vllm:x_seconds summary\n"
                 'vllm:x_seconds{model_name="m",quantile="0.5"} NaN\n'
                 'vllm:x_seconds_count{model_name="m"} 0\nvllm:x_seconds_sum{model_name="m"} 0\n')
    r = import_file(db, "d", p, AT)
    assert r.status == "stored"


# ---- series outside their family's block, sums that cannot be ---------------------------------------
STRAY = """# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 100.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 10.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 50.0
"""


def test_a_series_outside_its_familys_block_joins_its_family_with_a_warning():
    # prometheus_client's text parser makes the stray run its own family of type unknown: it was stored
    # untyped and left out of every total
    p = parse_payload(STRAY, "stray.prom")
    got = {(s.name, s.engine): s.type for s in p.samples}
    assert got == {("vllm:prompt_tokens_total", "0"): "counter", ("vllm:prompt_tokens_total", "1"): "counter",
                   ("vllm:generation_tokens_total", "0"): "counter"}
    assert any("(line 5) outside the lines of its family vllm:prompt_tokens (counter" in w for w in p.warnings)


def test_a_series_outside_its_block_still_counts_in_the_totals(db, tmp_path):
    # two scrapes a minute apart: engine 0 goes 100 -> 200, engine 1 (the stray line) 50 -> 150; all prompt
    # tokens = 100 + 100 = 200 (it was 100: engine 1 untyped, left out)
    from datetime import timedelta

    from kvplan.app.data.window import stats

    a, b = tmp_path / "a.prom", tmp_path / "b.prom"
    a.write_text(STRAY)
    b.write_text(STRAY.replace(" 100.0", " 200.0").replace(" 50.0", " 150.0").replace(" 10.0", " 20.0"))
    import_file(db, "d", a, AT, target="v")
    import_file(db, "d", b, AT + timedelta(minutes=1), target="v")
    assert stats(db, "d", AT - timedelta(hours=1), AT + timedelta(hours=1)).prompt_tokens == 200


BY_SOURCE = """# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1201.0
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} LOCAL
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_cache_hit"} 0.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 0.0
"""
LM = """# TYPE lmcache_mp_lookup_hit_tokens_total counter
lmcache_mp_lookup_hit_tokens_total{model_name="m"} 500.0
# TYPE lmcache_mp_lookup_hit_l1_tokens_total counter
lmcache_mp_lookup_hit_l1_tokens_total{model_name="m"} L1
# TYPE lmcache_mp_lookup_hit_l2_tokens_total counter
lmcache_mp_lookup_hit_l2_tokens_total{model_name="m"} 0.0
# TYPE lmcache_mp_lookup_requested_tokens_total counter
lmcache_mp_lookup_requested_tokens_total{model_name="m"} 1000.0
"""


def test_parts_above_their_whole_in_one_payload_are_flagged():
    # local_compute 1,378 of 1,201 prompt tokens; LMCache L1 hits 548.8 of 500 hits: accepted silently before
    p = parse_payload(BY_SOURCE.replace("LOCAL", "1378.0"), "v.prom")
    assert any("vllm:prompt_tokens_by_source_total sums to 1,378, above vllm:prompt_tokens_total = 1,201" in w
               for w in p.warnings), p.warnings
    p = parse_payload(LM.replace("L1", "548.8"), "lm.prom")
    assert any("_l1_tokens_total + _l2_tokens_total sums to 549, above lmcache_mp_lookup_hit_tokens_total = 500"
               in w for w in p.warnings), p.warnings
    # the parts adding up exactly (as every recorded payload does) is no warning
    assert parse_payload(BY_SOURCE.replace("LOCAL", "1201.0"), "v.prom").warnings == []
    assert parse_payload(LM.replace("L1", "500.0"), "lm.prom").warnings == []


def test_import_metrics_prints_the_payloads_warnings(tmp_path):
    f = tmp_path / "v.prom"
    f.write_text(BY_SOURCE.replace("LOCAL", "1378.0"))
    r = runner.invoke(app, ["import-metrics", "--db", str(tmp_path / "k.duckdb"), "--deployment", "d",
                            "--at", "2026-01-05T12:00:00Z", str(f)])
    assert r.exit_code == 0 and "a part cannot exceed the whole" in r.output, r.output
