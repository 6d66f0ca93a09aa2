"""The recording-rule pack (deploy/prometheus/rules/kvplan.rules.yml) against Debian's promtool:
``promtool check rules`` and its unit tests (``kvplan.rules.test.yml``, expected values worked
out by hand there), and a broken copy of the pack to show the unit tests catch a wrong rule."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.prom_fixtures import prometheus_bin

RULES = Path(__file__).resolve().parents[1] / "deploy/prometheus/rules"
PACK = RULES / "kvplan.rules.yml"
UNIT = RULES / "kvplan.rules.test.yml"

pytestmark = pytest.mark.prometheus


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([prometheus_bin("promtool"), *args], check=False, capture_output=True, text=True, cwd=cwd, timeout=120)


def test_the_rule_pack_passes_promtool_check_rules():
    r = promtool("check", "rules", str(PACK), cwd=RULES)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_the_rule_pack_passes_its_promtool_unit_tests():
    r = promtool("test", "rules", str(UNIT), cwd=RULES)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


TERM = ("(last_over_time(vllm:prompt_tokens_total[1m] offset 1m) - "
        "last_over_time(vllm:prompt_tokens_total[10m] offset 2m)) >= 0")


@pytest.mark.parametrize("old, new", [
    # the previous sample taken from inside the step: the pair across the step edge is lost
    ("[10m] offset 2m", "[10m] offset 1m"),
    # Prometheus's increase() (extrapolated, without the pair across the edge) instead of
    # the telescoping difference
    (TERM, "increase(vllm:prompt_tokens_total[1m] offset 1m) >= 0"),
    # gauges over a range that includes the step's first instant (Prometheus 2.x ranges do)
    ("[59s999ms]", "[1m]"),
], ids=["previous-sample-inside-step", "increase", "left-closed-gauges"])
def test_the_unit_tests_fail_on_a_broken_rule(tmp_path, old, new):
    text = PACK.read_text()
    assert old in text
    (tmp_path / PACK.name).write_text(text.replace(old, new))
    shutil.copy(UNIT, tmp_path / UNIT.name)
    assert promtool("check", "rules", PACK.name, cwd=tmp_path).returncode == 0
    r = promtool("test", "rules", UNIT.name, cwd=tmp_path)
    assert r.returncode != 0, "the unit tests passed a broken rule pack"
    assert "FAILED" in r.stdout + r.stderr
