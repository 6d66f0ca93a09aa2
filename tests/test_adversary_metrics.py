"""The adversary's metric cases of issue 27 (1 to 8), each built as literal exposition text (or
from the recorded two-server run) with its expected numbers worked out by hand here, not by the
code under test."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kvplan.app.data.plan import plan_range
from kvplan.app.data.prefill import plan_measurement
from kvplan.app.data.window import stats
from kvplan.collectors.scrape.payload import PayloadError
from kvplan.collectors.scrape.scrape import import_file
from tests.recorded import import_case, scrapes

T0 = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
STEP = timedelta(minutes=5)
DAY_OLD = (T0 - timedelta(days=1)).timestamp()
LBL = '{engine="0",model_name="m"}'


def at(i: int) -> datetime:
    return T0 + i * STEP


def counter(name: str, value: float | None, created: float, labels: str = LBL, *, prefix: str = "vllm:",
            total: bool = True, typed: bool = True) -> list[str]:
    """One counter family (one series) with its _created, as prometheus_client writes it."""
    if value is None:
        return []
    full = f"{prefix}{name}"
    out = [f"# HELP {full} {name}", f"# TYPE {full} counter"] if typed else []
    out.append(f"{full}{'_total' if total else ''}{labels} {float(value)}")
    out += [f"# TYPE {full}_created gauge", f"{full}_created{labels} {created}"]
    return out


def hist(name: str, count: float | None, created: float, total_sum: float = 1.0) -> list[str]:
    """A one-bucket histogram (everything at or below +Inf) with its _created."""
    if count is None:
        return []
    full = f"vllm:{name}"
    return [f"# HELP {full} {name}", f"# TYPE {full} histogram",
            f'{full}_bucket{{engine="0",le="+Inf",model_name="m"}} {float(count)}',
            f"{full}_count{LBL} {float(count)}", f"{full}_sum{LBL} {float(total_sum)}",
            f"# TYPE {full}_created gauge", f"{full}_created{LBL} {created}"]


def vllm_payload(created: float, *, queries=None, hits=None, prompt=None, requests=None, cached=None,
                 ext_hits=None, ext_queries=None, by_source: dict[str, tuple[float, float]] | None = None,
                 prompt_hist: bool = True) -> str:
    """A vLLM /metrics body in vLLM's family order (prefix cache first, then prompt tokens and the
    histograms). ``None`` leaves a family out; ``by_source``: source -> (value, its _created)."""
    lines = counter("prefix_cache_queries", queries, created) + counter("prefix_cache_hits", hits, created)
    lines += counter("external_prefix_cache_queries", ext_queries, created)
    lines += counter("external_prefix_cache_hits", ext_hits, created)
    lines += counter("prompt_tokens", prompt, created)
    lines += counter("prompt_tokens_cached", cached, created)
    if by_source:
        lines += ["# HELP vllm:prompt_tokens_by_source by source", "# TYPE vllm:prompt_tokens_by_source counter"]
        lines += [f'vllm:prompt_tokens_by_source_total{{engine="0",model_name="m",source="{s}"}} {float(v)}'
                  for s, (v, _) in by_source.items()]
        lines += ["# TYPE vllm:prompt_tokens_by_source_created gauge"]
        lines += [f'vllm:prompt_tokens_by_source_created{{engine="0",model_name="m",source="{s}"}} {c}'
                  for s, (_, c) in by_source.items()]
    lines += hist("time_to_first_token_seconds", requests, created)
    lines += hist("request_prefill_time_seconds", requests, created, total_sum=0.01 * (requests or 0))
    if prompt_hist and prompt is not None and requests is not None:
        lines += hist("request_prompt_tokens", requests, created, total_sum=prompt)
    return "\n".join(lines) + "\n"


def store(db, tmp_path: Path, texts: list[str], target: str = "v", dep: str = "d", start: int = 0) -> None:
    for i, text in enumerate(texts, start=start):
        f = tmp_path / f"{dep}-{i}.prom"
        f.write_text(text)
        import_file(db, dep, f, at(i), target=target)


def window(db, n: int, dep: str = "d"):
    return stats(db, dep, T0, at(n - 1))


# ---- 1. a truncated first scrape of a day-old engine ---------------------------------------
def test_a_series_first_seen_in_the_window_under_an_old_created_is_not_new_traffic(db, tmp_path):
    # 13 scrapes 5 minutes apart of an engine started a day ago: 10,000 prompt tokens and 100
    # requests each interval. The window's first scrape is cut off after vllm:prefix_cache_hits.
    def full(i):
        return vllm_payload(DAY_OLD, queries=500_000 + 10_000 * i, hits=250_000 + 5_000 * i,
                            prompt=500_000 + 10_000 * i, requests=5_000 + 100 * i)

    first = full(0)
    cut = first[: first.index("# HELP vllm:prompt_tokens ")]
    store(db, tmp_path, [cut] + [full(i) for i in range(1, 13)])
    s = window(db, 13)
    # the prompt tokens and requests are seen from scrape 1 on: 11 intervals, not the lifetime
    assert s.prompt_tokens == 11 * 10_000 == 110_000
    assert s.requests == 11 * 100 == 1_100
    assert any("vllm:prompt_tokens_total" in n and "missing" in n for n in s.notes), s.notes


def test_a_new_label_child_with_an_old_created_does_not_push_cached_above_prompt(db, tmp_path):
    # local_cache_hit (a child created with the engine, a day ago) is missing from scrapes 0-5
    # and reported from scrape 6 on at its lifetime value: 300,000 + 3,000 per interval.
    def p(i):
        src = {"local_compute": (400_000 + 7_000 * i, DAY_OLD)}
        if i >= 6:
            src["local_cache_hit"] = (300_000 + 3_000 * i, DAY_OLD)
        return vllm_payload(DAY_OLD, queries=700_000 + 10_000 * i, hits=300_000 + 3_000 * i,
                            prompt=700_000 + 10_000 * i, requests=5_000 + 100 * i, by_source=src)

    store(db, tmp_path, [p(i) for i in range(13)])
    s = window(db, 13)
    assert s.prompt_tokens == 12 * 10_000
    # counted from its first value (scrape 6): 6 intervals of 3,000, not 318,000 from a zero at scrape 5
    assert s.cached_prompt_tokens == 6 * 3_000
    assert s.cached_prompt_tokens <= s.prompt_tokens
    assert any("prompt_tokens_by_source_total" in n and "missing" in n for n in s.notes), s.notes


# ---- 2. one glitch sample of 0 ---------------------------------------------------------------
def test_one_glitch_sample_of_zero_with_the_same_created_counts_neither_the_drop_nor_the_climb_back(db, tmp_path):
    def p(i):
        prompt = 0 if i == 6 else 550_000 + 10_000 * i
        return vllm_payload(DAY_OLD, queries=550_000 + 10_000 * i, hits=0, prompt=prompt, requests=5_000 + 100 * i)

    store(db, tmp_path, [p(i) for i in range(13)])
    s = window(db, 13)
    # the counter went from 550,000 to 670,000: 120,000, the glitch in between counts nothing
    assert s.prompt_tokens == 670_000 - 550_000 == 120_000
    assert s.counter_decreases == 2  # the counter and the prompt-length histogram's _sum (both glitched)
    assert any("not counted" in n for n in s.notes), s.notes


# ---- 3. two replicas behind one URL ----------------------------------------------------------
def test_two_processes_behind_one_url_count_only_what_each_added(db, tmp_path):
    ca, cb = (T0 - timedelta(days=2)).timestamp(), DAY_OLD

    def p(i):  # even scrapes answered by A, odd ones by B; each adds 10,000 per 5 minutes
        if i % 2 == 0:
            v = 300_000 + 10_000 * i
            return vllm_payload(ca, queries=v, hits=0, prompt=v, requests=3_000 + 100 * i)
        v = 100_000 + 10_000 * i
        return vllm_payload(cb, queries=v, hits=0, prompt=v, requests=1_000 + 100 * i)

    store(db, tmp_path, [p(i) for i in range(13)])
    s = window(db, 13)
    a_added = (300_000 + 120_000) - 300_000  # A at scrapes 0 .. 12
    b_added = (100_000 + 110_000) - (100_000 + 10_000)  # B at scrapes 1 .. 11
    assert s.prompt_tokens == a_added + b_added == 220_000
    assert s.requests == 1_200 + 1_000
    assert any("two processes" in n for n in s.notes), s.notes


# ---- 4. an upgrade mid-window ----------------------------------------------------------------
def test_an_upgrade_mid_window_reads_cached_tokens_per_stretch_of_the_targets_life(db, tmp_path):
    # scrapes 0-6: vLLM 0.15 (no prompt_tokens_cached), started a day ago; restart 2.5 min after
    # scrape 6 into 0.16 (has it). Every interval: 10,000 prompt tokens, 6,000 of them cached.
    store(db, tmp_path, _upgrade(DAY_OLD))
    s = window(db, 13)
    assert s.prompt_tokens == 12 * 10_000
    assert s.cached_prompt_tokens == 12 * 6_000 == 72_000  # 36,000 by hits, then 36,000 by the counter
    assert plan_measurement(db, "d", T0, at(12)).cached_prompt_tokens == s.cached_prompt_tokens


def _day(t: datetime) -> tuple[datetime, datetime, datetime]:
    """The UTC day of ``t``, and the start of a window that reads that day from the rollups
    (``spans.plan_spans``: the rolled run starts EDGE_LOOKBACK after the window does)."""
    from kvplan.models.metrics.spans import EDGE_LOOKBACK

    d0 = t.replace(hour=0, minute=0, second=0, microsecond=0)
    return d0, d0 + timedelta(days=1), d0 - EDGE_LOOKBACK


def _upgrade(old_created: float) -> list[str]:
    """Case 4's scrapes: 0-6 vLLM 0.15 started at ``old_created``, then 0.16 after a restart."""
    new = (at(6) + STEP / 2).timestamp()

    def p(i):
        if i <= 6:
            return vllm_payload(old_created, queries=500_000 + 10_000 * i, hits=300_000 + 6_000 * i,
                                ext_queries=0, ext_hits=0, prompt=500_000 + 10_000 * i, requests=5_000 + 100 * i)
        k = i - 6
        return vllm_payload(new, queries=10_000 * k, hits=6_000 * k, ext_queries=0, ext_hits=0,
                            prompt=10_000 * k, cached=6_000 * k, requests=100 * k)

    return [p(i) for i in range(13)]


