"""Aggregated-ingestion settings, the queries it asks for, and what `config check` says."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.config import ConfigError, load_settings
from kvplan.collectors.prometheus import rules as prom_rules


def write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "kvplan.toml"
    p.write_text(f'db = "{tmp_path / "k.duckdb"}"\n' + body)
    return p


DEP = '[[deployments]]\nname = "prod"\nprometheus_selector = \'job="vllm"\'\n'


def test_raw_is_the_default_and_aggregated_is_chosen_per_deployment(tmp_path):
    s = load_settings(write(tmp_path, DEP + 'prometheus_mode = "aggregated"\nprometheus_sums = "rules"\n'
                                  + '[[deployments]]\nname = "small"\nprometheus_selector = \'job="x"\'\n'
                                  + '[prometheus]\nconcurrency = 3\n'))
    prod, small = s.deployments
    assert (prod.prometheus_mode, prod.prometheus_sums, small.prometheus_mode) == ("aggregated", "rules", "raw")
    assert s.prometheus.max_concurrency == 3                     # the old key still works
    assert "instance" in prod.prometheus_per_engine_labels and "model_name" not in prod.prometheus_per_engine_labels


@pytest.mark.parametrize("line, key", [('prometheus_mode = "fleet"', "prometheus_mode"),
                                       ('prometheus_sums = "recorded"', "prometheus_sums"),
                                       ('prometheus_per_engine_labels = ["instance", "le"]', "le"),
                                       ('prometheus_per_engine_labels = ["not a label"]', "not Prometheus label")])
def test_a_bad_mode_names_the_key(tmp_path, line, key):
    with pytest.raises(ConfigError, match=key):
        load_settings(write(tmp_path, DEP + line + "\n"))


def test_a_family_added_to_the_catalog_is_asked_for_and_recorded(monkeypatch):
    w = prom_rules.Window(60, 600, 0)
    assert not any(q.family == "vllm:new_counter" for q in prom_rules.queries(w))
    monkeypatch.setitem(prom_rules.FAMILIES, "vllm:new_counter", "counter")
    q = next(q for q in prom_rules.queries(w, selector='job="vllm"') if q.family == "vllm:new_counter")
    assert q.sample == "vllm:new_counter_total" and q.record == "deployment_model:vllm_new_counter:increase1m"
    assert 'vllm:new_counter_total{job="vllm"}[1m]' in q.expr and "[10m] offset 1m" in q.expr
    assert "deployment_model:vllm_new_counter:increase1m" in prom_rules.render()


def test_config_check_says_the_mode_what_it_loses_and_where_scraping_should_stop(tmp_path, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    targets = "".join(f'[[deployments.targets]]\nname = "t{i}"\n'
                      f'url = "http://10.0.0.{i % 250 + 1}:{8000 + i}/metrics"\n'
                      for i in range(400))
    body = (DEP + 'prometheus_mode = "aggregated"\nprometheus_sums = "rules"\n[[deployments]]\nname = "direct"\n'
            + targets + '[prometheus]\nstep = "30s"\n')
    r = CliRunner().invoke(app, ["config", "check", "--config", str(write(tmp_path, body))])
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "aggregated (rule pack outputs)" in out and "no per-engine detail" in out
    assert "not a multiple of the rule pack's minute" in out
    # 400 targets every 15 s are more than 2 cores x 80 targets a core (bench/scrape_bench.py)
    assert "400 direct targets every 15s" in out and "let Prometheus scrape" in out
