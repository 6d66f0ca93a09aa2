"""Scrapes into DuckDB and exact window numbers out, on payload sequences whose answers
are worked out by hand in each test."""

from datetime import UTC, datetime, timedelta

import pytest

from kvplan.app.data.window import stats, window_buckets
from kvplan.collectors.parse import parse_payload
from kvplan.collectors.store import ConflictError, payload_sha256, store_failure, store_payload
from tests.payloads import vllm_text

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
CREATED = T0.timestamp() - 3600  # servers started an hour before the first scrape


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def put(db, minute, series, target="vllm-a", deployment="d"):
    text = vllm_text(series)
    return store_payload(db, deployment=deployment, target=target, ts=at(minute),
                         payload=parse_payload(text, f"{target}@{minute}"), sha256=payload_sha256(text),
                         source="import")


def one(h, q, ttft, created=CREATED, model="m", engine="0"):
    return {(model, engine): {"hits": h, "queries": q, "ttft": ttft, "created": created}}


def test_window_counts_only_pairs_inside_it(db):
    put(db, 0, one(0, 0, [0, 0, 0]))
    put(db, 1, one(10, 100, [2, 4, 4]))
    put(db, 2, one(70, 200, [4, 9, 10]))
    s = stats(db, "d", at(0), at(2))
    assert (s.prefix_cache_hits, s.prefix_cache_queries) == (70, 200)
    assert s.prefix_cache_hit_rate == pytest.approx(0.35)
    s = stats(db, "d", at(0.5), at(2))  # only the pair (1, 2): 60 hits of 100 queries
    assert s.prefix_cache_hit_rate == pytest.approx(0.6) and s.requests == 6
    # TTFT over (1,2]: increases 0.1:2, 1.0:5, +Inf:6 -> p50 rank 3 in (0.1,1]: 0.1+0.9*(1/3)
    assert s.ttft_p50_s == pytest.approx(0.4)
    assert s.ttft_p99_s == 1.0 and s.ttft_p99.in_inf  # rank 5.94 > 5 -> +Inf bucket
    s = stats(db, "d", at(0.2), at(0.8))  # no pair inside: nothing, not zero
    assert s.prefix_cache_hit_rate is None and s.requests is None


def test_hit_rate_is_token_weighted_not_a_mean_of_ratios(db):
    put(db, 0, one(0, 0, [0, 0, 0]))
    put(db, 1, one(90, 100, [1, 1, 1]))     # interval ratio 0.9 on 100 tokens
    put(db, 2, one(90, 1100, [1, 1, 2]))    # interval ratio 0.0 on 1000 tokens
    s = stats(db, "d", at(0), at(2))
    assert s.prefix_cache_hit_rate == pytest.approx(90 / 1100)  # not (0.9 + 0) / 2


def test_counter_reset_counts_new_value_once(db):
    put(db, 0, one(100, 1000, [1, 1, 1]))
    put(db, 1, one(150, 1200, [1, 2, 2]))
    # restart at minute 1.5: counters start again from 0
    put(db, 2, one(20, 50, [0, 1, 1], created=at(1.5).timestamp()))
    put(db, 3, one(30, 80, [1, 2, 2], created=at(1.5).timestamp()))
    s = stats(db, "d", at(0), at(3))
    # 50 before the restart, 20 from restart to minute 2, 10 after: 80 hits; queries 200+50+30
    assert (s.prefix_cache_hits, s.prefix_cache_queries) == (80, 280)
    assert s.counter_resets > 0


def test_restart_that_climbs_past_the_old_value_is_caught_by_created(db):
    put(db, 0, one(100, 1000, [1, 1, 1]))
    put(db, 2, one(500, 5000, [3, 3, 3], created=at(1).timestamp()))  # restarted at 1, now higher
    s = stats(db, "d", at(0), at(2))
    # a plain "drop means reset" rule would say 400 / 4000; the new process did 500 / 5000
    assert (s.prefix_cache_hits, s.prefix_cache_queries) == (500, 5000)


def test_series_born_inside_the_window_counts_from_zero(db):
    put(db, 0, one(0, 0, [0, 0, 0]))
    both = one(10, 20, [1, 1, 1]) | one(7, 7, [0, 1, 1], created=at(0.5).timestamp(), engine="1")
    put(db, 1, both)
    s = stats(db, "d", at(0), at(1))
    assert (s.prefix_cache_hits, s.prefix_cache_queries) == (17, 27)
    s = stats(db, "d", at(0.75), at(1))  # born before this window: its first value is not counted
    assert s.prefix_cache_hits is None


