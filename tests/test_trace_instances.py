"""One trace, many cache instances: the logs of several LMCache servers import as one
deployment's trace, told apart by instance (directory or --instance), merged by time; re-import
stays a no-op; rows imported before instances existed are adopted, not imported twice."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from kvplan.collectors.scrape.payload import PayloadError
from kvplan.collectors.traces import ingest as traces
from kvplan.models.core.errors import KvplanError
from kvplan.sql.db import Database, migrations

FIX = Path(__file__).resolve().parent / "fixtures"
SAME = "lookup_hashes_20261201_124735_000000.jsonl"  # LMCache names files by start time


def lm_line(ts: float, rid: str, hashes: list[str], chunk_size: int = 4) -> str:
    return json.dumps({"timestamp": ts, "request_id": rid, "model_name": "m", "chunk_size": chunk_size,
                       "seq_len": len(hashes) * chunk_size + 1, "chunk_hashes": hashes})


def two_instances(tmp_path: Path) -> Path:
    """Two LMCache servers' log directories whose files have the same name (both started in the
    same second): rank 0 saw a at t=1 and c at t=3, rank 1 saw b at t=2."""
    root = tmp_path / "logs"
    for inst, lines in (("lmcache-0", [lm_line(1.0, "a", ["0xa", "0xb"]), lm_line(3.0, "c", ["0xa", "0xb"])]),
                        ("lmcache-1", [lm_line(2.0, "b", ["0xa", "0xb"])])):
        (root / inst).mkdir(parents=True)
        (root / inst / SAME).write_text("\n".join(lines) + "\n")
    return root


def test_two_servers_logs_with_the_same_file_name_import_as_one_trace(db, tmp_path):
    root = two_instances(tmp_path)
    r = traces.import_trace(db, "dep", [root / "lmcache-0", root / "lmcache-1"])
    assert [(f.instance, f.file, f.status, f.requests) for f in r.files] == [
        ("lmcache-0", SAME, "imported", 2), ("lmcache-1", SAME, "imported", 1)]
    trace, info = traces.load_trace(db, "dep")
    assert info.instances == ("lmcache-0", "lmcache-1")
    # merged by time: a (rank 0, t=1), b (rank 1, t=2), c (rank 0, t=3)
    assert trace.ts.tolist() == [1.0, 2.0, 3.0]
    assert trace.instance.tolist() == [0, 1, 0]
    again = traces.import_trace(db, "dep", [root / "lmcache-0", root / "lmcache-1"])
    assert [f.status for f in again.files] == ["unchanged", "unchanged"] and again.requests == 0
    assert db.fetch("traces", deployment="dep")[0]["requests"] == 3
    assert db.fetch("traces", deployment="dep")[0]["instances"] == 2


def test_a_directory_of_instance_directories_imports_each_as_an_instance(db, tmp_path):
    root = two_instances(tmp_path)
    r = traces.import_trace(db, "dep", [root])
    assert sorted(f.instance for f in r.files) == ["lmcache-0", "lmcache-1"] and r.requests == 3
    with pytest.raises(PayloadError, match="--instance names one"):
        traces.import_trace(db, "dep", [root], instance="x")


def test_instance_by_name_at_import_and_directories_of_the_same_name_refused(db, tmp_path):
    a, b = tmp_path / "a" / "lookup-hash-logs", tmp_path / "b" / "lookup-hash-logs"
    for d, ts in ((a, 1.0), (b, 2.0)):
        d.mkdir(parents=True)
        (d / SAME).write_text(lm_line(ts, str(ts), ["0x1"]) + "\n")
    with pytest.raises(PayloadError, match="also a directory named 'lookup-hash-logs'"):
        traces.import_trace(db, "dep", [a, b])
    assert db.fetch("traces", deployment="dep") == []  # nothing written
    traces.import_trace(db, "dep", [a], instance="rank-0")
    traces.import_trace(db, "dep", [b], instance="rank-1")
    _, info = traces.load_trace(db, "dep")
    assert info.instances == ("rank-0", "rank-1")
    # the same file under the same instance again: unchanged; a changed one is still refused
    assert traces.import_trace(db, "dep", [a], instance="rank-0").files[0].status == "unchanged"
    (a / SAME).write_text(lm_line(9.0, "x", ["0x2"]) + "\n")
    with pytest.raises(KvplanError, match="changed since it was imported"):
        traces.import_trace(db, "dep", [a], instance="rank-0")
    with pytest.raises(KvplanError, match="instance"):
        traces.import_trace(db, "dep", [a], instance=" ")


def test_a_window_keeps_the_requests_inside_it(db, tmp_path):
    traces.import_trace(db, "dep", [two_instances(tmp_path)])
    trace, info = traces.load_trace(db, "dep", t_from=1.5, t_to=3.0)
    assert trace.ts.tolist() == [2.0, 3.0] and trace.instance.tolist() == [1, 0]
    assert info.instances == ("lmcache-0", "lmcache-1")


def test_rows_imported_before_instances_are_adopted_not_imported_twice(db, tmp_path):
    """A file imported before migration 013 has instance '' (the migration's default): the next
    import of the same file under its directory's name adopts its rows."""
    root = two_instances(tmp_path)
    traces.import_trace(db, "dep", [root / "lmcache-0"])
    with db.write() as con:  # as migration 013 leaves an older import
        con.execute("UPDATE trace_files SET instance = ''")
        con.execute("UPDATE trace_requests SET instance = ''")
    r = traces.import_trace(db, "dep", [root / "lmcache-0", root / "lmcache-1"])
    assert [(f.instance, f.requests) for f in r.files] == [("lmcache-0", 0), ("lmcache-1", 1)]
    trace, info = traces.load_trace(db, "dep")
    assert info.instances == ("lmcache-0", "lmcache-1") and trace.instance.tolist() == [0, 1, 0]
    assert [x["instance"] for x in db.fetch("traces_files_of", trace_id=1)] == ["lmcache-0", "lmcache-1"]


def test_migration_013_keeps_an_older_trace(tmp_path):
    """A database at migration 011 with an imported trace, then migrated: its files and
    requests get instance '' and replay as before."""
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, "
                "applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp)")
    for version, name, sql in migrations():
        if version <= 11:
            con.execute(sql)
            con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [version, name])
    con.execute("INSERT INTO traces VALUES (1, 'dep', 'lmcache', 'lmcache', NULL, NULL, now())")
    con.execute("INSERT INTO trace_files VALUES (1, 'f.jsonl', 'abc', 10, 1, now())")
    con.execute("INSERT INTO trace_requests VALUES (1, 'f.jsonl', 1, 5.0, 'r', 'm', 4, 9, NULL, [0, 1])")
    con.close()
    db = Database(path)
    assert "013_trace_instances" in db.migrate()
    assert [(r["instance"], r["file"]) for r in db.fetch("traces_files_of", trace_id=1)] == [("", "f.jsonl")]
    trace, info = traces.load_trace(db, "dep")
    assert info.instances == ("",) and trace.chunk_ids.tolist() == [0, 1]


def test_the_recorded_private_run_imports_both_lmcache_servers(db, tmp_path):
    """The topology A/B's private side (two LMCache servers, one log each) as one trace."""
    logs = tmp_path / "logs"
    shutil.copytree(FIX / "topology-ab" / "private" / "lookup-logs", logs)
    meta = json.loads((FIX / "topology-ab" / "private" / "meta.json").read_text())
    r = traces.import_trace(db, "ab-private", [logs])
    assert {f.instance: f.requests for f in r.files} == meta["lookups_logged"]
    trace, info = traces.load_trace(db, "ab-private")
    assert info.instances == ("lmcache-0", "lmcache-1")
    assert (trace.ts[1:] >= trace.ts[:-1]).all()
    assert traces.import_trace(db, "ab-private", [logs]).requests == 0
