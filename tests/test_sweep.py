"""kvplan pilot --sweep without the stack: the per-level figures from requests (worked out by
hand), the plan's prompts and arrivals, storing and reading a pair back (migration 011, named
queries), the view and the chart, and the CLI against a real loopback HTTP server that streams
like vLLM's completions endpoint."""

from __future__ import annotations

import itertools
import json
import time
from http.server import BaseHTTPRequestHandler

import pytest
import vl_convert
from typer.testing import CliRunner

from kvplan.app import charts_cost
from kvplan.app.cli import app
from kvplan.app.data.sweeps import latest_sweep_pair
from kvplan.app.views.sweeps import sweep_view
from kvplan.collectors.loadgen import workload as wl
from kvplan.collectors.loadgen.sweep import Level, SweepPlan, SweepResult, level_point, save_sweep
from kvplan.deploy.local.recorders.sweep_check import REQUESTS_PER_LEVEL, SHAPE, TPOT_PREFILL_FACTOR, derive_tpot_slo
from kvplan.models.capacity.goodput import SweepPoint
from kvplan.models.core.errors import KvplanError
from tests.loopback import Loopback


def req(start, ttft, total, out=5, ok=True):
    return wl.RequestResult(user=0, turn=0, server="http://x", started_at=start, ttft_s=ttft if ok else None,
                            total_s=total, prompt_tokens=100, output_tokens=out if ok else None,
                            tokens_per_s=None, ok=ok, error=None if ok else "HTTP 500")


LEVEL = [req(100.0, 0.1, 0.5), req(100.5, 0.3, 0.7), req(101.0, 0.2, 1.0), req(100.2, None, 0.1, ok=False)]


def test_level_point_by_hand():
    p = level_point(4, LEVEL)
    # span: first sent 100.0, last answer 101.0 + 1.0 = 102.0 -> 2 s; 3 answered -> 1.5 req/s
    assert p.throughput_rps == pytest.approx(1.5)
    assert (p.requests, p.failed) == (4, 1)
    # TTFT [0.1, 0.2, 0.3]: p50 0.2, p99 at rank 1.98 -> 0.2 + 0.98 x 0.1
    assert p.ttft_p50_s == pytest.approx(0.2) and p.ttft_p99_s == pytest.approx(0.298)
    # TPOT = (total - ttft) / 4: 0.1, 0.1, 0.2 -> p99 0.1 + 0.98 x 0.1
    assert p.tpot_p50_s == pytest.approx(0.1) and p.tpot_p99_s == pytest.approx(0.198)


def test_one_output_token_has_no_tpot():
    p = level_point(1, [req(0.0, 0.1, 0.1, out=1)])
    assert p.tpot_p99_s is None and p.ttft_p99_s == pytest.approx(0.1)


def test_plan_sizes_levels_and_keeps_prompts_and_arrivals_the_same_on_both_sides():
    c = SweepPlan(levels=(3,), requests_per_level=10)
    assert c.requests_at(3) == 12  # rounded up to whole rounds of 3 users
    r = SweepPlan(levels=(2.5,), load_kind="rate", requests_per_level=20, level_seconds=10)
    assert r.requests_at(2.5) == 25 and r.requests_at(1.0) == 20
    a, b = r.arrivals(0, 2.5, 400), r.arrivals(0, 2.5, 400)
    assert a == b and a[0] == 0.0 and all(y > x for x, y in itertools.pairwise(a))
    # 400 arrivals at 2.5/s span 160 s: the last one comes one (scaled) gap before the end
    assert 159 < a[-1] < 160
    gaps = sorted(y - x for x, y in itertools.pairwise(a))
    assert gaps[0] < 0.05 and gaps[-1] > 1.0  # bursts and lulls, not a metronome
    ps = c.prompts(1, 3)
    system = wl.system_prompt(c.workload())
    assert all(p.startswith(system) for p in ps) and len(set(ps)) == 3
    assert ps == c.prompts(1, 3) and set(ps).isdisjoint(c.prompts(0, 3))


@pytest.mark.parametrize("kw", [{"levels": (1.5,)}, {"levels": ()}, {"levels": (2, 2)},
                                {"levels": (1,), "scenario": "multi_turn"}, {"levels": (1,), "load_kind": "qps"},
                                {"levels": (0,), "load_kind": "rate"}])
