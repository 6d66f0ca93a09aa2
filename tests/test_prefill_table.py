"""The prefill fit and the priced window over columns (kvplan.models.prefill.table, issue 35 item
4) give the numbers the per-interval code gave: tests/prefill_reference.py holds that code
(8834333's reader, ``rounds``, fit and ``PricedWindow.from_intervals``), run here side by side on

* recorded real payloads (tests/fixtures/payloads: vLLM releases with and without computed-token,
  cached-token and connector counters, a restart, two servers, LMCache stores);
* the recorded topology A/B (tests/fixtures/topology-ab: a real history the fit identifies);
* a database built as bench/dashboard_bench.py builds its 90 days (3 days x 16 engines here,
  rolled up by the nightly job: stored days and raw edges).

Given the same intervals, scrape rounds, the fitted model (parts, bands, every bootstrap draw,
notes) and the priced window are equal to the bit (``==``): the columns add in the same order
as the per-interval loops. The reader is compared to 1e-12 relative: DuckDB's parallel sums of
the raw edges differ in the last bit from one run of the same query to the next (on the
benchmark's 90 days about 130 of 34,560 rows, by 4e-16), for the reference as for the new code.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from datetime import timedelta
from pathlib import Path

import pytest

from kvplan.app.data.prefill import prefill_intervals, prefill_table
from kvplan.models.core.timeutil import aware_utc, from_epoch_s
from kvplan.models.prefill import table as table_module
from kvplan.models.prefill.fit import fit_prefill_cost
from kvplan.models.prefill.table import IntervalTable, rounds
from kvplan.models.prefill.window import PricedWindow
from kvplan.sql.db import Database
from tests import prefill_reference as ref
from tests.recorded import import_case
from tests.topology_ab import SIDES

ROOT = Path(__file__).resolve().parents[1]


def _close(u, v) -> bool:
    if isinstance(u, tuple):
        return len(u) == len(v) and all(_close(x, y) for x, y in zip(u, v, strict=True))
    if isinstance(u, float) and isinstance(v, float):
        return math.isclose(u, v, rel_tol=1e-12, abs_tol=1e-12)
    return u == v


def _check(db: Database, deployment: str, t_from, t_to, windows) -> list:
    """The reader against the reference's; then, on the reference's intervals, rounds, the fit
    and each priced window against the reference's, to the bit. Returns the intervals."""
    with db.snapshot() as src:
        want = ref.prefill_intervals(src, deployment, t_from, t_to)
        got = prefill_intervals(src, deployment, t_from, t_to)
    assert len(got) == len(want)
    for x, y in zip(got, want, strict=True):
        assert _close(dataclasses.astuple(x), dataclasses.astuple(y)), (x, y)
    table = IntervalTable.of(want)
    assert table.intervals() == want
    assert rounds(want) == ref.rounds(want)
    for group in (True, False):
        assert fit_prefill_cost(table, history="h", group_rounds=group) == \
            ref.fit_prefill_cost(want, history="h", group_rounds=group)
    assert fit_prefill_cost(want, history="h") == ref.fit_prefill_cost(want, history="h")
    for a, b in windows:
        a, b = aware_utc(a).timestamp(), aware_utc(b).timestamp()
        assert PricedWindow.from_intervals(table, t_from=a, t_to=b) == ref.priced_window(want, t_from=a, t_to=b)
    return want


@pytest.fixture
def db(tmp_path) -> Database:
    d = Database(tmp_path / "k.duckdb")
    d.migrate()
    return d


@pytest.mark.parametrize("case", ["shared_vs_unique", "restart", "two_servers", "multi_engine", "no_lmcache"])
def test_recorded_payloads_give_the_reference_numbers(db, case):
    ss = import_case(db, case, "dep")
    t0, t1 = ss[0].at, ss[-1].at
    ivs = _check(db, "dep", t0, t1, [(t0, t1), (t0 + (t1 - t0) / 3, t1), (t0, t0 + (t1 - t0) / 2)])
    assert any(iv.requests > 0 for iv in ivs)


@pytest.mark.parametrize("side", SIDES)
def test_the_recorded_topology_ab_gives_the_reference_numbers(topology_ab, side):
    dbs, metas = topology_ab
    m = metas[side]
    t0 = from_epoch_s(min(p["start"] for p in m["phases"].values()) - 5.0)
    t1 = from_epoch_s(max(p["end"] for p in m["phases"].values()) + 5.0)
    sp = m["phases"]["sequential"]
    phase = (from_epoch_s(sp["start"] - 1.2), from_epoch_s(sp["end"] + 3))
    ivs = _check(dbs[side], f"ab-{side}", t0, t1, [(t0, t1), phase])
    model = ref.fit_prefill_cost(ivs, history="h")
    assert model.status == "fitted" and len(model.draws) == 200  # a fit with bands, not a no-data shortcut


def _bench():
    spec = importlib.util.spec_from_file_location("dashboard_bench", ROOT / "bench" / "dashboard_bench.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_benchmarks_history_gives_the_reference_numbers(tmp_path):
    bench = _bench()
    db, dep, counts = bench.replay(tmp_path / "h.duckdb", "shared_vs_unique", days=3, engines=16, interval_min=60)
    bench.roll_up(db, dep, 3)
    t0 = bench.T0
    end = t0 + timedelta(days=3)
    with db.read() as con:
        assert con.execute("SELECT count(*) FROM prefill_rollup_days").fetchone()[0] == 3
    ivs = _check(db, dep, t0, end, [(t0, end), (t0 + timedelta(hours=5, minutes=30), t0 + timedelta(days=2, hours=3)),
                                    (end - timedelta(days=1), end)])
    assert len(ivs) == 4 * 3 * 24  # 2 vLLM + 2 LMCache targets, hourly, 3 days


def test_one_history_groups_its_scrape_rounds_once(db, monkeypatch):
    # the fit and the window priced over the whole history shared nothing before: each grouped
    # every interval into rounds (34,560 intervals at 90 days x 16 targets, twice per page)
    ss = import_case(db, "shared_vs_unique", "dep")
    t0, t1 = ss[0].at, ss[-1].at
    calls: list = []
    original = table_module.IntervalTable._rounds

    def counting(self, tol):
        calls.append(tol)
        return original(self, tol)

    monkeypatch.setattr(table_module.IntervalTable, "_rounds", counting)
    with db.snapshot() as src:
        table = prefill_table(src, "dep", t0, t1)
    fit_prefill_cost(table, history="h")
    PricedWindow.from_intervals(table, t_from=aware_utc(t0).timestamp(), t_to=aware_utc(t1).timestamp())
    assert calls == [None]
