"""The topology what-if against a fresh two-rank A/B on the real stack (CPU, tiny model), the
same comparison as tests/test_topology_ab.py on its recorded fixture: record_topology_ab.py
--small starts its own short-lived servers (both sides at once: 4 vLLM servers with prefix
caching off, 3 LMCache servers, about 10 GB; the caller holds the stack lock), runs 73 requests
a side (33 one at a time, 40 in bursts of 4 clients) and stops them; then each side's data alone
predicts the other side's hit rate, one request at a time its TTFT mean, and in bursts its TTFT
p99, within the bounds models/README.md states for a small live run: hit rate within 2 points
one at a time and 3 in bursts (which chunks a concurrent request had stored rides on the TTFT
pass, low in bursts); TTFT mean within 40 % (on 33 requests a side the two sides' own noise is
of that size: three runs on this shared 2-core machine gave +8/-30 %, -36/+26 % and -4 % on one
side; the recorded A/B's 78 requests hold 15 %); the bursts' TTFT p99 within 25 %, both ways:
the replay starts each burst's requests from before the wait for their engine's earlier
prefill (``latency.queued_arrival``; from the lookup times alone a fresh A/B gave +78 %, shared
-> private, on 20 requests in bursts). 40 requests in bursts, so that their p99 is not one
request alone. A side that misses a bound is checked again on a second A/B with another seed
(recorded only then, about 3 minutes); the test fails when the second misses too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.topology_ab import SIDES, cross, load_side, meta

pytestmark = [pytest.mark.stack, pytest.mark.timeout(1800)]

RECORDER = Path(__file__).resolve().parents[1] / "deploy" / "local" / "recorders" / "record_topology_ab.py"


def _record(tmp_path_factory, seed: int):
    base = tmp_path_factory.mktemp(f"topology-stack-{seed}")
    out = base / "out"
    run = subprocess.run([sys.executable, str(RECORDER), "--small", "--no-lock", "--seed", str(seed), "--out",
                          str(out), "--run-dir", str(base / "run")], capture_output=True, text=True, timeout=1700)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    print(run.stdout[-1500:], f"\nrecorded in {out}")
    dbs = {s: load_side(base / f"{s}.duckdb", out / s) for s in SIDES}
    return dbs, {s: meta(out / s) for s in SIDES}


@pytest.fixture(scope="module")
def fresh_ab(tmp_path_factory):
    return _record(tmp_path_factory, 23)


@pytest.fixture(scope="module")
def second_ab(tmp_path_factory):
    """Recorded only when a side of the first A/B missed a bound (``test_a_fresh_ab_...``)."""
    return _record(tmp_path_factory, 24)


def _misses(ab, src: str) -> tuple[list, dict]:
    """The bounds the other side's prediction from ``src`` missed (empty: all held), printed, and
    the sequential phase's comparison."""
    out, seq = [], {}
    for phase, points in (("sequential", 0.02), ("concurrent", 0.03)):
        c = cross(*ab, src, phase)
        print(src, phase, {k: v for k, v in c.items() if k != "today"})
        if abs(c["hit_pred"] - c["hit_meas"]) > points:
            out.append(("hit rate", phase, c["hit_pred"], c["hit_meas"], points))
        if phase == "sequential":
            seq = c
        elif abs(c["p99_pred"] / c["p99_meas"] - 1) > 0.25:  # the bursts' queue (module doc)
            out.append(("TTFT p99", phase, c["p99_pred"], c["p99_meas"], 0.25))
    if abs(seq["mean_pred"] / seq["mean_meas"] - 1) > 0.40:
        out.append(("TTFT mean", "sequential", seq["mean_pred"], seq["mean_meas"], 0.40))
    return out, seq


@pytest.mark.parametrize("src", SIDES)
def test_a_fresh_ab_is_predicted_side_from_side(fresh_ab, src, request):
    # A bound missed on this small live run is checked on a second A/B recorded with another
    # seed, against the same bounds; the test fails when that one misses too. (20 requests in
    # bursts: whether a request finds the chunks its burst is storing is a race, and one request
    # moves the rate by points: a fresh-clone run on 2026-12-02 predicted 0.709, measured 0.745.)
    missed, seq = _misses(fresh_ab, src)
    if missed:
        print(f"{src}: missed {missed}; a second A/B (seed 24)")
        again, _ = _misses(request.getfixturevalue("second_ab"), src)
        assert not again, (missed, again)
    # every lookup of the live run is in its log, and today's replay is LMCache's count, exactly
    today = seq["today"]  # the typed what-if's Today
    assert today.hit_rate_measured is not None
    assert abs(today.hit_rate_predicted - today.hit_rate_measured) <= 1e-9, today