def test_the_overview_reads_an_upgrade_mid_window_per_stretch_raw_and_from_the_rollups(db, tmp_path):
    # case 4 read by the dashboard: the Overview's window (raw edges) and the same day read
    # from the nightly rollups give the 72,000 cached tokens stats and plan give, not the
    # counter's 36,000 alone (the rule chosen once per target over the window)
    from kvplan.app.views.overview import overview
    from tests.test_app_fixtures import rollup

    store(db, tmp_path, _upgrade(DAY_OLD))
    ov = overview(db, "d", T0, at(12))
    assert ov.window.stats.prompt_tokens == 120_000
    assert ov.window.stats.cached_prompt_tokens == 72_000
    assert ov.plan.hit_rate == pytest.approx(0.6)
    # the rollup path: the old process started two days before (before the rollup's one-day
    # look-back, so its first scrape's count is not new traffic there either)
    store(db, tmp_path, _upgrade((T0 - timedelta(days=2)).timestamp()), dep="r")
    d0, d1, w0 = _day(T0)
    rollup(db, "r", d0)
    with db.read() as con:  # the nightly rollup stored the day's figure read per stretch
        assert con.execute("SELECT increase FROM daily_rollups WHERE name = 'kvplan:cached_prompt_tokens_total' "
                           "AND labels LIKE '%\"scope\":\"all\"%'").fetchall() == [(72_000.0,)]
    ov = overview(db, "r", w0, d1)
    assert ov.window.rolled_days == 1  # read from the rollups
    assert ov.window.stats.prompt_tokens == 120_000
    assert ov.window.stats.cached_prompt_tokens == 72_000 == stats(db, "r", w0, d1).cached_prompt_tokens
    assert ov.plan.hit_rate == pytest.approx(0.6)


