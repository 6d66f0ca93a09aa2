"""Shared fixtures, and which tests are slow.

Layers: `make test-fast` runs `-m "not stack and not browser and not prometheus and not slow"`
(the inner loop, under two minutes); `make test` runs everything. A test is `slow` when it drives
a whole integration each time (a Streamlit page through AppTest, a PDF/HTML report through
vl-convert and WeasyPrint, a wheel build, a daemon process): marked here, in one place, by module
or by test, so a test file needs no marker of its own. The fuzz runs in both layers: 100
examples and every family dropped in `make test`, a short fixed-seed run in `make test-fast`
(KVPLAN_FUZZ_EXAMPLES=10, KVPLAN_FUZZ_DROPS=6; two xdist workers)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kvplan.sql.db import Database

if TYPE_CHECKING:
    from tests.hostile import Server

FIXTURES = Path(__file__).parent / "fixtures"
PAYLOADS = FIXTURES / "payloads"

pytest_plugins = ["tests.stack_fixtures"]


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """No test sees the developer's KVPLAN_* settings or ./kvplan.toml."""
    for k in list(os.environ):
        if k.startswith("KVPLAN_") and k not in ("KVPLAN_STACK_VENV", "KVPLAN_STACK_HOME"):
            monkeypatch.delenv(k, raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def _no_report_prewarm_left_running():
    """A page run (AppTest) starts the Report page's prewarm thread (``app.state.prewarm_reports``),
    which builds a report in the background; it ends before the next test starts, so no test
    counts (or patches under) another test's reads. It failed a test that logs the report's reads
    in CI."""
    yield
    deadline = time.monotonic() + 300
    for t in threading.enumerate():
        if t.name == "kvplan-report-prewarm":
            t.join(max(0.0, deadline - time.monotonic()))
            assert not t.is_alive(), "the report prewarm thread still runs after 300 s"


SLOW_MODULES = {
    "test_app_pages.py": "every page through Streamlit's AppTest",
    "test_one_number.py": "stats, plan, Overview and the report on every recorded case and engine fixture",
    "test_app_recorded.py": "pages through AppTest on each recorded case",
    "test_whatif_app.py": "the What-if page through AppTest",
    "test_relabel.py": "the demo dataset through the Runs page",
    "test_report.py": "the report rendered (vl-convert SVGs, WeasyPrint PDF)",
    "test_demo.py": "the whole demo dataset loaded",
    "test_packaging.py": "a wheel built and installed into a fresh venv",
    "test_concurrency.py": "a writer and readers for CONCURRENCY_TEST_S seconds",
    "test_topology_ab.py": "the recorded two-rank A/B replayed and its TTFT passes run, per case",
    "test_history.py": "the recorded two-rank A/B loaded (about a minute), then every command on it",
    "test_prompts_ray.py": "a local Ray cluster started, the prompt check run on it",
    "test_whatif_month.py": "a month of recorded traffic through the report, the pages and the CLI",
    "test_edge_rollups.py": "four days of hourly scrapes stored, then rolled up night by night",
}
SLOW_TESTS = {
    "test_scheduler.py::test_a_killed_daemon_loses_nothing_committed_and_restarts_cleanly": "a daemon killed",
    "test_scheduler.py::test_the_daemon_scrapes_on_its_interval_while_one_target_hangs": "a daemon run",
    "test_scheduler.py::test_a_slow_target_delays_no_other": "a daemon round against a slow target",
    "test_scheduler.py::test_on_start_missed_nights_are_run_and_killed_runs_marked": "a daemon start",
    "test_cli.py::test_stats_json_tpot_and_itl_on_the_scenario": "the scenario database through the CLI",
    "test_app_fixtures.py::test_scenario_expected_numbers_match_the_store": "the scenario database read whole",
    "test_db_reading.py::test_one_pass_reads_the_same_window_and_buckets_as_the_two_reads": "90 days read twice",
    "test_app_service.py::test_gauges_read_from_gauge_rollups_equal_raw": "days of gauges rolled up and read twice",
    "test_app_service.py::test_a_window_read_from_rollups_counts_what_the_raw_samples_count": "weeks rolled up",
    "test_app_service.py::test_engines_in_window_agree_with_the_raw_engines_query": "weeks of engines read twice",
    "test_app_service.py::test_daily_chart_points_from_rollups_equal_the_raw_ones": "days rolled up and read twice",
    "test_dashboard.py::test_sigterm_to_kvplan_dashboard_stops_its_streamlit_child": "a Streamlit child started",
    "test_model_capacity.py::test_a_plan_at_the_largest_fleet_allowed_takes_seconds": "plans at 100,000 GPUs",
    "test_increase_rule.py::test_an_old_database_ends_identical_to_a_new_one": "every frozen migration run, then all",
    "test_model_capacity.py::test_erlang_c_of_large_fleets_matches_the_exact_formula": "exact Erlang C at 3,000",
    "test_sweep.py::test_pilot_sweep_stores_both_sides_and_prints_goodput": "a whole pilot sweep",
    "test_data_prefill.py::test_a_short_recording_is_not_identifiable_and_says_so": "a recording fitted whole",
    "test_app_service.py::test_saved_facts_override_the_config_and_scale_the_plan_by_gpus_per_engine": "plans twice",
    "test_app_service.py::test_kvplan_plan_prints_tiers_cost_per_token_and_the_json_keys": "the plan CLI on a store",
    "test_prefill_table.py::test_the_recorded_topology_ab_gives_the_reference_numbers": "the two-rank A/B loaded",
    "test_db_reading.py::test_a_span_without_a_sample_holds_no_pair": "a grid of 136 spans, four queries each",
    "test_db_reading.py::test_window_and_buckets_over_their_own_spans_read_each_shared_edge_once":
        "two days rolled up, five windows read three ways",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        name = Path(str(item.fspath)).name
        if name in SLOW_MODULES or f"{name}::{getattr(item, 'originalname', item.name)}" in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session", autouse=True)
def _scenario_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The shared scenario database (``test_app_fixtures.scenario_db``) is built once per test run:
    in the run's base temporary folder, the parent of each xdist worker's own."""
    from tests import test_app_fixtures

    base = tmp_path_factory.getbasetemp()
    test_app_fixtures.SHARED = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "kvplan-scenario"


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One freshly migrated database file per session; ``db`` hands each test a copy (every
    migration run once, not once per test)."""
    path = tmp_path_factory.mktemp("template") / "kvplan.duckdb"
    Database(path).migrate()
    return path


@pytest.fixture
def db(tmp_path: Path, migrated_template: Path) -> Database:
    dst = tmp_path / "kvplan.duckdb"
    shutil.copyfile(migrated_template, dst)
    d = Database(dst)
    d.migrate()  # a no-op on the copy: every migration is recorded as applied
    return d


@pytest.fixture
def server(request):
    """Make misbehaving loopback servers (tests.hostile.Server); all closed at the end."""
    made = []

    def make(mode: str, limit: float = 0, body: Path | None = None) -> Server:
        from tests.hostile import GOOD, Server

        made.append(Server(mode, limit, body or GOOD))
        return made[-1]

    yield make
    for s in made:
        s.close()


@pytest.fixture(scope="session")
def topology_ab(tmp_path_factory):
    """Both sides of the recorded topology A/B in DuckDB (built once a session, about a minute:
    264 scrape records on the private side, 195 on the shared one). Read them; copy before writing."""
    from tests.topology_ab import FIX, SIDES, load_side, meta

    d = tmp_path_factory.mktemp("topology-ab")
    dbs = {s: load_side(d / f"{s}.duckdb", FIX / s) for s in SIDES}
    return dbs, {s: meta(FIX / s) for s in SIDES}


@pytest.fixture(scope="session")
def topology_ab_3c(tmp_path_factory):
    """Both sides of the second recorded topology A/B (``tests/fixtures/topology-ab-3c``: a
    concurrent phase of 3 clients, each engine pinned to its own core), as ``topology_ab``."""
    from tests.topology_ab import FIX_3C, SIDES, load_side, meta

    d = tmp_path_factory.mktemp("topology-ab-3c")
    dbs = {s: load_side(d / f"{s}.duckdb", FIX_3C / s) for s in SIDES}
    return dbs, {s: meta(FIX_3C / s) for s in SIDES}
