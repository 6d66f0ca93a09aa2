"""The topology what-if against the recorded two-rank A/B (tests/fixtures/topology-ab, recorded
on the CPU stack by deploy/local/recorders/record_topology_ab.py): two vLLM servers with vLLM's
prefix cache off, LMCache the only tier; ``private`` = one LMCache per server (two lookup logs),
``shared`` = one LMCache for both; the same 78 requests, round-robin, a sequential phase and a
phase of bursts of 4 concurrent multi-turn clients. TTFTs are CPU-scale.

From each side's data alone (its scrapes and logs) the other side is predicted and compared with
what the other side measured (models/README.md, "Validation", states the tolerance):

* hit rate within 2 points, both phases;
* sequential phase: TTFT mean within 15 %, p99 within 25 % (the predicted TTFTs read through the
  measured histogram's buckets, as the measured p99 is);
* bursts: vLLM's scheduler sends a request's LMCache lookup only once the engine finished the
  step it was running, so a lookup time is after the wait behind another request's prefill; the
  replay takes that wait back (``latency.queued_arrival``: from the lookup times alone it was low
  by 53 % and 52 % on the mean). It is still low here (recorded: mean -43 % and -38 %): the two
  engines' prefills, unpinned on two cores, ran up to twice the quiet fit; calibrated on today,
  mean within 15 % and p99 within 25 %, both ways (the second recording, engines pinned, holds
  them raw too).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from tests.topology_ab import FIX, FIX_SMALL, SIDES, cross, load_side, meta, segment_ratios, side_topology

HIT_POINTS = 0.02
MEAN_REL = 0.15
P99_REL = 0.25
PHASES = ("sequential", "concurrent")


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("phase", PHASES)
def test_todays_replay_gives_the_hit_rate_lmcache_counted(topology_ab, side, phase):
    """The private side's two logs import as one deployment; replaying each instance's requests
    through its own L1 (size from LMCache's gauges) gives what LMCache's counters measured over
    the same phase (recorded: 0.546 private, 0.666 shared one request at a time; 0.829 and 0.894
    in bursts)."""
    dbs, metas = topology_ab
    t = side_topology(dbs[side], metas[side], phase).today
    assert t.instances == len(metas[side]["topology"]["instances"])
    assert t.engines == 2 and t.capacity_source.startswith("LMCache's L1 gauges")
    # LMCache logs no line for a prompt shorter than one chunk (no chunk hash): request 5 of the
    # schedule (243 tokens < 256) is counted by vLLM's TTFT histogram, not in the trace
    assert t.requests_measured - t.requests == (1 if phase == "sequential" else 0)
    # in bursts a lookup misses chunks another engine's prefill has not stored yet: the TTFT pass
    # says when each prefill ended (recorded: exact; every chunk stored at once would give 0.904
    # against 0.894 on the shared pool)
    tol = 1e-9 if phase == "sequential" else 0.005
    assert abs(t.hit_rate_predicted - t.hit_rate_measured) <= tol, t
    assert t.hit_rate_measured == pytest.approx(metas[side]["phases"][phase]["lmcache_hit_rate"])


@pytest.mark.parametrize("src", SIDES)
@pytest.mark.parametrize("phase", PHASES)
def test_each_side_predicts_the_other_sides_hit_rate(topology_ab, src, phase):
    dbs, metas = topology_ab
    c = cross(dbs, metas, src, phase)
    assert abs(c["hit_pred"] - c["hit_meas"]) <= HIT_POINTS, c
    # and the shared pool hit more: the article's point, measured (0.666 vs 0.546 one request at
    # a time, 0.894 vs 0.829 in bursts), which the prediction carries across
    rate = {s: metas[s]["phases"][phase]["lmcache_hit_rate"] for s in SIDES}
    assert rate["shared"] > rate["private"] + 0.05
    assert (c["hit_pred"] > c["today"].hit_rate_predicted) == (src == "private")


@pytest.mark.parametrize("src", SIDES)
def test_each_side_predicts_the_other_sides_ttft_one_request_at_a_time(topology_ab, src):
    """Calibrated on today (models/cache/calibration.py). Recorded: private -> shared mean 0.101
    vs 0.103 s (-1 %; raw -14 %), p99 0.452 vs 0.452 s (0 %); shared -> private 0.116 vs 0.118 s
    (-1 %; raw -25 %), p99 0.457 vs 0.452 s (+1 %)."""
    c = cross(*topology_ab, src, "sequential")
    assert abs(c["mean_pred"] / c["mean_meas"] - 1) <= MEAN_REL, c
    assert abs(c["p99_pred"] / c["p99_meas"] - 1) <= P99_REL, c


@pytest.mark.parametrize("src", SIDES)
def test_bursts_p99_calibrated_on_today_holds_the_target(topology_ab, src):
    """In bursts the replay is low (raw: mean -43 % private -> shared, -38 % shared -> private;
    p99 -48 % and -49 %; from the lookup times alone -53 %, -52 %, -49 %, -50 %), and today's own
    check shows it as much: today's measured / predicted carried into the other side brings the
    p99 within 25 % (recorded: +2 % and -2 %; from the lookup times alone +1 % and +2 %)."""
    c = cross(*topology_ab, src, "concurrent")
    t = c["today"]
    assert c["mean_raw"] < c["mean_meas"] and t.ttft_mean_s_predicted < t.ttft_mean_s_measured
    assert 0.3 <= 1 - c["mean_raw"] / c["mean_meas"] <= 0.65, c
    assert 0.3 <= 1 - c["p99_raw"] / c["p99_meas"] <= 0.65, c
    assert abs(c["p99_pred"] / c["p99_meas"] - 1) <= P99_REL, c
    # the calibrated value is the raw one times today's ratio, read from today's own check
    k = t.ttft_calibration
    assert k is not None and k.mean.ratio is not None
    assert c["mean_pred"] == pytest.approx(c["mean_raw"] * k.mean.ratio)
    assert k.mean.ratio == pytest.approx(t.ttft_mean_s_measured / t.ttft_mean_s_predicted, rel=1e-6)


@pytest.mark.parametrize("src", SIDES)
def test_bursts_mean_calibrated_on_today_holds_the_target(topology_ab, src):
    """Re-recorded 2026-12-02 after the lead's timing run (load average 5-9, other work niced; the
    first recording, under ~8 other jobs, missed by -21 % / +33 %: bench/results/topology.md). The
    same requests measured alike on both sides, segment by segment (shared / private 0.74-1.06,
    against 0.63-1.83 before), and the calibrated bursts mean holds 15 % both ways (recorded:
    private -> shared 0.142 vs 0.149 s, -5 %, raw -43 %; shared -> private 0.167 vs 0.162 s, +3 %,
    raw -38 %)."""
    c = cross(*topology_ab, src, "concurrent")
    assert abs(c["mean_pred"] / c["mean_meas"] - 1) <= MEAN_REL, c
    assert c["mean_raw"] / c["mean_meas"] - 1 < -MEAN_REL, c  # the replay alone misses it
    r = segment_ratios(FIX, "concurrent")
    assert 0.7 <= min(r) and max(r) <= 1.1, r


def test_whatif_json_keys(topology_ab, tmp_path):
    """``kvplan whatif --json``: today{...} and latency[...] with the keys the issue lists; the
    old keys stay."""
    import shutil

    dbs, metas = topology_ab
    db = tmp_path / "private.duckdb"
    shutil.copy(dbs["private"].path, db)
    sp = metas["private"]["phases"]["sequential"]
    from kvplan.models.core.timeutil import from_epoch_s

    r = CliRunner().invoke(app, ["whatif", "--db", str(db), "--deployment", "ab-private", "--ranks", "2", "--json",
                                 "--from", from_epoch_s(sp["start"] - 1.2).isoformat(),
                                 "--to", from_epoch_s(sp["end"] + 3).isoformat()])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert {"today", "latency", "points", "shared_vs_private", "dollars", "trace", "configured"} <= set(d)
    assert {"instances", "hit_rate_predicted", "hit_rate_measured", "ttft_mean_s_measured", "ttft_p99_s_measured",
            "ttft_mean_s_predicted", "ttft_p99_s_predicted"} <= set(d["today"])
    assert d["today"]["instances"] == 2 and d["today"]["requests"] == sp["requests"] - 1  # request 5: no chunk
    kinds = [(r["topology"], r["routing"]) for r in d["latency"]]
    assert kinds == [("today", None), ("shared", None), ("private", "round_robin"), ("private", "random"),
                     ("private", "prefix_affinity")]
    t = d["today"]
    k = t["ttft_calibration"]
    assert k["calibrated"] and {"mean", "p50", "p99", "method", "interval"} <= set(k)
    for row in d["latency"] + d["latency_curve"]:
        assert {"topology", "routing", "capacity_gb", "hit_rate", "ttft_mean_s", "ttft_p50_s", "ttft_p99_s",
                "goodput_rps", "ttft_mean_s_raw", "ttft_p50_s_raw", "ttft_p99_s_raw", "ttft_mean_s_interval",
                "ttft_p99_s_interval", "calibrated"} <= set(row)
        assert row["ttft_p50_s_raw"] <= row["ttft_p99_s_raw"] and 0 <= row["hit_rate"] <= 1
        for stat in ("mean", "p50", "p99"):  # calibrated = raw x today's ratio, inside its interval
            raw, cal, iv = row[f"ttft_{stat}_s_raw"], row[f"ttft_{stat}_s"], row[f"ttft_{stat}_s_interval"]
            assert cal == pytest.approx(raw * k[stat]["ratio"])
            if stat == "mean":
                assert iv[0] <= cal <= iv[1]
        assert row["holds_slo"] == (row["ttft_p99_s"] <= d["slo"]["ttft_p99_s"])
    # today's own row, calibrated, gives back today's measured mean (measured / predicted x predicted)
    today = d["latency"][0]
    assert today["ttft_mean_s_raw"] == pytest.approx(t["ttft_mean_s_predicted"])
    assert today["ttft_mean_s"] == pytest.approx(t["ttft_mean_s_measured"], rel=1e-6)
    # the same capacity everywhere: today's two L1s of 0.05 GiB = 102 whole chunks of 512 KiB each
    # (0.05 x 2^30 / 2^19 = 102.4), 2 x 102 x 524,288 bytes = 0.106954752 GB
    assert {round(r["capacity_gb"], 9) for r in d["latency"]} == {0.106954752}
    # a window with nothing in it is an error naming the options, exit 2
    r = CliRunner().invoke(app, ["whatif", "--db", str(db), "--deployment", "ab-private", "--from",
                                 "2020-01-01T00:00:00Z", "--to", "2020-01-02T00:00:00Z"])
    assert r.exit_code == 2 and "--from/--to" in r.output
    r = CliRunner().invoke(app, ["whatif", "--db", str(db), "--deployment", "ab-private", "--from",
                                 "2020-01-01T00:00:00Z"])
    assert r.exit_code == 2 and "both --from and --to" in r.output


def test_whatif_page_shows_today_against_the_shared_pool_and_ttft(topology_ab, tmp_path, monkeypatch):
    """The What-if page on the private side: today's topology (2 instances, 2 engines, the
    replayed and the measured hit rate), today against the shared pool, TTFT against capacity
    with the SLO line."""
    import shutil
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    dbs, _ = topology_ab
    db = tmp_path / "private.duckdb"
    shutil.copy(dbs["private"].path, db)
    monkeypatch.setenv("KVPLAN_DB", str(db))
    t = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app" / "streamlit_app.py"), default_timeout=300)
    t.switch_page("pages/whatif.py")
    t.run()
    assert not t.exception, t.exception
    m = {x.label: x.value for x in t.metric}
    assert m["Cache instances"] == "2" and m["Engines"] == "2"
    assert m["Hit rate, replayed"] == "70.3%" and m["Hit rate, LMCache measured"] == "70.5%"  # whole trace
    titles = [json.loads(c.proto.spec).get("title") for c in t.get("vega_lite_chart")]
    titles = [x.get("text") if isinstance(x, dict) else x for x in titles]
    assert any(x and x.startswith("TTFT p99 against cache capacity") for x in titles)
    assert any(x and x.startswith("TTFT: today (measured, predicted) against one shared pool") for x in titles)
    slo = next(json.loads(c.proto.spec) for c in t.get("vega_lite_chart")
               if str(json.loads(c.proto.spec).get("title", "")).startswith("TTFT p99 against"))
    assert '"type": "rule"' in json.dumps(slo) and "#c0392b" in json.dumps(slo)  # the SLO line
    frames = [f.value for f in t.dataframe]
    setups = next(f for f in frames if "holds the SLO" in f.columns)["set-up"].tolist()
    assert setups[:2] == ["today's topology", "one shared pool"]
    # the sidebar's time range: the last 15 minutes hold the whole recording too (about 90 s)
    t.selectbox(key="range").set_value("last 15 minutes").run()
    assert not t.exception


def test_report_section_has_today_and_ttft(topology_ab):
    from kvplan.app.report.whatif import render_section
    from kvplan.app.views.whatif import WhatIfQuery, whatif

    dbs, _ = topology_ab
    with dbs["shared"].snapshot() as src:
        html = render_section(whatif(src, "ab-shared", WhatIfQuery(ranks=2)))
    assert "Today&#x27;s topology, from the data: 1 cache instance(s), 2 engine(s)" in html or \
        "Today's topology, from the data: 1 cache instance(s), 2 engine(s)" in html
    assert "TTFT for each set-up" in html and "2 private caches, round robin" in html
    assert html.count("<svg") >= 4


# ---- the second recording: 3 concurrent clients, each engine pinned to its own core ----------------
@pytest.mark.parametrize("src", SIDES)
@pytest.mark.parametrize("phase", PHASES)
def test_second_recording_calibrated_ttft_holds_the_target_both_ways(topology_ab_3c, src, phase):
    """tests/fixtures/topology-ab-3c (recorded 2026-12-01 on this 2-core machine under a load
    average of 20-27, tiny random Llama; 38 requests one at a time, then 10 bursts of 3 concurrent
    clients). Recorded, calibrated (raw): one at a time, private -> shared mean -2 % (-8 %), p99 0 %;
    shared -> private +6 % (-1 %), p99 0 %; bursts, private -> shared -7 % (-12 %), p99 -8 % (0 %);
    shared -> private +3 % (-11 %), p99 0 % (0 %)."""
    c = cross(*topology_ab_3c, src, phase)
    assert abs(c["hit_pred"] - c["hit_meas"]) <= HIT_POINTS, c
    assert abs(c["mean_pred"] / c["mean_meas"] - 1) <= MEAN_REL, c
    assert abs(c["p99_pred"] / c["p99_meas"] - 1) <= P99_REL, c
    if phase == "concurrent":  # the replay alone, from the arrivals before the burst's queue
        # (latency.queued_arrival), is within the target too: recorded raw mean -12 % and -11 %, p99
        # 0 % both ways (from the lookup times alone: mean -27 % and -25 %, p99 -42 % both ways)
        assert abs(c["mean_raw"] / c["mean_meas"] - 1) <= MEAN_REL, c
        assert abs(c["p99_raw"] / c["p99_meas"] - 1) <= P99_REL, c


def test_second_recording_says_what_it_was_measured_on(topology_ab_3c):
    _, metas = topology_ab_3c
    for m in metas.values():
        assert m["clients"] == 3 and m["cores"] == 2 and "tiny random Llama" in m["measured_on"]
        assert m["pinning"].startswith("pinned: engine 0 -> core 0") and "engine 1 -> core 1" in m["pinning"]
        assert all(len(p["machine_load_1min"]) == 2 for p in m["phases"].values())


# ---- the third recording: the live test's size (--small: 40 requests in bursts of 4) -------------
@pytest.fixture(scope="module")
def topology_ab_small(tmp_path_factory):
    d = tmp_path_factory.mktemp("topology-ab-small")
    return {s: load_side(d / f"{s}.duckdb", FIX_SMALL / s) for s in SIDES}, {s: meta(FIX_SMALL / s) for s in SIDES}


@pytest.mark.parametrize("src", SIDES)
def test_the_live_size_bursts_p99_holds_both_ways_with_the_queue_before_the_lookups(topology_ab_small, src):
    """tests/fixtures/topology-ab-small (``record_topology_ab.py --small --seed 23``, 2026-12-05,
    load average 11-16 from other sessions). From the lookup times alone, today's replay put the
    shared side's bursts p99 at 0.25 s against 0.49 s measured while its own replay of the private
    side gave 0.45 s: today's ratio (x1.8) carried the shared side's missing queue into a private
    side that had it, and shared -> private missed by +68 % (0.818 against 0.486 s; the issue's
    live run: 0.39 against 0.644 s the other way). With the wait before each queued lookup taken
    back (``latency.queued_arrival``), recorded: private -> shared 0.452 against 0.450 s (0 %, raw
    0 %), shared -> private 0.483 against 0.486 s (-1 %, raw -1 %)."""
    c = cross(*topology_ab_small, src, "concurrent")
    assert abs(c["p99_pred"] / c["p99_meas"] - 1) <= P99_REL, c
    assert abs(c["p99_raw"] / c["p99_meas"] - 1) <= P99_REL, c  # the replay alone has the queue
    assert abs(c["hit_pred"] - c["hit_meas"]) <= HIT_POINTS, c
    assert abs(c["mean_pred"] / c["mean_meas"] - 1) <= MEAN_REL, c
