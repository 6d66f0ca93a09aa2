"""Record real /metrics payloads from the local stack into tests/fixtures/payloads/<case>/.

Run from the kvplan venv (it starts and stops its own stacks, one per case):

    .venv/bin/python deploy/local/recorders/record_fixtures.py [--cases shared_vs_unique,restart,...]
                                                     [--out tests/fixtures/payloads]

Every payload file is the body as the server sent it, with one rewrite: a ``model_name``
label that is a filesystem path (LMCache labels its metrics with vLLM's ``--model`` path) is
written as its last component (``kvplan.collectors.scrape.relabel``), so no fixture holds a path of the
recording machine. Each case directory
has a ``manifest.json``: a header saying where the numbers come from, the stack's
topology, the workload runs with their client-side summaries and the server-side
counter deltas between scrapes, and per file: target name, kind, URL, unix time of
the scrape, HTTP status and Content-Type, and what happened since the previous
scrape.

Cases:
- ``shared_vs_unique``: 1 LMCache + 1 connected vLLM; a unique-session run then a
  shared-prefix run (10 users x 2 turns each), scraped before, during, after each
  run and once while idle.
- ``restart``: a known prefix is sent, vLLM is restarted (LMCache keeps running),
  the same prefix is sent again: counters reset, new ``_created``, external hits.
- ``no_lmcache``: one vLLM without connector, before / after a shared-prefix run.
- ``two_servers``: 2 connected vLLM sharing LMCache; turn 1 of a conversation on
  A, turn 2 on B.
- ``multi_engine``: one vLLM with ``--data-parallel-size 2`` (series differ by
  ``engine``), if the CPU build can run it.

The recorder (scrapes, runs, manifest) is in fixture_recorder.py, the counter arithmetic in
payload_counters.py; this module holds the cases and the CLI.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvplan.collectors.loadgen import workload as wl
from kvplan.deploy.local import stack as stk
from kvplan.deploy.local.recorders.fixture_recorder import VERSIONS, Recorder, log, stack_versions
from kvplan.deploy.local.recorders.payload_counters import by_label

REPO = Path(__file__).resolve().parents[3]
DEFAULT_OUT = REPO / "tests" / "fixtures" / "payloads"
CASES = ("shared_vs_unique", "restart", "no_lmcache", "two_servers", "multi_engine")
STORE_SETTLE_S = 2.0  # LMCache stores KV asynchronously after a request finishes
# What Prometheus 2.42 sends when it scrapes: servers built on prometheus_client then
# answer in OpenMetrics (a different body: `# EOF`, `_created` inside the family).
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


# ---------------------------------------------------------------------- cases


def case_shared_vs_unique(out: Path, run_dir: Path) -> dict[str, Any]:
    st = stk.up(run_dir, n_vllm=1, lmcache=True, prometheus=False)
    try:
        rec = Recorder(out, "shared_vs_unique",
                       "1 LMCache MP server + 1 vLLM with the LMCacheMPConnector. A unique-session run "
                       "(10 concurrent users x 2 turns, every prompt new text from its first character, "
                       "~4,200 characters) then a shared-prefix run (10 users x 2 turns: one shared "
                       "4,000-character system prompt + a 200-character per-request tail), both 16 "
                       "output tokens with ignore_eos. Scraped before, during and after each run, and "
                       "once after 5 idle seconds.", st)
        v, lm = st.vllm()[0], st.server("lmcache")
        both = [v, lm]
        s0 = rec.scrape("start", both, "servers just became healthy; no request sent yet")
        rec.run("unique", [v], wl.Workload(scenario="unique", users=10, turns=2, seed=1),
                mid_scrapes=[(0.6, "during_unique", both)])
        time.sleep(STORE_SETTLE_S)
        s1 = rec.scrape("after_unique", both, "unique-session run finished (20 requests), 2 s settle")
        rec.observe("unique run", s0, s1)
        time.sleep(5)
        s2 = rec.scrape("idle", both, "nothing: 5 idle seconds after the unique run")
        rec.run("shared_prefix", [v], wl.Workload(scenario="shared_prefix", users=10, turns=2, seed=1),
                mid_scrapes=[(0.6, "during_shared", both)])
        time.sleep(STORE_SETTLE_S)
        s3 = rec.scrape("after_shared", both, "shared-prefix run finished (20 requests), 2 s settle")
        rec.observe("shared-prefix run", s2, s3)
        rec.scrape("after_shared_prometheus_accept", both, "nothing since the previous scrape; scraped with the "
                   "Accept header Prometheus 2.42 sends (it offers OpenMetrics first): both servers still "
                   "answer in the Prometheus text format",
                   accept=PROMETHEUS_ACCEPT)
        rec.write()
        return {"unique": rec.runs[0]["summary"], "shared_prefix": rec.runs[1]["summary"]}
    finally:
        stk.down(run_dir)


def case_restart(out: Path, run_dir: Path) -> dict[str, Any]:
    st = stk.up(run_dir, n_vllm=1, lmcache=True, prometheus=False)
    try:
        rec = Recorder(out, "restart",
                       "1 LMCache MP server + 1 vLLM with the LMCacheMPConnector. A known ~4,000-character "
                       "prompt is sent once, the vLLM server is restarted on the same port while LMCache "
                       "keeps running, then the same prompt is sent again: vLLM's counters restart from 0 "
                       "with new _created values, and the repeat is served from LMCache "
                       "(vllm:external_prefix_cache_hits_total and "
                       "prompt_tokens_by_source{source=\"external_kv_transfer\"} grow; LMCache's own "
                       "counters keep counting).", st)
        v, lm = st.vllm()[0], st.server("lmcache")
        w = wl.Workload(scenario="shared_prefix", seed=2)
        prompt = wl.prompt_for(w, 0, 0)
        s0 = rec.scrape("start", [v, lm], "servers just became healthy; no request sent yet")
        rec.one("known prefix, first time", v, prompt)
        time.sleep(STORE_SETTLE_S)
        s1 = rec.scrape("after_prefix", [v, lm], f"one request with a known {len(prompt)}-character "
                        "prompt (computed by vLLM, stored into LMCache), 2 s settle")
        rec.observe("first request", s0, s1)
        rec.event("restarting vllm-0 (SIGTERM to its process group, start again on the same port)")
        stk.restart(st, v.name)
        rec.event(f"vllm-0 healthy again after {v.ready_s} s")
        s2 = rec.scrape("after_restart", [v, lm], "vLLM server restarted (new process, counters from 0, "
                        "new _created); LMCache kept running; no request since")
        rec.one("known prefix, after restart", v, prompt)
        time.sleep(STORE_SETTLE_S)
        s3 = rec.scrape("after_repeat", [v, lm], "the same prompt sent again to the restarted vLLM: its "
                        "own device cache is empty, the prefix comes from LMCache")
        rec.observe("repeat after restart", s2, s3)
        rec.write()
        return {"repeat_after_restart": rec.events[-1]["increase"]}
    finally:
        stk.down(run_dir)


def case_no_lmcache(out: Path, run_dir: Path) -> dict[str, Any]:
    st = stk.up(run_dir, n_vllm=0, n_vllm_plain=1, lmcache=False, prometheus=False)
    try:
        rec = Recorder(out, "no_lmcache",
                       "1 vLLM without any KV connector (vLLM's own prefix cache only, "
                       "--enable-prefix-caching), before and after a shared-prefix run (10 users x 2 "
                       "turns, 4,000-character shared system prompt + 200-character tails, 16 output "
                       "tokens). vllm:external_prefix_cache_* are still exported but stay 0; there is no "
                       "vllm:lmcache_mp_lookup_duration_seconds family.", st)
        v = st.vllm()[0]
        s0 = rec.scrape("before", [v], "server just became healthy; no request sent yet")
        rec.run("shared_prefix", [v], wl.Workload(scenario="shared_prefix", users=10, turns=2, seed=3))
        s1 = rec.scrape("after_shared", [v], "shared-prefix run finished (20 requests)")
        rec.observe("shared-prefix run", s0, s1)
        rec.write()
        return {"shared_prefix": rec.runs[0]["summary"], "observed": rec.events[-1]["increase"]}
    finally:
        stk.down(run_dir)


def case_two_servers(out: Path, run_dir: Path) -> dict[str, Any]:
    st = stk.up(run_dir, n_vllm=2, lmcache=True, prometheus=False)
    try:
        rec = Recorder(out, "two_servers",
                       "2 vLLM servers (A = vllm-0, B = vllm-1) with the LMCacheMPConnector sharing one "
                       "LMCache MP server. Turn 1 of a conversation (a ~4,000-character opening context "
                       "+ a question) is sent to A; turn 2 (turn 1's prompt + A's answer + a new "
                       "question) is sent to B. B has never seen the conversation: the part A computed "
                       "comes from LMCache (B's prompt_tokens_by_source{source=\"external_kv_transfer\"} "
                       "grows, its own device-cache hits stay 0).", st)
        a, b = st.vllm()
        lm = st.server("lmcache")
        three = [a, b, lm]
        w = wl.Workload(scenario="multi_turn", users=1, turns=2, seed=4)
        s0 = rec.scrape("before", three, "servers just became healthy; no request sent yet")
        p1 = wl.prompt_for(w, 0, 0)
        ans = rec.one("turn 1 on A", a, p1)
        time.sleep(STORE_SETTLE_S)
        s1 = rec.scrape("after_turn1_on_A", three, "turn 1 of the conversation sent to A (vllm-0), 2 s settle")
        rec.observe("turn 1 on A", s0, s1)
        p2 = wl.prompt_for(w, 0, 1, wl.extend_history(p1, ans))
        rec.one("turn 2 on B", b, p2)
        time.sleep(STORE_SETTLE_S)
        s2 = rec.scrape("after_turn2_on_B", three, "turn 2 (whole history + new question) sent to B "
                        "(vllm-1), 2 s settle")
        rec.observe("turn 2 on B", s1, s2)
        src = {n: by_label(s2[n], "vllm:prompt_tokens_by_source_total", "source") for n in (a.name, b.name)}
        rec.write({"prompt_tokens_by_source_at_end": src})
        return {"turn2_on_B": rec.events[-1]["increase"], "by_source": src}
    finally:
        stk.down(run_dir)


def case_multi_engine(out: Path, run_dir: Path) -> dict[str, Any]:
    st = stk.up(run_dir, n_vllm=1, lmcache=True, prometheus=False,
                vllm_extra_args=["--data-parallel-size", "2"], start_timeout_s=420)
    try:
        rec = Recorder(out, "multi_engine",
                       "1 LMCache MP server + 1 vLLM server started with --data-parallel-size 2 and the "
                       "LMCacheMPConnector: one /metrics endpoint whose vllm:* series differ by "
                       "engine=\"0\" / engine=\"1\" (two data-parallel ranks, each with its own device "
                       "cache, sharing LMCache). Before and after a shared-prefix run (10 users x 2 turns).",
                       st)
        v, lm = st.vllm()[0], st.server("lmcache")
        s0 = rec.scrape("before", [v, lm], "server just became healthy; no request sent yet")
        rec.run("shared_prefix", [v], wl.Workload(scenario="shared_prefix", users=10, turns=2, seed=5))
        time.sleep(STORE_SETTLE_S)
        s1 = rec.scrape("after_shared", [v, lm], "shared-prefix run finished (20 requests), 2 s settle")
        rec.observe("shared-prefix run", s0, s1)
        engines = sorted(by_label(s1[v.name], "vllm:prompt_tokens_total", "engine").items())
        rec.write({"prompt_tokens_by_engine_at_end": dict(engines)})
        return {"prompt_tokens_by_engine": dict(engines), "observed": rec.events[-1]["increase"]}
    finally:
        stk.down(run_dir)


CASE_FUNCS: dict[str, Callable[[Path, Path], dict[str, Any]]] = {
    "shared_vs_unique": case_shared_vs_unique,
    "restart": case_restart,
    "no_lmcache": case_no_lmcache,
    "two_servers": case_two_servers,
    "multi_engine": case_multi_engine,
}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--work", type=Path, default=None, help="run dirs (default: a temp dir)")
    args = ap.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = set(cases) - set(CASE_FUNCS)
    if unknown:
        ap.error(f"unknown cases: {sorted(unknown)}")
    py = stk.ensure_installed()
    stk.ensure_model()
    VERSIONS.update(stack_versions(py))
    import tempfile

    work = args.work or Path(tempfile.mkdtemp(prefix="kvplan-record-"))
    results: dict[str, Any] = {}
    failed = []
    for case in cases:
        t0 = time.monotonic()
        log(f"=== {case}")
        try:
            results[case] = CASE_FUNCS[case](args.out, work / case)
            results[case]["seconds"] = round(time.monotonic() - t0, 1)
        except Exception as exc:  # noqa: BLE001 - report and go on with the other cases
            failed.append(case)
            results[case] = {"error": f"{type(exc).__name__}: {exc}"[:4000]}
            traceback.print_exc()
            bad = args.out / case
            if bad.exists() and not (bad / "manifest.json").exists():
                shutil.rmtree(bad)
    print(json.dumps(results, indent=2))
    log(f"run dirs and logs: {work}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