def test_bad_plans_are_user_errors(kw):
    with pytest.raises(KvplanError):
        SweepPlan(**kw)


def side(reuse, levels):
    plan = SweepPlan(levels=tuple(o for o, _ in levels), load_kind="rate")
    s = SweepResult(reuse, "http://user:secret@replica:8000", "m", plan, 1000.0, 1100.0)
    for offered, rs in levels:
        run = wl.RunResult("shared_prefix", 1000.0, 1010.0, plan.workload(), rs, "m", ["http://replica:8000"])
        s.levels.append(Level(offered, run, level_point(offered, rs)))
    return s


def even(rate, ttft, n=10):
    """n requests 1/rate apart, each answered ttft after sending and 0.04 s later in full."""
    return [req(1000.0 + i / rate, ttft, ttft + 0.04) for i in range(n)]


def test_a_stored_pair_reads_back_and_the_view_gives_goodput(db):
    off = side("off", [(2, even(2, 0.10)), (4, even(4, 0.20)), (8, even(8, 0.60))])
    on = side("on", [(2, even(2, 0.03)), (4, even(4, 0.04)), (8, even(8, 0.05))])
    ids = [save_sweep(db, "prod", s, pair="p1", measured_on="CPU stack, tiny model") for s in (off, on)]
    save_sweep(db, "prod", off, pair="p2-incomplete", measured_on="CPU stack")  # newer, but no 'on' side
    pair = latest_sweep_pair(db, "prod")
    assert pair.pair == "p1" and (pair.off.sweep_id, pair.on.sweep_id) == tuple(ids)
    assert "secret" not in pair.off.server
    assert [p.offered for p in pair.off.points] == [2, 4, 8]
    # even(2, .): 10 requests over 4.5 s + 0.14 s -> 10 / 4.64 req/s
    assert pair.off.points[0].throughput_rps == pytest.approx(10 / 4.64)
    assert latest_sweep_pair(db, "other") is None
    v = sweep_view(db, "prod", ttft_slo_s=0.3)
    x4, x8 = 10 / (9 / 4 + 0.24), 10 / (9 / 8 + 0.64)
    # off: 4 passes (0.20 s), 8 fails (0.60 s): 1/4 of the way from x4 to x8 (or x4 if x8 is lower)
    assert v.goodput.without_reuse_rps == pytest.approx(max(x4, x4 + 0.25 * (x8 - x4)))
    assert v.on.limited_by == "not reached" and v.goodput.with_reuse_rps == pytest.approx(10 / (9 / 8 + 0.09))
    assert [r["passes"] for r in v.rows] == [True, True, False, True, True, True]
    assert v.cpu_scale and v.load_kind == "rate"
    chart = charts_cost.sweep_curves_chart(v.rows, v.ttft_slo_s, v.goodput_rows, v.load_kind)
    spec = chart.to_dict()
    rows = [r for d in spec["datasets"].values() for r in d]
    assert {r.get("side") for r in rows} >= {"without reuse", "with reuse"}
    assert any(r.get("slo") == 0.3 for r in rows)
    assert vl_convert.vegalite_to_svg(spec).startswith("<svg")


def test_the_view_without_sweeps_is_empty(db):
    v = sweep_view(db, "prod", ttft_slo_s=0.5)
    assert v.empty and v.rows == [] and v.goodput is None
    assert vl_convert.vegalite_to_svg(charts_cost.sweep_curves_chart([], 0.5).to_dict()).startswith("<svg")


class _Completions(BaseHTTPRequestHandler):
    """Streams 4 tokens like vLLM's /v1/completions; the first after ``delay`` s."""

    delay = 0.02

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        time.sleep(self.delay)
        for i in range(body["max_tokens"]):
            self.wfile.write(f'data: {json.dumps({"choices": [{"text": f"t{i}"}]})}\n\n'.encode())
            self.wfile.flush()
            time.sleep(0.005)
        usage = {"prompt_tokens": 50, "completion_tokens": body["max_tokens"]}
        self.wfile.write(f'data: {json.dumps({"choices": [], "usage": usage})}\n\ndata: [DONE]\n\n'.encode())


