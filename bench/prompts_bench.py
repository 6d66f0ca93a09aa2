"""Time and peak memory of ``kvplan prompts check`` against the size of the request log, side by
side with a baseline tree and with the fast tokenizer alone, on the same logs.

Writes synthetic gzip logs of about ``--mb`` MB of request text each (uncompressed JSON; ``--mb
1024`` is a 1 GB log), ``--logs`` of:

* ``agent``: 50 agents, each a 4-8 KB system prompt (a third of them with a millisecond timestamp
  on its second line: a buster, so the check runs its second pass) and a tool list of 3-8 tools;
  conversations of 2-12 turns, several open at once, each request repeating the conversation so
  far (earlier user messages and assistant replies) and adding a new user message;
* ``long``: long agent sessions, as a coding agent's: 10 agents (system prompt and tools as
  ``agent``'s, no timestamp: no buster, one pass), sessions of 40 turns, 4 open at once, each
  request repeating the session so far and adding a user message;
* ``distinct``: every request its own system prompt and question (nothing shared);
* ``chats``: the earlier benchmark's single-turn chats (the 50 agents' system prompts and one
  question each; no tools, no history).

Then, each in its own process (the fixture tokenizer of tests/fixtures/prompts and its chat
template, block size 16, unlimited cache; progress on stderr), prints wall seconds, MB/s, the peak
resident set size (the larger of ``ru_maxrss`` and the process tree's memory sampled every 0.2 s:
the check's forked processes and ``--workers`` processes counted, by their proportional set sizes,
so that the pages a forked process shares with its parent count once) and the CPU seconds (user +
system, every thread and worker process: less moved than wall time by other processes on the
machine) of: ``this tree``'s check; ``--baseline DIR``'s check (DIR holds
``kvplan/{app,collectors,models,sql,deploy}``, e.g. ``git archive`` of an older commit); and
``tokenizer alone``: the same requests read, rendered with the chat template and tokenized whole in
batch calls of the fast tokenizer, nothing else; ``read and render alone``: the same without
tokenizing (a floor the check cannot go under: it needs every prompt's text). Beside them
the floor of python + kvplan + transformers imported, the distinct keys the unlimited caches held,
and whether the two trees' results are the same (requests, prompt tokens, cached, cached if fixed,
and a sha256 of each request's prompt tokens, cached tokens and miss reason and of the findings).
``--key-bytes`` also measures the bytes per distinct key of the key store.

What grows with the log: the unlimited caches' keys, one 64-bit key per distinct full block
(and per distinct LMCache chunk), 8 bytes each in two sorted arrays, in the
first pass and in each variant of the second; the piece cache (token ids of distinct pieces of
text, at most 256 MiB, least recently used evicted); once the first pass has a finding, the
renders it keeps for the fix pass (each text as a compressed delta against its conversation's
previous turn, at most 192 MiB); each conversation's last turn (text, ids, digests: at most 16 MiB
each for the piece cache and the digests); and a temporary file (8
bytes per block, 40 per request) on disk. What does not: the text (one batch of at most 32 requests at a time,
plus the finder's window of 256), per-request results (streamed, never kept), the finder's line
index (bounded by its window).

    .venv/bin/python bench/prompts_bench.py [--mb 20] [--logs agent,distinct] [--baseline DIR] [--workers 1,2]
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
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER = ROOT / "tests" / "fixtures" / "prompts" / "tokenizer"
TEMPLATE = ROOT / "tests" / "fixtures" / "prompts" / "chat_template.jinja"
WORDS = "cache block prefix token engine request policy answer careful brief topic rule user tool".split()
RUN = """
import resource, sys, time
{body}
try:  # the check's worker processes (--workers) are the forkserver's children: stopped and reaped,
    from multiprocessing import forkserver  # their CPU time joins RUSAGE_CHILDREN
    forkserver._forkserver._stop()
except Exception:
    pass
