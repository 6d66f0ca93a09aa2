"""Evaluation step 3: one shared cache or private ones, from the targets a deployment has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .catalog import LMCACHE_INPROC, LMCACHE_MP, VLLM

UNKNOWN_HOST = "unknown (imported payloads)"


@dataclass(frozen=True)
class ServingTopology:
    targets: list[dict[str, Any]]
    """The deployment's targets (kind, url, engines, kv_connector), each with its ``host`` added."""
    nodes: list[dict[str, Any]]
    """Per host: vLLM servers, engines, LMCache MP servers."""
    verdict: str
    """Shared or private caches, in one sentence."""


def serving_topology(targets: list[dict[str, Any]]) -> ServingTopology:
    """Group targets (rows with kind, url, engines, kv_connector) per host and say whether the
    engines share one cache."""
    nodes: dict[str, dict[str, Any]] = {}
    out = []
    for r in targets:
        host = (urlsplit(r["url"]).hostname if r.get("url") else None) or UNKNOWN_HOST
        r = dict(r, host=host)
        out.append(r)
        n = nodes.setdefault(host, {"host": host, "vllm_servers": 0, "engines": 0, LMCACHE_MP: 0,
                                    LMCACHE_INPROC: 0, "kv_connector": False})
        if r["kind"] == VLLM:
            n["vllm_servers"] += 1
            n["engines"] += r["engines"]
            n["kv_connector"] |= bool(r["kv_connector"])
        elif r["kind"] in (LMCACHE_MP, LMCACHE_INPROC):
            n[r["kind"]] += 1
    return ServingTopology(out, sorted(nodes.values(), key=lambda n: n["host"]), verdict(out))


def verdict(targets: list[dict[str, Any]]) -> str:
    vllm = [r for r in targets if r["kind"] == VLLM]
    engines = sum(r["engines"] for r in vllm)
    shared = sum(1 for r in targets if r["kind"] == LMCACHE_MP)
    if not vllm:
        return "No vLLM target in this deployment: topology unknown."
    if shared:
        return (f"Shared cache: {shared} LMCache multi-process server(s) serve {engines} vLLM engine(s) on "
                f"{len(vllm)} server(s); a prefix computed by one engine can be reused by the others.")
    if engines > 1:
        return (f"Private caches: {engines} vLLM engine(s) on {len(vllm)} server(s) each keep their own "
                "prefix cache; a turn routed to another engine recomputes its prefix. This is the "
                "fragmentation a shared cache (LMCache multi-process) fixes.")
    return ("One vLLM engine, private prefix cache: a shared cache adds little here beyond "
            "capacity (more cache memory).")
