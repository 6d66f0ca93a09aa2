"""Issue 27, the adversary's cases 14 to 16 (trace import): odd files named like LMCache
lookup-hash logs, one log reached under two names, a freshly rotated empty log. Real files,
symlinks and FIFOs; each test failed on the code before its fix."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.collectors.traces import ingest as traces
from kvplan.sql.db import Database

runner = CliRunner()
LOG = "lookup_hashes_20261201_124735_000000.jsonl"
LOG2 = "lookup_hashes_20261201_134735_000001.jsonl"


def lm_line(ts: float, rid: str, hashes: list[str]) -> str:
    return json.dumps({"timestamp": ts, "request_id": rid, "model_name": "m", "chunk_size": 4,
                       "seq_len": len(hashes) * 4 + 1, "chunk_hashes": hashes})


def log_dir(root: Path, name: str, requests: int, t0: float = 0.0) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / LOG).write_text("".join(lm_line(t0 + i, f"{name}-{i}", [f"0x{i % 3}", f"0x{i}"]) + "\n"
                                 for i in range(requests)))
    return d


def import_cli(db: Path, *args: str, timeout: float = 60) -> tuple[int, str]:
    """``kvplan import-trace`` in a thread with a deadline: a FIFO must not block it."""
    box: dict = {}

    def run():
        box["r"] = runner.invoke(app, ["import-trace", "--deployment", "d", "--db", str(db), *args])

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"import-trace {args} still running after {timeout}s (blocked)"
    r = box["r"]
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)  # never a traceback
    return r.exit_code, " ".join(r.output.split())


# -- 14: a symlink loop, a directory, a dangling link, a FIFO named like a log ---------------------
def _odd(d: Path, kind: str) -> Path:
    p = d / LOG2
    if kind == "symlink loop":
        os.symlink(p, p)
    elif kind == "directory":
        p.mkdir()
    elif kind == "dangling link":
        os.symlink(d / "gone.jsonl", p)
    else:
        os.mkfifo(p)
    return p


@pytest.mark.parametrize("kind, says", [("symlink loop", "symbolic link loop"), ("directory", "a directory"),
                                        ("dangling link", "dangling symbolic link"), ("fifo", "not a regular file")])
def test_an_odd_entry_named_like_a_log_is_a_clear_error(tmp_path, kind, says):
    d = log_dir(tmp_path, "lmcache-0", 3)
    p = _odd(d, kind)
    code, out = import_cli(tmp_path / "k.duckdb", str(d))
    assert code == 2 and LOG2 in out and says in out, out
    code, out = import_cli(tmp_path / "k.duckdb", str(p))       # named on its own (a directory is then
    assert code == 2 and LOG2 in out and (says if kind != "directory" else "holds no") in out, out  # one of logs)


# -- 15: one directory under two names; one file under a second --instance ------------------------
def test_one_log_directory_reached_under_two_names_is_imported_once(tmp_path):
    logs = tmp_path / "logs"
    log_dir(logs, "lmcache-0", 40)
    log_dir(logs, "lmcache-1", 49, t0=0.5)
    os.symlink(logs / "lmcache-1", logs / "latest")               # logs/latest -> lmcache-1
    db = tmp_path / "k.duckdb"
    code, out = import_cli(db, str(logs))
    assert code == 0, out
    d = Database(db)
    row = d.fetch("traces", deployment="d")[0]
    assert (row["requests"], row["instances"]) == (89, 2)          # 40 + 49, not 40 + 49 + 49
    _, info = traces.load_trace(d, "d")
    assert info.instances == ("lmcache-0", "lmcache-1")           # the real name, not the link's
    code, out = import_cli(db, str(logs / "latest"), str(logs / "lmcache-0"))
    assert code == 0 and "0 new request(s)" in out, out


def test_the_same_file_under_a_second_instance_is_not_imported_again(tmp_path):
    a = log_dir(tmp_path, "a", 40)
    b = log_dir(tmp_path, "b", 49)
    db = tmp_path / "k.duckdb"
    assert import_cli(db, str(a), "--instance", "rank-0")[0] == 0
    assert import_cli(db, str(b), "--instance", "rank-1")[0] == 0
    code, out = import_cli(db, str(b), "--instance", "rank-2")      # b again, under another name
    assert code == 0 and "0 new request(s)" in out and "rank-1" in out, out
    row = Database(db).fetch("traces", deployment="d")[0]
    assert (row["requests"], row["instances"]) == (89, 2)


# -- 16: a freshly rotated, still-empty log -----------------------------------------------------
def test_a_freshly_rotated_empty_log_does_not_refuse_the_directory(tmp_path):
    d = log_dir(tmp_path, "lmcache-0", 5)
    (d / LOG2).write_bytes(b"")                                    # LMCache just opened the next file
    db = tmp_path / "k.duckdb"
    code, out = import_cli(db, str(d))
    assert code == 0 and "5 new request(s)" in out, out
    (d / LOG2).write_text(lm_line(9.0, "late", ["0x1"]) + "\n")      # it fills: imported next time
    code, out = import_cli(db, str(d))
    assert code == 0 and "1 new request(s)" in out, out
    assert Database(db).fetch("traces", deployment="d")[0]["requests"] == 6


def test_a_directory_of_only_empty_logs_says_so(tmp_path):
    d = tmp_path / "lmcache-0"
    d.mkdir()
    (d / LOG).write_bytes(b"")
    code, out = import_cli(tmp_path / "k.duckdb", str(d))
    assert code == 2 and "empty" in out, out
