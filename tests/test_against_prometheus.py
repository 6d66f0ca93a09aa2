"""kvplan's window numbers against Prometheus's own functions, on the recorded real payloads.

The same payloads go (a) into kvplan by `import-metrics` and (b) into a real Prometheus
(Debian's 2.42) by `promtool tsdb create-blocks-from openmetrics`. For windows whose ends
are scrape times, Prometheus 2.x includes both end samples and does not extrapolate, so
`increase()` is exact there and must equal kvplan's sums:

    hit rate  sum(increase(hits[w])) / sum(increase(queries[w]))
    TTFT      histogram_quantile(q, sum by (le) (increase(..._bucket[w])))
"""

import math
from itertools import combinations

import pytest

from app.data.window import stats, window_increases
from collectors.openmetrics import to_openmetrics
from models.metrics import bucket_quantile, histogram_buckets, window_stats
from tests.prom_fixtures import create_blocks, promql, scalar, start_prometheus
from tests.recorded import cases, import_case, parsed, scrapes

pytestmark = pytest.mark.prometheus

HIT_RATES = {
    "prefix_cache_hit_rate": ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    "external_prefix_cache_hit_rate": ("vllm:external_prefix_cache_hits_total",
                                       "vllm:external_prefix_cache_queries_total"),
    "lmcache_lookup_hit_rate": ("lmcache_mp_lookup_hit_tokens_total", "lmcache_mp_lookup_requested_tokens_total"),
}
TTFT = "vllm:time_to_first_token_seconds_bucket"


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """Every recorded case in one kvplan DB (a deployment per case) and one Prometheus."""
    from sql.db import Database

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
def test_ttft_quantiles_equal_histogram_quantile(loaded, case, q):
    db, prom = loaded
    compared = 0
    for t0, t1 in windows(case, "vllm"):
        w = f"{round((t1 - t0).total_seconds() * 1000)}ms"
        expr = f"histogram_quantile({q}, sum by (le) (increase({TTFT}{sel(case)}[{w}])))"
        expected = scalar(prom.url, expr, t1.timestamp())
        rows = window_increases(db, case, t0, t1)
        got = bucket_quantile(q, histogram_buckets(rows, "vllm:time_to_first_token_seconds")).value
        if expected is None or math.isnan(expected):
            assert got is None and not window_stats(rows).requests, (t0, t1)
        else:
            assert got == pytest.approx(expected, rel=1e-9), (q, t0, t1, expr)
            compared += 1
    assert compared > 0
