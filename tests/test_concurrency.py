"""The daemon writes while the dashboard reads: one writer process stores scrape-sized
transactions as fast as it can while several reader processes query continuously.

Claims (the design of ``kvplan.sql.db``: no long-held connections, short write transactions,
read-only readers that close, bounded lock retries):
* no error reaches a reader;
* no sample is lost: what the writer says it committed is what the database holds;
* readers never block the writer for longer than WRITER_WAIT_BOUND_S at a time, nor the writer a
  reader for longer than READER_WAIT_BOUND_S (the wait for the file, not the query's CPU);
* each reader reads between the writer's commits, and never sees one undone. Rates (scrapes or
  queries a second) are printed, not asserted: a busy machine lowers them without anything
  being wrong.

The duration is ``CONCURRENCY_TEST_S`` seconds (default 60; a developer may run it with 10).
The measured numbers are printed (``pytest -s`` shows them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]
DURATION_S = float(os.environ.get("CONCURRENCY_TEST_S", "60"))
READERS = 3
WRITER_WAIT_BOUND_S = 2.0      # the longest a writer may wait for the file at one write
READER_WAIT_BOUND_S = 5.0      # the longest a reader may wait for the file (the writer's transactions are short)
T0 = datetime(2026, 11, 1, tzinfo=UTC)
ENGINES = 64                   # one vLLM server with 64 (model, engine) series: ~600 samples a scrape


def _payload(k: int, engines: int = ENGINES) -> str:
    from tests.payloads import vllm_text

    return vllm_text({(f"m{e % 4}", str(e)): {"hits": 10 * k * (e + 1), "queries": 20 * k * (e + 1),
                                              "ttft": [k, 2 * k, 3 * k], "created": T0.timestamp() - 60}
                      for e in range(engines)})


def _timed(path: str):
    """The database at ``path`` (lock timeout 60 s), recording the wait for the file at each write
    (from asking to holding an open transaction) and each read (to holding an open connection)."""
    from kvplan.sql.db import Database

    class Timed(Database):
        def __init__(self) -> None:
            super().__init__(path, lock_timeout_s=60)
            self.write_waits: list[float] = []
            self.read_waits: list[float] = []

        @contextmanager
        def write(self):
            t = time.monotonic()
            with super().write() as con:
                self.write_waits.append(time.monotonic() - t)
                yield con

        @contextmanager
        def read(self):
            t = time.monotonic()
            with super().read() as con:
                self.read_waits.append(time.monotonic() - t)
                yield con

    return Timed()


def writer(path: str, seconds: float, out: str) -> None:
    """Store one scrape after another for ``seconds``; report what was committed and the
    wait for the file at each write."""
    from kvplan.collectors.scrape.parse import parse_payload
    from kvplan.collectors.scrape.store import payload_sha256, store_payload

    db = _timed(path)
    committed = samples = 0
    stop = time.monotonic() + seconds
    k = 0
    while time.monotonic() < stop:
        text = _payload(k)
        p = parse_payload(text, f"scrape {k}")
        store_payload(db, deployment="d", target="vllm", ts=T0 + timedelta(seconds=15 * k), payload=p,
                      sha256=payload_sha256(text), source="scrape")
        committed += 1
        samples += len(p.samples)
        k += 1
    w = sorted(db.write_waits)
    Path(out).write_text(json.dumps({"committed": committed, "samples": samples, "max_wait_s": w[-1],
                                     "p99_wait_s": w[int(0.99 * (len(w) - 1))], "mean_wait_s": sum(w) / len(w)}))


def reader(path: str, seconds: float, out: str) -> None:
    """Query continuously (window stats, deployments) for ``seconds``; report errors, the scrapes
    each query saw and the wait for the file at each read."""
    from kvplan.app.data.window import stats

    db = _timed(path)
    errors, took, seen, queries = [], [], [], 0
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        t = time.monotonic()
        try:
            stats(db, "d", T0, T0 + timedelta(days=1))
            seen.append(sum(r["scrapes"] for r in db.fetch("deployments")))
            queries += 2
        except Exception as e:  # noqa: BLE001 - any error reaching a reader is the failure
            errors.append(f"{type(e).__name__}: {e}")
        took.append(time.monotonic() - t)
    Path(out).write_text(json.dumps({"queries": queries, "errors": errors[:5], "n_errors": len(errors),
                                     "seen": seen, "max_s": max(took, default=0.0),
                                     "max_wait_s": max(db.read_waits, default=0.0)}))


def spawn_server(fn: str, *args) -> subprocess.Popen:
    code = f"from tests.test_concurrency import {fn}; {fn}(*{list(map(str, args))!r}[:1], " \
           f"float({args[1]!r}), {str(args[2])!r})"
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)


def test_a_writer_and_readers_share_the_file_without_errors_or_losses(tmp_path):
    from kvplan.sql.db import Database

    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    w_out = tmp_path / "writer.json"
    procs = [spawn_server("writer", db.path, DURATION_S, w_out)]

    def first_scrape() -> bool:  # committed before the readers start
        assert procs[0].poll() is None, "the writer exited before its first scrape"
        with Database(db.path, lock_timeout_s=60).read() as con:
            return con.execute("SELECT count(*) FROM scrapes").fetchone()[0] > 0

    wait_until(first_scrape, "the writer's first scrape", every_s=0.2)
    r_outs = [tmp_path / f"reader{i}.json" for i in range(READERS)]
    procs += [spawn_server("reader", db.path, DURATION_S, o) for o in r_outs]
    for p in procs:
        assert p.wait(DURATION_S + 120) == 0
    w = json.loads(w_out.read_text())
    rs = [json.loads(o.read_text()) for o in r_outs]
    with db.read() as con:
        scrapes, samples = con.execute("SELECT (SELECT count(*) FROM scrapes), (SELECT count(*) FROM samples)"
                                       ).fetchone()
    print(f"\n{DURATION_S:.0f}s, 1 writer + {READERS} readers: writer committed {w['committed']} scrapes "
          f"({w['committed'] / DURATION_S:.1f}/s, {w['samples']} samples); writer wait for the file: "
          f"max {w['max_wait_s'] * 1000:.0f} ms, p99 {w['p99_wait_s'] * 1000:.0f} ms, "
          f"mean {w['mean_wait_s'] * 1000:.1f} ms (bound {WRITER_WAIT_BOUND_S:.1f} s); readers: "
          + ", ".join(f"{r['queries']} queries, {len(set(r['seen']))} states seen, slowest {r['max_s'] * 1000:.0f} ms, "
                      f"longest wait for the file {r['max_wait_s'] * 1000:.0f} ms" for r in rs))
    assert [r["n_errors"] for r in rs] == [0] * READERS, [r["errors"] for r in rs]
    assert (scrapes, samples) == (w["committed"], w["samples"])
    # what holds on a busy machine too (not a rate): each reader read between the writer's
    # commits, and never saw a commit undone
    for r in rs:
        assert len(set(r["seen"])) >= 3, "a reader did not read while the writer wrote: the test proves nothing"
        assert r["seen"] == sorted(r["seen"]) and r["seen"][-1] <= w["committed"], r["seen"]
    assert w["max_wait_s"] < WRITER_WAIT_BOUND_S
    assert max(r["max_wait_s"] for r in rs) < READER_WAIT_BOUND_S



IMPORT_FILES = 800             # the import: ~13 s of CPU on this machine, longer than the lock timeout
IMPORT_ENGINES = 16            # ~150 samples a file
IMPORT_LOCK_TIMEOUT_S = 10.0   # every process's lock_timeout_s in the import test (the issue's)


def dashboard_reader(path: str, done: str, out: str) -> None:
    """What a dashboard page does (``app.state``: the schema check, then one read-only snapshot
    for the page's queries), again and again until ``done`` exists; reports errors and the
    scrape counts it saw."""
    from kvplan.app.data.store import deployments_with_data
    from kvplan.app.data.window import stats
    from kvplan.sql.db import Database

    db = Database(path, lock_timeout_s=IMPORT_LOCK_TIMEOUT_S)
    errors, seen, slowest = [], [], 0.0
    while not Path(done).exists():
        t = time.monotonic()
        try:
            db.require_current()
            with db.snapshot() as src:
                deployments_with_data(src)
                stats(src, "d", T0, T0 + timedelta(days=1))
                seen.append(sum(r["scrapes"] for r in src.fetch("deployments")))
        except Exception as e:  # noqa: BLE001 - any error reaching a reader is the failure
            errors.append(f"{type(e).__name__}: {e}")
        slowest = max(slowest, time.monotonic() - t)
    Path(out).write_text(json.dumps({"errors": errors[:5], "n_errors": len(errors), "seen": seen,
                                     "slowest_s": slowest}))


def test_stats_and_the_dashboard_read_while_a_long_import_writes(tmp_path):
    """Issue 27 case 18: ``kvplan stats`` during an import of hundreds of files failed with
    "another writer kept it for over 10s" (every command migrated under the writer lock, and the
    import kept the file for one long transaction). Now readers never take the writer lock and
    the import writes in short transactions, letting waiting readers in between them: while
    ``kvplan import-metrics`` of IMPORT_FILES files runs in one process, ``kvplan stats`` runs
    again and again from this one and a dashboard reader reads in a third. No reader sees an
    error, each reads during the import (scrape counts between the first and the last), and
    every file's scrape is stored. Every process's lock timeout is IMPORT_LOCK_TIMEOUT_S, shorter
    than the import."""
    from kvplan.collectors.scrape.parse import parse_payload
    from kvplan.sql.db import Database

    files = tmp_path / "files"
    files.mkdir()
    for k in range(IMPORT_FILES):
        ts = (T0 + timedelta(seconds=15 * k)).strftime("%Y-%m-%dT%H:%M:%SZ")
        (files / f"vllm@{ts}.prom").write_text(_payload(k, IMPORT_ENGINES))
    paths = sorted(files.iterdir())
    db = Database(tmp_path / "k.duckdb", lock_timeout_s=60)
    env = dict(os.environ, KVPLAN_LOCK_TIMEOUT_S=str(IMPORT_LOCK_TIMEOUT_S))
    kvplan = [sys.executable, "-m", "kvplan.app.cli"]
    first = subprocess.run([*kvplan, "import-metrics", "--deployment", "d", "--db", str(db.path), str(paths[0])],
                           env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    done, d_out = tmp_path / "done", tmp_path / "dashboard.json"
    importer = subprocess.Popen([*kvplan, "import-metrics", "--deployment", "d", "--db", str(db.path),
                                 *map(str, paths[1:])], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
    started = time.monotonic()
    dash = subprocess.Popen([sys.executable, "-c", "from tests.test_concurrency import dashboard_reader; "
                             f"dashboard_reader({str(db.path)!r}, {str(done)!r}, {str(d_out)!r})"], cwd=ROOT)
    runs = []
    deadline = time.monotonic() + 1800  # a busy 2-core machine took over 11 min for the import
    while importer.poll() is None and time.monotonic() < deadline:
        r = subprocess.run([*kvplan, "stats", "--deployment", "d", "--from", T0.isoformat(), "--to",
                            (T0 + timedelta(days=1)).isoformat(), "--json", "--db", str(db.path)],
                           env=env, capture_output=True, text=True)
        runs.append((r.returncode, r.stderr.strip()[-300:], json.loads(r.stdout)["requests"] if r.returncode == 0
                     else None))
    assert importer.wait(60) == 0, importer.stderr.read() if importer.stderr else ""
    took = time.monotonic() - started
    done.write_text("")
    assert dash.wait(120) == 0
    d = json.loads(d_out.read_text())
    print(f"\nimport of {IMPORT_FILES} files in {took:.0f} s; kvplan stats ran {len(runs)} times during it; the "
          f"dashboard reader read {len(d['seen'])} times (slowest {d['slowest_s']:.1f} s), seeing "
          f"{len(set(d['seen']))} different scrape counts")
    assert took > IMPORT_LOCK_TIMEOUT_S, "the import was shorter than the lock timeout: the test proves nothing"
    assert [rc for rc, _, _ in runs] == [0] * len(runs), [e for rc, e, _ in runs if rc]
    assert d["n_errors"] == 0, d["errors"]
    during = [n for n in d["seen"] if 1 < n < IMPORT_FILES]
    assert len(set(during)) >= 2, f"the dashboard reader did not read during the import: {d['seen'][:20]}"
    # stats read numbers during the import, never fewer requests than a run before it (a run that saw
    # only the first file has no interval yet: its _created lies before the window, so requests are unknown)
    got = [n for _, _, n in runs if n is not None]
    assert len(runs) >= 2 and got, runs
    assert got == sorted(got), got
    per_file = len(parse_payload(paths[0].read_text(), "first").samples)
    with db.read() as con:
        scrapes, samples = con.execute("SELECT (SELECT count(*) FROM scrapes), (SELECT count(*) FROM samples)"
                                       ).fetchone()
        (hits,) = con.execute("SELECT sum(i.delta) FROM increments('d', ?, ?, NULL) i "
                              "JOIN series se USING (series_id) WHERE se.name = 'vllm:prefix_cache_hits_total'",
                              [T0.replace(tzinfo=None), (T0 + timedelta(days=1)).replace(tzinfo=None)]).fetchone()
    assert (scrapes, samples) == (IMPORT_FILES, IMPORT_FILES * per_file)
    # the generator's counters: engine e's hits are 10 k (e + 1) at scrape k
    assert hits == 10 * (IMPORT_FILES - 1) * sum(e + 1 for e in range(IMPORT_ENGINES))
