"""Load-sweep view: the latest sweep pair of a deployment as plain rows for
``kvplan.app.charts_cost.sweep_curves_chart``, with both goodputs at the SLOs and how each was limited.
Not wired into a page yet."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...models.capacity.goodput import Goodput, SideGoodput, failed_metrics
from ...models.metrics.runs import is_cpu_scale
from ...sql.db import Source
from ..data.store import load_pricebook
from ..data.sweeps import SweepPair, latest_sweep_pair

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


def sweep_view(source: Source, deployment: str, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None, *,
               prices: dict | None = None) -> SweepView:
    """``ttft_slo_s`` None: the planning inputs' p99 TTFT SLO; ``tpot_slo_s`` None: TPOT is not
    checked. ``prices``: the config's default price table (as the other views)."""
    if ttft_slo_s is None:
        ttft_slo_s = load_pricebook(source, deployment, prices).planning.ttft_p99_slo_seconds
    return sweep_view_of(latest_sweep_pair(source, deployment), ttft_slo_s, tpot_slo_s)


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
