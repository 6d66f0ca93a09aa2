"""The recorded topology A/B (``tests/fixtures/topology-ab``, ``record_topology_ab.py``): load a
side into DuckDB through the product's paths (the scrapes as ``kvplan demo`` loads a recording,
the lookup logs with ``import-trace``), and predict one side from the other's data alone."""

from __future__ import annotations

import json
from pathlib import Path

from kvplan.app.views.whatif import WhatIf, WhatIfQuery, whatif
from kvplan.app.views.whatif_topology import TopologyWhatIf
from kvplan.collectors.demo import load_demo
from kvplan.collectors.traces import ingest as traces
from kvplan.models.core.timeutil import from_epoch_s
from kvplan.sql.db import Database

FIX = Path(__file__).resolve().parent / "fixtures" / "topology-ab"
FIX_3C = Path(__file__).resolve().parent / "fixtures" / "topology-ab-3c"
"""The second recording: a concurrent phase of 3 clients, each engine pinned to its own core."""
FIX_SMALL = Path(__file__).resolve().parent / "fixtures" / "topology-ab-small"
"""The third: ``--small --seed 23`` (the live test's size, 40 requests in bursts of 4), recorded
2026-12-05 beside other sessions' work."""
SIDES = ("private", "shared")
OTHER = {"private": "shared", "shared": "private"}
EDGE_BEFORE_S, EDGE_AFTER_S = 1.2, 3.0
"""A phase's window: from a scrape before its first request to the scrapes after its last answer."""


def load_side(path: Path, side_dir: Path) -> Database:
    db = Database(path)
    db.migrate()
    load_demo(db, side_dir / "scrapes.jsonl.xz")
    traces.import_trace(db, f"ab-{side_dir.name}", [side_dir / "lookup-logs"])
    return db


def meta(side_dir: Path) -> dict:
    return json.loads((side_dir / "meta.json").read_text())


def window(m: dict, phase: str):
    sp = m["phases"][phase]
    return from_epoch_s(sp["start"] - EDGE_BEFORE_S), from_epoch_s(sp["end"] + EDGE_AFTER_S)


def side_whatif(db: Database, m: dict, phase: str) -> WhatIf:
    a, b = window(m, phase)
    with db.snapshot() as src:
        return whatif(src, f"ab-{m['side']}", WhatIfQuery(ranks=m["vllm_servers"], t_from=a, t_to=b))


def side_topology(db: Database, m: dict, phase: str) -> TopologyWhatIf:
    tw = side_whatif(db, m, phase).topology
    assert tw is not None
    return tw


def cross(dbs: dict[str, Database], metas: dict[str, dict], src: str, phase: str) -> dict:
    """From ``src``'s data alone: the other side's hit rate, TTFT mean and p99, against what
    the other side measured over the same phase."""
    dst = OTHER[src]
    pred = side_topology(dbs[src], metas[src], phase)
    row = next(r for r in pred.latency if (r.topology == "shared") == (dst == "shared")
               and (dst == "shared" or r.routing == "round_robin"))
    meas = side_topology(dbs[dst], metas[dst], phase).today
    # the predicted TTFTs read through the measured histogram's buckets, as the measured p99 is read
    # (the calibrated ones: ``ttft_mean_s``; the replay's own: ``ttft_mean_s_raw``)
    return {"hit_pred": row.hit_rate, "hit_meas": meas.hit_rate_measured,
            "mean_pred": row.ttft_mean_s, "mean_meas": meas.ttft_mean_s_measured,
            "p99_pred": row.ttft_p99_s_as_histogram, "p99_meas": meas.ttft_p99_s_measured,
            "p50_pred": row.ttft_p50_s, "p50_meas": meas.ttft_p50_s_measured,
            "mean_raw": row.ttft_mean_s_raw, "p99_raw": row.ttft_p99_s_as_histogram_raw,
            "mean_interval": row.ttft_mean_s_interval, "p99_interval": row.ttft_p99_s_as_histogram_interval,
            "today": pred.today}


def segment_ratios(fix: Path, phase: str) -> list[float]:
    """Per segment of ``phase``: the shared side's mean client TTFT over the private side's, the
    same requests (``requests.json``): how much the two sides' own measurements move segment to
    segment on the shared machine, whatever the model."""
    rows = {s: json.loads((fix / s / "requests.json").read_text()) for s in SIDES}
    out = []
    for k in sorted({r["segment"] for r in rows["private"] if r["phase"] == phase}):
        mean = {s: sum(r["ttft_s"] for r in rows[s] if r["segment"] == k)
                / sum(1 for r in rows[s] if r["segment"] == k) for s in SIDES}
        out.append(mean["shared"] / mean["private"])
    return out