def test_engines_and_models_sum_and_filter(db):
    def snap(k):
        return (one(10 * k, 100 * k, [k, k, k], model="a", engine="0")
                | one(20 * k, 100 * k, [0, k, k], model="a", engine="1")
                | one(0, 50 * k, [0, 0, k], model="b", engine="0"))
    put(db, 0, snap(0))
    put(db, 1, snap(1))
    put(db, 0, one(0, 0, [0, 0, 0], model="a"), target="vllm-b")
    put(db, 1, one(30, 30, [1, 1, 1], model="a"), target="vllm-b")
    s = stats(db, "d", at(0), at(1))
    assert (s.prefix_cache_hits, s.prefix_cache_queries, s.requests) == (60, 280, 4)
    s = stats(db, "d", at(0), at(1), model="a")
    assert (s.prefix_cache_hits, s.prefix_cache_queries, s.requests) == (60, 230, 3)
    s = stats(db, "d", at(0), at(1), model="b")
    assert s.prefix_cache_hit_rate == 0.0 and s.ttft_p50.in_inf


def test_reimport_is_a_no_op_and_a_different_payload_is_refused(db):
    assert put(db, 0, one(0, 0, [0, 0, 0])).status == "stored"
    assert put(db, 1, one(10, 100, [1, 1, 1])).status == "stored"
    assert put(db, 1, one(10, 100, [1, 1, 1])).status == "duplicate"
    with pytest.raises(ConflictError, match="target 'vllm-a' already has a different payload"):
        put(db, 1, one(11, 100, [1, 1, 1]))
    with db.read() as con:
        assert con.execute("SELECT count(*) FROM scrapes").fetchone()[0] == 2
        assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == 2 * 7
    assert stats(db, "d", at(0), at(1)).prefix_cache_hits == 10


def test_crash_mid_write_leaves_nothing(db, monkeypatch):
    from kvplan.collectors import store

    put(db, 0, one(0, 0, [0, 0, 0]))
    real = store.pa.table
    calls = []

    def boom(*a, **k):
        calls.append(1)
        if len(calls) == 2:  # after the scrape row and the series table are built
            raise MemoryError("killed")
        return real(*a, **k)

    monkeypatch.setattr(store.pa, "table", boom)
    with pytest.raises(MemoryError):
        put(db, 1, one(10, 100, [1, 1, 1]))
    monkeypatch.setattr(store.pa, "table", real)
    with db.read() as con:
        assert con.execute("SELECT count(*) FROM scrapes").fetchone()[0] == 1
    assert put(db, 1, one(10, 100, [1, 1, 1])).status == "stored"  # retry works, no conflict


def test_failed_scrape_is_a_gap_not_zero(db):
    put(db, 0, one(0, 0, [0, 0, 0]))
    store_failure(db, deployment="d", target="vllm-a", kind="vllm", ts=at(1),
                  error="http://h/metrics: timeout", source="scrape")
    put(db, 2, one(40, 100, [1, 1, 1]))
    s = stats(db, "d", at(0), at(2))
    assert s.prefix_cache_hit_rate == pytest.approx(0.4)
    log = db.fetch("scrape_log", deployment="d", limit=10)
    assert [r["ok"] for r in log] == [True, False, True]


def test_time_buckets_are_exact_per_bucket(db):
    put(db, 0, one(0, 0, [0, 0, 0]))
    put(db, 1, one(10, 100, [1, 1, 1]))
    put(db, 2, one(10, 200, [1, 2, 2]))
    pts = [b.stats() for b in window_buckets(db, "d", at(0), at(2), step_s=60)]
    assert [p.prefix_cache_hit_rate for p in pts] == [pytest.approx(0.1), pytest.approx(0.0)]
    assert [p.requests for p in pts] == [1, 1]


def test_counter_absent_from_previous_scrape_counts_from_zero(db):
    """LMCache MP exposes a counter only after its first increment, with no _created."""
    lm0 = "# TYPE lmcache_mp_l1_eviction_loop_ticks_total counter\nlmcache_mp_l1_eviction_loop_ticks_total 5\n"
    lm1 = lm0 + ("# TYPE lmcache_mp_lookup_hit_tokens_total counter\n"
                 'lmcache_mp_lookup_hit_tokens_total{cache_salt="",model_name="m"} 256\n'
                 "# TYPE lmcache_mp_lookup_requested_tokens_total counter\n"
                 'lmcache_mp_lookup_requested_tokens_total{cache_salt="",model_name="m"} 1024\n')
    lm2 = lm1.replace("} 256", "} 512").replace("} 1024", "} 2048")
    for minute, text in ((0, lm0), (1, lm1), (2, lm2)):
        store_payload(db, deployment="d", target="lmcache", ts=at(minute), payload=parse_payload(text, "lm"),
                      sha256=payload_sha256(text), source="import")
    s = stats(db, "d", at(0), at(2))  # born between 0 and 1: 256 + 256 of 1024 + 1024
    assert s.lmcache_lookup_hit_rate == pytest.approx(512 / 2048)
    s = stats(db, "d", at(0.5), at(2))  # the scrape before its birth is outside the window
    assert s.lmcache_lookup_hit_rate == pytest.approx(256 / 1024)
