"""Load sweeps (``kvplan pilot --sweep``): the offered load on one replica raised in levels,
once against a replica with KV reuse off and once against one with reuse on, the same prompts on
both; per level the client-side throughput and TTFT / TPOT percentiles (``kvplan.models.capacity.goodput``
reads the goodput off them).

Levels are either

* ``concurrency``: closed loop, ``c`` users each sending their requests one after another
  (``requests_per_level`` in all, rounded up to a multiple of ``c``), or
* ``rate``: open loop, Poisson arrivals at ``r`` requests/s (a seeded schedule, the same on both
  sides, conditioned to offer exactly ``r`` over the level), ``max(requests_per_level,
  r x level_seconds)`` requests; arrivals do not wait for
  answers, so past its capacity a replica builds a queue as under real traffic.

Prompts follow a ``kvplan.collectors.loadgen.workload`` scenario (``shared_prefix``: one system prompt and a
per-request tail; ``unique``: nothing shared), each request of the sweep its own tail, the same
text on both sides. The sides run interleaved by level (level ``k`` on one side, then on the
other, the order alternating) so that slow drifts of a shared machine hit both. Each side first
gets one warm-up request of the same shape, not measured: neither side pays for a cold process,
and the reuse-on side starts with the system prompt cached, as a fleet behind one system prompt
runs in steady state.

Per request TPOT = (total - TTFT) / (output tokens - 1); per level throughput = completed
requests / (last answer - first request sent); percentiles are linear-interpolated (numpy's
default, DuckDB's ``quantile_cont``).
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import pyarrow as pa

from ...models.capacity.goodput import SweepPoint
from ...models.core.errors import KvplanError
from ...models.core.timeutil import from_epoch_s
from ...sql.db import Database
from ..scrape.scrape import redact_url
from . import client as lg_client
from . import workload as wl

MAX_LEVEL = {"concurrency": 10_000, "rate": 100_000.0}
"""Highest level a sweep takes: concurrent users, or requests/s."""
LOAD_KINDS = ("concurrency", "rate")
SWEEP_SCENARIOS = ("shared_prefix", "unique")


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep sends: the load levels and the prompt/output shape."""

    levels: tuple[float, ...]
    load_kind: str = "concurrency"
    scenario: str = "shared_prefix"
    prefix_chars: int = 4000
    tail_chars: int = 200
    output_tokens: int = 16
    seed: int = 0
    requests_per_level: int = 24
    level_seconds: float = 10.0
    """Rate levels: arrivals spread over about this long (at least ``requests_per_level``)."""
    request_timeout_s: float = 120.0
    warmup: bool = True
    first_request: int = 0
    """Request numbering offset: another run with the same seed (same system prompt) but an
    offset past the sweep's sends new tails."""

    def __post_init__(self) -> None:
        if self.load_kind not in LOAD_KINDS:
            raise KvplanError(f"must be one of {', '.join(LOAD_KINDS)}", source=f"load kind {self.load_kind!r}")
        if self.scenario not in SWEEP_SCENARIOS:
            raise KvplanError(f"a sweep sends {' or '.join(SWEEP_SCENARIOS)} prompts (multi_turn histories "
                              "depend on the answers, so the two sides would not get the same stream)",
                              source=f"--scenario {self.scenario}")
        if not self.levels:
            raise KvplanError("give at least one level", source="--levels/--rates")
        for x in self.levels:
            top = MAX_LEVEL[self.load_kind]
            if not math.isfinite(x) or x <= 0 or x > top or (self.load_kind == "concurrency" and x != int(x)):
                raise KvplanError(f"levels must be positive and at most {top:,} (whole numbers of users for "
                                  "concurrency)", source=f"level {x!r}")
        if len(set(self.levels)) != len(self.levels):
            raise KvplanError("a level is given twice", source="--levels/--rates")
        if self.output_tokens < 1 or self.requests_per_level < 1 or self.level_seconds <= 0:
            raise KvplanError("output tokens and requests per level must be >= 1, level seconds > 0",
                              source="sweep")

    def workload(self) -> wl.Workload:
        return wl.Workload(scenario=self.scenario, users=1, turns=1, output_tokens=self.output_tokens,  # type: ignore[arg-type]
                           prefix_chars=self.prefix_chars, tail_chars=self.tail_chars, seed=self.seed,
                           request_timeout_s=self.request_timeout_s)

    def requests_at(self, level: float) -> int:
        if self.load_kind == "concurrency":
            c = int(level)
            return c * math.ceil(self.requests_per_level / c)
        return max(self.requests_per_level, math.ceil(level * self.level_seconds))

    def prompts(self, level_idx: int, n: int) -> list[str]:
        """The ``n`` prompts of level ``level_idx``: request ``i`` is workload user
        ``first_request + level_idx x 100000 + i``, turn 0 (its own tail; the shared system prompt)."""
        w = self.workload()
        return [wl.prompt_for(w, self.first_request + level_idx * 100_000 + i, 0) for i in range(n)]

    def arrivals(self, level_idx: int, rate: float, n: int) -> list[float]:
        """Seeded Poisson arrival offsets (seconds) of a rate level, the same on both sides:
        exponential gaps, scaled so that the ``n`` arrivals span ``n / rate`` seconds (a Poisson
        stream conditioned on its count: bursts as in real traffic, but a short level still
        offers exactly its rate)."""
        rng = random.Random(f"kvplan-sweep:{self.seed}:{level_idx}:{rate!r}")
        gaps = [rng.expovariate(rate) for _ in range(n)]
        scale = (n / rate) / sum(gaps)
        t, out = 0.0, []
        for g in gaps:
            out.append(t)
            t += g * scale
        return out

    def to_dict(self) -> dict:
        return asdict(self)


