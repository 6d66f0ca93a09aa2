"""The daemon writes while the dashboard reads: one writer process stores scrape-sized
transactions as fast as it can while several reader processes query continuously.

Claims (the design of ``kvplan.sql.db``: no long-held connections, short write transactions,
read-only readers that close, bounded lock retries):
* no error reaches a reader;
* no sample is lost: what the writer says it committed is what the database holds;
* readers never block the writer for longer than WRITER_WAIT_BOUND_S at a time.

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
READER_WAIT_BOUND_S = 5.0      # the longest a reader may wait (the writer's transactions are short)
T0 = datetime(2026, 11, 1, tzinfo=UTC)
ENGINES = 64                   # one vLLM server with 64 (model, engine) series: ~600 samples a scrape


def _payload(k: int) -> str:
    from tests.payloads import vllm_text

    return vllm_text({(f"m{e % 4}", str(e)): {"hits": 10 * k * (e + 1), "queries": 20 * k * (e + 1),
                                              "ttft": [k, 2 * k, 3 * k], "created": T0.timestamp() - 60}
                      for e in range(ENGINES)})


def writer(path: str, seconds: float, out: str) -> None:
    """Store one scrape after another for ``seconds``; report what was committed and the
    wait for the file at each write."""
    from kvplan.collectors.scrape.parse import parse_payload
    from kvplan.collectors.scrape.store import payload_sha256, store_payload
    from kvplan.sql.db import Database

    class Timed(Database):
        @contextmanager
        def write(self):  # the wait: from asking to write to holding an open transaction
            t = time.monotonic()
            with super().write() as con:
                self.waits.append(time.monotonic() - t)
                yield con

    db = Timed(path, lock_timeout_s=60)
    db.waits = []
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
    w = sorted(db.waits)
    Path(out).write_text(json.dumps({"committed": committed, "samples": samples, "max_wait_s": w[-1],
                                     "p99_wait_s": w[int(0.99 * (len(w) - 1))], "mean_wait_s": sum(w) / len(w)}))


def reader(path: str, seconds: float, out: str) -> None:
    """Query continuously (window stats, deployments) for ``seconds``; report errors."""
    from kvplan.app.data.window import stats
    from kvplan.sql.db import Database

    db = Database(path, lock_timeout_s=60)
    errors, waits, queries = [], [], 0
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        t = time.monotonic()
        try:
            stats(db, "d", T0, T0 + timedelta(days=1))
            db.fetch("deployments")
            queries += 2
        except Exception as e:  # noqa: BLE001 - any error reaching a reader is the failure
            errors.append(f"{type(e).__name__}: {e}")
        waits.append(time.monotonic() - t)
    Path(out).write_text(json.dumps({"queries": queries, "errors": errors[:5], "n_errors": len(errors),
                                     "max_s": max(waits)}))


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
          + ", ".join(f"{r['queries']} queries, slowest {r['max_s'] * 1000:.0f} ms" for r in rs))
    assert [r["n_errors"] for r in rs] == [0] * READERS, [r["errors"] for r in rs]
    assert (scrapes, samples) == (w["committed"], w["samples"])
    assert w["committed"] >= DURATION_S, "the writer barely wrote: the test proves nothing"
    assert all(r["queries"] >= DURATION_S for r in rs), "a reader barely read"
    assert w["max_wait_s"] < WRITER_WAIT_BOUND_S
    assert max(r["max_s"] for r in rs) < READER_WAIT_BOUND_S
