"""The wait before a burst's lookups (``latency.queued_arrival``, ``alternatives.queued_arrival``)
on hand-made inputs: vLLM's scheduler logs a request's LMCache lookup only at the step boundary
after it arrived, so a request that arrived while its engine ran another prefill is logged when
that prefill ends, and the replay must start it from before. Every expected value is worked out
by hand in the comment next to it."""

from __future__ import annotations

import numpy as np
import pytest

from kvplan.models.cache import alternatives as alt
from kvplan.models.cache import latency as lat
from kvplan.models.cache.sim import Trace, make_trace


def two(ts: list[float] | None) -> Trace:
    """Two requests of one distinct 100-token chunk each (no hits), logged at ``ts``."""
    tr = make_trace([([1], 100, 100), ([2], 100, 100)])
    return Trace(tr.chunk_ids, tr.offsets, tr.seq_len, tr.chunk_size,
                 ts=None if ts is None else np.array(ts, float))


def test_a_lookup_logged_while_its_engine_ran_the_previous_prefill_is_taken_back_to_that_step():
    # engine 0: lookups at 10.0 (busy 0.25 s: to 10.25) and 10.25 -> the second came within 2 x 0.25 of
    # the first, so it waited: it arrived just after the first's step began, 10.0 + 0.01 (start_s) + 1e-6
    # engine 1: lookups at 10.05 (busy 0.1 s) and 11.0 -> 0.95 s later, beyond 2 x 0.1: no wait taken
    lookup = np.array([10.0, 10.05, 10.25, 11.0])
    engine = np.array([0, 1, 0, 1])
    busy = np.array([0.25, 0.1, 0.2, 0.2])
    got = lat.queued_arrival(lookup, engine, busy, 0.01)
    assert got.tolist() == pytest.approx([10.0, 10.05, 10.010001, 11.0], abs=1e-12)
    # the slack decides: at 1 x busy the second on engine 0 (0.25 s after, busy 0.25) still waited;
    # at 0.9 x it did not
    assert lat.queued_arrival(lookup, engine, busy, 0.01, slack=1.0)[2] == pytest.approx(10.010001)
    assert lat.queued_arrival(lookup, engine, busy, 0.01, slack=0.9)[2] == 10.25
    # a chain: three lookups back to back on one engine, each the previous one's end: each arrived
    # just after the previous one's step began (never later than its own lookup)
    got = lat.queued_arrival(np.array([0.0, 0.1, 0.2]), np.zeros(3), np.array([0.1, 0.1, 0.1]))
    assert got.tolist() == pytest.approx([0.0, 1e-6, 0.1 + 1e-6], abs=1e-12)
    # no busy figure (NaN) or one request: nothing moves
    assert lat.queued_arrival(np.array([0.0, 0.1]), np.zeros(2), np.array([np.nan, 0.1])).tolist() == [0.0, 0.1]
    assert lat.queued_arrival(np.array([5.0]), np.zeros(1), np.array([1.0])).tolist() == [5.0]


def test_the_replay_from_the_arrivals_puts_the_burst_queue_in_the_second_ttft():
    # Two requests of 100 computed tokens each sent together at t = 0 to one engine (1 ms a token:
    # 0.1 s each, one step each: the token budget is 100). The data logs the first lookup at 0 and
    # the second at 0.1, when the first prefill ended. From the lookup times the replay gives the
    # second 0.1 s (it found the engine idle); it waited 0.1 s more: its TTFT was 0.2 s.
    m = lat.LatencyModel(fixed=0.0, per_token=0.001, output_tokens=1, max_batch_tokens=100)
    tr = two([0.0, 0.1])
    today = alt.today(tr, instances=1, engines=1, capacity_chunks=10)
    from_lookups = alt.predict(tr, alt.as_today(tr, today), m, slo_s=None, seconds=1.0)
    assert from_lookups.ttft.tolist() == pytest.approx([0.1, 0.1])
    arrival = alt.queued_arrival(tr, today, m)
    assert arrival is not None
    # busy 0.1 s each; the second lookup 0.1 s after the first, within 2 x 0.1: arrived at 0 + 1e-6
    assert arrival.tolist() == pytest.approx([0.0, 1e-6], abs=1e-12)
    p = alt.predict(tr, alt.as_today(tr, today), m, slo_s=None, seconds=1.0, arrival=arrival)
    # the second is seen at the first's step end (0.1) and ends at 0.2: TTFT 0.2 - 1e-6
    assert p.ttft.tolist() == pytest.approx([0.1, 0.2 - 1e-6], abs=1e-9)
    # one request at a time (the second logged 0.5 s after the first, beyond 2 x 0.1): unchanged
    tr2 = two([0.0, 0.5])
    t2 = alt.today(tr2, instances=1, engines=1, capacity_chunks=10)
    assert alt.queued_arrival(tr2, t2, m).tolist() == [0.0, 0.5]
    # no request times: nothing to take back
    assert alt.queued_arrival(two(None), t2, m) is None
