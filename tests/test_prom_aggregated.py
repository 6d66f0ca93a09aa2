"""Aggregated ingestion against the exact (raw) path, on a REAL Prometheus (Debian's 2.42).

A day of replayed history goes into Prometheus (``promtool tsdb create-blocks-from
openmetrics``): 4 vLLM engines on 2 nodes and one LMCache MP server per node, scraped every
60 s with up to +-2 s of jitter, every series a sum of three recorded real traffic components
under their own load curves (``shared_vs_unique``: its unique-prompt run, and its shared-prefix
run; ``two_servers``: a turn served from LMCache), so hit rates, prompt lengths and TTFT
buckets change over the day. Engine 1 restarts at 09:00
(3 min down, counters from 0, new ``_created``), engine 3 at 15:30 (1 min down); engine 2 is
silent for 7 min at 12:00; the LMCache server of node 1 for 20 min at 18:00 (longer than
lookback). The rule pack's outputs are backfilled with ``promtool tsdb create-blocks-from
rules`` (evaluated as a ruler would, at its own phase inside the minute).

Then the same day is ingested three ways into three databases: raw (exact), aggregated with
query-time sums, aggregated from the rule outputs. The issue's bound: the day's hit rates and
tokens within 0.5 % of raw, TTFT p50/p99 in the same bucket, and the plan's saved GPU-hours.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from kvplan.app.data.plan import plan_range
from kvplan.app.data.store import DeploymentSettings
from kvplan.app.data.window import engines_in_window, stats
from kvplan.collectors.prometheus.ingest import ingest_range, split_name
from kvplan.collectors.prometheus.rules import render
from kvplan.collectors.scrape.openmetrics import label_text
from kvplan.collectors.scrape.parse import parse_payload
from kvplan.models.inputs.settings import DeploymentConfig, PrometheusConfig
from kvplan.sql.db import Database
from tests.prom_fixtures import prometheus_bin, start_prometheus

pytestmark = pytest.mark.prometheus

DAY0 = datetime(2026, 2, 2, tzinfo=UTC)
EVERY, TICKS = 60, 1440
ENGINES = 4                         # 2 per node; one LMCache MP server per node
RESTARTS = {1: (9 * 60, 3), 3: (15 * 60 + 30, 1)}    # engine: (minute of the day, minutes down)
SILENT = {("vllm", 2): (12 * 60, 7), ("lmcache", 1): (18 * 60, 20)}
SHARED = Path(__file__).parent / "fixtures/payloads/shared_vs_unique"
TWO = Path(__file__).parent / "fixtures/payloads/two_servers"
SEL = 'kvplan_deployment="prod"'
MODEL = "tiny-llama"  # the recorded payloads' model_name


def _template(p: Path):
    return parse_payload(p.read_text(), str(p))


def _kept(payload) -> dict:
    out = {}
    for s in payload.samples:
        try:
            split_name(s.name)
        except KeyError:
            continue
        out[(s.name, label_text(s, {}))] = s
    return out


def _curves(e: int) -> list[np.ndarray]:
    """Cumulative weights of the three traffic components of engine ``e`` over the day."""
    k = np.arange(TICKS + 1)
    unique = (1 + 0.9 * np.sin(2 * np.pi * k / TICKS - np.pi / 2)) * (0.6 + 0.2 * e)
    shared = (1 + 0.9 * np.sin(2 * np.pi * k / TICKS + np.pi / 2)) * (0.4 + 0.15 * e)
    external = (1 + 0.5 * np.sin(4 * np.pi * k / TICKS)) * (0.5 + 0.1 * e)
    return [np.cumsum(unique) / 30, np.cumsum(shared) / 30, np.cumsum(external) / 3]


def _series(kind: str, idx: int, curves: list[np.ndarray], parts: list[dict], jitter: np.ndarray) -> list[str]:
    """OpenMetrics lines of one target: counters = sum of curve x component, restarted from 0."""
    inst = f"node{idx // 2}:{8000 + idx % 2}" if kind == "vllm" else f"node{idx}:8090"
    extra = {"instance": inst, "job": kind, "kvplan_deployment": "prod"}
    keep = np.ones(TICKS + 1, bool)
    created = np.full(TICKS + 1, DAY0.timestamp() - 86400)
    if kind == "vllm" and idx in RESTARTS:
        m, down = RESTARTS[idx]
        keep[m:m + down] = False
        curves = [c - np.where(np.arange(TICKS + 1) >= m + down, c[m + down - 1], 0.0) for c in curves]
        created[m + down:] = DAY0.timestamp() + (m + down) * EVERY - 20
    if (kind, idx) in SILENT:
        m, n = SILENT[(kind, idx)]
        keep[m:m + n] = False
    ts = [f"{DAY0.timestamp() + k * EVERY + jitter[k]:.3f}" for k in range(TICKS + 1)]
    lines = []
    for key in sorted(set().union(*parts)):
        first = next(p[key] for p in parts if key in p)
        name, _ = key
        lab = label_text(first, extra)
        if split_name(name)[2]:
            vals = created
        elif first.type == "gauge":
            vals = first.value * (0.5 + 0.5 * np.sin(np.arange(TICKS + 1) / 50 + idx))
        else:
            vals = sum(c * (p[key].value if key in p else 0.0) for c, p in zip(curves, parts, strict=True))
        lines += [f"{name}{lab} {float(vals[k])!r} {ts[k]}" for k in np.nonzero(keep)[0]]
    return lines


def _diff(later: dict, earlier: dict) -> dict:
    """What a recorded server counted between two of its payloads (later - earlier)."""
    out = {}
    for key, s in later.items():
        e = earlier.get(key)
        v = s.value - (e.value if e is not None and s.type != "gauge" and not split_name(key[0])[2] else 0.0)
        out[key] = replace(s, value=max(v, 0.0))
    return out


def history() -> str:
    rng = np.random.default_rng(22)
    vu, vs = (_kept(_template(SHARED / f"{n}_vllm-0.prom")) for n in ("02_after_unique", "05_after_shared"))
    lu, ls = (_kept(_template(SHARED / f"{n}_lmcache.prom")) for n in ("02_after_unique", "05_after_shared"))
    vllm = [vu, _diff(vs, vu), _kept(_template(TWO / "02_after_turn2_on_B_vllm-1.prom"))]
    lmcache = [lu, _diff(ls, lu), _kept(_template(TWO / "02_after_turn2_on_B_lmcache.prom"))]
    lines: list[str] = []
    node_load: dict[int, list[np.ndarray]] = {}
    for e in range(ENGINES):
        curves = _curves(e)
        lines += _series("vllm", e, curves, vllm, rng.uniform(-2, 2, TICKS + 1))
        prev = node_load.get(e // 2)
        node_load[e // 2] = curves if prev is None else [p + c for p, c in zip(prev, curves, strict=True)]
    for n, curves in node_load.items():
        lines += _series("lmcache", n, curves, lmcache, rng.uniform(-2, 2, TICKS + 1))
    by_name: dict[str, list[str]] = {}
    for line in lines:
        by_name.setdefault(line.split("{", 1)[0], []).append(line)
    out = []
    for name in sorted(by_name):
        out.append(f"# TYPE {name} unknown")
        out += sorted(by_name[name], key=lambda x: (x.rsplit(" ", 2)[0].split(" ")[0], float(x.rsplit(" ", 1)[1])))
    return "\n".join(out) + "\n# EOF\n"


def promtool(*args: str) -> None:
    r = subprocess.run([prometheus_bin("promtool"), *args], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """(raw db, query-time db, rules db) after ingesting the day from one Prometheus."""
    work = tmp_path_factory.mktemp("prom-agg")
    (work / "h.om").write_text(history())
    promtool("tsdb", "create-blocks-from", "openmetrics", str(work / "h.om"), str(work / "tsdb"))
    (work / "h.om").unlink()
    prom = start_prometheus(work, storage=work / "tsdb")
    try:
        (work / "kvplan.rules.yml").write_text(render())
        promtool("tsdb", "create-blocks-from", "rules", f"--url={prom.url}", f"--start={int(DAY0.timestamp())}",
                 f"--end={int(DAY0.timestamp()) + 86400 + 1800}", f"--output-dir={work / 'rb'}",
                 str(work / "kvplan.rules.yml"))
    finally:
        prom.stop()
    for blk in (work / "rb").iterdir():
        if blk.is_dir():
            shutil.copytree(blk, work / "tsdb" / blk.name)
    prom = start_prometheus(work, storage=work / "tsdb")
    cfg = PrometheusConfig(url=prom.url, step="1m", chunk="6h", lookback="10m", gap_after="5m", timeout_s=300)
    dbs, results = {}, {}
    try:
        for mode, extra in (("raw", {}), ("query", {"prometheus_mode": "aggregated", "prometheus_sums": "query"}),
                            ("rules", {"prometheus_mode": "aggregated", "prometheus_sums": "rules"})):
            db = Database(work / f"{mode}.duckdb")
            db.migrate()
            dep = DeploymentConfig(name="prod", prometheus_selector=SEL, **extra)
            results[mode] = ingest_range(db, cfg, dep, DAY0, DAY0 + timedelta(days=1))
            dbs[mode] = db
    finally:
        prom.stop()
    return dbs, results


def day(db):
    return stats(db, "prod", DAY0, DAY0 + timedelta(days=1))


def test_every_mode_ingested_the_day_and_aggregated_says_what_it_leaves_out(three):
    dbs, res = three
    for mode, r in res.items():
        assert r.failed == 0 and r.chunks == 4, (mode, r.errors)
    assert res["raw"].lost is None
    assert "per-engine" in res["query"].lost and "restart" in res["rules"].lost
    # the fleet stores one series per family part, not per engine: far fewer points
    assert res["query"].raw_samples < res["raw"].raw_samples / 3
    with dbs["query"].read() as con:
        targets = {r[0] for r in con.execute("SELECT name FROM targets").fetchall()}
    assert targets == {"fleet/vllm/" + MODEL, "fleet/lmcache_mp/" + MODEL, "fleet/lmcache_mp"}, targets


@pytest.mark.parametrize("mode", ["query", "rules"])
def test_a_days_hit_rates_and_tokens_are_within_half_a_percent_of_raw(three, mode):
    dbs, _ = three
    raw, agg = day(dbs["raw"]), day(dbs[mode])
    for field in ("prefix_cache_hit_rate", "external_prefix_cache_hit_rate", "lmcache_lookup_hit_rate",
                  "prompt_tokens", "generation_tokens", "cached_prompt_tokens", "requests"):
        r, a = getattr(raw, field), getattr(agg, field)
        assert r is not None and r > 0, field
        assert a == pytest.approx(r, rel=0.005), (field, r, a, (a - r) / r)


@pytest.mark.parametrize("mode", ["query", "rules"])
def test_ttft_quantiles_land_in_the_same_bucket(three, mode):
    dbs, _ = three
    raw, agg = day(dbs["raw"]), day(dbs[mode])
    for q in ("ttft_p50", "ttft_p99", "itl_p99", "tpot_p50"):
        r, a = getattr(raw, q), getattr(agg, q)
        assert r is not None and a is not None, q
        assert (a.lower, a.upper, a.in_inf) == (r.lower, r.upper, r.in_inf), (q, r, a)


@pytest.mark.parametrize("mode", ["query", "rules"])
def test_the_plans_saved_gpu_hours_and_engines_agree(three, mode):
    dbs, _ = three
    t0, t1 = DAY0, DAY0 + timedelta(days=1)
    with dbs["raw"].snapshot() as s:
        raw, raw_engines = plan_range(s, "prod", t0, t1, cfg=DeploymentSettings()), engines_in_window(s, "prod", t0, t1)
    with dbs[mode].snapshot() as s:
        agg, agg_engines = plan_range(s, "prod", t0, t1, cfg=DeploymentSettings()), engines_in_window(s, "prod", t0, t1)
    # 4 engines: raw counts them by (target, engine); the fleet by the most reporting in a step
    assert raw_engines == agg_engines == ENGINES
    assert raw.saved_prefill_gpu_hours and raw.saved_prefill_gpu_hours > 0
    # query-time sums land on kvplan's own steps: the fit sees the same intervals (measured
    # -0.03 %); the rule outputs cover the rule group's minutes (its evaluation phase), so each
    # interval holds a slightly different slice of the day and the fit moves more (-1.2 %)
    assert agg.saved_prefill_gpu_hours == pytest.approx(raw.saved_prefill_gpu_hours,
                                                        rel=0.005 if mode == "query" else 0.02)
    assert agg.decision.kind == raw.decision.kind
    assert math.isfinite(agg.monthly_benefit_usd or 0.0)
