"""``window_stats`` sums each name's increases from one pass over the rows (a name -> increases
index) instead of one scan per figure: every total it reports is ``total(rows, name)``, bit for
bit, on hand-made rows whose non-integer increases make a sum depend on its order."""

from __future__ import annotations

import random

from kvplan.models.metrics import catalog as c
from kvplan.models.metrics.increase import Increase
from kvplan.models.metrics.window import histogram_buckets, total, window_stats


def test_window_stats_totals_are_the_per_name_sums_in_row_order():
    rng = random.Random(3)
    names = [c.total_name(c.PREFIX_HITS), c.total_name(c.PREFIX_QUERIES), c.total_name(c.PROMPT_TOKENS),
             c.total_name(c.GENERATION_TOKENS), c.count_name(c.TTFT), c.sum_name(c.PREFILL_TIME),
             c.count_name(c.PREFILL_TIME)]
    rows = [Increase(name=rng.choice(names), increase=rng.uniform(0, 1e7), engine=str(e), resets=rng.randrange(2))
            for e in range(300)]
    # hits below queries: the rate is reported
    rows.append(Increase(name=names[1], increase=1e12))
    rng.shuffle(rows)
    st = window_stats(rows)
    assert st.prefix_cache_hits == total(rows, names[0])
    assert st.prefix_cache_queries == total(rows, names[1])
    assert st.prompt_tokens == total(rows, names[2])
    assert st.generation_tokens == total(rows, names[3])
    assert st.requests == total(rows, names[4])
    assert st.prefill_seconds_sum == total(rows, names[5])
    assert st.prefill_requests == total(rows, names[6])
    assert st.prefix_cache_hit_rate == total(rows, names[0]) / total(rows, names[1])
    assert st.counter_resets == sum(r.resets for r in rows) > 0
    assert st.external_prefix_cache_hits is None and st.estimated_flops is None  # absent names: None, not 0


def test_histogram_buckets_keep_the_bucket_rows_in_order():
    b = c.bucket_name(c.TTFT)
    rows = [Increase(name=b, increase=3.0, le=0.5), Increase(name=c.count_name(c.TTFT), increase=9.0),
            Increase(name=b, increase=9.0, le=float("inf")), Increase(name=b, increase=1.0, le=None)]
    assert histogram_buckets(rows, c.TTFT) == [(0.5, 3.0), (float("inf"), 9.0)]