def level_point(offered: float, results: Sequence[wl.RequestResult]) -> SweepPoint:
    """One level's ``SweepPoint`` from its requests (module docstring)."""
    ok = [r for r in results if r.ok and r.ttft_s is not None]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]  # all of ok
    tpot = [(r.total_s - r.ttft_s) / (r.output_tokens - 1) for r in ok
            if r.output_tokens and r.output_tokens > 1 and r.total_s is not None and r.ttft_s is not None]
    span = None
    if results:
        first = min(r.started_at for r in results)
        last = max(r.started_at + (r.total_s or 0.0) for r in results)
        span = last - first
    rps = len(ok) / span if span and span > 0 else 0.0
    return SweepPoint(offered=offered, throughput_rps=rps, ttft_p50_s=wl.percentile(ttft, 50),
                      ttft_p99_s=wl.percentile(ttft, 99), tpot_p99_s=wl.percentile(tpot, 99),
                      requests=len(results), failed=len(results) - len(ok),
                      tpot_p50_s=wl.percentile(tpot, 50))


@dataclass
class Level:
    offered: float
    run: wl.RunResult
    point: SweepPoint

    @property
    def span_s(self) -> float | None:
        rs = self.run.results
        if not rs:
            return None
        return max(r.started_at + (r.total_s or 0.0) for r in rs) - min(r.started_at for r in rs)


@dataclass
class SweepResult:
    """One side of a sweep."""

    reuse: str
    server: str
    model_name: str
    plan: SweepPlan
    started_at: float
    ended_at: float = 0.0
    levels: list[Level] = field(default_factory=list)

    @property
    def points(self) -> list[SweepPoint]:
        return [lv.point for lv in self.levels]

    @property
    def errors(self) -> list[str]:
        return [r.error or "" for lv in self.levels for r in lv.run.errors]


Progress = Callable[[str, int, SweepPoint], None]
"""Called after each level: (reuse side, level index, the level's point)."""


def run_level(server: str, model_name: str, plan: SweepPlan, level_idx: int) -> Level:
    """Run one level of ``plan`` against ``server``."""
    level = plan.levels[level_idx]
    n = plan.requests_at(level)
    prompts = plan.prompts(level_idx, n)
    if plan.load_kind == "concurrency":
        c = int(level)
        per_user = [prompts[u::c] for u in range(c)]
        run = lg_client.run_prompts([server], model_name, per_user, output_tokens=plan.output_tokens,
                             scenario=plan.scenario, request_timeout_s=plan.request_timeout_s)
    else:
        offsets = plan.arrivals(level_idx, level, n)
        run = lg_client.run_arrivals(server, model_name, prompts, offsets, output_tokens=plan.output_tokens,
                              scenario=plan.scenario, request_timeout_s=plan.request_timeout_s)
    return Level(level, run, level_point(level, run.results))


def warm_up(server: str, model_name: str, plan: SweepPlan) -> None:
    """One request of the sweep's shape (its own tail), not measured."""
    w = plan.workload()
    lg_client.complete(server, model_name, wl.prompt_for(w, 999_999_999, 0), output_tokens=plan.output_tokens,
                timeout_s=plan.request_timeout_s)


