"""Database.data_version: the key the dashboard caches its page views under."""

from __future__ import annotations

from kvplan.sql.db import Database


def test_data_version_changes_with_a_write_not_with_a_read(tmp_path):
    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    v0 = db.data_version()
    db.fetch("deployments")
    with db.snapshot() as snap:
        snap.fetch("deployments")
    assert db.data_version() == v0
    with db.write() as con:
        con.execute("INSERT INTO deployments (name) VALUES ('x')")
    assert db.data_version() != v0


def test_data_version_of_a_missing_file(tmp_path):
    assert Database(tmp_path / "none.duckdb").data_version() == (None, None, None, None)


def _rows(win):
    return sorted((r.name, r.family, r.model_name, r.le, r.labels, round(r.increase, 6), r.pairs, r.resets)
                  for r in win.rows)


def _buckets(buckets):
    return [(b.start, sorted((r.name, r.le, r.labels, round(r.increase, 6)) for r in b.rows)) for b in buckets]


def test_one_pass_reads_the_same_window_and_buckets_as_the_two_reads(tmp_path):
    """load_window_and_buckets (one scan of each raw edge) gives exactly the rows of
    load_window + window_buckets: short windows, a window around rolled-up days with daily
    points, and one whose buckets would read raw what the window reads rolled (fallback)."""
    from datetime import timedelta

    from kvplan.app.data.window import load_window, load_window_and_buckets, window_buckets
    from tests.test_app_fixtures import DEPLOYMENT, hour, rollup, scenario_db

    db = scenario_db(tmp_path)
    for day in (hour(0), hour(24)):  # the nightly rollups of both days
        rollup(db, DEPLOYMENT, day)
    cases = [(hour(0), hour(48), 3600), (hour(24), hour(48), 1800), (hour(3.5), hour(9.25), 600),
             (hour(0), hour(48) + timedelta(days=2), 86400), (hour(1), hour(47), 1800)]
    queries, one_pass = [], []
    real_fetch = db.fetch

    def fetch(name, **kw):
        queries.append(name)
        return real_fetch(name, **kw)

    db.fetch = fetch
    for f, t, step in cases:
        w1, b1 = load_window(db, DEPLOYMENT, f, t), window_buckets(db, DEPLOYMENT, f, t, step)
        queries.clear()
        w2, b2 = load_window_and_buckets(db, DEPLOYMENT, f, t, step)
        assert _rows(w2) == _rows(w1) and w2.spans == w1.spans and w2.stats == w1.stats, (f, t, step)
        assert _buckets(b2) == _buckets(b1), (f, t, step)
        one_pass.append("span_increases_and_buckets" in queries)
        if one_pass[-1]:
            assert "span_increases" not in queries and "span_buckets" not in queries
    assert w1.rows and b1
    assert True in one_pass and False in one_pass, one_pass  # both paths were compared


def _exact(rows):
    """Every field of every row (increases to 12 significant digits: DuckDB's sums), sorted
    (daily_increases orders rows by name, model and bound only)."""
    from dataclasses import astuple

    return sorted((tuple(float(f"{v:.12g}") if isinstance(v, float) else v for v in astuple(r)) for r in rows),
                  key=repr)


