"""The exact-increase rule lives in one file (sql/macros/increase.sql), applied after the numbered
migrations. Migrations 001-012 used to carry their own copies (the live rule was whichever came
last); those copies are gone. These tests show that this changes nothing:

* a database migrated by kvplan as of migration 013 (tests/fixtures/migrations-013: the migration
  files exactly as released before the move, copies and all) gives the same increments() and
  interval_increments() rows before and after today's code migrates it, on seeded random data
  that walks every branch of the rule (created zero points, births, gaps, broken pairs, resets,
  insane samples, model and name filters, ingested Prometheus steps);
* after that, its schema (tables, columns, constraints, sequences, macros) is identical to a new
  database's.
"""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta
from pathlib import Path

import duckdb

from kvplan.sql.db import Database, macros, migrations

OLD = Path(__file__).parent / "fixtures" / "migrations-013"
T0 = datetime(2026, 3, 1, 12, 0)
NAMES = ["vllm:prompt_tokens_total", "vllm:prefix_cache_hits_total", "lat_seconds_sum", "lat_seconds_count",
         "lmcache:num_hit_tokens_total", "vllm:num_requests_running"]


def _migrate_as_of_013(path: Path) -> None:
    """What kvplan's runner did with the migration files as of 013: each file in one
    transaction, recorded in schema_migrations (no macro files then)."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                "version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, "
                "applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp)")
    for f in sorted(OLD.glob("*.sql")):
        con.execute("BEGIN TRANSACTION")
        con.execute(f.read_text())
        con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [int(f.name[:3]), f.stem])
        con.execute("COMMIT")
    con.close()


def _fill(con: duckdb.DuckDBPyConnection, seed: int, hostile: bool = True) -> None:
    """Seeded random scrapes of two deployments: values that climb, drop (restart or broken),
    skip scrapes, appear late without _created, carry insane values and _created times.
    ``hostile=False`` leaves out what issue 27 (cases 1-3) changed the rule for: drops under an
    unchanged _created, older processes answering, late first appearances under an old
    _created, and restarts whose _created lies before the previous scrape."""
    rnd = random.Random(seed)
    con.execute("INSERT INTO deployments (deployment_id, name) VALUES (1, 'a'), (2, 'b')")
    con.execute("INSERT INTO targets (target_id, deployment_id, name, kind) VALUES "
                "(1, 1, 't1', 'vllm'), (2, 1, 't2', 'lmcache_mp'), (3, 2, 't3', 'vllm')")
    times = [T0 + timedelta(seconds=15 * i + rnd.choice([0, 0, 1])) for i in range(40)]
    sid = 0
    scrapes: list[list] = []
    series: list[list] = []
    samples: list[list] = []
    for target in (1, 2, 3):
        ok = [rnd.random() > 0.1 for _ in times]
        for ts, good in zip(times, ok, strict=True):
            scrapes.append([target, ts, good, 'import'])
        for name in NAMES:
            for model in ("m1", "m2", None):
                sid += 1
                kind = "gauge" if name.endswith("running") else rnd.choice(["counter", "counter", "histogram",
                                                                            "summary"])
                series.append([sid, target, name, name, kind, model, '{}'])
                value = rnd.choice([0.0, 10.0, 5000.0])
                created: float | None = rnd.choice([None, (T0 - timedelta(hours=1)).timestamp()])
                start = rnd.choice([0, 0, 0, 5, 12])  # a late first appearance: a birth
                if not hostile and start:
                    created = None
                emitted = False
                for i, (ts, good) in enumerate(zip(times, ok, strict=True)):
                    if i < start or (good and rnd.random() < 0.08  # missing from a scrape: a gap
                                     and (hostile or emitted or created is None)):
                        continue
                    if not good and rnd.random() > 0.1:
                        continue
                    r = rnd.random()
                    if r < 0.04:  # a restart: new process, new _created (or none)
                        value = rnd.choice([0.0, 3.0])
                        back = [1, 5, 100] if hostile else [1, 5]  # 100 s: before the previous scrape
                        created = rnd.choice([None, ts.timestamp() - rnd.choice(back)])
                    elif r < 0.07 and hostile:  # a drop with the same _created: broken
                        value = max(0.0, value - rnd.choice([1.0, 50.0]))
                    elif r < 0.09 and created is not None and hostile:  # an older process answers
                        created -= 1000
                    else:
                        value += rnd.choice([0.0, 1.0, 7.0, 120.0])
                    v = value
                    if rnd.random() < 0.03 and (hostile or emitted or created is None):
                        v = rnd.choice([math.nan, math.inf, -5.0, 1e300])
                    c = created
                    if c is not None and rnd.random() < 0.03:
                        c = rnd.choice([math.nan, 0.0, -1.0, 1e12])
                    samples.append([sid, ts, v, c])
                    emitted = True
    _insert(con, "scrapes (target_id, ts, ok, source)", scrapes)
    _insert(con, "series (series_id, target_id, name, family, type, model_name, labels)", series)
    _insert(con, "samples (series_id, ts, value, created)", samples)
    # ingested Prometheus steps for deployment b's series
    _insert(con, "prom_increments (series_id, ts, step_s, delta, pairs, resets)",
            [[s, T0 + timedelta(seconds=60 * k), 60, rnd.choice([0.0, 2.0, 9.5]), 4, rnd.choice([0, 0, 1])]
             for s in range(sid - 20, sid + 1) for k in range(1, 9)])


def _insert(con: duckdb.DuckDBPyConnection, into: str, rows: list[list]) -> None:
    """Rows into ``table (columns)`` in one statement: one list per column, unnested."""
    columns = [list(c) for c in zip(*rows, strict=True)]
    con.execute(f"INSERT INTO {into} SELECT " + ", ".join(f"unnest(${i + 1})" for i in range(len(columns))),
                columns)


def _results(con: duckdb.DuckDBPyConnection) -> list[str]:
    out = []
    windows = [(T0, T0 + timedelta(minutes=10)), (T0 + timedelta(seconds=100), T0 + timedelta(seconds=400)),
               (T0 - timedelta(hours=2), T0 + timedelta(hours=1))]
    for dep in ("a", "b"):
        for t_from, t_to in windows:
            for model in (None, "m1", "m2"):
                rows = con.execute("SELECT * FROM increments(?, ?, ?, ?) ORDER BY ALL",
                                   [dep, t_from, t_to, model]).fetchall()
                out.append(repr((dep, t_from, t_to, model, rows)))
                for names in (NAMES[:2], NAMES[2:4], [NAMES[4]], []):
                    rows = con.execute("SELECT * FROM interval_increments(?, ?, ?, ?, ?) ORDER BY ALL",
                                       [dep, t_from, t_to, model, names]).fetchall()
                    out.append(repr((dep, t_from, t_to, model, names, rows)))
    return out


def _schema(path: Path) -> dict[str, list]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        q = {
            "columns": "SELECT table_name, column_index, column_name, data_type, is_nullable, column_default "
                       "FROM duckdb_columns() WHERE NOT internal ORDER BY ALL",
            "constraints": "SELECT table_name, constraint_type, constraint_text FROM duckdb_constraints() "
                           "ORDER BY ALL",
            "sequences": "SELECT sequence_name, start_value FROM duckdb_sequences() ORDER BY ALL",
            "views": "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal ORDER BY ALL",
            "indexes": "SELECT table_name, sql FROM duckdb_indexes() ORDER BY ALL",
            "macros": "SELECT function_name, function_type, parameters, macro_definition FROM duckdb_functions() "
                      "WHERE function_type IN ('macro', 'table_macro') AND NOT internal ORDER BY ALL",
            "migrations": "SELECT version, name FROM schema_migrations ORDER BY version",
            "macro_files": "SELECT file, sha256 FROM schema_macros ORDER BY file",
        }
        return {k: con.execute(v).fetchall() for k, v in q.items()}
    finally:
        con.close()


def test_the_fixture_is_the_released_migration_list():
    """The frozen copy stands for kvplan as of 013: the same file names, and the files the move
    did not touch are byte for byte today's."""
    assert [f.stem for f in sorted(OLD.glob("*.sql"))] == [m[1] for m in migrations()][:13]
    moved = {"001_metrics", "002_collection", "006_series_birth", "008_sane_increments",
             "009_prefill_intervals", "012_continuing_series"}
    for _, name, sql in migrations()[:13]:
        old = (OLD / f"{name}.sql").read_text()
        assert (old == sql) == (name not in moved), name
        assert ("MACRO" in old) == (name in moved), name
        assert "MACRO" not in sql, f"{name} still defines a macro: the rule belongs in sql/macros"


