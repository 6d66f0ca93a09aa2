"""Prometheus ingestion benchmark: a real Prometheus filled with replayed history, then
kvplan's backfill, one nightly run and the daily aggregates, each measured against
Prometheus answering the same questions directly.

History: ``--days`` days of ``--engines`` vLLM servers (one engine each, ``--per-node`` per
node, one LMCache MP server per node), scraped every ``--interval`` seconds, written as
OpenMetrics one day at a time and loaded with ``promtool tsdb create-blocks-from
openmetrics``. Every series is replayed from a recorded real payload
(tests/fixtures/payloads; built ones if none) and carries ``replay="<case>/<file>"``:
counters and histogram buckets are the recorded values times a cumulative load that follows
a day/night curve (each engine its own level, one counter restart per engine every ~10
days), gauges follow the same curve. Only the families kvplan ingests are replayed.

Measured (each kvplan job in its own process, whose peak RSS is reported):
  backfill   kvplan ingest of the whole range: raw samples/s
  rollups    daily_rollups of every day (what the daemon holds after that many nights)
  night      one nightly run (ingest of the last day + rollups; the report is not rendered)
  raw read   the same range-vector queries for that day, answered by Prometheus alone
  daily      per-day hit rate and TTFT p50/p99 over the range: PromQL vs kvplan's rollups
             vs kvplan's step increases (values must agree)

    .venv/bin/python bench/prom_bench.py [--days 30 --engines 64 --interval 300]
    .venv/bin/python bench/prom_bench.py --days 1 --engines 2 --interval 600   # smoke
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import numpy as np

from kvplan.collectors.prometheus.ingest import split_name
from kvplan.collectors.scrape.openmetrics import label_text
from kvplan.collectors.scrape.parse import parse_payload
from kvplan.collectors.scrape.payload import Payload

ROOT = Path(__file__).resolve().parents[1]
DAY = 86400


def templates() -> list[tuple[str, Payload]]:
    """(replay label, payload) of the largest recorded vLLM and LMCache MP payloads."""
    found: dict[str, tuple[int, str, Payload]] = {}
    for man in sorted((ROOT / "tests/fixtures/payloads").glob("*/manifest.json")):
        for f in json.loads(man.read_text())["files"]:
            path = man.parent / f["file"]
            p = parse_payload(path.read_text(), str(path), content_type=f.get("content_type"))
            size = sum(s.value for s in p.samples if s.name.endswith("_total"))
            if size > found.get(p.kind, (-1,))[0]:
                found[p.kind] = (size, f"{man.parent.name}/{f['file']}", p)
    missing = {"vllm", "lmcache_mp"} - set(found)
    if missing:
        raise SystemExit(f"tests/fixtures/payloads holds no recorded {' or '.join(sorted(missing))} payload "
                         "(record them with deploy/local/recorders/record_fixtures.py)")
    return [(label, p) for _, label, p in found.values()]


def _keep(s) -> bool:
    try:
        return not split_name(s.name)[2]
    except KeyError:
        return False


def load(days: int, ticks: np.ndarray, engine: int) -> np.ndarray:
    """Cumulative load (in 'template payloads') at each tick, restarting every ~10 days."""
    per_tick = (1 + 0.6 * np.sin(2 * np.pi * ticks / DAY - np.pi / 2)) * (0.5 + (engine % 7) / 7)
    per_tick /= DAY / (ticks[1] - ticks[0]) if len(ticks) > 1 else 1
    restart = (ticks - ticks[0] + engine * 3 * 3600) // (10 * DAY)
    out = np.cumsum(per_tick)
    for r in np.unique(restart)[1:]:
        first = np.argmax(restart == r)
        out[first:] -= out[first - 1]
    return out


def write_day(path: Path, series: list, t0: int, interval: int, g: dict[int, np.ndarray], day: int) -> int:
    """One day of OpenMetrics (samples grouped by name); returns the sample count."""
    per_day = DAY // interval
    sl = slice(day * per_day, (day + 1) * per_day)
    ts = [str(t0 + (day * per_day + i) * interval) for i in range(per_day)]
    by_name: dict[str, list] = {}
    for eng, lab, s in series:
        by_name.setdefault(s.name, []).append((eng, lab, s))
    n = 0
    with path.open("w") as f:
        for name in sorted(by_name):
            f.write(f"# TYPE {name} unknown\n")
            for eng, lab, s in by_name[name]:
                if s.type == "gauge":
                    vals = s.value * (0.5 + 0.5 * np.sin(g[eng][sl] * 7))
                else:
                    vals = s.value * g[eng][sl]
                f.write("".join(f"{name}{lab} {v!r} {t}\n" for v, t in zip(vals.tolist(), ts, strict=True)))
                n += len(ts)
        f.write("# EOF\n")
    return n


def fill(work: Path, args, t0: int) -> tuple[int, float, float]:
    tmpl = templates()
    per_day = DAY // args.interval
    ticks = t0 + np.arange((args.days + 1) * per_day) * args.interval
    series = []
    nodes = math.ceil(args.engines / args.per_node)
    for label, p in tmpl:
        kept = [s for s in p.samples if _keep(s)]
        targets = ([(e, f"node{e // args.per_node}:{8000 + e % args.per_node}", "vllm") for e in range(args.engines)]
                   if p.kind == "vllm" else
                   [(args.engines + n, f"node{n}:8090", "lmcache") for n in range(nodes)])
        for eng, inst, job in targets:
            for s in kept:
                series.append((eng, label_text(s, {"instance": inst, "job": job, "replay": label}), s))
    g = {eng: load(args.days, ticks, eng) for eng in {e for e, _, _ in series}}
    gen_s = prom_s = 0.0
    samples = 0
    tsdb = work / "tsdb"
    for day in range(args.days + 1):  # +1: the sample at the end of the last day
        src = work / f"day{day}.om"
        t = time.perf_counter()
        n = write_day(src, series, t0, args.interval, g, day) if day < args.days else \
            write_last(src, series, t0 + day * DAY, g, day * per_day)
        gen_s += time.perf_counter() - t
        samples += n
        t = time.perf_counter()
        r = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h",
                            str(src), str(tsdb)], capture_output=True, text=True)
        prom_s += time.perf_counter() - t
        if r.returncode:
            sys.exit(f"promtool failed on day {day}:\n{r.stderr[-2000:]}")
        src.unlink()
    print(f"history: {len(series)} series ({args.engines} vLLM + {nodes} LMCache targets), {samples:,} samples "
          f"every {args.interval}s over {args.days} days; replayed from {', '.join(label for label, _ in tmpl)}; "
          f"OpenMetrics written in {gen_s:.1f}s, promtool {prom_s:.1f}s")
    return samples, gen_s, prom_s


def write_last(path: Path, series: list, t: int, g: dict, i: int) -> int:
    with path.open("w") as f:
        for name in sorted({s.name for _, _, s in series}):
            f.write(f"# TYPE {name} unknown\n")
            for eng, lab, s in series:
                if s.name == name:
                    v = float(s.value * (g[eng][i] if s.type != "gauge" else 1.0))
                    f.write(f"{name}{lab} {v!r} {t}\n")
        f.write("# EOF\n")
    return len(series)


def start_prometheus(work: Path) -> tuple[subprocess.Popen, str]:
    from kvplan.deploy.local.processes import free_ports

    (work / "prometheus.yml").write_text("global: {}\n")
    (port,) = free_ports(1)
    proc = subprocess.Popen(["prometheus", f"--config.file={work / 'prometheus.yml'}",
                             f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--storage.tsdb.retention.time=100y", "--storage.tsdb.max-block-duration=2h"],
                            stdout=(work / "prometheus.log").open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    sys.exit(f"Prometheus did not start; see {work / 'prometheus.log'}")


CHILD = """
import json, resource, sys, time
from datetime import datetime
from kvplan.app.config import load_settings
from kvplan.sql.db import Database
s = load_settings(__import__('pathlib').Path({conf!r}))
db = Database(s.db); db.migrate()
t = time.perf_counter()
{body}
out['seconds'] = time.perf_counter() - t
out['maxrss_mb'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print('RESULT', json.dumps(out))
"""


def child(conf: Path, body: str) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), conf=str(conf), body=body)],
                       capture_output=True, text=True)
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    if r.returncode or line is None:
        sys.exit(f"child failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return json.loads(line[7:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--engines", type=int, default=64)
    ap.add_argument("--per-node", type=int, default=8, help="vLLM engines per node (one LMCache MP server each)")
    ap.add_argument("--interval", type=int, default=300, help="scrape interval of the replayed history, seconds")
    ap.add_argument("--step", default="5m", help="kvplan's ingestion step")
    ap.add_argument("--chunk", default="6h", help="kvplan's range per query and transaction")
    ap.add_argument("--workdir", type=Path, help="keep everything here (default: a temp dir, removed)")
    ap.add_argument("--modes", help="compare nights instead: e.g. raw,query,rules (aggregated with query-time "
                                    "sums, aggregated from the rule pack's outputs, backfilled by promtool)")
    args = ap.parse_args()
    if DAY % args.interval:
        sys.exit("--interval must divide a day")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="kvplan-prom-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=args.days + 1)
    t0 = int(start.timestamp())
    try:
        samples, _, _ = fill(work, args, t0)
        proc, url = start_prometheus(work)
        try:
            if args.modes:
                proc, url = nights(work, args, proc, url, start, samples)
            else:
                run(work, args, url, start, samples)
        finally:
            proc.terminate()
            proc.wait(30)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def run(work: Path, args, url: str, start: datetime, samples: int) -> None:
    end = start + timedelta(days=args.days)
    conf = work / "kvplan.toml"
    # lookback and gap_after must exceed the replayed scrape interval
    lookback, gap = max(600, 3 * args.interval), max(300, 2 * args.interval)
    conf.write_text(f'db = "{work / "bench.duckdb"}"\n[prometheus]\nurl = "{url}"\nstep = "{args.step}"\n'
                    f'chunk = "{args.chunk}"\nlookback = "{lookback}s"\ngap_after = "{gap}s"\ntimeout_s = 600\n'
                    f'[[deployments]]\nname = "bench"\nprometheus_selector = \'job=~"vllm|lmcache"\'\n')
    rng = f"datetime.fromisoformat({start.isoformat()!r}), datetime.fromisoformat({end.isoformat()!r})"
    back = child(conf, f"""from kvplan.collectors.prometheus.ingest import ingest_range
r = ingest_range(db, s.prometheus, s.deployments[0], {rng})
out = dict(raw=r.raw_samples, rows=r.rows, failed=r.failed, chunks=r.chunks, far=r.far_pairs, gaps=r.gaps)""")
    rollups = child(conf, f"""from kvplan.collectors.schedule.scheduler import rollup_day
from datetime import timedelta
d0 = datetime.fromisoformat({start.date().isoformat()!r}).date()
out = dict(rows=sum(rollup_day(db, 'bench', d0 + timedelta(days=i)) for i in range({args.days})))""")
    last = (end - timedelta(days=1)).date()
    night = child(conf, f"""import kvplan.collectors.schedule.scheduler as sch
sch.REPORT_MODULE = 'app.no_such_report'
o = sch.Nightly(s, db).run_day(datetime.fromisoformat({last.isoformat()!r}).date())
out = dict(rows=o.rows, errors=o.errors)""")
    read = child(conf, f"""from kvplan.collectors.prometheus.ingest import (PromClient, fetch_chunk, chunk_bounds,
                                                 in_order)
from kvplan.models.inputs.settings_checks import duration_s
c = PromClient(s.prometheus); n = 0
d0 = datetime.fromisoformat({(end - timedelta(days=1)).isoformat()!r}); d1 = datetime.fromisoformat({end.isoformat()!r})
lb = int(duration_s(s.prometheus.lookback) * 1000)
bounds = list(chunk_bounds(d0, d1, s.prometheus.step_s(), int(duration_s(s.prometheus.chunk))))
for ch in in_order(lambda a, b: fetch_chunk(c, s.deployments[0].prometheus_selector, a, b, lb), bounds,
                   s.prometheus.max_concurrency):
    n += ch.n_raw
out = dict(raw=n)""")
    daily = compare_daily(work / "bench.duckdb", url, start, args.days)
    print(f"backfill  {args.days} days: {back['raw']:,} raw samples in {back['seconds']:.1f}s = "
          f"{back['raw'] / back['seconds']:,.0f} samples/s ({back['chunks']} chunks of {args.chunk}, "
          f"{back['rows']:,} rows stored, {back['failed']} failed, {back['gaps']} gaps, {back['far']} far pairs), "
          f"peak RSS {back['maxrss_mb']:.0f} MB")
    print(f"rollups   {args.days} days: {rollups['seconds']:.1f}s ({rollups['rows']:,} rows)")
    print(f"night     {last}: {night['seconds']:.1f}s (ingest + rollups, {night['rows']:,} rows, "
          f"{night['errors']} errors), "
          f"peak RSS {night['maxrss_mb']:.0f} MB")
    print(f"raw read  same day, range-vector queries only: {read['seconds']:.1f}s ({read['raw']:,} samples) -> "
          f"the nightly run takes {night['seconds'] / read['seconds']:.1f}x Prometheus's raw read")
    p, r, i = daily["promql_s"], daily["rollup_s"], daily["increments_s"]
    print(f"daily     {args.days} days of hit rate + TTFT p50/p99: PromQL {p:.2f}s; kvplan from rollups {r:.3f}s "
          f"({r / p:.2f}x PromQL's time), from step increases {i:.2f}s ({i / p:.2f}x); "
          f"values agree: {daily['agree']} of {args.days} days")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def nights(work: Path, args, proc, url: str, start: datetime, samples: int):
    """One night (the last day: ingest + rollups) per mode, each in its own process with its
    peak RSS, and Prometheus's own CPU time answering it; the rule pack's outputs backfilled
    first by promtool (Prometheus evaluating the pack over the day, timed the same way)."""
    from kvplan.collectors.prometheus.rules import render

    modes = args.modes.split(",")
    d0 = start + timedelta(days=args.days - 1)
    d1 = start + timedelta(days=args.days)
    rows = []
    if "rules" in modes:
        (work / "kvplan.rules.yml").write_text(render())
        c0, t = _cpu_s(proc.pid), time.perf_counter()
        r = subprocess.run(["promtool", "tsdb", "create-blocks-from", "rules", f"--url={url}",
                            f"--start={int(d0.timestamp())}", f"--end={int(d1.timestamp()) + 1800}",
                            f"--output-dir={work / 'rule-blocks'}", str(work / "kvplan.rules.yml")],
                           capture_output=True, text=True, check=False)
        if r.returncode:
            sys.exit(f"promtool create-blocks-from rules failed:\n{r.stderr[-2000:]}")
        rows.append(("rule pack over the day (promtool backfill)", time.perf_counter() - t, None,
                     _cpu_s(proc.pid) - c0, _hwm_mb(proc.pid), ""))
        proc.terminate()
        proc.wait(60)
        for blk in (work / "rule-blocks").iterdir():
            if blk.is_dir():
                shutil.move(str(blk), str(work / "tsdb" / blk.name))
        proc, url = start_prometheus(work)
    lookback, gap = max(600, 3 * args.interval), max(300, 2 * args.interval)
    rng = f"datetime.fromisoformat({d0.isoformat()!r}), datetime.fromisoformat({d1.isoformat()!r})"
    values = {}
    for mode in modes:
        conf = work / f"kvplan-{mode}.toml"
        extra = "" if mode == "raw" else f'prometheus_mode = "aggregated"\nprometheus_sums = "{mode}"\n'
        conf.write_text(f'db = "{work / f"night-{mode}.duckdb"}"\n[prometheus]\nurl = "{url}"\nstep = "{args.step}"\n'
                        f'chunk = "{args.chunk}"\nlookback = "{lookback}s"\ngap_after = "{gap}s"\ntimeout_s = 3600\n'
                        f'[[deployments]]\nname = "bench"\nprometheus_selector = \'job=~"vllm|lmcache"\'\n{extra}')
        c0 = _cpu_s(proc.pid)
        o = child(conf, f"""from kvplan.collectors.prometheus.ingest import ingest_range
from kvplan.collectors.schedule.scheduler import rollup_day
from kvplan.app.data.window import stats
r = ingest_range(db, s.prometheus, s.deployments[0], {rng})
n = rollup_day(db, 'bench', datetime.fromisoformat({d0.isoformat()!r}).date())
w = stats(db, 'bench', {rng})
out = dict(points=r.raw_samples, rows=r.rows, failed=r.failed, hit=w.prefix_cache_hit_rate, prompt=w.prompt_tokens,
           lm=w.lmcache_lookup_hit_rate, p50=[w.ttft_p50.lower, w.ttft_p50.upper],
           p99=[w.ttft_p99.lower, w.ttft_p99.upper])""")
        values[mode] = o
        rows.append((f"night, {mode}", o["seconds"], o["maxrss_mb"], _cpu_s(proc.pid) - c0, _hwm_mb(proc.pid),
                     f"{o['points']:,} points read, {o['rows']:,} rows, {o['failed']} failed"))
    print(f"{args.engines} engines, {args.interval}s scrapes, the last of {args.days} day(s): {samples:,} samples "
          f"in Prometheus")
    print(f"{'what':44s} {'wall s':>8s} {'kvplan RSS MB':>14s} {'Prometheus CPU s':>17s} {'Prom. RSS MB':>13s}")
    for what, sec, rss, pcpu, prss, note in rows:
        print(f"{what:44s} {sec:8.1f} {'' if rss is None else f'{rss:14.0f}':>14s} {pcpu:17.1f} {prss:13.0f}  {note}")
    base = values.get("raw")
    for mode, o in values.items():
        if base is None or mode == "raw":
            continue
        rel = {k: (o[k] - base[k]) / base[k] for k in ("hit", "prompt", "lm") if base[k]}
        print(f"{mode} vs raw: " + ", ".join(f"{k} {v:+.3%}" for k, v in rel.items())
              + f"; TTFT p50 bucket {'same' if o['p50'] == base['p50'] else 'DIFFERENT'}, "
              f"p99 bucket {'same' if o['p99'] == base['p99'] else 'DIFFERENT'}")
    return proc, url


def compare_daily(db_path: Path, url: str, start: datetime, days: int) -> dict:
    from kvplan.app.data.window import stats
    from kvplan.models.metrics.window import Increase, window_stats
    from kvplan.sql.db import Database

    db = Database(db_path)
    ttft = "vllm:time_to_first_token_seconds_bucket"
    qs = ["sum(increase(vllm:prefix_cache_hits_total[1d])) / sum(increase(vllm:prefix_cache_queries_total[1d]))",
          f"histogram_quantile(0.5, sum by (le) (increase({ttft}[1d])))",
          f"histogram_quantile(0.99, sum by (le) (increase({ttft}[1d])))"]
    t = time.perf_counter()
    prom = []
    with httpx.Client(timeout=600) as c:
        for d in range(days):
            at = (start + timedelta(days=d + 1)).timestamp()
            vals = []
            for q in qs:
                res = c.get(f"{url}/api/v1/query", params={"query": q, "time": at}).json()["data"]["result"]
                vals.append(float(res[0]["value"][1]) if res else None)
            prom.append(vals)
    promql_s = time.perf_counter() - t
    t = time.perf_counter()
    roll = []
    for d in range(days):
        a, b = start + timedelta(days=d), start + timedelta(days=d + 1)
        rows = db.fetch("daily_increases", deployment="bench", t_from=a.replace(tzinfo=None),
                        t_to=b.replace(tzinfo=None), model_name=None)
        w = window_stats([Increase(**x) for x in rows])
        roll.append([w.prefix_cache_hit_rate, w.ttft_p50_s, w.ttft_p99_s])
    rollup_s = time.perf_counter() - t
    t = time.perf_counter()
    inc = []
    for d in range(days):
        w = stats(db, "bench", start + timedelta(days=d), start + timedelta(days=d + 1))
        inc.append([w.prefix_cache_hit_rate, w.ttft_p50_s, w.ttft_p99_s])
    increments_s = time.perf_counter() - t

    def eq(x, y):
        return all((a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9))
                   for a, b in zip(x, y, strict=True))

    agree = sum(eq(p, i) and eq(p, r) for p, r, i in zip(prom, roll, inc, strict=True))
    return dict(promql_s=promql_s, rollup_s=rollup_s, increments_s=increments_s, agree=agree)


if __name__ == "__main__":
    from results import record

    raise SystemExit(record("ingestion", main))