def test_window_and_buckets_over_their_own_spans_read_each_shared_edge_once(tmp_path):
    """The report's read: the window over one span, the chart buckets over the data inside it
    (``buckets_from``/``buckets_to``). Every row (broken and gap counts too) and
    bucket is what load_window + window_buckets give; a raw edge both read is scanned once,
    one only the window reads is read alone; the window is kept for load_window in the
    snapshot."""
    from datetime import timedelta

    from kvplan.app.data.window import load_window, load_window_and_buckets, window_buckets
    from tests.test_app_fixtures import DEPLOYMENT, hour, rollup, scenario_db

    db = scenario_db(tmp_path)
    for day in (hour(0), hour(24)):
        rollup(db, DEPLOYMENT, day)
    past = hour(48) + timedelta(days=2)  # the window runs two days past the data
    cases = [  # window, buckets, step, the edge both read (None: none, the two reads)
        ((hour(0), past), (hour(0), hour(48)), 86400, (hour(0), hour(0), hour(48) - timedelta(days=1))),
        ((hour(0) - timedelta(days=1), past), (hour(0), hour(48)), 2880, None),
        ((hour(3.5), hour(9.25)), (hour(3.5), hour(9.25)), 600, (hour(3.5), hour(3.5), hour(9.25))),
        ((hour(1), hour(47)), (hour(1), hour(40)), 1800, None),
        ((hour(24), hour(48)), (hour(24), hour(48)), 1800, (hour(24), hour(24), hour(48))),  # node2's gap at 30:00
    ]
    seen: list[tuple[str, dict]] = []
    real_fetch = db.fetch

    def fetch(name, **kw):
        seen.append((name, kw))
        return real_fetch(name, **kw)

    db.fetch = fetch
    for (f, t), (bf, bt), step, shared in cases:
        w1, b1 = load_window(db, DEPLOYMENT, f, t), window_buckets(db, DEPLOYMENT, bf, bt, step)
        seen.clear()
        w2, b2 = load_window_and_buckets(db, DEPLOYMENT, f, t, step, buckets_from=bf, buckets_to=bt)
        assert _exact(w2.rows) == _exact(w1.rows) and w2.spans == w1.spans and w2.stats == w1.stats, (f, t)
        assert [(b.start, _exact(b.rows)) for b in b2] == [(b.start, _exact(b.rows)) for b in b1], (f, t)
        both = [(kw["t_lookback"], kw["t_after"], kw["t_to"]) for n, kw in seen if n == "span_increases_and_buckets"]
        both += [(kw["day"], kw["day"], kw["day"] + timedelta(days=1)) for n, kw in seen
                 if n == "edge_rollup_rows"]  # a whole first day the nightly job stored (migration 015)
        alone = [(kw["t_lookback"], kw["t_after"], kw["t_to"]) for n, kw in seen
                 if n in ("span_increases", "span_buckets")]
        assert both == ([] if shared is None else [shared]), (f, t, both)
        assert shared not in alone, (f, t, alone)
    assert w1.rows and b1
    with db.snapshot() as snap:
        f, t = cases[0][0]
        w, _ = load_window_and_buckets(snap, DEPLOYMENT, f, t, 86400, buckets_from=hour(0), buckets_to=hour(48))
        assert load_window(snap, DEPLOYMENT, f, t) is w


def test_one_pass_keeps_broken_and_gap_counts(tmp_path):
    """A raw edge read in one pass carries the pairs' broken and gap counts as span_increases
    does: a payload without the prompt-token counter at 2:00 (its series continues at 3:00, a
    gap), the prefix-cache hits going back under the same _created at 4:00 (broken)."""
    from datetime import timedelta

    from kvplan.app.data.window import load_window, load_window_and_buckets, window_buckets
    from tests.test_app_fixtures import SimEngine, hour, put_text, vllm_exposition

    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    e = SimEngine(created=(hour(0) - timedelta(hours=1)).timestamp())
    for h in range(6):
        e.serve(10)
        lines = vllm_exposition([e]).splitlines()
        if h == 2:
            lines = [x for x in lines if not x.startswith("vllm:prompt_tokens_total")]
        if h == 4:
            lines = [x.rsplit(" ", 1)[0] + " 1.0" if x.startswith("vllm:prefix_cache_hits_total") else x
                     for x in lines]
        put_text(db, "d", "n1-vllm", hour(h), "\n".join(lines) + "\n")
    w1, b1 = load_window(db, "d", hour(0), hour(5)), window_buckets(db, "d", hour(0), hour(5), 1800)
    w2, b2 = load_window_and_buckets(db, "d", hour(0), hour(5), 1800)
    by = {r.name: r for r in w2.rows}
    assert by["vllm:prompt_tokens_total"].gaps == 1 and by["vllm:prefix_cache_hits_total"].broken >= 1
    assert _exact(w2.rows) == _exact(w1.rows) and w2.stats == w1.stats
    assert [(b.start, _exact(b.rows)) for b in b2] == [(b.start, _exact(b.rows)) for b in b1]