def test_a_series_created_the_day_before_its_first_scrape_reads_alike_raw_and_from_the_rollups(db, tmp_path):
    # vLLM 0.15 started at 10:00 the day before its first scrape (T0): its first count, 500,000
    # prompt tokens, is its traffic since _created. A window starting after _created counts none of
    # it, one starting before counts all of it: raw and through the nightly rollup alike (the
    # rollup looks back a day for a series' _created; the rolled days begin a day after the window
    # does, spans.EDGE_LOOKBACK). Before, a window starting at 10:01 the day before read the day
    # from the rollup and counted the 500,000 that the raw read leaves out.
    from kvplan.app.views.overview import overview
    from tests.test_app_fixtures import rollup

    store(db, tmp_path, _upgrade(DAY_OLD), dep="r")
    d0, d1, _ = _day(T0)
    rollup(db, "r", d0)
    created = datetime.fromtimestamp(DAY_OLD, UTC)
    for w0, lifetime, rolled in ((created + timedelta(minutes=1), 0, 0), (d0 - timedelta(days=1), 500_000, 1)):
        raw = stats(db, "r", w0, d1)
        ov = overview(db, "r", w0, d1)
        assert raw.prompt_tokens == ov.window.stats.prompt_tokens == lifetime + 12 * 10_000
        assert raw.cached_prompt_tokens == ov.window.stats.cached_prompt_tokens
        assert raw.requests == ov.window.stats.requests
        assert ov.window.rolled_days == rolled


