"""Counter samples of a recorded /metrics payload and their increases between two scrapes
(Prometheus's reset rule), and the cache figures a fixture's manifest shows from them."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# ------------------------------------------------------------------ counters


def counters(text: str) -> dict[tuple[str, tuple], float]:
    """Counter samples (`*_total`) of a payload keyed by (name, sorted labels)."""
    out: dict[tuple[str, tuple], float] = {}
    for fam in text_string_to_metric_families(text):
        if fam.type != "counter":
            continue
        for s in fam.samples:
            if s.name.endswith("_total"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def increase(before: str, after: str) -> dict[str, float]:
    """Per counter name: increase summed over series, Prometheus's reset rule applied."""
    b, a = counters(before), counters(after)
    inc: dict[str, float] = {}
    for key, v in a.items():
        prev = b.get(key, 0.0)
        d = v - prev if v >= prev else v  # a drop means a reset
        inc[key[0]] = inc.get(key[0], 0.0) + d
    return inc


def by_label(text: str, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for (n, labels), v in counters(text).items():
        if n == name:
            lv = dict(labels).get(label, "")
            out[lv] = out.get(lv, 0.0) + v
    return out


def cache_numbers(inc: dict[str, float]) -> dict[str, Any]:
    def ratio(h: str, q: str) -> float | None:
        return round(inc[h] / inc[q], 4) if inc.get(q) else None

    keys = [
        "vllm:prompt_tokens_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:external_prefix_cache_queries_total", "vllm:external_prefix_cache_hits_total",
        "vllm:request_success_total", "vllm:generation_tokens_total",
        "lmcache_mp_lookup_requested_tokens_total", "lmcache_mp_lookup_hit_tokens_total",
        "lmcache_mp_lookup_hit_l1_tokens_total", "lmcache_mp_l1_write_chunks_total",
    ]
    out: dict[str, Any] = {k: inc[k] for k in keys if k in inc}
    if "vllm:prefix_cache_queries_total" in inc:
        out["vllm_hit_rate"] = ratio("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
    if "vllm:external_prefix_cache_queries_total" in inc:
        out["vllm_external_hit_rate"] = ratio("vllm:external_prefix_cache_hits_total",
                                              "vllm:external_prefix_cache_queries_total")
    if "lmcache_mp_lookup_requested_tokens_total" in inc:
        out["lmcache_hit_rate"] = ratio("lmcache_mp_lookup_hit_tokens_total",
                                        "lmcache_mp_lookup_requested_tokens_total")
    return out
