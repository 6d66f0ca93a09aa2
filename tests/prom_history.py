"""Payload sequences for the Prometheus ingestion tests: three targets scraped every 30 s
for 40 minutes, with a restart, a silent target and an LMCache server, built as text
exposition (so the direct import reads exactly what Prometheus holds), plus the OpenMetrics
history to load into a real Prometheus."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from collectors.openmetrics import to_openmetrics
from collectors.parse import Payload, parse_payload

T0 = datetime(2026, 1, 5, 10, 0, tzinfo=timezone.utc)
EVERY_S = 30
SCRAPES = 81                      # k = 0..80: T0 .. T0 + 40 min
RESTART_K = 41                    # engine 1 of target a restarts between k=40 and k=41
SILENT_B = range(51, 64)          # target b not scraped from 25.5 to 31.5 min
BOUNDS = ("0.1", "1.0", "+Inf")
TARGETS = {"a": ("vllm", "a:8000"), "b": ("vllm", "b:8000"), "c": ("lmcache", "c:8090")}


def at(k: float) -> datetime:
    return T0 + timedelta(seconds=EVERY_S * k)


def _cum(k: int, f) -> int:
    return sum(f(j) for j in range(1, k + 1))


def _engine(k: int, e: int, restart_base: int | None) -> dict:
    scale = e + 1
    vals = {
        "hits": _cum(k, lambda j: (j * 7 % 13) * scale * 10),
        "queries": _cum(k, lambda j: ((j * 7 % 13) + j % 5 + 3) * scale * 10),
        "b0": _cum(k, lambda j: j % 3),
        "b1": _cum(k, lambda j: j % 3 + (j % 4 == 0)),
        "binf": _cum(k, lambda j: j % 3 + (j % 4 == 0) + (j % 7 == 0)),
        "gen": _cum(k, lambda j: 16 * (j % 3)),
    }
    if restart_base is not None:  # counters restarted: only what happened since restart_base
        base = _engine(restart_base, e, None)
        vals = {n: v - base[n] for n, v in vals.items()}
    return vals


def vllm_payload(k: int, model: str, engines: tuple[int, ...], restarted: bool = False) -> str:
    created_old = T0.timestamp() - 3600
    created_new = at(RESTART_K - 0.5).timestamp()
    rows = {}
    for e in engines:
        restart = restarted and e == 1 and k >= RESTART_K
        rows[e] = (_engine(k, e, RESTART_K - 1 if restart else None), created_new if restart else created_old)
    out = []

    def lab(e, extra=""):
        return f'{{engine="{e}",model_name="{model}"{extra}}}'

    for fam, key in (("vllm:prefix_cache_hits", "hits"), ("vllm:prefix_cache_queries", "queries"),
                     ("vllm:generation_tokens", "gen")):
        out.append(f"# TYPE {fam}_total counter")
        out += [f"{fam}_total{lab(e)} {float(v[key])}" for e, (v, _) in rows.items()]
        out.append(f"# TYPE {fam}_created gauge")
        out += [f"{fam}_created{lab(e)} {c}" for e, (_, c) in rows.items()]
    fam = "vllm:time_to_first_token_seconds"
    out.append(f"# TYPE {fam} histogram")
    for e, (v, _) in rows.items():
        for le, key in zip(BOUNDS, ("b0", "b1", "binf")):
            le_label = ',le="' + le + '"'
            out.append(f"{fam}_bucket{lab(e, le_label)} {float(v[key])}")
        out.append(f"{fam}_count{lab(e)} {float(v['binf'])}")
        out.append(f"{fam}_sum{lab(e)} {v['binf'] * 0.25}")
    out.append(f"# TYPE {fam}_created gauge")
    out += [f"{fam}_created{lab(e)} {c}" for e, (_, c) in rows.items()]
    out.append("# TYPE vllm:kv_cache_usage_perc gauge")
    out += [f"vllm:kv_cache_usage_perc{lab(e)} {((k * 7 + e) % 10) / 10}" for e in rows]
    out.append("# TYPE vllm:num_requests_running gauge")
    out += [f"vllm:num_requests_running{lab(e)} {float(k % 4)}" for e in rows]
    return "\n".join(out) + "\n"


def lmcache_payload(k: int) -> str:
    req = _cum(k, lambda j: 256 * (j % 4 + 1))
    hit = _cum(k, lambda j: 256 * (j % 4))
    l1 = _cum(k, lambda j: 256 * (j % 4) - 256 * (j % 2 if j % 4 else 0))
    lab = '{cache_salt="t1",model_name="m1"}'
    out = []
    for fam, v in (("lmcache_mp_lookup_requested_tokens", req), ("lmcache_mp_lookup_hit_tokens", hit),
                   ("lmcache_mp_lookup_hit_l1_tokens", l1), ("lmcache_mp_lookup_hit_l2_tokens", hit - l1)):
        out += [f"# TYPE {fam}_total counter", f"{fam}_total{lab} {float(v)}"]
    out += ["# TYPE lmcache_mp_l1_usage_ratio gauge",
            f'lmcache_mp_l1_usage_ratio{{backend="cpu",l1_tag="0"}} {(k % 9) / 10}']
    return "\n".join(out) + "\n"


def scrapes() -> list[tuple[str, datetime, str]]:
    """(target key, time, exposition text) of every scrape, in time order."""
    out = []
    for k in range(SCRAPES):
        out.append(("a", at(k), vllm_payload(k, "m1", (0, 1), restarted=True)))
        if k not in SILENT_B:
            out.append(("b", at(k), vllm_payload(k, "m2", (0,))))
        out.append(("c", at(k), lmcache_payload(k)))
    return out


def parsed() -> list[tuple[str, datetime, Payload]]:
    return [(t, ts, parse_payload(text, f"{t}@{ts.isoformat()}")) for t, ts, text in scrapes()]


def openmetrics_history(extra_labels: dict[str, str] | None = None) -> str:
    def labels(t):
        job, inst = TARGETS[t]
        return {"job": job, "instance": inst, **(extra_labels or {})}
    return to_openmetrics((ts, labels(t), p) for t, ts, p in parsed())
