"""Run one workload twice, reuse off then reuse on, and collect each run's server metrics
window (evaluation step 4: pilot on the same hardware, compare with the baseline). Used by
the model's validation test and `bench/validation_bench.py`; works the same against GPU
servers."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from collectors import workload as wl
from collectors.runs import save_run
from collectors.scrape import Target, scrape_target
from sql.db import Database


@dataclass
class ABSide:
    deployment: str
    start: datetime
    end: datetime
    run: wl.RunResult


def _measure(db: Database, deployment: str, servers: list[str], targets: list[Target], model: str,
             workload: wl.Workload, label: str, measured_on: str, settle_s: float) -> ABSide:
    def snap() -> datetime:
        time.sleep(settle_s)  # vLLM publishes its stats a moment after a request ends
        at = datetime.now(timezone.utc)
        for t in targets:
            r = scrape_target(db, deployment, t, at=at)
            if r.status != "stored":
                raise RuntimeError(f"scrape of {t.url} failed; see kvplan's scrape log")
        return at

    start = snap()
    run = wl.run(servers, model, workload)
    if run.errors:
        raise RuntimeError(f"{label}: {len(run.errors)} request(s) failed, first: {run.errors[0].error}")
    end = snap()
    save_run(db, deployment, run, label=label, measured_on=measured_on)
    return ABSide(deployment, start, end, run)


def run_ab(db: Database, *, name: str, workload: wl.Workload, model: str,
           off: tuple[list[str], list[Target]], on: tuple[list[str], list[Target]],
           measured_on: str, settle_s: float = 1.5) -> tuple[ABSide, ABSide]:
    """``off``/``on``: (OpenAI base URLs, /metrics targets). The same workload (same seed,
    same prompts) runs on the cache-off servers, then on the cache-on ones. One warm-up
    request (unrelated text, not measured) goes to every server first, so neither side pays
    for a cold process."""
    for base in dict.fromkeys(off[0] + on[0]):
        wl.complete(base, model, wl.text(workload.seed, "warm-up", 2000), output_tokens=2)
    a = _measure(db, f"ab-{name}-off", *off, model, workload, f"{name}: reuse off", measured_on, settle_s)
    b = _measure(db, f"ab-{name}-on", *on, model, replace(workload), f"{name}: reuse on", measured_on, settle_s)
    return a, b


def validation_cases(seed: int, *, nocache, plain, connected: list) -> dict:
    """The model's validation scenarios (tests/test_validation_stack.py, bench/validation_bench.py):
    name -> (workload, off side, on side), each side (base URLs, targets). One user, sequential
    turns (per-request prefill times do not overlap, so their sum is the engine's prefill busy
    time) and ~3,000-token prompts (prefill compute, not per-request overhead, dominates).
    ``nocache``/``plain``/``connected``: servers with ``base_url``, ``metrics_url`` and ``name``
    (deploy.local.stack.Server), no reuse / vLLM's prefix cache / LMCache-connected."""
    def side(*servers):
        return [s.base_url for s in servers], [Target(s.name, s.metrics_url) for s in servers]

    big = dict(users=1, output_tokens=8, prefix_chars=12000, tail_chars=400)
    conv = {**big, "prefix_chars": 6000}
    return {
        "unique": (wl.Workload(scenario="unique", turns=12, seed=seed, **big), side(nocache), side(plain)),
        "shared_prefix": (wl.Workload(scenario="shared_prefix", turns=12, seed=seed + 1, **big),
                          side(nocache), side(plain)),
        "multi_turn": (wl.Workload(scenario="multi_turn", turns=8, seed=seed + 2, **conv), side(nocache), side(plain)),
        "multi_turn_lmcache_2_servers": (
            wl.Workload(scenario="multi_turn", turns=8, seed=seed + 3, routing="round_robin", **conv),
            side(nocache), side(*connected)),
    }
