"""Store workload-driver runs (``kvplan.collectors.loadgen.workload``) in DuckDB as labelled runs, so
runs can be compared side by side (unique sessions against a shared prefix, cache off
against cache on) and each run's window can be matched with the server metrics."""

from __future__ import annotations

import json
from dataclasses import asdict

import pyarrow as pa

from ...models.core.timeutil import from_epoch_s
from ...sql.db import Database
from ..scrape.scrape import redact_url
from .workload import RunResult


def save_run(db: Database, deployment: str, run: RunResult, *, label: str | None = None,
             measured_on: str, reuse: str | None = None, engine_seconds: float | None = None,
             engine_seconds_source: str | None = None, ab_pair: str | None = None,
             cached_tokens: float | None = None) -> int:
    """Insert the run and its requests in one transaction; returns the run id.

    A side of a measured A/B also records ``reuse`` ('off' or 'on'), the ``engine_seconds`` it
    took and how they were measured, the ``ab_pair`` both sides share, and the cached prompt
    tokens the servers reported over the run: ``kvplan.app.data.prefill.measured_ab`` reads them."""
    if reuse not in (None, "off", "on"):
        raise ValueError(f"reuse: must be 'off', 'on' or None; got {reuse!r}")
    w = run.workload
    with db.write() as con:
        run_id = Database.scalar(
            con, "insert_run", deployment=deployment, label=label or run.scenario, scenario=run.scenario,
            routing=w.routing, started_at=from_epoch_s(run.started_at), ended_at=from_epoch_s(run.ended_at),
            model_name=run.model_name,
            servers=json.dumps([redact_url(s) for s in run.servers]), workload=json.dumps(asdict(w)),
            stopped_by=run.stopped_by, measured_on=measured_on, reuse=reuse, engine_seconds=engine_seconds,
            engine_seconds_source=engine_seconds_source, ab_pair=ab_pair, cached_tokens=cached_tokens)
        rs = run.results
        reqs = pa.table({  # noqa: F841 (read by DuckDB by name)
            "run_id": pa.array([run_id] * len(rs), pa.int64()),
            "user_idx": pa.array([r.user for r in rs], pa.int32()),
            "turn": pa.array([r.turn for r in rs], pa.int32()),
            "server": [redact_url(r.server) for r in rs],
            "started_at": pa.array([from_epoch_s(r.started_at) for r in rs], pa.timestamp("us")),
            "ttft_s": pa.array([r.ttft_s for r in rs], pa.float64()),
            "total_s": pa.array([r.total_s for r in rs], pa.float64()),
            "prompt_tokens": pa.array([r.prompt_tokens for r in rs], pa.int32()),
            "output_tokens": pa.array([r.output_tokens for r in rs], pa.int32()),
            "tokens_per_s": pa.array([r.tokens_per_s for r in rs], pa.float64()),
            "decode_tokens_per_s": pa.array([r.decode_tokens_per_s for r in rs], pa.float64()),
            "cached_tokens": pa.array([r.cached_tokens for r in rs], pa.int32()),
            "ok": pa.array([r.ok for r in rs], pa.bool_()),
            "error": pa.array([r.error for r in rs], pa.string()),
        })
        con.execute("INSERT INTO run_requests SELECT * FROM reqs")
    return run_id