def test_a_span_without_a_sample_holds_no_pair(tmp_path):
    """``span_has_points`` lets the readers skip a raw span: wherever it says no, the span's
    own queries (increases, prefill intervals, cached-token intervals) return nothing, on a
    grid of spans over a restart whose _created zero point lies between two scrapes; and it
    says yes where they return something."""
    from datetime import timedelta

    from kvplan.app.data.window import span_has_points
    from kvplan.models.metrics.catalog import PREFILL_NAMES
    from kvplan.models.metrics.spellings import CACHED_RULE_NAMES
    from tests.test_app_fixtures import SimEngine, hour, put_text, vllm_exposition

    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    old = SimEngine(created=(hour(0) - timedelta(hours=1)).timestamp())
    for h in (0, 1):
        old.serve(10 + h)
        put_text(db, "d", "n1-vllm", hour(h), vllm_exposition([old]))
    new = SimEngine(created=hour(1.5).timestamp())  # restarted at 1:30, scraped at 2:00 and 3:00
    for h in (2, 3):
        new.serve(5)
        put_text(db, "d", "n1-vllm", hour(h), vllm_exposition([new]))
    grid = [hour(q / 4) for q in range(-2, 15)]
    said = {}
    with db.snapshot() as snap:
        for i, after in enumerate(grid):
            for end in grid[i + 1:]:
                lb = hour(-1)
                inc = snap.fetch("span_increases", deployment="d", t_lookback=lb, t_after=after, t_to=end,
                                 model_name=None)
                pre = snap.fetch("prefill_intervals", deployment="d", t_lookback=lb.replace(tzinfo=None),
                                 t_after=after.replace(tzinfo=None), t_to=end.replace(tzinfo=None), model_name=None,
                                 names=PREFILL_NAMES)
                cac = snap.fetch("cached_intervals_span", deployment="d", t_lookback=lb, t_after=after, t_to=end,
                                 model_name=None, names=list(CACHED_RULE_NAMES))
                has = span_has_points(snap, "d", after, end)
                said[(after, end)] = has
                if not has:
                    assert not inc and not pre and not cac, (after, end)
                any_scrape = any(after < hour(h) <= end for h in range(4))
                assert has == any_scrape, (after, end)
                if any_scrape and after >= hour(0):
                    assert inc, (after, end)
        # the restart's zero point (1:30) alone in a span: no pair ends there without the 2:00 sample
        assert said[(hour(1.25), hour(1.75))] is False
        assert said[(hour(1.25), hour(2))] is True
        rows = snap.fetch("span_increases", deployment="d", t_lookback=hour(-1), t_after=hour(1.25), t_to=hour(2),
                          model_name=None)
        assert sum(r["resets"] for r in rows) > 0  # the pair to the zero point, counted in the span with 2:00


def test_the_one_pass_cached_part_is_cached_intervals_span(tmp_path):
    """span_increases_and_buckets' part 'cached' (read with the window's pairs) holds exactly the
    rows cached_intervals_span reads on its own for the same span, with and without a model, on
    raw edges before, between and after rolled-up days; and nothing with no names asked."""
    from kvplan.models.metrics.catalog import CHART_NAMES
    from kvplan.models.metrics.spellings import CACHED_RULE_NAMES
    from tests.test_app_fixtures import DEPLOYMENT, MODEL, hour, scenario_db

    db = scenario_db(tmp_path)
    cols = ("target", "t_end", "name", "family", "model_name", "engine", "le", "labels", "increase")
    seen = 0
    with db.snapshot() as snap:
        for lb, after, end in [(hour(0), hour(0), hour(48)), (hour(0), hour(3.5), hour(9.25)),
                               (hour(23), hour(24), hour(48)), (hour(-24), hour(0), hour(24))]:
            for model in (None, MODEL):
                common = dict(deployment=DEPLOYMENT, t_lookback=lb, t_after=after, t_to=end, model_name=model)
                alone = snap.fetch("cached_intervals_span", **common, names=list(CACHED_RULE_NAMES))
                both = snap.fetch("span_increases_and_buckets", **common, step_s=3600, origin=after,
                                  names=list(CHART_NAMES), cached_names=list(CACHED_RULE_NAMES))
                part = [{k: r[k] for k in cols} for r in both if r["part"] == "cached"]
                key = lambda r: tuple(str(r[k]) for k in cols[:-1]) + (round(r["increase"], 6),)  # noqa: E731
                assert sorted(map(key, part)) == sorted(map(key, alone)), (lb, after, end, model)
                assert [(r["target"], r["t_end"]) for r in part] == sorted((r["target"], r["t_end"]) for r in part)
                seen += len(alone)
                none = snap.fetch("span_increases_and_buckets", **common, step_s=3600, origin=after,
                                  names=list(CHART_NAMES), cached_names=[])
                assert not [r for r in none if r["part"] == "cached"]
                rounded = lambda rows: [dict(r, increase=round(r["increase"], 6)) for r in rows  # noqa: E731
                                        if r["part"] != "cached"]  # DuckDB's parallel sums: last bits vary
                assert rounded(none) == rounded(both)
    assert seen > 0
