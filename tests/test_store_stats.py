"""Scrapes into DuckDB and exact window numbers out, on payload sequences whose answers
are worked out by hand in each test."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from kvplan.app.cli import app
from kvplan.app.data.window import stats, window_buckets
from kvplan.collectors.scrape.parse import parse_payload
from kvplan.collectors.scrape.scrape import import_file
from kvplan.collectors.scrape.store import ConflictError, payload_sha256, store_failure, store_payload
from tests.hostile import AT, payload, poison, runner, stats_json, two_scrapes
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


def one(h, q, ttft, created=CREATED, model_name="m", engine="0"):
    return {(model_name, engine): {"hits": h, "queries": q, "ttft": ttft, "created": created}}


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
        return (one(10 * k, 100 * k, [k, k, k], model_name="a", engine="0")
                | one(20 * k, 100 * k, [0, k, k], model_name="a", engine="1")
                | one(0, 50 * k, [0, 0, k], model_name="b", engine="0"))
    put(db, 0, snap(0))
    put(db, 1, snap(1))
    put(db, 0, one(0, 0, [0, 0, 0], model_name="a"), target="vllm-b")
    put(db, 1, one(30, 30, [1, 1, 1], model_name="a"), target="vllm-b")
    s = stats(db, "d", at(0), at(1))
    assert (s.prefix_cache_hits, s.prefix_cache_queries, s.requests) == (60, 280, 4)
    s = stats(db, "d", at(0), at(1), model_name="a")
    assert (s.prefix_cache_hits, s.prefix_cache_queries, s.requests) == (60, 230, 3)
    s = stats(db, "d", at(0), at(1), model_name="b")
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
    from kvplan.collectors.scrape import store

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


# -- hostile or careless inputs --------------------------------------------------------------
@pytest.mark.parametrize("col, expr", [("created", "9.9e12"), ("created", "1e26"), ("created", "'NaN'::DOUBLE"),
                                       ("value", "1e308"), ("value", "-5"), ("value", "'Infinity'::DOUBLE")])
def test_stored_poisoned_rows_are_reported_not_raised(db, tmp_path, col, expr):
    from datetime import timedelta

    from kvplan.app.data.plan import plan_range as plan
    from kvplan.app.data.window import stats

    import_file(db, "d", payload(tmp_path, "a.prom", hits=0, queries=0, ttft=[0, 0, 0]), AT)
    import_file(db, "d", payload(tmp_path, "b.prom", hits=10, queries=20, ttft=[1, 2, 2]), AT + timedelta(minutes=5))
    poison(db, **{col: (expr, "name = 'vllm:prefix_cache_hits_total'")})
    t0, t1 = AT - timedelta(hours=1), AT + timedelta(hours=1)
    st = stats(db, "d", t0, t1)
    assert st.prefix_cache_hit_rate is None or 0 <= st.prefix_cache_hit_rate <= 1
    assert any("vllm:prefix_cache_hits_total" in n and "not used" in n for n in st.notes), st.notes
    plan(db, "d", t0, t1)


def test_decrease_with_unchanged_created_is_not_traffic(db, tmp_path):
    st = two_scrapes(db, tmp_path, dict(hits=100, queries=200, ttft=[5, 8, 8]),
                     dict(hits=50, queries=100, ttft=[2, 3, 3]))
    assert st.prefix_cache_hits == 0 and st.prefix_cache_queries == 0 and st.requests == 0
    assert st.counter_resets == 0 and st.counter_decreases >= 3
    assert any("unchanged _created" in n and "vllm:prefix_cache_hits_total" in n for n in st.notes), st.notes


def test_decrease_with_a_new_created_is_a_reset(db, tmp_path):
    # restarted 2 minutes after the first scrape: counted from 0 (Prometheus's rule + the zero point)
    st = two_scrapes(db, tmp_path, dict(hits=100, queries=200, ttft=[5, 8, 8]),
                     dict(hits=50, queries=100, ttft=[2, 3, 3], created=AT.timestamp() + 120))
    assert st.prefix_cache_hits == 50 and st.prefix_cache_queries == 100 and st.requests == 3
    assert st.counter_resets > 0 and st.counter_decreases == 0 and st.notes == []


def test_created_going_backwards_is_not_traffic(db, tmp_path):
    # two processes behind one URL answering in turn: the older one's counters are not an increase
    st = two_scrapes(db, tmp_path, dict(hits=10, queries=20, ttft=[1, 2, 2], created=AT.timestamp() - 7200),
                     dict(hits=15, queries=30, ttft=[1, 3, 3], created=AT.timestamp() - 10800))
    assert st.prefix_cache_hits == 0 and st.counter_decreases > 0


def test_hit_rate_outside_0_1_is_not_reported():
    from kvplan.models.metrics.window import Increase, window_stats

    st = window_stats([Increase("vllm:prefix_cache_hits_total", 30.0),
                       Increase("vllm:prefix_cache_queries_total", 20.0)])
    assert st.prefix_cache_hit_rate is None and "outside [0, 1]" in st.notes[0]


def test_stats_say_why_figures_are_null(db, tmp_path):
    # the natural mistake: snapshots of one server imported under their file names
    a = payload(tmp_path, "vllm-0-1200.prom", hits=0, queries=0, ttft=[0, 0, 0])
    b = payload(tmp_path, "vllm-0-1205.prom", hits=30, queries=40, ttft=[3, 4, 4])
    for f, at in ((a, "2026-01-05T12:00:00Z"), (b, "2026-01-05T12:05:00Z")):
        assert runner.invoke(app, ["import-metrics", str(f), "--at", at, "--deployment", "d",
                                   "--db", str(db.path)]).exit_code == 0
    d = stats_json(db)
    assert d["prefix_cache_hit_rate"] is None
    assert any("one scrape" in n and "NAME@TIME" in n for n in d["notes"]), d["notes"]
    r = runner.invoke(app, ["stats", "--deployment", "d", "--from", "2026-02-05T11:00:00Z",
                            "--to", "2026-02-05T13:00:00Z", "--json", "--db", str(db.path)])
    assert any("no data in the window" in n for n in json.loads(r.stdout)["notes"])
    r = runner.invoke(app, ["plan", "--deployment", "d", "--from", "2026-01-05T11:00:00Z",
                            "--to", "2026-01-05T13:00:00Z", "--db", str(db.path)])
    assert r.exit_code == 0 and "one scrape" in r.output, r.output


def test_unknown_model_is_refused_with_the_known_ones(db, tmp_path):
    import_file(db, "d", payload(tmp_path), AT)
    for cmd in ("stats", "plan"):
        r = runner.invoke(app, [cmd, "--deployment", "d", "--from", "2026-01-05T11:00:00Z", "--to",
                                "2026-01-05T13:00:00Z", "--model", "ghost", "--db", str(db.path)])
        assert r.exit_code == 2 and "'ghost'" in r.output and "'m'" in r.output, r.output


# ---- a series missing from one middle scrape ----------------------------------------
def _drop(text: str, prefix: str) -> str:
    return "".join(line + "\n" for line in text.splitlines() if not line.startswith(prefix))


RECORDED = ("00_start", "01_during_unique", "02_after_unique", "03_idle", "04_during_shared", "05_after_shared")


def _recorded_history(db, drop_from_idle: str | None = None):
    """The six recorded scrapes of vllm-0 (shared_vs_unique), a minute apart; ``drop_from_idle``:
    the lines of that family left out of the fourth (idle) scrape, as a proxy truncating a body."""
    from tests.conftest import PAYLOADS

    for i, name in enumerate(RECORDED):
        text = (PAYLOADS / "shared_vs_unique" / f"{name}_vllm-0.prom").read_text()
        if name == "03_idle" and drop_from_idle:
            text = _drop(text, drop_from_idle)
        store_payload(db, deployment="d", target="vllm-0", ts=at(i), payload=parse_payload(text, name, at=at(i)),
                      sha256=payload_sha256(text), source="import")
    return stats(db, "d", at(-1), at(10))


@pytest.mark.parametrize("family", ["vllm:prompt_tokens_total", "vllm:prefix_cache_queries_total"])
def test_a_counter_missing_from_one_middle_scrape_continues_from_its_last_value(db, family):
    # recorded: prompt tokens 0, 0, 23,852, 23,852, 29,881, 47,911 (queries the same, hits 19,456 at
    # the end): the window's increase is 47,911 and the hit rate 19,456 / 47,911 = 0.4061. With the
    # family dropped from the idle scrape, the old rule took the next value (29,881) as counted from 0
    # again: 47,911 + 23,852 = 71,763 tokens, a hit rate of 19,456 / 71,763 = 0.2711
    s = _recorded_history(db, family)
    assert s.prompt_tokens == 47_911 and s.prefix_cache_queries == 47_911
    assert s.prefix_cache_hit_rate == pytest.approx(19_456 / 47_911)
    # the gap is said, naming the series
    assert any("missing from a scrape" in n and family in n for n in s.notes), s.notes


def test_a_full_history_has_no_gap_note(db):
    s = _recorded_history(db)
    assert s.prompt_tokens == 47_911
    assert not any("missing from a scrape" in n for n in s.notes)


def test_a_series_never_seen_before_still_counts_from_zero_and_a_new_created_still_resets(db):
    # never seen: LMCache MP's counter born between scrapes counts from 0 (006 kept; see
    # test_counter_absent_from_previous_scrape_counts_from_zero). A series that comes back with a new
    # _created restarted: 100 hits of 1,000 queries before, gone at minute 1, back at minute 2 at 20 of
    # 50 with _created at 1.5: the restart's zero point counts 20 of 50, total 120 of 1,050
    put(db, 0, one(0, 0, [0, 0, 0]))
    put(db, 0.5, one(100, 1000, [1, 1, 1]))
    text = "# TYPE vllm:other_total counter\nvllm:other_total 1\n"
    store_payload(db, deployment="d", target="vllm-a", ts=at(1), payload=parse_payload(text, "gap"),
                  sha256=payload_sha256(text), source="import")
    put(db, 2, one(20, 50, [0, 1, 1], created=at(1.5).timestamp()))
    s = stats(db, "d", at(-1), at(3))
    assert (s.prefix_cache_hits, s.prefix_cache_queries) == (120, 1050)


@pytest.mark.parametrize("name", ["prod\u202egpj.exe", "a\u2066b", "zero\u200bwidth", "bom\ufeff", "line\u2028sep"])
def test_names_with_bidi_or_invisible_characters_are_refused(db, name):
    # an RTL override was accepted in a deployment name: 'prod\u202egpj.exe' shows as 'prodexe.jpg'
    from kvplan.models.core.errors import KvplanError

    with pytest.raises(KvplanError, match="invisible formatting character"):
        put(db, 0, one(0, 0, [0, 0, 0]), deployment=name)
    with pytest.raises(KvplanError, match="invisible formatting character"):
        put(db, 0, one(0, 0, [0, 0, 0]), target=name)


def test_parts_above_their_whole_across_the_window_are_noted(db):
    # each payload alone adds up; across the window local_compute grows by 1,378 while all prompt tokens
    # grow by 1,201 (a counter reset by hand, a replaced exporter...): flagged in the stats
    def vllm(prompt, local):
        return ("# TYPE vllm:prompt_tokens_total counter\n"
                f'vllm:prompt_tokens_total{{engine="0",model_name="m"}} {prompt}\n'
                "# TYPE vllm:prompt_tokens_by_source_total counter\n"
                f'vllm:prompt_tokens_by_source_total{{engine="0",model_name="m",source="local_compute"}} {local}\n')
    for minute, text in ((0, vllm(5000.0, 4000.0)), (1, vllm(6201.0, 5378.0))):
        store_payload(db, deployment="d", target="v", ts=at(minute), payload=parse_payload(text, "v"),
                      sha256=payload_sha256(text), source="import")
    s = stats(db, "d", at(0), at(1))
    assert (s.prompt_tokens, s.prompt_tokens_by_source["local_compute"]) == (1201, 1378)
    assert any("vllm:prompt_tokens_by_source_total sums to 1,378, above vllm:prompt_tokens_total = 1,201" in n
               for n in s.notes), s.notes
