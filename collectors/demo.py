"""Load the recorded demo dataset (deploy/demo/kvplan-demo.jsonl.gz, made by
deploy/local/recorders/record_demo.py from the real CPU stack) into a DuckDB file through the same
path as `kvplan import-metrics`. Loading twice changes nothing.

The file's header says what the data is: recorded on CPU with a tiny random model, time
axis stretched. Times are mapped onto the stretched axis starting at the recording time, so
the same file always gives the same database.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import lzma
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

from ..models.core.timeutil import from_epoch_s, naive_utc
from ..sql.db import Database
from .loadgen.runs import save_run
from .loadgen.workload import RequestResult, RunResult, Workload
from .scrape.parse import parse_payload
from .scrape.payload import Payload, PayloadError
from .scrape.store import insert_failure, insert_payload, payload_sha256

DEMO_FILE = Path(__file__).resolve().parents[1] / "deploy" / "demo" / "kvplan-demo.jsonl.gz"


def records(path: Path = DEMO_FILE) -> Iterator[dict]:
    """The dataset's records (gzip, or xz for a ``.xz`` file: the recorded topology A/B)."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: demo dataset not found (record it with "
                                "deploy/local/recorders/record_demo.py)")
    opener = lzma.open if path.suffix == ".xz" else gzip.open
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise PayloadError(str(path), f"not a JSON line: {e}", line=lineno) from None


def stretched(p: Payload, t0: float, stretch: float) -> Payload:
    """The payload with its series' ``_created`` times moved onto the stretched time axis, as
    the scrape times are: a restart's new ``_created`` must still lie between the scrapes
    around it, or the restart would read as a broken target (a decrease without a restart)."""
    return dataclasses.replace(p, samples=[
        s if s.created is None else dataclasses.replace(s, created=t0 + (s.created - t0) * stretch)
        for s in p.samples])


def load_demo(db: Database, path: Path = DEMO_FILE,
              progress: Callable[[int, int], None] | None = None) -> dict:
    """Import every scrape, failure and run of the dataset. Returns counts and the header."""
    recs = list(records(path))
    head = recs[0] if recs else {}
    if head.get("type") != "header":
        raise PayloadError(str(path), "first line is not the dataset header", line=1)
    t0, stretch = head["t0"], head["stretch"]
    deployment = head["deployment"]

    def on_axis(t: float) -> datetime:
        return from_epoch_s(t0 + (t - t0) * stretch)

    counts = {"scrapes": 0, "duplicates": 0, "failures": 0, "runs": 0, "lookups": 0}
    body = [r for r in recs[1:] if r["type"] in ("scrape", "failure")]
    with db.batch() as con:
        for i, r in enumerate(body, start=1):
            with Database.transaction(con):
                if r["type"] == "scrape":
                    p = parse_payload(r["body"], f"{path.name}:{r['target']}@{r['t']:.3f}",
                                      content_type=r.get("content_type"))
                    p = stretched(p, t0, stretch)
                    res = insert_payload(con, deployment=deployment, target=r["target"], ts=on_axis(r["t"]),
                                         payload=p, sha256=payload_sha256(r["body"]), source="import", url=r["url"])
                    counts["scrapes" if res.status == "stored" else "duplicates"] += 1
                else:
                    insert_failure(con, deployment=deployment, target=r["target"], kind=r["kind"],
                                   ts=on_axis(r["t"]), error=r["error"], source="import", url=r["url"])
                    counts["failures"] += 1
            if progress:
                progress(i, len(body))
    have = {(row["label"], row["started_at"]) for row in db.fetch("run_summaries", deployment=deployment)}
    for r in (r for r in recs[1:] if r["type"] == "run"):
        d = r["result"]
        run = RunResult(
            scenario=d["scenario"], started_at=t0 + (d["started_at"] - t0) * stretch,
            ended_at=t0 + (d["ended_at"] - t0) * stretch, workload=Workload(**d["workload"]),
            results=[RequestResult(**{**q, "started_at": t0 + (q["started_at"] - t0) * stretch}) for q in d["results"]],
            # runs recorded before RunResult.model became model_name say "model"
            model_name=d.get("model_name", d.get("model", "")), servers=d.get("servers", []),
            stopped_by=d.get("stopped_by"))
        key = (r["label"], naive_utc(from_epoch_s(run.started_at)))
        if any(k[0] == key[0] and abs((k[1] - key[1]).total_seconds()) < 1e-3 for k in have):
            continue
        save_run(db, deployment, run, label=r["label"], measured_on=head["measured_on"])
        counts["runs"] += 1
    counts["lookups"] = _load_lookups(db, deployment, [r for r in recs[1:] if r["type"] == "lookup"], t0, stretch)
    return {**counts, "deployment": deployment, "header": head}


def _load_lookups(db: Database, deployment: str, recs: list[dict], t0: float, stretch: float) -> int:
    """LMCache's lookup-hash log lines of the recording, written back as the files they came
    from (one directory per cache instance) with their times on the stretched axis, then
    imported as the deployment's trace ``lmcache`` (``kvplan import-trace``): the same bytes
    every time, so loading again imports nothing. Returns the new requests."""
    import tempfile

    from .traces.ingest import import_trace

    if not recs:
        return 0
    files: dict[tuple[str, str], list[str]] = {}
    for r in recs:
        line = {**r["line"], "timestamp": t0 + (r["line"]["timestamp"] - t0) * stretch}
        files.setdefault((r["instance"], r["file"]), []).append(json.dumps(line))
    with tempfile.TemporaryDirectory(prefix="kvplan-demo-lookups-") as tmp:
        for (inst, name), lines in files.items():
            d = Path(tmp) / inst
            d.mkdir(exist_ok=True)
            (d / name).write_text("\n".join(lines) + "\n")
        return import_trace(db, deployment, [Path(tmp) / inst for inst in sorted({i for i, _ in files})],
                            name="lmcache", fmt="lmcache").requests