_u = resource.getrusage(resource.RUSAGE_SELF)
_c = resource.getrusage(resource.RUSAGE_CHILDREN)
print(_u.ru_utime + _u.ru_stime + _c.ru_utime + _c.ru_stime)
print(_u.ru_maxrss)
"""
CPU: dict[str, float] = {}
"""CPU seconds (user + system, every thread) of the last run of each body: less moved than the
wall time by other processes on the machine."""


def tree_kb(pid: int) -> int:
    """KiB of memory ``pid`` and every process under it (the check's forked and worker
    processes) take now: the sum of their proportional set sizes (PSS: a page n processes share,
    as a forked process shares its parent's until either writes it, counts 1/n in each; their
    resident sets would count it n times), each one's RSS where the kernel gives no PSS."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            parent[int(d)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo += [c for c, pp in parent.items() if pp == p and c not in tree]
    page = os.sysconf("SC_PAGE_SIZE") // 1024
    total = 0
    for p in tree:
        try:
            try:
                rollup = Path(f"/proc/{p}/smaps_rollup").read_text()
                total += int(next(x for x in rollup.splitlines() if x.startswith("Pss:")).split()[1])
            except (OSError, StopIteration):
                total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    return total


def peak_kb(body: str, pythonpath: str | None = None) -> tuple[int, float, list[str]]:
    """Peak RSS (KiB) and wall seconds of ``body`` run in a fresh python (its stderr passed
    through: the check's progress), and the lines it printed before the CPU time and the RSS
    (the CPU seconds, its worker processes' included, go to ``CPU[body]``). The peak is the
    larger of its own ``ru_maxrss`` and its process tree's memory (``tree_kb``: the check's
    forked processes and the worker processes of ``--workers`` counted, pages they share once),
    sampled every 0.2 s."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as f:
        proc = subprocess.Popen([sys.executable, "-c", RUN.format(body=body)], stdout=f, text=True, env=env)
        tree = 0
        while proc.poll() is None:
            tree = max(tree, tree_kb(proc.pid))
            time.sleep(0.2)
        if proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, "python -c")
        f.seek(0)
        lines = f.read().strip().splitlines()
    CPU[body] = float(lines[-2])
    return max(int(lines[-1]), tree), time.monotonic() - t0, lines[:-2]


def write_log(path: Path, mb: float, seed: int = 7) -> tuple[int, int]:
    """The earlier benchmark's log: single-turn chats from 50 agents (see the module docstring)."""
    rng = random.Random(seed)
    agents = []
    for a in range(50):
        lines = [f"You are agent {a}."] + [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(60)]
        agents.append((lines, a % 3 == 0))
    n = size = 0
    with gzip.open(path, "wt", compresslevel=1) as f:
        while size < mb * 1e6:
            lines, stamped = rng.choice(agents)
            sys_lines = list(lines)
            if stamped:
                sys_lines.insert(1, stamp(n, rng))
            q = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(20, 80)))
            body = {"messages": [{"role": "system", "content": "\n".join(sys_lines)},
                                 {"role": "user", "content": f"{n}: {q}"}], "max_tokens": 64}
            line = json.dumps(body)
            f.write(line + "\n")
            size += len(line)
            n += 1
    return n, size


def stamp(n: int, rng: random.Random) -> str:
    return f"Now: 2026-12-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}.{rng.randrange(1000):03d}Z"


def words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randrange(lo, hi)))


def write_agent_log(path: Path, mb: float, seed: int = 7) -> tuple[int, int]:
    """Multi-turn agent conversations sharing system prompts and tools (see the module docstring)."""
    rng = random.Random(seed)
    agents = []
    for a in range(50):
        lines = [f"You are agent {a}."] + [words(rng, 8, 16) for _ in range(rng.randrange(40, 80))]
        tools = [{"type": "function", "function": {
            "name": f"agent{a}_tool{k}", "description": words(rng, 10, 30),
            "parameters": {"type": "object", "properties": {w: {"type": "string", "description": words(rng, 3, 8)}
                                                            for w in rng.sample(WORDS, 4)}}}}
                 for k in range(rng.randrange(3, 9))]
        agents.append((lines, tools, a % 3 == 0))
    open_convs: list[dict] = []
    n = size = 0
    with gzip.open(path, "wt", compresslevel=1) as f:
        while size < mb * 1e6:
            if len(open_convs) < 8 or rng.random() < 0.1:
                a = rng.randrange(len(agents))
                open_convs.append({"agent": a, "turns": rng.randrange(2, 13), "history": []})
            c = rng.choice(open_convs)
            lines, tools, stamped = agents[c["agent"]]
            sys_lines = list(lines)
            if stamped:
                sys_lines.insert(1, stamp(n, rng))
            size += write_turn(f, rng, n, "\n".join(sys_lines), tools, c, open_convs)
            n += 1
    return n, size


