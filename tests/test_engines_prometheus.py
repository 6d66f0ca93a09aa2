"""The engine-release payloads through a real Prometheus (Debian's): every release's before and
after bodies are written as timestamped OpenMetrics (the samples as exposed, types unknown, as
a scrape would store them), loaded with promtool, and ingested by kvplan with the same reading
rules as a direct import: the figures must be the direct import's, and a router must be refused
here too (its vllm:gpu_prefix_cache_hits_total is a gauge, which Prometheus cannot tell from a
counter by the name)."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvplan.app.data.window import stats
from kvplan.collectors.prometheus.ingest import ingest_range
from kvplan.models.inputs.settings import DeploymentConfig, PrometheusConfig
from kvplan.sql.db import Database
from tests.engines import ENGINES, T0, T1, import_release
from tests.prom_fixtures import create_blocks, scalar, start_prometheus

# V1 0.7's block counters cannot be told from tokens without their HELP, which a TSDB does not
# keep: over Prometheus they are read by name (collectors/README.md says so); left out here.
VIA_PROMETHEUS = ["vllm-0.10.2", "vllm-0.9.0.1", "vllm-0.6.6", "sglang-0.5.23", "sglang-0.5.4",
                  "vllm-0.32.0-lmcache-inproc-tp2", "vllm-0.32.0", "vllm-0.31.0"]
ROUTER = "router-production-stack"


def openmetrics(releases: list[str]) -> str:
    """Every sample of every release's two payloads, timestamped at T0 / T1, job = the release."""
    by_name: dict[str, list[str]] = {}
    for rel in releases:
        for f, at in (("00_before.prom", T0), ("01_after.prom", T1)):
            for fam in text_string_to_metric_families((ENGINES / rel / f).read_text()):
                for s in fam.samples:
                    if s.name.endswith("_created"):
                        continue
                    labels = {**s.labels, "job": rel, "instance": "127.0.0.1:1"}
                    lab = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                    by_name.setdefault(s.name, []).append(f"{s.name}{{{lab}}} {float(s.value)!r} {at.timestamp():.3f}")
    out = []
    for name in sorted(by_name):
        out.append(f"# TYPE {name} unknown")
        out.extend(sorted(by_name[name], key=lambda line: (line.rsplit(" ", 2)[0], float(line.rsplit(" ", 1)[1]))))
    return "\n".join([*out, "# EOF"]) + "\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    work = tmp_path_factory.mktemp("prom-engines")
    create_blocks(openmetrics([*VIA_PROMETHEUS, ROUTER]), work)
    server = start_prometheus(work, storage=work / "tsdb")
    yield server
    server.stop()


def cfg(url: str) -> PrometheusConfig:
    return PrometheusConfig(url=url, step="10m", chunk="80m", lookback="2h", gap_after="2h", retries=0,
                            timeout_s=10)


def ingest(db: Database, url: str, release: str):
    dep = DeploymentConfig(name=f"prom-{release}", prometheus_selector=f'job="{release}"')
    return ingest_range(db, cfg(url), dep, T0 - timedelta(minutes=10), T1)


@pytest.mark.prometheus
@pytest.mark.parametrize("release", VIA_PROMETHEUS)
def test_prometheus_ingestion_reads_every_release_like_a_direct_import(prom, tmp_path, release):
    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    res = ingest(db, prom.url, release)
    assert res.failed == 0 and not res.refused, res
    import_release(db, release, "direct")
    got = stats(db, f"prom-{release}", T0, T1).to_dict()
    want = stats(db, "direct", T0, T1).to_dict()
    for k in ("prefix_cache_hit_rate", "cached_prompt_tokens", "prompt_tokens", "requests", "ttft_p50_s",
              "ttft_p99_s", "itl_p50_s", "itl_p99_s", "lmcache_lookup_hit_rate", "lmcache_retrieve_hit_rate"):
        a, b = got[k], want[k]
        assert (a is None and b is None) or math.isclose(a, b, rel_tol=1e-12), (k, a, b)
    if release == "vllm-0.10.2":  # PromQL over both spellings would double the tokens; kvplan reads one
        expr = (f'sum(vllm:gpu_prefix_cache_queries_total{{job="{release}"}}) + '
                f'sum(vllm:prefix_cache_queries_total{{job="{release}"}})')
        both = scalar(prom.url, expr, T1.timestamp()) - scalar(prom.url, expr, T0.timestamp())
        assert both == pytest.approx(20000) and got["prefix_cache_queries"] == 10000


@pytest.mark.prometheus
def test_prometheus_ingestion_refuses_a_router_target(prom, tmp_path):
    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    res = ingest(db, prom.url, ROUTER)
    assert list(res.refused.values()) == ["the vLLM production-stack router"]
    with db.read() as con:
        assert con.execute("SELECT count(*) FROM targets").fetchone()[0] == 0