# ---- 5. the old spelling's hits above its queries --------------------------------------------
def test_old_spelling_hits_above_queries_are_refused_like_the_new_spelling(db, tmp_path):
    f = tmp_path / "old.prom"
    f.write_text("\n".join(
        counter("gpu_prefix_cache_queries", 1_000, DAY_OLD) + counter("gpu_prefix_cache_hits", 5_000, DAY_OLD)
        + counter("prompt_tokens", 1_000, DAY_OLD)) + "\n")
    with pytest.raises(PayloadError, match="hits cannot exceed queries") as e:
        import_file(db, "d", f, T0, target="v")
    assert "vllm:gpu_prefix_cache_hits_total" in str(e.value)


# ---- 6. counters without _total, vllm_ beside vllm:, sglang_ beside sglang: -----------------
@pytest.mark.parametrize("typed", [False, True])
def test_counters_written_without_total_are_read(db, tmp_path, typed):
    # without TYPE lines, or under a TYPE line that names the family with _total while the
    # samples have none: the text parser makes these untyped families
    def p(i):
        lines = [f"vllm:prefix_cache_queries{LBL} {10_000.0 * i}", f"vllm:prefix_cache_hits{LBL} {4_000.0 * i}",
                 f"vllm:prompt_tokens{LBL} {10_000.0 * i}"]
        if typed:
            lines = [x for line in lines
                     for x in (f"# TYPE {line.split('{')[0]}_total counter", line)]
        return "\n".join(lines) + "\n"

    store(db, tmp_path, [p(i) for i in (1, 2)])
    s = stats(db, "d", T0, at(1))
    assert s.prompt_tokens == 10_000 and s.prefix_cache_hit_rate == 0.4
    assert not any("V0" in n for n in s.notes), s.notes


def test_vllm_underscore_names_beside_colon_names_are_read(db, tmp_path):
    def p(i):
        return "\n".join(counter("prefix_cache_queries", 10_000 * i, DAY_OLD)
                         + counter("prefix_cache_hits", 4_000 * i, DAY_OLD)
                         + counter("prompt_tokens", 10_000 * i, DAY_OLD, prefix="vllm_")) + "\n"

    store(db, tmp_path, [p(i) for i in (1, 2)])
    s = stats(db, "d", T0, at(1))
    assert s.prompt_tokens == 10_000
    assert s.prefix_cache_hit_rate == 0.4
    assert not any("V0" in n for n in s.notes), s.notes


def test_sglang_underscore_names_beside_colon_names_are_read(db, tmp_path):
    def p(i):
        return "\n".join(counter("prompt_tokens", 10_000 * i, DAY_OLD, prefix="sglang:", labels='{model_name="m"}')
                         + counter("cached_tokens", 3_000 * i, DAY_OLD, prefix="sglang_",
                                   labels='{model_name="m"}')) + "\n"

    store(db, tmp_path, [p(i) for i in (1, 2)])
    s = stats(db, "d", T0, at(1))
    assert s.prompt_tokens == 10_000
    assert s.cached_prompt_tokens == 3_000 and s.prefix_cache_hit_rate == 0.3
    assert not any("V0" in n for n in s.notes), s.notes


