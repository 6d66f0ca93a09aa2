"""The parser: what it accepts, and the errors it gives for what it refuses."""

import pytest

from kvplan.collectors.parse import PayloadError, check_content_type, parse_payload

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
    ('# TYPE lmcache_mp_lookup_hit_tokens_total counter\nlmcache_mp_lookup_hit_tokens_total{cache_salt="",model_name="m"} 3\n', "lmcache_mp"),
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