def write_turn(f: IO[str], rng: random.Random, n: int, system: str, tools: list[dict], conv: dict,
               open_convs: list[dict]) -> int:
    """One request of ``conv`` (the ``n``-th of the log) written to ``f``: a new user message
    after the conversation so far, then the assistant's reply added to it; the conversation
    leaves ``open_convs`` after its last turn. Returns the line's length."""
    conv["history"].append({"role": "user", "content": f"{n}: {words(rng, 20, 80)}\n{words(rng, 5, 40)}"})
    line = json.dumps({"messages": [{"role": "system", "content": system}, *conv["history"]], "tools": tools,
                       "max_tokens": 64})
    f.write(line + "\n")
    conv["history"].append({"role": "assistant", "content": f"{words(rng, 10, 60)}\n{words(rng, 5, 30)}"})
    conv["turns"] -= 1
    if conv["turns"] <= 0:
        open_convs.remove(conv)
    return len(line)


def write_distinct_log(path: Path, mb: float, seed: int = 7) -> tuple[int, int]:
    """Every request its own system prompt and question: nothing shared."""
    rng = random.Random(seed)
    n = size = 0
    with gzip.open(path, "wt", compresslevel=1) as f:
        while size < mb * 1e6:
            sys_text = "\n".join([f"You are agent {n}."] + [words(rng, 8, 16) for _ in range(rng.randrange(40, 80))])
            body = {"messages": [{"role": "system", "content": sys_text},
                                 {"role": "user", "content": f"{n}: {words(rng, 20, 80)}"}], "max_tokens": 64}
            line = json.dumps(body)
            f.write(line + "\n")
            size += len(line)
            n += 1
    return n, size


def write_long_log(path: Path, mb: float, seed: int = 7) -> tuple[int, int]:
    """Long agent sessions, no buster (see the module docstring)."""
    rng = random.Random(seed)
    agents = []
    for a in range(10):
        lines = [f"You are agent {a}."] + [words(rng, 8, 16) for _ in range(rng.randrange(40, 80))]
        tools = [{"type": "function", "function": {"name": f"agent{a}_tool{k}", "description": words(rng, 10, 30),
                                                   "parameters": {"type": "object"}}}
                 for k in range(rng.randrange(3, 9))]
        agents.append(("\n".join(lines), tools))
    sessions: list[dict] = []
    n = size = 0
    with gzip.open(path, "wt", compresslevel=1) as f:
        while size < mb * 1e6:
            while len(sessions) < 4:
                sessions.append({"agent": rng.randrange(len(agents)), "turns": 40, "history": []})
            c = rng.choice(sessions)
            system, tools = agents[c["agent"]]
            size += write_turn(f, rng, n, system, tools, c, sessions)
            n += 1
    return n, size


LOGS = {"agent": write_agent_log, "long": write_long_log, "distinct": write_distinct_log, "chats": write_log}