# ---- 7. no prompt-length histogram -----------------------------------------------------------
def test_without_a_prompt_length_histogram_the_plan_does_not_claim_no_requests(db, tmp_path):
    def p(i):  # vLLM 0.12-like: no computed-token histogram, and here no request_prompt_tokens either
        return vllm_payload(DAY_OLD, queries=500_000 + 10_000 * i, hits=200_000 + 4_000 * i,
                            ext_queries=0, ext_hits=0, prompt=500_000 + 10_000 * i, requests=5_000 + 100 * i,
                            prompt_hist=False)

    store(db, tmp_path, [p(i) for i in range(13)])
    s = window(db, 13)
    assert s.requests == 1_200 and s.prompt_tokens == 120_000
    with db.snapshot() as src:
        plan = plan_range(src, "d", T0, at(12)).to_dict()
    reason = plan["reason"]
    assert "no requests" not in reason and "window is 1 s" not in reason, reason
    m = plan_measurement(db, "d", T0, at(12))
    assert m.requests == 1_200 and m.cached_prompt_tokens == 12 * 4_000


# ---- 8. two real vLLM servers ----------------------------------------------------------------
def test_parts_and_whole_are_compared_over_the_same_servers(db):
    import_case(db, "two_servers")
    ss = scrapes("two_servers")
    s = stats(db, "two_servers", ss[0].at, ss[-1].at)
    assert not any("part cannot exceed the whole" in n for n in s.notes), s.notes
    # the check still fires when one server's part does exceed its own whole
    from kvplan.models.metrics.increase import Increase
    from kvplan.models.metrics.window_notes import sum_notes

    rows = [Increase("vllm:prompt_tokens_total", 100.0, target="a"), Increase("vllm:prompt_tokens_total", 900.0,
                                                                               target="b"),
            Increase("vllm:prompt_tokens_cached_total", 200.0, target="a"),
            Increase("vllm:prompt_tokens_cached_total", 100.0, target="b")]
    notes = sum_notes(rows)
    assert len(notes) == 1 and "200" in notes[0] and "100" in notes[0], notes


def test_the_overview_of_two_real_servers_gives_stats_numbers_raw_and_from_the_rollups(db):
    # case 8 read by the dashboard: the recorded two-server run's Overview (raw edges, then the
    # same day from the nightly rollups) gives stats' cached tokens, without the suspect note
    from kvplan.app.views.overview import overview
    from tests.test_app_fixtures import rollup

    import_case(db, "two_servers")
    ss = scrapes("two_servers")
    d0, d1, w0 = _day(ss[0].at)
    assert ss[-1].at < d1  # one UTC day
    want = stats(db, "two_servers", w0, d1)
    assert want.cached_prompt_tokens and want.prompt_tokens
    for rolled in (False, True):
        if rolled:
            rollup(db, "two_servers", d0)
        ov = overview(db, "two_servers", w0, d1)
        assert ov.window.rolled_days == int(rolled)
        s = ov.window.stats
        assert (s.cached_prompt_tokens, s.prompt_tokens) == (want.cached_prompt_tokens, want.prompt_tokens)
        assert not any("part cannot exceed the whole" in n for n in s.notes), s.notes
        assert ov.plan.hit_rate == pytest.approx(want.cached_prompt_tokens / want.prompt_tokens)


# ---- the same rules in Prometheus ingestion (collectors/prometheus/step_math.py) -------------
def test_ingestion_counts_a_glitch_and_two_processes_as_the_direct_import_does():
    import numpy as np

    from kvplan.collectors.prometheus.step_math import step_increments

    minute = 60_000
    base = int(T0.timestamp() * 1000)  # the processes started before (1.5e12, 1.6e12 ms)
    t = base + np.arange(13, dtype=np.int64) * 5 * minute
    # case 2: 550,000 .. 670,000 with one 0 at the 7th sample, _created unchanged
    v = np.array([0.0 if i == 6 else 550_000 + 10_000 * i for i in range(13)])
    created = np.full(13, 1.6e12)
    _, delta, _, resets, _ = step_increments(t, v, created, base - minute, t[-1], minute, 600_000)
    assert delta.sum() == 120_000 and resets.sum() == 0
    # case 3: processes A (even samples) and B (odd ones), each adding 10,000 per 5 minutes
    v = np.array([300_000 + 10_000 * i if i % 2 == 0 else 100_000 + 10_000 * i for i in range(13)], dtype=float)
    created = np.array([1.5e12 if i % 2 == 0 else 1.6e12 for i in range(13)])
    _, delta, _, _, _ = step_increments(t, v, created, base - minute, t[-1], minute, 600_000)
    assert delta.sum() == 120_000 + 100_000
