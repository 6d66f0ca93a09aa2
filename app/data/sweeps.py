"""What the goodput reads from DuckDB: the latest load-sweep pair of a deployment
(``kvplan pilot --sweep``, migration 011) as ``kvplan.models.capacity.goodput.SweepPoint`` curves.

Opens the database read-only for as long as its queries take (``kvplan.sql.db``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from ...models.capacity.goodput import Goodput, SideGoodput, SweepGoodput, SweepPoint, failed_metrics, sweep_goodput
from ...models.metrics.runs import is_cpu_scale
from ...sql.db import Source


@dataclass(frozen=True)
class SweepSide:
    sweep_id: int
    reuse: str
    load_kind: str
    """``concurrency`` (closed loop, users) or ``rate`` (open loop, requests/s)."""
    server: str
    scenario: str
    workload: dict
    started_at: datetime
    ended_at: datetime
    measured_on: str
    points: tuple[SweepPoint, ...]


@dataclass(frozen=True)
class SweepPair:
    """The reuse-off and reuse-on sweeps of one pair."""

    deployment: str
    pair: str
    off: SweepSide
    on: SweepSide

    @property
    def label(self) -> str:
        return (f"load sweep {self.pair!r} (sweeps {self.off.sweep_id} off, {self.on.sweep_id} on; "
                f"{self.off.load_kind} levels; measured on {self.on.measured_on})")

    def goodput(self, ttft_slo_s: float, tpot_slo_s: float | None = None) -> SweepGoodput:
        """Both goodputs at these SLOs (``kvplan.models.capacity.goodput.sweep_goodput``)."""
        return sweep_goodput(self.off.points, self.on.points, ttft_slo_s, tpot_slo_s, label=self.label)


def _point(r: dict) -> SweepPoint:
    return SweepPoint(offered=float(r["offered"]), throughput_rps=float(r["throughput_rps"] or 0.0),
                      ttft_p50_s=r["ttft_p50_s"], ttft_p99_s=r["ttft_p99_s"], tpot_p99_s=r["tpot_p99_s"],
                      requests=int(r["requests"]), failed=int(r["failed"]), tpot_p50_s=r["tpot_p50_s"])


def latest_sweep_pair(db: Source, deployment: str) -> SweepPair | None:
    """The newest pair with both sides stored for ``deployment``; None when there is none."""
    rows = db.fetch("latest_sweep_pair", deployment=deployment)
    if len(rows) != 2:
        return None
    sides = []
    for r in rows:
        pts = tuple(_point(p) for p in db.fetch("sweep_points", sweep_id=r["sweep_id"]))
        sides.append(SweepSide(sweep_id=r["sweep_id"], reuse=r["reuse"], load_kind=r["load_kind"],
                               server=r["server"], scenario=r["scenario"], workload=json.loads(r["workload"]),
                               started_at=r["started_at"], ended_at=r["ended_at"],
                               measured_on=r["measured_on"], points=pts))
    off, on = sides
    return SweepPair(deployment, rows[0]["pair"], off, on)


SIDES = {"off": "without reuse", "on": "with reuse"}
"""Series names of the two sides, as the chart labels them."""


@dataclass(frozen=True)
class SweepView:
    ttft_slo_s: float
    tpot_slo_s: float | None
    pair: SweepPair | None = None
    rows: list[dict] = field(default_factory=list)
    """One per side and level: side, reuse, offered, throughput_rps, ttft_p50_s, ttft_p99_s,
    tpot_p50_s, tpot_p99_s, requests, failed, passes, misses (what failed, comma-separated)."""
    goodput: Goodput | None = None
    off: SideGoodput | None = None
    on: SideGoodput | None = None
    load_kind: str | None = None
    measured_on: str | None = None
    cpu_scale: bool = False
    """True when the sweep ran on a CPU stack: milliseconds and a tiny model, not GPU figures."""

    @property
    def empty(self) -> bool:
        return self.pair is None

    @property
    def goodput_rows(self) -> list[dict]:
        """One per side: side, goodput_rps, limited_by, note."""
        return [{"side": SIDES[k], "goodput_rps": g.rps, "limited_by": g.limited_by, "note": g.note}
                for k, g in (("off", self.off), ("on", self.on)) if g is not None]


def sweep_view_of(pair: SweepPair | None, ttft_slo_s: float, tpot_slo_s: float | None = None) -> SweepView:
    """``sweep_view`` of a pair already read (the plan reads it for its goodput)."""
    if pair is None:
        return SweepView(ttft_slo_s, tpot_slo_s)
    sg = pair.goodput(ttft_slo_s, tpot_slo_s)
    rows = []
    for reuse, side in (("off", pair.off), ("on", pair.on)):
        for p in side.points:
            miss = failed_metrics(p, ttft_slo_s, tpot_slo_s)
            rows.append({"side": SIDES[reuse], "reuse": reuse, "offered": p.offered,
                         "throughput_rps": p.throughput_rps, "ttft_p50_s": p.ttft_p50_s,
                         "ttft_p99_s": p.ttft_p99_s, "tpot_p50_s": p.tpot_p50_s, "tpot_p99_s": p.tpot_p99_s,
                         "requests": p.requests, "failed": p.failed, "passes": not miss,
                         "misses": ", ".join(miss)})
    return SweepView(ttft_slo_s, tpot_slo_s, pair, rows, sg.goodput, sg.off, sg.on, pair.on.load_kind,
                     pair.on.measured_on, is_cpu_scale(pair.on.measured_on))