CHECK = """
from pathlib import Path
import kvplan.collectors.requests.check as c
from kvplan.collectors.requests.check import check, CheckOptions
from kvplan.collectors.requests.render import Renderer
assert Path(c.__file__).resolve().is_relative_to(Path({tree!r}).resolve()), c.__file__
import hashlib, json
def progress(stage, n):
    print(f"  {{stage}}: {{n:,}} requests", file=sys.stderr, flush=True)
per = hashlib.sha256()
def on_request(q, o, m):
    per.update(f"{{q.where}} {{o.prompt_tokens}} {{o.cached}} {{o.cached_unlimited}} {{m.reason}};".encode())
r = check([Path({log!r})], Renderer({tok!r}, Path({tpl!r})), CheckOptions(block_size=16{opts}), progress=progress,
          on_request=on_request)
per.update(json.dumps(r.as_json()["findings"], sort_keys=True).encode())
print(per.hexdigest())
print(r.totals.requests, r.totals.prompt_tokens, r.totals.cached, r.fixed.cached if r.fixed else -1,
      len(r.findings), getattr(r, "keys_held", -1))
"""


TOKENIZE = """
from pathlib import Path
from kvplan.collectors.requests.check import BATCH_CHARS, BATCH_REQUESTS
from kvplan.collectors.requests.read import Skipped, read_requests
from kvplan.collectors.requests.render import Renderer
r = Renderer({tok!r}, Path({tpl!r}))
bt = r._backend()
batch, n, tokens, chars = [], 0, 0, 0
def flush(batch):
    return sum(len(e.ids) for e in bt.encode_batch_fast(batch, add_special_tokens=False))
for q in read_requests([Path({log!r})], Skipped()):
    batch.append(r.text(q))
    chars += len(batch[-1])
    n += 1
    if len(batch) >= BATCH_REQUESTS or chars >= BATCH_CHARS:
        tokens += flush(batch)
        batch, chars = [], 0
tokens += flush(batch) if batch else 0
print(n, tokens)
"""


RENDER = """
from pathlib import Path
from kvplan.collectors.requests.read import Skipped, read_requests
from kvplan.collectors.requests.render import Renderer
r = Renderer({tok!r}, Path({tpl!r}))
n = chars = 0
for q in read_requests([Path({log!r})], Skipped()):
    chars += len(r.text(q))
    n += 1
print(n, chars)
"""


def run_render(log: Path) -> tuple[int, float, float]:
    """Read and render alone (what the check cannot skip: every request's prompt text), nothing
    tokenized: peak RSS, wall and CPU seconds."""
    body = RENDER.format(log=str(log), tok=str(TOKENIZER), tpl=str(TEMPLATE))
    peak, secs, _ = peak_kb(body)
    return peak, secs, CPU[body]


def run_check(log: Path, tree: Path, pythonpath: str | None, workers: int = 1
              ) -> tuple[int, float, list[int], str, float]:
    """Peak RSS, wall seconds, the totals, a sha256 of every request's (file:line, prompt
    tokens, cached, cached unlimited, miss reason) and of the findings' JSON, and CPU seconds;
    ``workers`` > 1: ``CheckOptions.workers`` (this tree only)."""
    body = CHECK.format(tree=str(tree), log=str(log), tok=str(TOKENIZER), tpl=str(TEMPLATE),
                        opts=f", workers={workers}" if workers > 1 else "")
    peak, secs, lines = peak_kb(body, pythonpath)
    return peak, secs, [int(x) for x in lines[-1].split()], lines[-2], CPU[body]


def run_tokenizer(log: Path) -> tuple[int, float, list[int], float]:
    """The fast tokenizer alone on ``log``: read, render, tokenize whole in batches as the check's
    (``check.BATCH_REQUESTS`` requests or ``BATCH_CHARS`` characters), nothing else; the last item
    is its CPU seconds."""
    body = TOKENIZE.format(log=str(log), tok=str(TOKENIZER), tpl=str(TEMPLATE))
    peak, secs, lines = peak_kb(body)
    return peak, secs, [int(x) for x in lines[-1].split()], CPU[body]


