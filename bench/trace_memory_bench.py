"""Peak memory of ``kvplan import-trace`` against the size of the file (the import used to read
whole files, ``read_bytes()``, and peaked at about 4x the file: 2.7 GB for 686 MB).

Writes a synthetic LMCache lookup-hash log of ``--mb`` MB (16 chunk hashes per line, 30 % of
them fresh 256-bit hashes, the rest shared: the shape of the recorded logs, more of it), then
runs, each in its own process, and prints the peak resident set size (``ru_maxrss``):

  python + kvplan    importing the modules only (the floor)
  scan               ``trace_parse.scan_file``: the validating pass alone
  import             ``kvplan import-trace`` into a fresh DuckDB file

    .venv/bin/python bench/trace_memory_bench.py [--mb 150]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

RUN = """
import resource, sys
{body}
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_kb(body: str) -> int:
    out = subprocess.run([sys.executable, "-c", RUN.format(body=body)], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=150.0)
    mb = ap.parse_args().mb
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "lookup_hashes_bench.jsonl"
        rng, size, i = random.Random(1), 0, 0
        with open(path, "w") as fh:
            while size < mb * 2**20:
                hashes = [f"0x{rng.getrandbits(256):064x}" if rng.random() < 0.3 else f"0x{j + 1:064x}"
                          for j in range(16)]
                line = json.dumps({"timestamp": 1767614400.0 + i, "request_id": f"r{i}", "model_name": "m",
                                   "chunk_size": 256, "seq_len": 4200, "dtypes": ["torch.bfloat16"],
                                   "shapes": [[4, 256, 256]], "chunk_hashes": hashes}) + "\n"
                fh.write(line)
                size, i = size + len(line), i + 1
        floor = peak_kb("import duckdb, numpy, pyarrow\nfrom kvplan.collectors.traces import ingest as traces")
        scan = peak_kb(f"from kvplan.collectors.traces.parse import scan_file\nscan_file({str(path)!r}, 'lmcache')")
        imp = peak_kb("from kvplan.sql.db import Database\nfrom kvplan.collectors.traces.ingest import import_trace\n"
                      f"db = Database({str(Path(d) / 'k.duckdb')!r}); db.migrate()\n"
                      f"import_trace(db, 'd', [{str(path)!r}])")
        print(f"file {size / 2**20:,.0f} MiB, {i:,} lines")
        for label, kb in (("python + kvplan", floor), ("scan", scan), ("import", imp)):
            print(f"{label:>16} {kb / 1024:>8,.0f} MiB   {kb * 1024 / size:>5.2f}x the file")


if __name__ == "__main__":
    from results import record

    raise SystemExit(record("whatif", main))
