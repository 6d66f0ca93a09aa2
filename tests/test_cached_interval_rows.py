"""The cached-tokens rule over per-interval rows (``spellings.cached_of_interval_rows``), read on
plain (name, labels, increase) rows, against the straightforward reading it replaced: every row
made an ``Increase``, each (target, interval end) group resolved and ruled by ``stretch_parts``.
Hand-made rows cover each branch of the rule; the figures are also worked out by hand."""

from __future__ import annotations

import json
import random

import pytest

from kvplan.models.metrics.increase import Increase
from kvplan.models.metrics.spellings import cached_of_interval_rows, stretch_parts

PROMPT = "vllm:prompt_tokens_total"
CACHED = "vllm:prompt_tokens_cached_total"
BY_SOURCE = "vllm:prompt_tokens_by_source_total"
HITS = "vllm:prefix_cache_hits_total"
GPU_HITS = "vllm:gpu_prefix_cache_hits_total"
EXT = "vllm:external_prefix_cache_hits_total"
LM_HIT = "lmcache:num_hit_tokens_total"


def reference(rows: list[dict]) -> tuple[float, str, bool, bool]:
    """The loop cached_of_interval_rows ran before (kept as the reference)."""
    groups: dict[tuple, list] = {}
    for r in rows:
        r = dict(r)
        key = (r.pop("target"), r.pop("t_end"))
        groups.setdefault(key, []).append(Increase(**r, target=key[0]))
    return stretch_parts(groups.values())


def row(target: str, t_end: int, name: str, increase: float, labels: dict | None = None, **kw) -> dict:
    fam = name.removesuffix("_total")
    return dict(target=target, t_end=t_end, name=name, family=fam, model_name=kw.get("model_name", "m"),
                engine=kw.get("engine", "0"), le=None, labels=json.dumps(labels or {}, sort_keys=True),
                increase=increase)


def src(s: str) -> dict:
    return {"source": s}


CASES = {
    # 0.32: the counter; by_source and hits are there too and not used
    "counter": ([row("a", 1, PROMPT, 100.0), row("a", 1, CACHED, 40.0), row("a", 1, HITS, 99.0),
                 row("a", 1, BY_SOURCE, 7.0, src("local_cache_hit"))], 40.0),
    # by source: local + external, the rest (local_compute) left out
    "by_source": ([row("a", 1, PROMPT, 100.0), row("a", 1, BY_SOURCE, 30.5, src("local_cache_hit")),
                   row("a", 1, BY_SOURCE, 12.25, src("external_kv_transfer")),
                   row("a", 1, BY_SOURCE, 57.25, src("local_compute"))], 42.75),
    # 0.11-0.15: hits + external hits; an upgrade at t_end 2 to the counter (never the counter alone)
    "upgrade": ([row("a", 1, PROMPT, 50.0), row("a", 1, HITS, 10.0), row("a", 1, EXT, 5.0),
                 row("a", 2, PROMPT, 50.0), row("a", 2, CACHED, 20.0), row("a", 2, HITS, 3.0)], 35.0),
    # 0.9-0.10: the old spelling (gpu_prefix_cache_hits) renamed; both spellings: the new one only
    "spellings": ([row("a", 1, PROMPT, 80.0), row("a", 1, GPU_HITS, 9.0),
                   row("b", 1, PROMPT, 80.0), row("b", 1, GPU_HITS, 1000.0), row("b", 1, HITS, 11.0),
                   row("b", 1, EXT, 2.0)], 9.0 + 13.0),
    # LMCache in-process, two TP ranks: the largest rank's loaded tokens, added to device hits
    "lmcache ranks": ([row("a", 1, PROMPT, 100.0), row("a", 1, GPU_HITS, 10.0),
                       row("a", 1, LM_HIT, 30.0, {"worker_id": "0"}), row("a", 1, LM_HIT, 31.0, {"worker_id": "1"})],
                      41.0),
    # an interval with prompt tokens and no way to tell its cached ones: unknown
    "unknown": ([row("a", 1, PROMPT, 100.0), row("a", 1, CACHED, 40.0), row("b", 1, PROMPT, 5.0)], None),
    # an LMCache server's interval (no prompt tokens) is not an engine; no rule anywhere: not found
    "no rule": ([row("lm", 1, "lmcache_mp:requested_tokens_total", 9.0)], None),
}


@pytest.mark.parametrize("case", CASES)
def test_hand_made_intervals_give_the_reference_and_the_hand_figure(case):
    rows, by_hand = CASES[case]
    got = cached_of_interval_rows(rows, Increase)
    assert got == reference(rows)
    total, _how, found, unknown = got
    assert (total if found and not unknown else None) == by_hand


def test_shuffled_mixed_intervals_give_the_reference_to_the_bit():
    """Non-integer increases (sums depend on their order) over many targets and intervals,
    rows in a random order: the same total, bit for bit, and the same description."""
    rng = random.Random(7)
    kinds = [[PROMPT, CACHED, HITS], [PROMPT, BY_SOURCE, HITS, EXT], [PROMPT, GPU_HITS], [PROMPT, HITS, EXT],
             [PROMPT, GPU_HITS, LM_HIT]]
    rows = []
    for t in range(6):
        for end in range(40):
            for name in kinds[(t + end // 13) % len(kinds)]:
                for lab in ([src("local_cache_hit"), src("external_kv_transfer"), src("local_compute")]
                            if name == BY_SOURCE else [{"worker_id": "0"}, {"worker_id": "1"}] if name == LM_HIT
                            else [{}]):
                    rows.append(row(f"t{t}", end, name, rng.uniform(0, 1e6), lab, engine=str(rng.randrange(2))))
    rng.shuffle(rows)
    got = cached_of_interval_rows(rows, Increase)
    assert got == reference(rows)
    assert got[2] and not got[3] and got[0] > 0
    assert set(got[1].split("; ")) >= {"vllm:prompt_tokens_cached", "prefix-cache hits + external prefix-cache hits"}