def key_bytes(n: int = 1_000_000) -> tuple[float, float, float]:
    """Bytes per distinct key, measured with tracemalloc on ``n`` random keys: the check's
    ``KeySet`` once merged, its newest keys before a merge (a smaller sorted array), and the set of 32-byte
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
        for i in range(0, n, 10_000):
            ks.update(arr[i:i + 10_000])
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
    ap.add_argument("--mb", type=float, default=20.0, help="MB of request JSON (uncompressed) per log")
    ap.add_argument("--logs", default="agent,distinct", help=f"comma-separated, of {', '.join(LOGS)}")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a directory holding an older kvplan/ tree to time on the same logs, side by side")
    ap.add_argument("--workers", default="1", help="comma-separated worker counts to run this tree's check at "
                    "(CheckOptions.workers), e.g. 1,2")
    ap.add_argument("--key-bytes", action="store_true", help="also measure bytes per distinct key of the key store")
    args = ap.parse_args()
    kinds = [k.strip() for k in args.logs.split(",") if k.strip()]
    for k in kinds:
        if k not in LOGS:
            ap.error(f"--logs: {k!r} is not one of {', '.join(LOGS)}")
    floor, fsecs, _ = peak_kb("import kvplan.collectors.requests.check, transformers")
    print(f"load average (1, 5, 15 min) at the start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"python + kvplan + transformers alone: peak RSS {floor / 1024:,.0f} MiB, {fsecs:,.1f} s")
    for kind in kinds:
        with tempfile.TemporaryDirectory() as d:
            log = Path(d) / f"{kind}.jsonl.gz"
            t0 = time.monotonic()
            n, size = LOGS[kind](log, args.mb)
            print(f"{kind} log: {n:,} requests, {size / 1e6:,.1f} MB of JSON ({log.stat().st_size / 1e6:,.1f} MB "
                  f"gzip), written in {time.monotonic() - t0:,.0f} s", flush=True)
            peak, tsecs, (tn, ttokens), tcpu = run_tokenizer(log)
            print(f"  tokenizer alone: {tsecs:,.1f} s, {size / 1e6 / tsecs:,.2f} MB/s, peak RSS {peak / 1024:,.0f} "
                  f"MiB, CPU {tcpu:,.1f} s ({tn:,} requests, {ttokens:,} prompt tokens)", flush=True)
            rpeak, rsecs, rcpu = run_render(log)
            print(f"  read and render alone (the check's floor: every prompt's text, nothing tokenized): {rsecs:,.1f} "
                  f"s ({rsecs / tsecs:.2f}x the tokenizer alone), peak RSS {rpeak / 1024:,.0f} MiB, CPU {rcpu:,.1f} s",
                  flush=True)
            counts = [int(w) for w in args.workers.split(",") if w.strip()]
            runs = [(f"this tree, {w} worker(s)" if counts != [1] else "this tree", ROOT, None, w) for w in counts]
            if args.baseline is not None:
                runs.append((f"baseline {args.baseline.name}", args.baseline / "kvplan", str(args.baseline), 1))
            got = []
            for name, tree, pp, w in runs:
                peak, secs, res, digest, cpu = run_check(log, tree, pp, w)
                got.append((*res[:4], digest))
                keys = f", {res[5]:,} distinct keys held" if len(res) > 5 and res[5] >= 0 else ""
                print(f"  {name}: {secs:,.1f} s ({secs / tsecs:.2f}x the tokenizer alone), "
                      f"{size / 1e6 / secs:,.2f} MB/s, peak RSS {peak / 1024:,.0f} MiB, CPU {cpu:,.1f} s "
                      f"({cpu / tcpu:.2f}x); {res[1]:,} prompt tokens, "
                      f"{res[2]:,} cached, {res[3]:,} if fixed{keys}", flush=True)
            if len(got) > 1:
                print("  same results (requests, prompt tokens, cached, cached if fixed; per request prompt tokens, "
                      "cached, cached unlimited and miss reason; the findings): "
                      + ("yes" if all(g == got[0] for g in got) else f"NO: {got}"))
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.key_bytes:
        merged, buffered, digests = key_bytes()
        print(f"bytes per distinct key (tracemalloc, 1 M keys): {merged:,.1f} in the sorted array, {buffered:,.0f} "
              f"while among the newest (before a merge), {digests:,.0f} as 32-byte digests in a set (before)")


if __name__ == "__main__":
    from results import record

    raise SystemExit(record("prompts", main))
