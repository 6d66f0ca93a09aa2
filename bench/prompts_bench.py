"""Time and peak memory of ``kvplan prompts check`` against the size of the request log.

Writes a synthetic gzip log of about ``--mb`` MB of request text: chat bodies from 50 agents,
each a 4-8 KB system prompt (a third of them with a millisecond timestamp on its second line)
and a few hundred bytes of unique question, so the check finds a buster and runs its second
pass. Then runs the check in its own process (the fixture tokenizer of tests/fixtures/prompts,
block size 16, unlimited cache) and prints requests, MB of text, wall seconds and the peak
resident set size (``ru_maxrss``), beside the floor of python + kvplan + transformers imported.

What grows with the log: the caches' keys (one per distinct full block: about 100 bytes each in
the unlimited cache's set), four integers per request, the finder's line index (cleared past 2 M
lines). What does not: the text (one request at a time, plus the finder's window of 256).

    .venv/bin/python bench/prompts_bench.py [--mb 50]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER = ROOT / "tests" / "fixtures" / "prompts" / "tokenizer"
RUN = """
import resource, sys, time
{body}
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_kb(body: str) -> tuple[int, float]:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", RUN.format(body=body)], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1]), time.monotonic() - t0


def write_log(path: Path, mb: float, seed: int = 7) -> tuple[int, int]:
    rng = random.Random(seed)
    words = "cache block prefix token engine request policy answer careful brief topic rule user tool".split()
    agents = []
    for a in range(50):
        lines = [f"You are agent {a}."] + [" ".join(rng.choice(words) for _ in range(12)) for _ in range(60)]
        agents.append((lines, a % 3 == 0))
    n = size = 0
    with gzip.open(path, "wt") as f:
        while size < mb * 1e6:
            lines, stamped = rng.choice(agents)
            sys_lines = list(lines)
            if stamped:
                sys_lines.insert(1, f"Now: 2026-12-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}."
                                    f"{rng.randrange(1000):03d}Z")
            q = " ".join(rng.choice(words) for _ in range(rng.randrange(20, 80)))
            body = {"messages": [{"role": "system", "content": "\n".join(sys_lines)},
                                 {"role": "user", "content": f"{n}: {q}"}], "max_tokens": 64}
            line = json.dumps(body)
            f.write(line + "\n")
            size += len(line)
            n += 1
    return n, size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=50.0)
    mb = ap.parse_args().mb
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "log.jsonl.gz"
        n, size = write_log(log, mb)
        floor, _ = peak_kb("import kvplan.collectors.requests.check, transformers")
        body = (f"from pathlib import Path\nfrom kvplan.collectors.requests.check import check, CheckOptions\n"
                f"from kvplan.collectors.requests.render import Renderer\n"
                f"r = check([Path({str(log)!r})], Renderer({str(TOKENIZER)!r}), CheckOptions(block_size=16))\n"
                f"print(r.totals.requests, r.totals.prompt_tokens, len(r.findings), file=sys.stderr)")
        peak, secs = peak_kb(body)
        print(f"{n:,} requests, {size / 1e6:,.1f} MB of JSON ({log.stat().st_size / 1e6:,.1f} MB gzip): "
              f"{secs:,.1f} s, peak RSS {peak / 1024:,.0f} MiB (python + kvplan + transformers alone: "
              f"{floor / 1024:,.0f} MiB)")


if __name__ == "__main__":
    from results import record

    raise SystemExit(record("prompts", main))
