"""What the goodput reads from DuckDB: the latest load-sweep pair of a deployment
(``kvplan pilot --sweep``, migration 011) as ``kvplan.models.capacity.goodput.SweepPoint`` curves.

Opens the database read-only for as long as its queries take (``kvplan.sql.db``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from ...models.capacity.goodput import SweepGoodput, SweepPoint, sweep_goodput
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
