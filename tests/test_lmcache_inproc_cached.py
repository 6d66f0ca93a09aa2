"""Issue 27, part 3.3: LMCache in-process next to a vLLM without the external-hit families
(vLLM 0.11-style: ``vllm:prefix_cache_*`` only, no ``external_prefix_cache_*``, no
``prompt_tokens_cached`` / ``_by_source``). The tokens LMCache loaded are cached tokens too:
cached = device hits + ``lmcache:num_hit_tokens``.

The payloads are built by hand (tests/payloads.py's rule: expected values worked out by hand).
Over the hour: 10 requests of 1,000 prompt tokens (10,000); vLLM's device cache hit 3,000 of
them; LMCache loaded 3,000 more, counted by each of its two TP workers (``worker_id`` 0 and 1:
once, not twice). So cached = 3,000 + 3,000 = 6,000 and the plan's hit rate 6,000 / 10,000 =
0.60 (before: 3,000 and 0.30)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.data.prefill import plan_measurement
from kvplan.app.data.window import stats
from kvplan.collectors.scrape.scrape import import_file
from kvplan.models.metrics.spellings import cached_rule
from tests.engines import T0, T1

CREATED = 1_700_000_000.0


def _payload(requests: int, prompt: int, hits: int, lm_hits: int, prefill_s: float) -> str:
    lab = 'engine="0",model_name="m"'
    out = []

    def counter(name: str, value: float, labels: str = lab) -> None:
        out.extend([f"# TYPE {name} counter", f"{name}_total{{{labels}}} {float(value)}",
                    f"{name}_created{{{labels}}} {CREATED}"])

    def hist(name: str, count: float, total: float) -> None:
        out.append(f"# TYPE {name} histogram")
        for le in ("1.0", "+Inf") if name.endswith("seconds") else ("2048.0", "+Inf"):
            out.append(f'{name}_bucket{{{lab},le="{le}"}} {float(count)}')
        out.extend([f"{name}_count{{{lab}}} {float(count)}", f"{name}_sum{{{lab}}} {float(total)}",
                    f"{name}_created{{{lab}}} {CREATED}"])

    counter("vllm:prefix_cache_queries", prompt)
    counter("vllm:prefix_cache_hits", hits)
    counter("vllm:prompt_tokens", prompt)
    counter("vllm:generation_tokens", requests * 10)
    hist("vllm:request_prompt_tokens", requests, prompt)
    hist("vllm:request_prefill_time_seconds", requests, prefill_s)
    hist("vllm:time_to_first_token_seconds", requests, prefill_s)
    for w in ("0", "1"):  # two TP workers count the same tokens
        wl = f'model_name="m",role="worker",served_model_name="m",worker_id="{w}"'
        counter("lmcache:num_requested_tokens", lm_hits, wl)
        counter("lmcache:num_hit_tokens", lm_hits, wl)
    return "\n".join(out) + "\n"


@pytest.fixture
def inproc(db, tmp_path):
    before = tmp_path / "before.prom"
    after = tmp_path / "after.prom"
    before.write_text(_payload(5, 5000, 1000, 500, 5.0))
    after.write_text(_payload(15, 15000, 4000, 3500, 15.0))  # + 10 requests, 10,000, 3,000, 3,000
    import_file(db, "inproc", before, T0, target="v")
    import_file(db, "inproc", after, T1, target="v")
    return db, before, after


def test_the_rule_adds_what_lmcache_loaded_when_vllm_has_no_external_counters():
    assert cached_rule(None, None, 3000.0, None, 3000.0)[0] == 6000.0
    assert cached_rule(None, None, 3000.0, None)[0] == 3000.0  # no LMCache: device hits only
    # vLLM's external counters already carry LMCache's hits: never added twice
    assert cached_rule(None, None, 3000.0, 3000.0, 3000.0)[0] == 6000.0
    assert cached_rule(7000.0, None, 3000.0, None, 3000.0)[0] == 7000.0  # prompt_tokens_cached wins


def test_stats_and_plan_count_the_tokens_lmcache_loaded(inproc):
    db, _, _ = inproc
    s = stats(db, "inproc", T0, T1)
    assert s.prompt_tokens == 10000
    assert s.cached_prompt_tokens == 6000  # was 3,000
    assert s.prefix_cache_hit_rate == pytest.approx(0.3)  # vLLM's device cache alone
    m = plan_measurement(db, "inproc", T0, T1)
    assert m.prompt_tokens == 10000 and m.cached_prompt_tokens == 6000
    assert m.hit_rate == pytest.approx(0.6)  # was 0.30
    assert m.priced_tier == "lmcache"  # LMCache's 3,000 are its tier, beyond vLLM's own
    assert m.baseline_cached_prompt_tokens == 3000


def test_the_cli_says_the_same(inproc, tmp_path):
    db, _, _ = inproc
    window = ["--deployment", "inproc", "--from", T0.isoformat(), "--to", T1.isoformat(), "--json",
              "--db", str(db.path)]
    runner = CliRunner()
    st = json.loads(runner.invoke(app, ["stats", *window]).stdout)
    assert st["cached_prompt_tokens"] == 6000
    r = runner.invoke(app, ["plan", *window])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["hit_rate"] == pytest.approx(0.6)
