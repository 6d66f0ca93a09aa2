"""The stated A/B tolerance (kvplan.models.prefill.validation) and the local stack's quiet busy-wait patch,
without servers."""

import importlib.util
import sys
import types
from pathlib import Path

import pytest

from kvplan.models.prefill.validation import gate, tolerance


def test_large_saving_is_judged_against_itself():
    # measured 4 s saved, cache-off prefill 10 s: 4 > 20 % of 10 -> within 15 % of 4 s = 0.6 s
    t = tolerance(predicted=4.5, measured=4.0, off_prefill=10.0)
    assert t.rule == "share of measured" and t.allowed == pytest.approx(0.6)
    assert t.error == pytest.approx(0.5) and t.relative == pytest.approx(0.125) and t.ok
    assert not tolerance(predicted=4.7, measured=4.0, off_prefill=10.0).ok


def test_small_saving_is_judged_against_cache_off_prefill():
    # measured -1 s (reuse cost time), cache-off prefill 10 s: |-1| <= 2 -> within 5 % of 10 s
    t = tolerance(predicted=-0.6, measured=-1.0, off_prefill=10.0)
    assert t.rule == "share of cache-off prefill" and t.allowed == pytest.approx(0.5)
    assert t.relative == pytest.approx(0.04) and t.ok
    assert not tolerance(predicted=0.0, measured=-1.0, off_prefill=10.0).ok


def test_the_ci_gate_is_twice_the_shares_on_the_larger_scale():
    # measured 4 s, cache-off 5 s: 30 % of 4 s = 1.2 s > 15 % of 5 s = 0.75 s -> 1.2 s; 5.1 s is 1.1 s
    # off (held; the stated 15 % of 4 s = 0.6 s missed), 5.3 s is 1.3 s off (missed)
    g = gate(predicted=5.1, measured=4.0, off_prefill=5.0)
    assert g.rule == "share of measured" and g.allowed == pytest.approx(1.2) and g.ok
    assert not tolerance(predicted=5.1, measured=4.0, off_prefill=5.0).ok
    assert not gate(predicted=5.3, measured=4.0, off_prefill=5.0).ok
    # measured -2 s, cache-off 6 s (unique sessions: the stated rule judges it as a share of the
    # 2 s measured, 15 % = 0.3 s): 30 % of 2 = 0.6 s < 15 % of 6 = 0.9 s -> 0.9 s; -1.2 s (0.8 s off)
    # held, -1.0 s (1.0 s off) missed
    s = gate(predicted=-1.2, measured=-2.0, off_prefill=6.0)
    assert s.rule == "share of cache-off prefill" and s.allowed == pytest.approx(0.9) and s.ok
    assert tolerance(predicted=-1.2, measured=-2.0, off_prefill=6.0).rule == "share of measured"
    assert not gate(predicted=-1.0, measured=-2.0, off_prefill=6.0).ok


def test_negative_large_saving_uses_its_magnitude():
    t = tolerance(predicted=-3.2, measured=-3.0, off_prefill=10.0)
    assert t.rule == "share of measured" and t.allowed == pytest.approx(0.45) and t.ok


def test_quiet_patch_turns_the_busy_wait_into_sleeps(monkeypatch):
    path = Path(__file__).parents[1] / "deploy" / "local" / "quiet" / "sitecustomize.py"
    spec = importlib.util.spec_from_file_location("kvplan_quiet_test", path)
    mod = importlib.util.module_from_spec(spec)
    finders = list(sys.meta_path)
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.meta_path[:] = finders  # the module registers a finder; keep this process clean
    calls = []

    class SpinCondition:
        def __init__(self):
            self.is_reader, self.busy_loop_s, self.last_read = True, 1.0, 0.0

        def wait(self, timeout_ms=None):
            calls.append(("original", timeout_ms))

    fake = types.SimpleNamespace(SpinCondition=SpinCondition)
    mod._patch(fake)
    slept = []
    monkeypatch.setattr(mod.time, "sleep", lambda s: slept.append(s))
    cond = SpinCondition()
    cond.last_read = mod.time.monotonic()  # just read: inside the busy window -> sleep, no yield
    cond.wait(5)
    assert slept == [mod.SLEEP_S] and calls == []
    cond.last_read = mod.time.monotonic() - 2.0  # idle for 2 s: vLLM's blocking wait, unchanged
    cond.wait(7)
    assert calls == [("original", 7)]
    mod._patch(fake)  # idempotent
    assert SpinCondition._kvplan_quiet
