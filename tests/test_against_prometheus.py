"""kvplan's window numbers against Prometheus's own functions, on the recorded real payloads.

The same payloads go (a) into kvplan by `import-metrics` and (b) into a real Prometheus
(Debian's 2.42) by `promtool tsdb create-blocks-from openmetrics`. For windows whose ends
are scrape times, Prometheus 2.x includes both end samples and does not extrapolate, so
`increase()` is exact there and must equal kvplan's sums:

    hit rate        sum(increase(hits[w])) / sum(increase(queries[w]))
    TTFT/TPOT/ITL   histogram_quantile(q, sum by (le) (increase(..._bucket[w])))
"""

import math
from itertools import combinations

import pytest

from kvplan.app.data.window import stats, window_increases
from kvplan.collectors.scrape.openmetrics import to_openmetrics
from kvplan.models.metrics.window import bucket_quantile, histogram_buckets, total, window_stats
from tests.prom_fixtures import create_blocks, promql, scalar, start_prometheus
from tests.recorded import cases, import_case, parsed, scrapes

pytestmark = pytest.mark.prometheus

HIT_RATES = {
    "prefix_cache_hit_rate": ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    "external_prefix_cache_hit_rate": ("vllm:external_prefix_cache_hits_total",
                                       "vllm:external_prefix_cache_queries_total"),
    "lmcache_lookup_hit_rate": ("lmcache_mp_lookup_hit_tokens_total", "lmcache_mp_lookup_requested_tokens_total"),
}
LATENCY_FAMILIES = {"ttft": "vllm:time_to_first_token_seconds", "tpot": "vllm:request_time_per_output_token_seconds",
                    "itl": "vllm:inter_token_latency_seconds"}
"""WindowStats prefix -> histogram family (the names as the recorded servers expose them)."""


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """Every recorded case in one kvplan DB (a deployment per case) and one Prometheus."""
    from kvplan.sql.db import Database

    work = tmp_path_factory.mktemp("prom-oracle")
    db = Database(work / "kvplan.duckdb")
    db.migrate()
    history = []
    for case in cases():
        for s in import_case(db, case):
            history.append((s.at, {"instance": s.target, "job": s.kind, "case": case}, parsed(s)))
    tsdb = create_blocks(to_openmetrics(history), work)
    prom = start_prometheus(work, storage=tsdb)
    yield db, prom
    prom.stop()


def windows(case: str, kind: str):
    """Every pair of scrape times of one target kind: windows whose ends are samples."""
    times = sorted({s.at for s in scrapes(case) if s.kind == kind})
    return list(combinations(times, 2))


def rounds(case: str, kind: str):
    """Every pair of scrape rounds of one target kind, as {target: (t0, t1)}: each target's own
    sample times, so Prometheus's increase() is exact for every series (no extrapolation to a
    window end that falls between a target's samples)."""
    by: dict[str, list] = {}
    for s in scrapes(case):
        if s.kind == kind:
            by.setdefault(s.target, []).append(s.at)
    times = {t: sorted(v) for t, v in by.items()}
    n = {len(v) for v in times.values()}
    assert len(n) == 1, f"{case}: targets scraped a different number of times"
    return [{t: (v[i], v[j]) for t, v in times.items()} for i, j in combinations(range(n.pop()), 2)]


def sel(case):
    return f'{{case="{case}"}}'


def present(prom, case, metric, at) -> int:
    return len(promql(prom.url, f"{metric}{sel(case)}", at.timestamp()))


@pytest.mark.parametrize("case", cases())
def test_hit_rates_equal_promql(loaded, case):
    db, prom = loaded
    compared = 0
    for key, (num, den) in HIT_RATES.items():
        kind = "lmcache" if num.startswith("lmcache") else "vllm"
        for t0, t1 in windows(case, kind):
            n0 = present(prom, case, den, t0)
            if n0 == 0 or n0 != present(prom, case, den, t1):
                continue  # a series born mid-window: Prometheus extrapolates it, kvplan does not
            w = f"{round((t1 - t0).total_seconds() * 1000)}ms"
            expr = f"sum(increase({num}{sel(case)}[{w}])) / sum(increase({den}{sel(case)}[{w}]))"
            expected = scalar(prom.url, expr, t1.timestamp())
            got = getattr(stats(db, case, t0, t1), key)
            if expected is None or math.isnan(expected):  # 0/0: nothing queried
                assert got is None, (key, t0, t1)
            else:
                assert got == pytest.approx(expected, rel=1e-9, abs=1e-12), (key, t0, t1, expr)
            compared += 1
    assert compared > 0


@pytest.mark.parametrize("case", cases())
@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
@pytest.mark.parametrize("key", list(LATENCY_FAMILIES))
def test_latency_quantiles_equal_histogram_quantile(loaded, case, q, key):
    """TTFT, TPOT and ITL: kvplan's bucket_quantile, and for p50/p99 the window stats (what
    `kvplan stats --json` prints), equal PromQL's histogram_quantile on every window. With two
    servers each target's increase is taken over its own samples (``@`` at its last one)."""
    db, prom = loaded
    family = LATENCY_FAMILIES[key]
    compared = 0
    for win in rounds(case, "vllm"):
        parts = []
        for target, (a, b) in sorted(win.items()):
            w = f"{round((b - a).total_seconds() * 1000)}ms"
            parts.append(f'increase({family}_bucket{{case="{case}",instance="{target}"}}[{w}] @ {b.timestamp():.3f})')
        expr = f"histogram_quantile({q}, sum by (le) ({' or '.join(parts)}))"
        t0, t1 = min(a for a, _ in win.values()), max(b for _, b in win.values())
        expected = scalar(prom.url, expr, t1.timestamp())
        rows = window_increases(db, case, t0, t1)
        got = bucket_quantile(q, histogram_buckets(rows, family)).value
        st = window_stats(rows)
        from_stats = getattr(st, f"{key}_p{round(q * 100)}_s") if q in (0.5, 0.99) else got
        if expected is None or math.isnan(expected):
            # no observation of this family in the window (TPOT is observed when a request
            # finishes, TTFT at its first token: a window can hold TTFTs and no TPOT)
            assert got is None and from_stats is None and not total(rows, f"{family}_count"), (t0, t1)
        else:
            assert got == pytest.approx(expected, rel=1e-9), (q, t0, t1, expr)
            assert from_stats == pytest.approx(expected, rel=1e-9), (key, q, t0, t1, expr)
            compared += 1
    assert compared > 0
