"""The sample's error and time: ``kvplan prompts check --sample-sessions FRACTION`` against the
full check, on ``prompts_bench.py``'s agent log (50 agents, shared system prompts and tool lists,
a third with a per-request timestamp, conversations of 2-12 turns interleaved).

Each check runs in its own process (the fixture tokenizer and chat template, block size 16,
unlimited cache, as ``prompts_bench.py``), one after the other: the full log, each fraction, and
the full log again (the shared machine's drift). Per run: wall and CPU seconds (CPU time is the
steadier on a shared machine), peak RSS, conversations and requests kept, today's predicted hit
rate, the unlimited cache's and the rate with every finding fixed; per fraction, each rate's
error against the first full check in percentage points (sample minus full). The log has no
session field, so conversations are keyed by their first user message (unique per conversation
here).

    .venv/bin/python bench/prompts_sample_bench.py [--mb 24] [--fractions 0.1,0.25,0.5]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from prompts_bench import TEMPLATE, TOKENIZER, peak_kb, write_agent_log

CHECK = """
import resource
from pathlib import Path
from kvplan.collectors.requests.check import check, CheckOptions
from kvplan.collectors.requests.render import Renderer
from kvplan.collectors.requests.sample import SessionSample
f = {fraction}
s = SessionSample(f) if f is not None else None
r = check([Path({log!r})], Renderer({tok!r}, Path({tpl!r})), CheckOptions(block_size=16, sample=s))
t = r.totals
fixed = r.fixed.cached if r.fixed is not None else t.cached
kept, total = (s.kept(), s.total()) if s is not None else (-1, -1)
u = resource.getrusage(resource.RUSAGE_SELF)
print(t.requests, t.prompt_tokens, t.cached, t.cached_unlimited, fixed, kept, total, round(u.ru_utime + u.ru_stime, 2))
"""


def rates(res: list[int]) -> tuple[float, float, float]:
    """(today, unlimited, if fixed) hit rates of one run's printed figures."""
    _, prompt, cached, unlimited, fixed = res[:5]
    return cached / prompt, unlimited / prompt, fixed / prompt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=24.0, help="MB of request JSON (uncompressed) per log")
    ap.add_argument("--fractions", default="0.1,0.25,0.5", help="comma-separated fractions of conversations")
    ap.add_argument("--seeds", default="7", help="comma-separated seeds of the agent log: one log, one full check "
                    "and one sample per fraction each (7 is prompts_bench.py's log); with several, the errors' "
                    "mean and range per fraction")
    args = ap.parse_args()
    fractions = [float(x) for x in args.fractions.split(",") if x.strip()]
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    errors: dict[float, list[list[float]]] = {f: [] for f in fractions}
    for k, seed in enumerate(seeds):
        with tempfile.TemporaryDirectory() as d:
            log = Path(d) / "agent.jsonl.gz"
            n, size = write_agent_log(log, args.mb, seed)
            print(f"agent log, seed {seed}: {n:,} requests, {size / 1e6:,.1f} MB of JSON")
            full: tuple[float, float, float] | None = None
            full_secs = full_cpu = 0.0
            for i, f in enumerate([None, *fractions, *([None] if k == 0 else [])]):
                peak, secs, lines = peak_kb(CHECK.format(fraction=f, log=str(log), tok=str(TOKENIZER),
                                                         tpl=str(TEMPLATE)))
                *ints, cpu = lines[-1].split()
                res = [int(x) for x in ints]
                today, unlimited, fixed = rates(res)
                head = (f"  full check{' again' if i else ''}: {res[0]:,} requests" if f is None else
                        f"  --sample-sessions {f:g}: {res[5]:,} of {res[6]:,} conversations, {res[0]:,} of {n:,} "
                        "requests")
                print(f"{head}, {res[1]:,} prompt tokens; {secs:,.1f} s ({float(cpu):,.1f} s CPU), peak RSS "
                      f"{peak / 1024:,.0f} MiB; hit rate today {today:.2%}, unlimited {unlimited:.2%}, "
                      f"if fixed {fixed:.2%}", flush=True)
                if f is None:
                    if full is None:
                        full, full_secs, full_cpu = (today, unlimited, fixed), secs, float(cpu)
                    continue
                assert full is not None and full_cpu > 0
                err = [100 * (a - b) for a, b in zip((today, unlimited, fixed), full, strict=True)]
                errors[f].append(err)
                print(f"    error against the full check (percentage points): today {err[0]:+.2f}, unlimited "
                      f"{err[1]:+.2f}, if fixed {err[2]:+.2f}; {secs / full_secs:.2f}x the full check's wall time, "
                      f"{float(cpu) / full_cpu:.2f}x its CPU time", flush=True)
    if len(seeds) > 1:
        print(f"errors over {len(seeds)} logs (percentage points, sample minus full: mean [min, max]):")
        for f, errs in errors.items():
            cols = [[e[j] for e in errs] for j in range(3)]
            print(f"  {f:g}: " + "; ".join(f"{name} {sum(c) / len(c):+.2f} [{min(c):+.2f}, {max(c):+.2f}]"
                                          for name, c in zip(("today", "unlimited", "if fixed"), cols, strict=True)))


if __name__ == "__main__":
    from results import record

    raise SystemExit(record("prompts", main))
