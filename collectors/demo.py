"""Load the recorded demo dataset (deploy/demo/kvplan-demo.jsonl.gz, made by
deploy/local/recorders/record_demo.py from the real CPU stack) into a DuckDB file through the same
path as `kvplan import-metrics`. Loading twice changes nothing.

The file's header says what the data is: recorded on CPU with a tiny random model, time
axis stretched. Times are mapped onto the stretched axis starting at the recording time, so
the same file always gives the same database.

Beside it, deploy/demo/prompts/ holds kvplan's own request logs with what vLLM reported for each
on the same CPU stack (deploy/local/recorders/record_prompts.py): the Prompts page and
``kvplan prompts check`` read them (``demo_prompts``), and the shipped dataset's load imports
those with arrival times as the request-log trace of the vLLM-only deployment ``demo-requests``
(``load_demo_prompts``: hashes, lengths and times, never text), which the What-if page reads.
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
DEMO_PROMPTS = DEMO_FILE.parent / "prompts"
"""The recorded request logs (deploy/local/recorders/record_prompts.py): ``logs/``, the tiny Llama's
``tokenizer/`` and ``recording.json`` (what vLLM reported for each log on the CPU stack)."""
CHAT_TEMPLATE = DEMO_FILE.parents[1] / "local" / "templates" / "tiny-llama-tools.jinja"
PROMPTS_DEPLOYMENT = "demo-requests"
"""The demo's vLLM-only deployment: no metrics, no LMCache, only request logs (trace ``requests``)."""
PROMPTS_TRACE_FILES = ("agent-tools.jsonl", "chats.batch.jsonl", "ts-top.jsonl")
"""The logs with arrival times that make the request-log trace (ts-end is ts-top fixed: not twice)."""


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
    if path == DEMO_FILE and DEMO_PROMPTS.is_dir():  # the shipped dataset comes with its request logs
        counts["request_log_requests"] = load_demo_prompts(db)
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


def demo_prompts(root: Path = DEMO_PROMPTS) -> dict:
    """The recorded request logs the demo ships, for the Prompts page and ``kvplan prompts check``:
    each log's path with what vLLM measured for it, the tokenizer and chat template to read them
    with, the engine's block size, and the label saying where they were recorded."""
    manifest = root / "recording.json"
    try:
        rec = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise PayloadError(str(manifest), f"the demo's request-log recording is unreadable: {e}") from None
    on = rec["measured_on"]
    runs = []
    for r in rec["runs"]:
        m = r["metrics"]
        runs.append({"name": r["name"], "file": root / "logs" / r["file"], "requests": r["requests"],
                     "prompt_tokens": r["prompt_tokens"], "gpu_blocks": r["gpu_blocks_override"],
                     "block_size": int(r["cache_config"]["block_size"]),
                     "measured_hit_rate": m["prefix_cache_hits"] / m["prefix_cache_queries"]
                     if m["prefix_cache_queries"] else None})
    return {
        "label": (f"kvplan's own request logs, recorded on this project's CPU stack ({on['engine']}; "
                  f"{on['model']}; {rec['recorded_at'][:10]}): CPU-scale, not GPU results"),
        "tokenizer": root / "tokenizer", "chat_template": CHAT_TEMPLATE, "deployment": PROMPTS_DEPLOYMENT,
        "runs": runs,
    }


def load_demo_prompts(db: Database, root: Path = DEMO_PROMPTS) -> int:
    """Import the recorded request logs with arrival times as the trace ``requests`` of the
    vLLM-only deployment ``demo-requests`` (``kvplan import-trace --format requests``): hashes,
    lengths and times only, so the What-if page runs on request logs alone. Returns the new
    requests (0 when loaded before)."""
    from .traces import import_trace

    return import_trace(db, PROMPTS_DEPLOYMENT, [root / "logs" / f for f in PROMPTS_TRACE_FILES], name="requests",
                        fmt="requests", tokenizer=root / "tokenizer", chat_template=CHAT_TEMPLATE,
                        instance="vllm-0").requests
