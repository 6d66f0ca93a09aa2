"""The savings model against a measured A/B on the real stack (CPU, tiny model).

Four scenarios (kvplan.deploy.local.recorders.ab_scenarios.validation_cases): unique sessions, shared prefix, multi-turn
conversations and a loaded run of 8 concurrent users, each in at least 20 segments with prompt
lengths that vary. Each runs on a vLLM server with no reuse (``vllm-nocache-0``) and on one with
vLLM's prefix cache and LMCache (``vllm-0``), interleaved by segment. The model predicts the
saved engine time from the reuse-on deployment's metrics alone (plus its calibration history:
mixed unique and shared-prefix requests on ``vllm-0`` and on the vLLM-only replica
``vllm-plain-0``); the reuse-off side measures it (engine time = wall time of each side's
segments, servers at real-time priority; kvplan.deploy.local.recorders.ab says why not CPU time).

Stated tolerance (kvplan.models.prefill.validation.tolerance), and what CI fails on: within 25 % of
the measured saving where that saving exceeds 35 % of the cache-off prefill time, else within 15 %
of the cache-off prefill time (what held in 31 of 32 scenario runs on this shared 2-core machine;
bench/results/validation.md lists them, ``bench/validation_bench.py --repeat 3`` prints them).
A scenario that misses runs once more with new prompts and fails the suite only if it misses
again (``ABValidation.held``). The validation's time budget scales with its calibration phase's
wall time (``ab.budget_s``).
"""

from __future__ import annotations

import json
import time

import pytest

from kvplan.deploy.local.recorders.ab import validate_on_stack
from kvplan.models.prefill.validation import ABS_TOLERANCE, BIG_SAVING, REL_TOLERANCE, gate
from kvplan.sql.db import Database

# A hang guard only: the validation stops itself past the budget its calibration phase gives it
# (kvplan.deploy.local.recorders.ab.budget_s).
pytestmark = [pytest.mark.stack, pytest.mark.timeout(4 * 3600)]

SCENARIOS = ["unique", "shared_prefix", "multi_turn", "loaded"]


@pytest.fixture(scope="module")
def validations(local_stack, tmp_path_factory):
    db = Database(tmp_path_factory.mktemp("ab") / "kvplan.duckdb")
    db.migrate()
    seed = int(time.time() * 1000) % 10**9
    t0 = time.monotonic()
    out = validate_on_stack(db, off_server=local_stack.server("vllm-nocache-0"),
                            on_server=local_stack.server("vllm-0"), lmcache_server=local_stack.lmcache(),
                            replicas=[local_stack.server("vllm-plain-0")], model_name=local_stack.model_name,
                            seed=seed)
    cc = out[0].cross_check
    print(f"\nA/B validation (seed {seed}, {time.monotonic() - t0:.0f} s; calibration {cc['calibration_s']:.0f} s, "
          f"budget {cc['budget_s']:.0f} s): scenario, predicted s, measured s, cache-off prefill s, error, rule")
    for v in [x for first in out for x in (first, first.second_run) if x is not None]:
        t = v.tolerance
        print(f"  {v.scenario:<14} {v.predicted_saved_s:+8.3f} {v.measured_saved_s:+8.3f} "
              f"{v.off_prefill_s:8.3f} {t.relative:6.1%} of {t.rule} ok={t.ok}"
              + (" (second run)" if v.cross_check["pair"].endswith("-second") else ""))
        print("  " + json.dumps({k: v.to_dict()[k] for k in ("device_s", "lmcache_s", "lmcache_overhead_s",
                                                            "on_intervals", "off_engine_s", "on_engine_s",
                                                            "engine_time_source")}))
        print("  " + json.dumps({k: v.cross_check[k] for k in ("worker_cpu_off_s", "worker_cpu_on_s", "steps_off",
                                                               "steps_on")}))
    return {v.scenario: v for v in out}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_prediction_within_the_stated_tolerance(validations, scenario):
    first = validations[scenario]
    runs = [first] + ([first.second_run] if first.second_run is not None else [])
    assert first.second_run is None or not first.tolerance.ok  # a second run only after a miss
    for v in runs:
        assert v.on_intervals >= 20, v.on_intervals
        assert v.predicted_saved_s is not None, v.cost_model
        t = v.tolerance
        big = abs(v.measured_saved_s) > BIG_SAVING * v.off_prefill_s
        assert t.rule == ("share of measured" if big else "share of cache-off prefill")
        assert t.allowed == pytest.approx((REL_TOLERANCE * abs(v.measured_saved_s)) if big
                                          else ABS_TOLERANCE * v.off_prefill_s)
        assert gate(v.predicted_saved_s, v.measured_saved_s, v.off_prefill_s) == t  # CI fails on the stated one
        print(f"{scenario}{' (second run)' if v is not first else ''}: {t.relative:.1%} of {t.rule}: "
              f"stated tolerance {'held' if t.ok else 'MISSED'}")
    # A miss is confirmed by a second run with new prompts before it fails (validation.ABValidation.held).
    assert first.held == any(v.tolerance.ok for v in runs)
    keys = ("predicted_saved_s", "predicted_low_s", "predicted_high_s", "measured_saved_s", "off_prefill_s",
            "off_engine_s", "on_engine_s", "device_s", "lmcache_s", "on_cached_tokens")
    assert first.held, " | ".join(json.dumps({k: v.to_dict()[k] for k in keys} | {
        "cpu_saved_s": v.cross_check["worker_cpu_saved_s"], "calibration_s": v.cross_check["calibration_s"]})
        for v in runs)  # a string: pytest prints it whole (a dict's repr is cut)


