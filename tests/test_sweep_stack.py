"""Goodput from a load sweep on the real stack (CPU, tiny model): the validation of the capacity model.

``kvplan.deploy.local.recorders.sweep_check``: three sequential requests measure the reuse-off
replica's capacity (1 / its request time), then a rate sweep at 0.5 to 6 times that capacity
(12 requests a level, open-loop Poisson arrivals, one 8,000-character system prompt + 200-character
tails, 8 output tokens) on ``vllm-nocache-0`` (reuse off) and ``vllm-0`` (vLLM prefix cache +
LMCache), interleaved by level. TTFT SLO = 3 x the reuse-off TTFT p50 at the lowest level,
rounded up to 10 ms; TPOT SLO 4 x the slower side's TPOT p99 there, at least 0.25 s (a fixed 0.25 s was
missed by every level on a busy core) and at least 2 reuse-off TTFT p50s there (a decode step that
another request's prefill joins takes that prefill's time). Then one run of 24 requests on each side at the midpoint
of the two goodputs: the reuse-off replica must miss the TTFT SLO there, the reuse-on replica
meet it. The load, and the time the sweep may take (``sweep_check.budget_s``: twice its worst
case at the measured capacity), follow what this machine serves: a slower machine runs a
lighter sweep for longer. Run under ``flock /tmp/kvplan-stack.lock``.
"""

from __future__ import annotations

import time

import pytest

from kvplan.app.data.sweeps import latest_sweep_pair
from kvplan.deploy.local.recorders.sweep_check import (
    LEVEL_FRACTIONS,
    MEASURED_ON,
    budget_s,
    expected_s,
    table,
    validate_sweep_on_stack,
)
from kvplan.models.capacity.goodput import TTFT
from kvplan.sql.db import Database

# A hang guard only: the sweep stops itself past the budget its calibration gives it.
pytestmark = [pytest.mark.stack, pytest.mark.timeout(4 * 3600)]


@pytest.fixture(scope="module")
def validation(local_stack, tmp_path_factory):
    db = Database(tmp_path_factory.mktemp("sweep") / "kvplan.duckdb")
    db.migrate()
    seed = int(time.time() * 1000) % 10**9
    t0 = time.monotonic()
    v = validate_sweep_on_stack(db, off_server=local_stack.server("vllm-nocache-0"),
                                on_server=local_stack.server("vllm-0"), lmcache_server=local_stack.lmcache(),
                                model_name=local_stack.model_name, seed=seed)
    c = v.capacity
    print(f"\nload sweep (seed {seed}, {time.monotonic() - t0:.0f} s of stack time; budget {budget_s(c):.0f} s, "
          f"worst case {expected_s(c):.0f} s)\n{table(v)}")
    return db, v


def test_every_request_of_the_sweep_was_answered(validation):
    _, v = validation
    assert v.off.errors == [] and v.on.errors == []
    assert len(v.off.points) == len(v.on.points) == len(LEVEL_FRACTIONS)
    # the levels are the fractions of the capacity the calibration measured
    assert [p.offered for p in v.off.points] == [round(f * v.capacity.rps, 4) for f in LEVEL_FRACTIONS]


def test_reuse_raises_the_goodput_and_ttft_limits_the_cache_off_replica(validation):
    _, v = validation
    g = v.goodput
    assert v.separated, table(v)
    assert g.off.limited_by == TTFT, g.off.note
    # the cache-off replica's curve crosses the SLO inside the sweep, not below its lowest level
    assert 0 < g.goodput.without_reuse_rps < g.goodput.with_reuse_rps


def test_between_the_goodputs_the_cache_off_replica_misses_the_slo_and_the_cache_on_one_meets_it(validation):
    _, v = validation
    g = v.goodput.goodput
    assert g.without_reuse_rps < v.check_rps < g.with_reuse_rps
    assert v.off_misses, table(v)
    assert v.on_meets, table(v)


def test_the_stored_pair_reads_back_with_the_same_goodput(validation):
    db, v = validation
    pair = latest_sweep_pair(db, "local-stack")
    assert pair is not None and (pair.off.sweep_id, pair.on.sweep_id) == v.sweep_ids
    assert pair.on.measured_on == MEASURED_ON and pair.off.load_kind == "rate"
    back = pair.goodput(v.ttft_slo_s, v.tpot_slo_s).goodput
    assert back.without_reuse_rps == pytest.approx(v.goodput.goodput.without_reuse_rps)
    assert back.with_reuse_rps == pytest.approx(v.goodput.goodput.with_reuse_rps)


def test_the_plan_predicts_what_the_check_run_measured(validation):
    """Sized from the measured goodputs at the check run's load (no headroom: the check is the
    SLO at exactly that load), one replica holds the SLO with reuse and the baseline needs more
    replicas: what the check run measured (cache-off misses, cache-on meets)."""
    from kvplan.models.capacity.fleet import CapacityInputs, plan_capacity
    from kvplan.models.inputs.pricebook import PriceBook

    _, v = validation
    g = v.goodput.goodput
    c = plan_capacity(CapacityInputs(
        ttft_p99_slo_seconds=v.ttft_slo_s, requests_per_second=v.check_rps, mean_prompt_tokens=2000.0,
        hit_rate=0.9, prefill_tokens_per_gpu_second=1e4, current_gpus=1, goodput=g,
        peak_requests_per_second=v.check_rps, headroom=0.0), PriceBook())
    assert c.method == "goodput"
    assert c.gpus_needed_with_reuse == 1 and v.on_meets, (c.why_none_with_reuse, table(v))
    assert c.gpus_needed_without_reuse is not None, (c.why_none_without_reuse, table(v))
    assert c.gpus_needed_without_reuse >= 2 and v.off_misses