def _upgraded(tmp_path: Path, hostile: bool = True) -> tuple[Path, list[str], list[str]]:
    """An old database with data: its results under the old migrations' rule, then its results
    after today's code migrated it."""
    path = tmp_path / "old.duckdb"
    _migrate_as_of_013(path)
    con = duckdb.connect(str(path))
    _fill(con, seed=25, hostile=hostile)
    before = _results(con)
    con.close()
    assert sum("[]" not in r for r in before) > len(before) // 2, "the data counts nothing: a vacuous check"
    assert Database(path).migrate() == [m[1] for m in migrations()][13:]
    con = duckdb.connect(str(path))
    after = _results(con)
    con.close()
    return path, before, after


def test_moving_the_rule_changed_no_increase(tmp_path):
    """The move into sql/macros kept 012's rule, and issue 27's change of it (cases 1-3: a series
    first seen under an older _created, a decrease under an unchanged _created and the climb back,
    processes answering in turn) changed nothing else: on data without those, every increase,
    interval and flag is 012's."""
    _, before, after = _upgraded(tmp_path, hostile=False)
    assert after == before


def test_an_old_database_ends_identical_to_a_new_one(tmp_path):
    old_path, _, after = _upgraded(tmp_path)
    new_path = tmp_path / "new.duckdb"
    Database(new_path).migrate()
    con = duckdb.connect(str(new_path))
    _fill(con, seed=25)
    assert _results(con) == after
    con.close()
    old_schema, new_schema = _schema(old_path), _schema(new_path)
    assert old_schema == new_schema
    assert {m[0] for m in new_schema["macros"]} >= {"increments", "interval_increments", "increase_pairs"}
    assert new_schema["macro_files"] == [(f, d) for f, d, _ in macros()]


def test_a_changed_rule_is_applied_again_and_only_then(tmp_path, monkeypatch):
    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    with db.read() as con:
        (stamp,) = con.execute("SELECT applied_at FROM schema_macros").fetchone()
    db.migrate()
    with db.read() as con:
        assert con.execute("SELECT applied_at FROM schema_macros").fetchone() == (stamp,)
    edited = tmp_path / "macros"
    edited.mkdir()
    text = macros()[0][2].replace("SELECT series_id, t_end AS ts, delta,",
                                  "SELECT series_id, t_end AS ts, 2 * delta AS delta,")
    (edited / macros()[0][0]).write_text(text)
    monkeypatch.setattr("kvplan.sql.db.MACROS", edited)
    db.migrate()
    with db.read() as con:
        (definition,) = con.execute("SELECT macro_definition FROM duckdb_functions() "
                                    "WHERE function_name = 'increments'").fetchone()
    assert "(2 * delta)" in definition
