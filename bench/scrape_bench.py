"""Direct scraping: how many /metrics targets one core keeps up with at a 15 s interval.

N targets are served by a separate process (``python -m http.server`` over one recorded real
vLLM payload, the largest in tests/fixtures/payloads), scraped by kvplan's own Scraper (its
thread pool, scrape_timeout_s, scrape_max_bytes), parsed and stored into DuckDB. kvplan's own
CPU time per round (getrusage) gives the milliseconds of one target scrape, hence how many
targets one core serves per interval; the round's wall time says whether it kept up.

    .venv/bin/python bench/scrape_bench.py [--targets 50 150] [--rounds 3] [--interval 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    from kvplan.collectors.schedule.scheduler import Scraper
    from kvplan.collectors.scrape.parse import parse_payload
    from kvplan.models.inputs.settings import DeploymentConfig, ScheduleConfig, Settings, TargetConfig
    from kvplan.sql.db import Database

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", type=int, nargs="+", default=[50, 150])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", type=float, default=15.0)
    a = ap.parse_args()
    payload = max((ROOT / "tests/fixtures/payloads").glob("*/*vllm*.prom"), key=lambda p: p.stat().st_size)
    n_samples = len(parse_payload(payload.read_text(), str(payload)).samples)
    print(f"payload {payload.relative_to(ROOT)}: {payload.stat().st_size:,} bytes, {n_samples} samples; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    work = Path(tempfile.mkdtemp(prefix="kvplan-scrape-bench-"))
    srv = None
    try:
        for i in range(max(a.targets)):
            (work / "www" / f"t{i}").mkdir(parents=True)
            os.symlink(payload, work / "www" / f"t{i}" / "metrics.txt")  # served as text/plain
        port = free_port()
        srv = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port), "--directory",
                                str(work / "www")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.5)
        for n in a.targets:
            path = work / f"b{n}.duckdb"
            db = Database(path)
            db.migrate()
            s = Settings(db=path, schedule=ScheduleConfig(scrape_interval_s=a.interval), deployments=[
                DeploymentConfig(name="bench", targets=[
                    TargetConfig(name=f"t{i}", url=f"http://127.0.0.1:{port}/t{i}/metrics.txt") for i in range(n)])])
            sc = Scraper(s, db)
            sc.ensure_targets()
            cpu, wall, errs = [], [], 0
            for _ in range(a.rounds):
                c0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                out = sc.round()
                c1 = resource.getrusage(resource.RUSAGE_SELF)
                wall.append(time.perf_counter() - t0)
                cpu.append(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
                errs += out.errors
            sc.close()
            per = min(cpu) / n
            print(f"{n:5d} targets: round {min(wall):.1f}-{max(wall):.1f}s wall, kvplan CPU {min(cpu):.1f}s = "
                  f"{per * 1000:.0f} ms per target scrape ({n_samples / per:,.0f} samples/s per core), "
                  f"{errs} scrapes late or failed of {n * a.rounds}; one core keeps up with "
                  f"{a.interval / per:.0f} targets every {a.interval:g}s")
    finally:
        if srv is not None:
            srv.terminate()
            srv.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    from results import record

    raise SystemExit(record("ingestion", main))
