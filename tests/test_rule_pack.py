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
    return subprocess.run([prometheus_bin("promtool"), *args], check=False, capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_the_rule_pack_passes_promtool_check_rules():
    r = promtool("check", "rules", str(PACK), cwd=RULES)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_the_rule_pack_passes_its_promtool_unit_tests():
    r = promtool("test", "rules", str(UNIT), cwd=RULES)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


TERM = ("((last_over_time(vllm:prompt_tokens_total[1m] offset 1m) >= 0 <= 9007199254740992) - "
        "(last_over_time(vllm:prompt_tokens_total[10m] offset 2m) >= 0 <= 9007199254740992)) >= 0")


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


# -- the pack is generated from the catalog ---------------------------------------------------
def test_the_checked_in_pack_is_what_kvplan_rules_prints():
    from typer.testing import CliRunner

    from kvplan.app.cli import app

    r = CliRunner().invoke(app, ["rules"])
    assert r.exit_code == 0, r.output
    assert r.output == PACK.read_text(), "regenerate: kvplan rules > deploy/prometheus/rules/kvplan.rules.yml"


def test_every_catalog_family_and_every_older_spelling_has_its_sums():
    import yaml

    from kvplan.collectors.prometheus.rules import EXTRA_SPELLINGS, metric_part
    from kvplan.models.metrics.catalog import FAMILIES, ROUTER_MARKERS

    records = {r["record"] for g in yaml.safe_load(PACK.read_text())["groups"] for r in g["rules"]}
    assert not any(metric_part(m) in r for m in ROUTER_MARKERS for r in records)  # they say what to leave out
    for fam, typ in {**FAMILIES, **EXTRA_SPELLINGS}.items():
        if fam in ROUTER_MARKERS:
            continue
        want = {"counter": [":increase1m"], "histogram": ["_bucket:increase1m", "_count:increase1m", "_sum:increase1m"],
                "gauge": [":max1m", ":sum1m"]}[typ]
        for w in want:
            assert f"deployment_model:{metric_part(fam)}{w}" in records, (fam, w)
    for name in ("vllm_engines:count1m", "sglang_engines:count1m", "lmcache_mp_servers:count1m"):
        assert f"deployment_model:{name}" in records


def test_kvplan_rules_regenerates_with_other_labels_and_as_a_prometheusrule(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from kvplan.app.cli import app

    r = CliRunner().invoke(app, ["rules", "--per-engine-labels", "instance,hostname", "--delay", "3m"])
    assert r.exit_code == 0, r.output
    (tmp_path / "x.yml").write_text(r.output)
    assert promtool("check", "rules", "x.yml", cwd=tmp_path).returncode == 0
    assert "sum without (instance, hostname) (" in r.output and "offset 3m" in r.output
    assert "kvplan_delay: 3m" in r.output and "engine," not in r.output
    r = CliRunner().invoke(app, ["rules", "--format", "prometheusrule", "--label", "release=kps"])
    doc = yaml.safe_load(r.output)
    assert doc["kind"] == "PrometheusRule" and doc["metadata"]["labels"] == {"release": "kps"}
    def exprs(groups):
        return [(r["record"], r["expr"].strip(), r["labels"]) for g in groups for r in g["rules"]]

    assert exprs(doc["spec"]["groups"]) == exprs(yaml.safe_load(PACK.read_text())["groups"])
    bad = CliRunner().invoke(app, ["rules", "--per-engine-labels", "le"])
    assert bad.exit_code == 2 and "--per-engine-labels" in bad.output
