"""Time and peak memory of ``kvplan prompts check`` against the size of the request log.

Writes a synthetic gzip log of about ``--mb`` MB of request text (uncompressed JSON; ``--mb
1024`` is a 1 GB log): chat bodies from 50 agents, each a 4-8 KB system prompt (a third of them
with a millisecond timestamp on its second line) and a few hundred bytes of unique question, so
the check finds a buster and runs its second pass. Then runs the check in its own process (the
fixture tokenizer of tests/fixtures/prompts, block size 16, unlimited cache; its progress on
stderr) and prints requests, MB of text, wall seconds, MB/s and the peak resident set size
(``ru_maxrss``), beside the floor of python + kvplan + transformers imported, and the distinct
keys the unlimited caches held. ``--baseline DIR`` also times the same log with another kvplan
tree (DIR holds ``kvplan/{app,collectors,models,sql,deploy}``, e.g. ``git archive`` of an older
commit), side by side.

What grows with the log: the unlimited caches' keys, one 64-bit key per distinct full block
(and per distinct LMCache chunk), 8 bytes each in a sorted array plus a fixed buffer, in the
first pass and in each variant of the second; and a temporary file (8 bytes per block, 40 per
request) on disk. What does not: the text (one batch of at most 64 requests at a time, plus the
finder's window of 256), per-request results (streamed, never kept), the finder's line index
(bounded by its window).

    .venv/bin/python bench/prompts_bench.py [--mb 50] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
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


def peak_kb(body: str, pythonpath: str | None = None) -> tuple[int, float, list[str]]:
    """Peak RSS (KiB) and wall seconds of ``body`` run in a fresh python (its stderr passed
    through: the check's progress), and the lines it printed before the RSS."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", RUN.format(body=body)], stdout=subprocess.PIPE, text=True,
                         check=True, env=env)
    lines = out.stdout.strip().splitlines()
    return int(lines[-1]), time.monotonic() - t0, lines[:-1]


def write_log(path: Path, mb: float, seed: int = 7) -> tuple[int, int]:
    rng = random.Random(seed)
    words = "cache block prefix token engine request policy answer careful brief topic rule user tool".split()
    agents = []
    for a in range(50):
        lines = [f"You are agent {a}."] + [" ".join(rng.choice(words) for _ in range(12)) for _ in range(60)]
        agents.append((lines, a % 3 == 0))
    n = size = 0
    with gzip.open(path, "wt", compresslevel=1) as f:
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


CHECK = """
from pathlib import Path
import kvplan.collectors.requests.check as c
from kvplan.collectors.requests.check import check, CheckOptions
from kvplan.collectors.requests.render import Renderer
assert Path(c.__file__).resolve().is_relative_to(Path({tree!r}).resolve()), c.__file__
def progress(stage, n):
    print(f"  {{stage}}: {{n:,}} requests", file=sys.stderr, flush=True)
r = check([Path({log!r})], Renderer({tok!r}), CheckOptions(block_size=16), progress=progress)
print(r.totals.requests, r.totals.prompt_tokens, r.totals.cached, r.fixed.cached if r.fixed else -1,
      len(r.findings), getattr(r, "keys_held", -1))
"""


def run_check(log: Path, tree: Path, pythonpath: str | None) -> tuple[int, float, list[int]]:
    peak, secs, lines = peak_kb(CHECK.format(tree=str(tree), log=str(log), tok=str(TOKENIZER)), pythonpath)
    return peak, secs, [int(x) for x in lines[-1].split()]


def key_bytes(n: int = 1_000_000) -> tuple[float, float, float]:
    """Bytes per distinct key, measured with tracemalloc on ``n`` random keys: the check's
    ``KeySet`` once merged, its buffer (the newest keys, before a merge), and the set of 32-byte
    sha256 digests the caches held before."""
    import hashlib
    import tracemalloc

    import numpy as np

    from kvplan.models.prompts.predict import KeySet

    rng = random.Random(1)
    keys = [rng.getrandbits(64) for _ in range(n)]
    arr = np.array(keys, dtype=np.uint64)
    out = []
    for merged in (True, False):
        tracemalloc.start()
        ks = KeySet(buffer=n + 1)
        for i in range(0, n, 100):
            ks.update(arr[i:i + 100].tolist())  # new int objects, as the check's keys are
        if merged:
            ks.merge()
        out.append(tracemalloc.get_traced_memory()[0] / n)
        tracemalloc.stop()
        del ks
    tracemalloc.start()
    digests = {hashlib.sha256(k.to_bytes(8, "little")).digest() for k in keys}
    out.append(tracemalloc.get_traced_memory()[0] / n)
    tracemalloc.stop()
    del digests
    return out[0], out[1], out[2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=50.0, help="MB of request JSON (uncompressed) to write and check")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a directory holding an older kvplan/ tree to time on the same log, side by side")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "log.jsonl.gz"
        t0 = time.monotonic()
        n, size = write_log(log, args.mb)
        print(f"log: {n:,} requests, {size / 1e6:,.1f} MB of JSON ({log.stat().st_size / 1e6:,.1f} MB gzip), "
              f"written in {time.monotonic() - t0:,.0f} s", file=sys.stderr, flush=True)
        floor, _, _ = peak_kb("import kvplan.collectors.requests.check, transformers")
        runs = [("this tree", ROOT, None)]
        if args.baseline is not None:
            runs.insert(0, (f"baseline {args.baseline.name}", args.baseline / "kvplan", str(args.baseline)))
        got = []
        for name, tree, pp in runs:
            peak, secs, res = run_check(log, tree, pp)
            got.append(res[:4])
            keys = f", {res[5]:,} distinct keys held" if len(res) > 5 and res[5] >= 0 else ""
            print(f"{name}: {n:,} requests, {size / 1e6:,.1f} MB of JSON ({log.stat().st_size / 1e6:,.1f} MB "
                  f"gzip): {secs:,.1f} s, {size / 1e6 / secs:,.2f} MB/s, peak RSS {peak / 1024:,.0f} MiB "
                  f"(python + kvplan + transformers alone: {floor / 1024:,.0f} MiB){keys}")
        merged, buffered, digests = key_bytes()
        print(f"bytes per distinct key (tracemalloc, 1 M keys): {merged:,.1f} in the sorted array, {buffered:,.0f} "
              f"while in the buffer (at most 262,144 keys), {digests:,.0f} as 32-byte digests in a set (before)")
        if len(got) > 1:
            print("same results (requests, prompt tokens, cached, cached if fixed): "
                  + ("yes" if all(g == got[0] for g in got) else f"NO: {got}"))


if __name__ == "__main__":
    from results import record

    raise SystemExit(record("prompts", main))