class _Slow(_Completions):
    delay = 0.15


def test_pilot_sweep_stores_both_sides_and_prints_goodput(tmp_path):
    off, on = Loopback(_Slow), Loopback(_Completions)
    try:
        db = str(tmp_path / "k.duckdb")
        r = CliRunner().invoke(app, ["pilot", "--sweep", "--deployment", "d", "--model", "m",
                                     "--off-url", off.url, "--on-url", on.url, "--levels", "1,2",
                                     "--requests-per-level", "4", "--output-tokens", "4", "--prefix-chars", "300",
                                     "--ttft-slo", "0.1", "--measured-on", "loopback test server", "--db", db])
    finally:
        off.close()
        on.close()
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["load_kind"] == "concurrency" and d["ttft_slo_s"] == 0.1
    assert [(x["reuse"], x["offered"], x["requests"], x["failed"]) for x in d["levels"]] == [
        ("off", 1, 4, 0), ("off", 2, 4, 0), ("on", 1, 4, 0), ("on", 2, 4, 0)]
    # every cache-off request waits 0.15 s for its first token: no level meets a 0.1 s SLO
    assert d["goodput"]["without_reuse_rps"] == 0 and d["goodput"]["limited_by"]["off"] == "lowest level fails"
    assert d["goodput"]["with_reuse_rps"] > 0
    from kvplan.sql.db import Database
    pair = latest_sweep_pair(Database(db), "d")
    assert pair is not None and pair.on.measured_on == "loopback test server"
    assert all(p.ttft_p50_s >= 0.15 for p in pair.off.points)


def test_pilot_sweep_needs_both_urls_and_one_kind_of_level(tmp_path):
    db = str(tmp_path / "k.duckdb")
    base = ["pilot", "--sweep", "--deployment", "d", "--model", "m", "--db", db]
    r = CliRunner().invoke(app, base + ["--levels", "1"])
    assert r.exit_code == 2 and "--off-url" in r.output
    r = CliRunner().invoke(app, base + ["--off-url", "http://a", "--on-url", "http://b", "--levels", "1",
                                        "--rates", "2"])
    assert r.exit_code == 2 and "either --levels" in r.output
    r = CliRunner().invoke(app, base + ["--off-url", "http://a", "--on-url", "http://b", "--levels", "1,x"])
    assert r.exit_code == 2 and "comma-separated" in r.output
    r = CliRunner().invoke(app, ["pilot", "--deployment", "d", "--model", "m", "--db", db])
    assert r.exit_code == 2 and "--server" in r.output



def _side(reuse, points):
    run = wl.RunResult(SHAPE.scenario, 0.0, 0.0, SHAPE.workload())
    return SweepResult(reuse, "http://x", "m", SHAPE, 0.0, levels=[Level(p.offered, run, p) for p in points])


def _point(offered, ttft_p50, tpot_p99):
    return SweepPoint(offered, offered, ttft_p50, 2 * ttft_p50, tpot_p99, requests=12)


def test_a_decode_shares_fewer_prefills_a_step_than_the_tpot_slo_leaves():
    # a request's decode steps share at most the other prefills of its level: its TPOT stays under
    # that many prefills a step, so the SLO must leave more
    assert (REQUESTS_PER_LEVEL - 1) / (SHAPE.output_tokens - 1) < TPOT_PREFILL_FACTOR


@pytest.mark.parametrize("off_low, on_low_tpot, slo", [
    ((0.25, 0.005), 0.01, 0.5),   # two unloaded prefills: 2 x 0.25 s
    ((0.25, 0.005), 0.2, 0.8),    # a slow decode: 4 x 0.2 s
    ((0.05, 0.005), 0.01, 0.25),  # both under the floor
])
def test_the_load_sweeps_tpot_slo_leaves_room_for_the_prefills_a_decode_shares(off_low, on_low_tpot, slo):
    # the lowest level counts; a higher one (faster here) does not
    off = _side("off", [_point(2.0, 0.01, 0.001), _point(0.5, *off_low)])
    on = _side("on", [_point(0.5, 0.01, on_low_tpot), _point(2.0, 0.01, 0.001)])
    assert derive_tpot_slo(off, on) == pytest.approx(slo)