def run_pair(off_url: str, on_url: str, model_name: str, plan: SweepPlan, *,
             progress: Progress | None = None) -> tuple[SweepResult, SweepResult]:
    """Both sides of a sweep, interleaved by level (module docstring). Never raises for failed
    requests: they are counted in the level (and fail it)."""
    sides = {"off": SweepResult("off", lg_client.normalize_base_url(off_url), model_name, plan, time.time()),
             "on": SweepResult("on", lg_client.normalize_base_url(on_url), model_name, plan, time.time())}
    if plan.warmup:
        for s in sides.values():
            warm_up(s.server, model_name, plan)
    for k in range(len(plan.levels)):
        for reuse in (("off", "on") if k % 2 == 0 else ("on", "off")):
            s = sides[reuse]
            lv = run_level(s.server, model_name, plan, k)
            s.levels.append(lv)
            if progress is not None:
                progress(reuse, k, lv.point)
    for s in sides.values():
        s.levels.sort(key=lambda lv: lv.offered)
        s.started_at = min([lv.run.started_at for lv in s.levels] or [s.started_at])
        s.ended_at = max([lv.run.ended_at for lv in s.levels] or [time.time()])
    return sides["off"], sides["on"]


def save_sweep(db: Database, deployment: str, sweep: SweepResult, *, pair: str, measured_on: str) -> int:
    """Insert one side, its levels and its requests in one transaction; returns the sweep id."""
    from ..scrape.store import check_name

    check_name(deployment, "--deployment")
    with db.write() as con:
        sweep_id = Database.scalar(
            con, "insert_sweep", deployment=deployment, pair=pair, side=sweep.reuse,
            load_kind=sweep.plan.load_kind, server=redact_url(sweep.server), model_name=sweep.model_name,
            scenario=sweep.plan.scenario, workload=json.dumps(sweep.plan.to_dict()),
            started_at=from_epoch_s(sweep.started_at), ended_at=from_epoch_s(sweep.ended_at),
            measured_on=measured_on)
        rows: dict[str, list] = {k: [] for k in ("sweep_id", "level_idx", "started_at", "ttft_s", "total_s",
                                                 "prompt_tokens", "output_tokens", "cached_tokens", "ok", "error")}
        for i, lv in enumerate(sweep.levels):
            p = lv.point
            Database.run(con, "insert_sweep_point", sweep_id=sweep_id, level_idx=i, offered=p.offered,
                         started_at=from_epoch_s(lv.run.started_at), ended_at=from_epoch_s(lv.run.ended_at),
                         requests=p.requests, failed=p.failed, span_s=lv.span_s, throughput_rps=p.throughput_rps,
                         ttft_p50_s=p.ttft_p50_s, ttft_p99_s=p.ttft_p99_s, tpot_p50_s=p.tpot_p50_s,
                         tpot_p99_s=p.tpot_p99_s)
            for r in lv.run.results:
                for k, v in (("sweep_id", sweep_id), ("level_idx", i), ("started_at", from_epoch_s(r.started_at)),
                             ("ttft_s", r.ttft_s), ("total_s", r.total_s), ("prompt_tokens", r.prompt_tokens),
                             ("output_tokens", r.output_tokens), ("cached_tokens", r.cached_tokens),
                             ("ok", r.ok), ("error", r.error)):
                    rows[k].append(v)
        reqs = pa.table({  # noqa: F841 (read by DuckDB by name)
            "sweep_id": pa.array(rows["sweep_id"], pa.int64()), "level_idx": pa.array(rows["level_idx"], pa.int32()),
            "started_at": pa.array(rows["started_at"], pa.timestamp("us")),
            "ttft_s": pa.array(rows["ttft_s"], pa.float64()), "total_s": pa.array(rows["total_s"], pa.float64()),
            "prompt_tokens": pa.array(rows["prompt_tokens"], pa.int32()),
            "output_tokens": pa.array(rows["output_tokens"], pa.int32()),
            "cached_tokens": pa.array(rows["cached_tokens"], pa.int32()),
            "ok": pa.array(rows["ok"], pa.bool_()), "error": pa.array(rows["error"], pa.string()),
        })
        con.execute("INSERT INTO sweep_requests SELECT * FROM reqs")
    return sweep_id
