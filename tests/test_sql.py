"""Schema and named queries: every query runs against an empty schema (a renamed column
breaks CI), migrations are recorded and idempotent."""

from datetime import datetime

import pytest

from kvplan.sql.db import Database, DatabaseError, migrations, queries

SPECIAL = {"model_name": None, "step_s": 60, "names": ["x"], "limit": 10, "ok": True, "url": None,
           "error": None, "warnings": None, "duration_s": None, "payload_sha256": None, "n_samples": 0,
           "stopped_by": None, "reuse": None, "engine_seconds": None, "engine_seconds_source": None,
           "ab_pair": None, "cached_tokens": None,
           # migration 011 (sweeps): CHECK constraints and numeric columns
           "side": "on", "load_kind": "rate", "offered": 1.0, "level_idx": 0, "requests": 1, "failed": 0,
           "span_s": None, "throughput_rps": None, "ttft_p50_s": None, "ttft_p99_s": None, "tpot_p50_s": None,
           "tpot_p99_s": None}


def sample_param(name: str):
    """A value of the right type for a query parameter, by naming convention."""
    import re as _re

    if name in SPECIAL:
        return SPECIAL[name]
    if name.endswith("_names"):  # a list of metric names, unnested by the query
        return ["x"]
    if name in ("ts", "day") or name.startswith("t_") or _re.search(r"(_at|_from|_to|_ts|_day)$", name):
        return datetime(2026, 1, 1)
    if name.endswith("_id") or name.startswith("n_"):
        return 1
    return "x"


def params_for(sql: str) -> dict:
    import re as _re

    return {n: sample_param(n) for n in set(_re.findall(r"\$([a-z_][a-z0-9_]*)", sql))}


# Every migration kvplan ever shipped, written out: a deleted, renamed or renumbered migration fails
# here (the code's own list, migrations(), would follow it). A new migration is added here too.
MIGRATIONS = [
    "001_metrics", "002_collection", "003_runs", "004_pricebook", "005_dashboard", "006_series_birth",
    "007_traces", "008_sane_increments", "009_prefill_intervals", "010_deployment_facts", "011_sweeps",
    "012_continuing_series", "013_trace_instances", "014_prefill_rollups", "015_edge_rollups",
]


def test_migrations_are_recorded_once(tmp_path):
    assert [m[1] for m in migrations()] == MIGRATIONS
    assert [m[0] for m in migrations()] == list(range(1, len(MIGRATIONS) + 1))
    db = Database(tmp_path / "a.duckdb")
    assert db.migrate() == MIGRATIONS
    assert db.migrate() == []
    assert db.schema_version() == len(MIGRATIONS)
    with db.read() as con:
        assert con.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall() == \
            [(int(n[:3]), n) for n in MIGRATIONS]


@pytest.mark.parametrize("name", sorted(queries()))
def test_every_named_query_runs_on_an_empty_schema(db, name):
    q = queries()[name]
    assert q.doc, f"{name} has no docstring comment"
    with db.write() as con:
        Database.run(con, name, **params_for(q.sql)).fetchall()


def test_missing_parameter_is_named(db):
    with db.read() as con, pytest.raises(TypeError, match="needs parameter.*t_from"):
        Database.run(con, "window_increases", deployment="d")


def test_missing_database_is_a_clear_error(tmp_path):
    with pytest.raises(DatabaseError, match="no such database"):
        Database(tmp_path / "nope.duckdb").fetch("deployments")


def _hold_write_lock(path, seconds):
    """Another process opening the file read-write and keeping it for ``seconds``."""
    import subprocess
    import sys

    code = ("import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('locked', flush=True); "
            "time.sleep(float(sys.argv[2])); c.close()")
    p = subprocess.Popen([sys.executable, "-c", code, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def test_reader_waits_for_a_writer_process_then_reads(db):
    import time

    p = _hold_write_lock(db.path, 1.0)
    t0 = time.monotonic()
    assert db.fetch("deployments") == []
    assert time.monotonic() - t0 >= 0.5  # it had to wait for the other process
    p.wait()


def test_lock_held_too_long_is_a_clear_error(db):
    db.lock_timeout_s = 0.3
    p = _hold_write_lock(db.path, 3.0)
    try:
        with pytest.raises(DatabaseError, match="still locked by another process after 0s"):
            db.fetch("deployments")
    finally:
        p.kill()
        p.wait()


def _catalog_names() -> set[str]:
    """Every metric (sample) name the catalog spells: its family constants, the samples of each
    (``_total``, ``_bucket``, ``_sum``, ``_count``) and the names in its tables."""
    from kvplan.models.metrics import catalog

    families: set[str] = set()
    for value in vars(catalog).values():
        items = value.values() if isinstance(value, dict) else value if isinstance(value, tuple) else [value]
        families |= {v for v in items if isinstance(v, str)}
    helpers = (catalog.total_name, catalog.bucket_name, catalog.sum_name, catalog.count_name)
    return families | {h(f) for f in families for h in helpers}


def _metric_literals(text: str) -> list[str]:
    """The string literals of SQL code (comments left out) that are metric names: a name with a
    colon (vllm:, lmcache:, sglang:, kvplan:) or LMCache MP's lmcache_mp_ prefix."""
    import re as _re

    code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    return [s for s in _re.findall(r"'([^']*)'", code)
            if _re.fullmatch(r"[a-z_]+:[a-z0-9_:]+|lmcache_mp_[a-z0-9_]+|(vllm|sglang)_[a-z0-9_]+", s)]


def test_every_metric_name_in_sql_is_spelled_by_the_catalog():
    from pathlib import Path

    import kvplan.sql.db as dbmod

    files = [p for d in (dbmod.QUERIES, dbmod.MACROS, dbmod.MIGRATIONS) for p in sorted(Path(d).glob("*.sql"))]
    found = {(p.name, s) for p in files for s in _metric_literals(p.read_text())}
    assert len(found) >= 30, f"only {len(found)} metric names found in sql/: the scan is broken"
    known = _catalog_names()
    unknown = sorted(f"{f}: {s}" for f, s in found if s not in known)
    assert not unknown, "metric names in SQL that models/metrics/catalog.py does not spell:\n" + "\n".join(unknown)
    # the check itself: a misspelt name would be caught
    typo = "vllm:prefix_cache_hit_total"
    assert _metric_literals(f"WHERE i.name = '{typo}' -- 'vllm:x'") == [typo]
    assert typo not in known