def test_the_fit_is_identified_on_the_calibrated_history(validations):
    for v in validations.values():
        m = v.cost_model
        assert m["status"] == "fitted", m
        assert m["parts"]["per_token"]["value"] > 0
        assert "calibration" in m["history"]


def test_unique_sessions_with_lmcache_predict_a_negative_saving(validations):
    """Unique sessions share nothing: the model predicts LMCache's overhead as a (negative) saving,
    and the measured saving is nothing within the run's noise band (the stated absolute tolerance,
    a share of this run's cache-off prefill time). Its sign is asserted only outside the band: a
    fresh-clone run measured +0.088 s of 108 s, noise, against a sign test."""
    v = validations["unique"]
    assert v.on_cached_tokens == 0 and v.device_s == 0
    assert v.lmcache_overhead_s > 0 and v.predicted_saved_s < 0
    band = ABS_TOLERANCE * v.off_prefill_s
    assert v.measured_saved_s < band, (v.measured_saved_s, band)  # never a real saving
    if abs(v.measured_saved_s) > band:
        assert v.measured_saved_s < 0


def test_tiers_device_cache_saves_lmcache_adds_overhead(validations):
    for name in ("shared_prefix", "multi_turn", "loaded"):
        v = validations[name]
        assert v.device_s > 0 and v.measured_saved_s > 0, name
        assert v.lmcache_s <= 0, name  # one server: every hit came from vLLM's own cache


def test_loaded_run_overlapped_and_was_counted_as_engine_time(validations):
    v = validations["loaded"]
    notes = " ".join(v.cost_model["notes"])
    assert "several requests per engine step" in notes
    assert v.predicted_saved_s <= v.off_engine_s  # never more than the engine had


@pytest.fixture(scope="module")
def forced_miss(validations, local_stack, tmp_path_factory):
    """The second-run path on the same servers (after the validation above): a tolerance of zero
    makes every run miss, so the scenario runs again with new prompts and the miss stands."""
    import kvplan.models.prefill.validation as val

    db = Database(tmp_path_factory.mktemp("ab-second") / "kvplan.duckdb")
    db.migrate()
    seed = int(time.time() * 1000) % 10**9 + 1
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(val, "REL_TOLERANCE", 0.0)
        mp.setattr(val, "ABS_TOLERANCE", 0.0)
        return validate_on_stack(db, off_server=local_stack.server("vllm-nocache-0"),
                                 on_server=local_stack.server("vllm-0"), lmcache_server=local_stack.lmcache(),
                                 replicas=[local_stack.server("vllm-plain-0")], model_name=local_stack.model_name,
                                 seed=seed, names=["multi_turn"])[0], db


def test_a_miss_runs_the_scenario_again_with_new_prompts(forced_miss):
    first, db = forced_miss
    second = first.second_run
    assert not first.tolerance.ok and second is not None and not second.tolerance.ok
    assert not first.held  # a miss confirmed by its second run fails
    assert second.second_run is None  # once, not until it holds
    assert second.requests == first.requests and second.on_intervals >= 20
    with db.read() as con:
        pairs = dict(con.execute("SELECT ab_pair, count(*) FROM runs WHERE ab_pair IS NOT NULL GROUP BY 1").fetchall())
    assert pairs == {first.cross_check["pair"]: 2, second.cross_check["pair"]: 2}  # each side stored once per run
    assert second.measured_saved_s > 0 and second.predicted_saved_s > 0
