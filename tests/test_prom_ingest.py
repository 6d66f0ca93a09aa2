"""Prometheus ingestion against a REAL Prometheus (Debian's 2.42) loaded with history via
``promtool tsdb create-blocks-from openmetrics``.

The history: three targets scraped every 30 s for 40 minutes (two vLLM servers, one with a
restart of one engine, one silent for 7 minutes; one LMCache MP server), built as text
exposition so the direct import reads exactly what Prometheus holds. The key check: after
ingesting from Prometheus, ``kvplan.app.data.window.stats`` over step-aligned windows equals (a) the
stats of the direct import of the same payloads and (b) PromQL on the same Prometheus.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.data.window import stats
from kvplan.collectors.prometheus.ingest import PromClient, PromError, chunk_bounds, family_query, ingest_range
from kvplan.collectors.prometheus.step_math import silent_stretches, step_gauges, step_increments
from kvplan.collectors.scrape.openmetrics import to_openmetrics
from kvplan.collectors.scrape.parse import parse_payload
from kvplan.collectors.scrape.payload import Payload
from kvplan.collectors.scrape.store import payload_sha256, store_payload
from kvplan.models.core.errors import KvplanError
from kvplan.models.inputs.settings import DeploymentConfig, PrometheusConfig
from kvplan.sql.db import Database
from tests.loopback import Loopback
from tests.prom_fixtures import create_blocks, free_port, scalar, start_prometheus

# -- the history ---------------------------------------------------------------------------

T0 = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
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


def vllm_payload(k: int, model_name: str, engines: tuple[int, ...], restarted: bool = False) -> str:
    created_old = T0.timestamp() - 3600
    created_new = at(RESTART_K - 0.5).timestamp()
    rows = {}
    for e in engines:
        restart = restarted and e == 1 and k >= RESTART_K
        rows[e] = (_engine(k, e, RESTART_K - 1 if restart else None), created_new if restart else created_old)
    out = []

    def lab(e, extra=""):
        return f'{{engine="{e}",model_name="{model_name}"{extra}}}'

    for fam, key in (("vllm:prefix_cache_hits", "hits"), ("vllm:prefix_cache_queries", "queries"),
                     ("vllm:generation_tokens", "gen")):
        out.append(f"# TYPE {fam}_total counter")
        out += [f"{fam}_total{lab(e)} {float(v[key])}" for e, (v, _) in rows.items()]
        out.append(f"# TYPE {fam}_created gauge")
        out += [f"{fam}_created{lab(e)} {c}" for e, (_, c) in rows.items()]
    fam = "vllm:time_to_first_token_seconds"
    out.append(f"# TYPE {fam} histogram")
    for e, (v, _) in rows.items():
        for le, key in zip(BOUNDS, ("b0", "b1", "binf"), strict=True):
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


# -- fixtures ------------------------------------------------------------------------------
DEP = DeploymentConfig(name="prom", prometheus_selector='job=~"vllm|lmcache"')
END = at(SCRAPES - 1)


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    work = tmp_path_factory.mktemp("prom")
    create_blocks(openmetrics_history(), work)
    server = start_prometheus(work, storage=work / "tsdb")
    yield server
    server.stop()


def cfg(url: str, **kw) -> PrometheusConfig:
    return PrometheusConfig(**{"url": url, "step": "1m", "chunk": "10m", "retries": 0, "timeout_s": 10, **kw})


def import_direct(db: Database) -> None:
    for t, ts, text in scrapes():
        store_payload(db, deployment="direct", target=t, ts=ts, payload=parse_payload(text, t),
                      sha256=payload_sha256(text), source="import")


def counts(db: Database) -> dict:
    with db.read() as con:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("prom_increments", "samples", "series", "gaps", "prom_chunks", "targets")}


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


# -- the arithmetic on its own -------------------------------------------------------------
def _ms(*secs):
    return np.array([int(s * 1000) for s in secs], dtype=np.int64)


def test_step_increments_follow_the_reset_rule_and_attribute_to_the_later_sample():
    t = _ms(50, 60, 90, 120, 150)                      # 50 is the anchor before the chunk (60, 180]
    v = np.array([10.0, 15, 40, 5, 9])                 # drop at 120: a reset, the increase is 5
    ends, delta, pairs, resets, far = step_increments(t, v, np.full(5, np.nan), 60_000, 180_000, 60_000, 600_000)
    # the sample at 60 is on the chunk start: it belongs to the previous chunk's last step
    assert ends.tolist() == [120_000, 180_000]
    assert delta.tolist() == [25 + 5, 4] and pairs.tolist() == [2, 1] and resets.tolist() == [1, 0] and far == 0


def test_created_after_the_previous_sample_is_a_restart_even_when_the_value_climbs():
    t, v = _ms(0, 60), np.array([100.0, 500.0])
    created = np.array([np.nan, 30_000.0])             # restarted at 30 s, now above the old value
    _, delta, _, resets, _ = step_increments(t, v, created, 0, 60_000, 60_000, 600_000)
    assert delta.tolist() == [500.0] and resets.tolist() == [1]
    _, delta, _, _, _ = step_increments(t, v, np.full(2, np.nan), 0, 60_000, 60_000, 600_000)
    assert delta.tolist() == [400.0]                   # without _created: the plain rule


def test_series_born_inside_the_chunk_counts_from_its_created_zero_point():
    t, v = _ms(90), np.array([7.0])
    _, delta, _, _, _ = step_increments(t, v, np.array([70_000.0]), 60_000, 120_000, 60_000, 600_000)
    assert delta.tolist() == [7.0]
    ends, _, _, _, _ = step_increments(t, v, np.full(1, np.nan), 60_000, 120_000, 60_000, 600_000)
    assert ends.size == 0                              # first sample, no _created: nothing to pair


def test_samples_further_apart_than_lookback_are_a_gap_not_an_increase():
    t, v = _ms(0, 900, 930), np.array([1.0, 50.0, 60.0])
    ends, delta, _, _, far = step_increments(t, v, np.full(3, np.nan), 0, 960_000, 60_000, 600_000)
    assert ends.tolist() == [960_000] and delta.tolist() == [10.0] and far == 1


def test_gauges_keep_the_last_value_of_each_step():
    ends, vals = step_gauges(_ms(10, 30, 60, 61, 119), np.array([1.0, 2, 3, 4, 5]), 0, 120_000, 60_000)
    assert ends.tolist() == [60_000, 120_000] and vals.tolist() == [3.0, 5.0]


def test_silent_stretches_belong_to_the_chunk_holding_their_end():
    minute = 60_000
    pts = np.array([0, 1, 2, 9, 10]) * minute          # silent from 2 to 9
    assert silent_stretches(pts, 5 * minute, 10 * minute, 5 * minute, True) == [(2 * minute, 9 * minute)]
    assert silent_stretches(pts[:3], 0, 5 * minute, 5 * minute, True) == []   # not yet 5 minutes
    assert silent_stretches(np.array([], np.int64), 0, minute, 5 * minute, True) == [(0, minute)]
    assert silent_stretches(np.array([], np.int64), 0, minute, 5 * minute, False) == []


def test_chunks_are_step_aligned_and_queries_ask_for_raw_samples():
    b = list(chunk_bounds(datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC),
                          datetime(2026, 1, 1, 1, 0, 10, tzinfo=UTC), 60, 1800))
    start = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    assert [(x - start, y - start) for x, y in b] == [(0, 1_800_000), (1_800_000, 3_600_000),
                                                       (3_600_000, 3_660_000)]
    q = family_query("vllm:time_to_first_token_seconds", 'job="vllm"', 4200)
    assert q == ('{__name__=~"vllm:time_to_first_token_seconds_bucket|vllm:time_to_first_token_seconds_sum|'
                 'vllm:time_to_first_token_seconds_count|vllm:time_to_first_token_seconds_created",'
                 'job="vllm"}[4200s]')


# -- against the real Prometheus ------------------------------------------------------------
WINDOWS = [(0, 80), (4, 36), (20, 48), (40, 42), (64, 80), (10, 50)]   # scrape indices, whole minutes


@pytest.fixture(scope="module")
def ingested(prom, tmp_path_factory):
    db = Database(tmp_path_factory.mktemp("db") / "k.duckdb")
    db.migrate()
    import_direct(db)
    res = ingest_range(db, cfg(prom.url), DEP, T0, END)
    assert res.failed == 0 and res.chunks == 4, res
    return db


@pytest.mark.prometheus
@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: f"{w[0] // 2}-{w[1] // 2}min")
def test_ingested_stats_equal_direct_import_and_promql(prom, ingested, window):
    a, b = at(window[0]), at(window[1])
    got = stats(ingested, "prom", a, b).to_dict()
    want = stats(ingested, "direct", a, b).to_dict()
    assert got["prefix_cache_hits"] and got["requests"]  # the window holds data
    assert same(got, want), {k: (got[k], want[k]) for k in got if not same(got[k], want[k])}

    w, t = f"{(window[1] - window[0]) * EVERY_S}s", b.timestamp()

    def q(expr):
        return scalar(prom.url, expr, t)

    assert got["prefix_cache_hits"] == q(f"sum(increase(vllm:prefix_cache_hits_total[{w}]))")
    assert math.isclose(got["prefix_cache_hit_rate"], q(
        f"sum(increase(vllm:prefix_cache_hits_total[{w}])) / sum(increase(vllm:prefix_cache_queries_total[{w}]))"))
    assert got["requests"] == q(f"sum(increase(vllm:time_to_first_token_seconds_count[{w}]))")
    for key, quant in (("ttft_p50_s", 0.5), ("ttft_p99_s", 0.99)):
        assert math.isclose(got[key], q(f"histogram_quantile({quant}, sum by (le) "
                                        f"(increase(vllm:time_to_first_token_seconds_bucket[{w}])))"))
    assert math.isclose(got["lmcache_lookup_hit_rate"], q(
        f"sum(increase(lmcache_mp_lookup_hit_tokens_total[{w}])) / "
        f"sum(increase(lmcache_mp_lookup_requested_tokens_total[{w}]))"))


@pytest.mark.prometheus
def test_targets_series_and_gauges_are_mapped_like_the_scrape_path(ingested):
    with ingested.read() as con:
        targets = con.execute("SELECT t.name, t.kind, p.job, p.instance FROM targets t "
                              "JOIN prom_targets p USING (target_id) ORDER BY 1").fetchall()
        assert targets == [("lmcache/c:8090", "lmcache_mp", "lmcache", "c:8090"),
                           ("vllm/a:8000", "vllm", "vllm", "a:8000"), ("vllm/b:8000", "vllm", "vllm", "b:8000")]
        le = con.execute("SELECT DISTINCT le FROM series se JOIN prom_targets USING (target_id) "
                         "WHERE name LIKE '%_bucket' ORDER BY 1").fetchall()
        assert [x[0] for x in le] == [0.1, 1.0, math.inf]
        labels = con.execute("SELECT DISTINCT labels FROM series se JOIN prom_targets USING (target_id) "
                             "WHERE family = 'lmcache_mp_lookup_hit_tokens'").fetchall()
        assert labels == [('{"cache_salt":"t1"}',)]
    # gauges: the last raw value of each 1-minute step, at the step end
    rows = ingested.fetch("window_gauges", deployment="prom", t_from=at(2), t_to=at(2), model_name="m1")
    kv = {r["engine"]: r["last"] for r in rows if r["name"] == "vllm:kv_cache_usage_perc"}
    assert kv == {"0": (2 * 7 % 10) / 10, "1": (2 * 7 + 1) % 10 / 10}


@pytest.mark.prometheus
def test_a_silent_target_is_a_gap_and_never_zeros(ingested):
    gaps = ingested.fetch("ingest_gaps", deployment="prom", t_from=T0, t_to=END)
    assert [(g["target"], g["t_from"], g["t_to"]) for g in gaps] == [
        ("vllm/b:8000", at(50).replace(tzinfo=None), at(64).replace(tzinfo=None))]
    with ingested.read() as con:
        inside = con.execute(
            "SELECT count(*) FROM prom_increments pi JOIN series se USING (series_id) JOIN targets t "
            "USING (target_id) WHERE t.name = 'vllm/b:8000' AND pi.ts > ? AND pi.ts < ?",
            [at(51).replace(tzinfo=None), at(64).replace(tzinfo=None)]).fetchone()[0]
    assert inside == 0


@pytest.mark.prometheus
def test_reingesting_never_duplicates_and_chunking_does_not_change_a_number(prom, tmp_path):
    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    ingest_range(db, cfg(prom.url), DEP, T0, END)
    first = counts(db)
    want = stats(db, "prom", T0, END).to_dict()
    ingest_range(db, cfg(prom.url), DEP, T0, END)
    ingest_range(db, cfg(prom.url), DEP, at(20), at(40))        # an overlapping sub-range too
    assert counts(db) == first
    ingest_range(db, cfg(prom.url, chunk="30m"), DEP, T0, END)   # other chunk boundaries
    c = counts(db)
    assert {k: c[k] for k in c if k != "prom_chunks"} == {k: first[k] for k in first if k != "prom_chunks"}
    assert same(stats(db, "prom", T0, END).to_dict(), want)
    ledger = db.fetch("ingest_ledger", deployment="prom", t_from=T0, t_to=END)
    assert [(r["t_from"].minute, r["t_to"].minute, r["ok"]) for r in ledger] == [(0, 30, True), (30, 40, True)]


@pytest.mark.prometheus
def test_prometheus_down_is_a_logged_gap_and_keeps_earlier_data(prom, tmp_path, caplog):
    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    ingest_range(db, cfg(prom.url), DEP, T0, at(40))
    before = stats(db, "prom", T0, at(40)).to_dict()
    dead = f"http://127.0.0.1:{free_port()}"
    res = ingest_range(db, cfg(dead), DEP, T0, END)             # all 4 chunks fail, all are tried
    assert (res.chunks, res.failed) == (4, 4)
    assert f"{dead}/api/v1/query" in res.errors[0] and "vllm:prefix_cache_hits_total" in res.errors[0]
    assert "cannot connect ([Errno 111] Connection refused)" in res.errors[0] and dead in caplog.text
    assert same(stats(db, "prom", T0, at(40)).to_dict(), before)  # the good chunks are kept
    gaps = db.fetch("ingest_gaps", deployment="prom", t_from=T0, t_to=END)
    assert [(g["target"], g["t_from"], g["t_to"]) for g in gaps] == [
        (None, at(40).replace(tzinfo=None), END.replace(tzinfo=None))]
    ingest_range(db, cfg(prom.url), DEP, T0, END)                # the next run goes ahead and fills it
    assert [g["target"] for g in db.fetch("ingest_gaps", deployment="prom", t_from=T0, t_to=END)] == [
        "vllm/b:8000"]


# -- faults, from a real HTTP server on loopback ----------------------------------------------
class _Server(Loopback):
    """A ThreadingHTTPServer on a free loopback port running ``handle(handler) -> (status,
    content type, body)`` for every request."""

    def __init__(self, handle):
        outer = self

        class H(BaseHTTPRequestHandler):
            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                self.body = self.rfile.read(n) if n else b""
                outer.seen.append(dict(self.headers))
                status, ctype, body = handle(self)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except BrokenPipeError:  # the client gave up (timeout test)
                    pass

            do_GET = do_POST = _any

            def log_message(self, *a):
                pass

        self.seen: list[dict] = []
        super().__init__(H)


FAULTS = {
    "http-500": (lambda h: (500, "text/plain", b"internal error"), "HTTP Status Code 500"),
    "http-503-retried": (lambda h: (503, "text/plain", b"overloaded"), "HTTP Status Code 503"),
    "http-400": (lambda h: (400, "application/json",
                            b'{"status":"error","errorType":"bad_data","error":"parse error at char 3"}'),
                 "parse error at char 3"),
    "not-json": (lambda h: (200, "text/html", b"<html>login</html>"), "malformed response"),
    "no-data": (lambda h: (200, "application/json", b'{"status":"success"}'), "malformed response"),
    "vector-not-matrix": (lambda h: (200, "application/json", json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"__name__": "x"}, "value": [1, "1"]}]}}).encode()), "malformed response"),
    "timeout": (lambda h: (time.sleep(1.5), (200, "application/json", b"{}"))[1], "timeout"),
}


@pytest.mark.prometheus
@pytest.mark.parametrize("fault", FAULTS)
def test_a_bad_prometheus_answer_names_url_and_query_logs_a_gap_and_the_next_run_goes_ahead(
        fault, prom, tmp_path):
    handle, message = FAULTS[fault]
    server = _Server(handle)
    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    try:
        c = cfg(server.url, timeout_s=0.5, retries=1 if "retried" in fault else 0)
        with pytest.raises(PromError) as e:
            PromClient(c).range_vector('{__name__="up"}[60s]', END.timestamp())
        assert server.url + "/api/v1/query" in str(e.value) and "'{__name__=\"up\"}[60s]'" in str(e.value)
        assert message in str(e.value)
        if "retried" in fault:
            assert len(server.seen) == 2          # one retry, then the error
        res = ingest_range(db, c, DEP, T0, at(40))
        assert (res.chunks, res.failed) == (2, 2) and message in res.errors[-1]
        gaps = db.fetch("ingest_gaps", deployment="prom", t_from=T0, t_to=END)
        assert [(g["target"], g["t_from"], g["t_to"], g["n"]) for g in gaps] == [
            (None, T0.replace(tzinfo=None), at(40).replace(tzinfo=None), 2)]
        assert message in gaps[0]["reason"] and server.url in gaps[0]["reason"]
    finally:
        server.close()
    res = ingest_range(db, cfg(prom.url), DEP, T0, at(40))   # Prometheus is back: the gap is filled
    assert res.failed == 0 and db.fetch("ingest_gaps", deployment="prom", t_from=T0, t_to=END) == []
    assert stats(db, "prom", T0, at(40)).prefix_cache_hits > 0


# -- secrets ---------------------------------------------------------------------------------
TOKEN = "tok-5ecret-Zq81xv"
PASSWORD = "pw-5ecret-Hh27kd"


def _auth_proxy(prom_url: str, expect: str) -> _Server:
    """An authenticating reverse proxy in front of the real Prometheus."""
    def handle(h):
        if h.headers.get("Authorization") != expect:
            return 401, "text/plain", b"unauthorized"
        r = httpx.request(h.command, prom_url + h.path, content=h.body,
                          headers={"Content-Type": h.headers.get("Content-Type", "")})
        return r.status_code, r.headers.get("content-type", "application/json"), r.content
    return _Server(handle)


def _secret_free(db: Database, text: str) -> None:
    for f in db.path.parent.glob(db.path.name + "*"):   # the file and any WAL
        data = f.read_bytes()
        assert TOKEN.encode() not in data and PASSWORD.encode() not in data, f
    assert TOKEN not in text and PASSWORD not in text


def _config(tmp_path: Path, url: str) -> Path:
    p = tmp_path / "kvplan.toml"
    p.write_text(f'db = "{tmp_path / "k.duckdb"}"\n[prometheus]\nurl = "{url}"\nchunk = "10m"\nretries = 0\n'
                 f'[[deployments]]\nname = "prom"\nprometheus_selector = \'job=~"vllm|lmcache"\'\n')
    return p


@pytest.mark.prometheus
def test_bearer_token_from_the_environment_never_reaches_db_logs_or_output(prom, tmp_path, monkeypatch, caplog):
    import base64

    caplog.set_level(logging.DEBUG)
    proxy = _auth_proxy(prom.url, f"Bearer {TOKEN}")
    try:
        conf = _config(tmp_path, proxy.url)
        runner = CliRunner()
        args = ["ingest", "--deployment", "prom", "--from", T0.isoformat(), "--to", END.isoformat(),
                "--config", str(conf)]
        monkeypatch.setenv("KVPLAN_PROMETHEUS__BEARER_TOKEN", "wrong-token")
        bad = runner.invoke(app, args)
        assert bad.exit_code == 2 and "HTTP Status Code 401" in bad.output and "wrong-token" not in bad.output
        monkeypatch.setenv("KVPLAN_PROMETHEUS__BEARER_TOKEN", TOKEN)
        ok = runner.invoke(app, args + ["--step", "1m"])
        assert ok.exit_code == 0, ok.output
        assert "4 chunks" in ok.output
        db = Database(tmp_path / "k.duckdb")
        assert stats(db, "prom", T0, END).prefix_cache_hits > 0
        _secret_free(db, bad.output + ok.output + caplog.text)
        assert TOKEN not in repr(PromClient(cfg(proxy.url, bearer_token=TOKEN)))
        assert base64.b64encode(TOKEN.encode()).decode() not in caplog.text
    finally:
        proxy.close()


@pytest.mark.prometheus
def test_basic_auth_password_from_a_secrets_dir(prom, tmp_path, monkeypatch, caplog):
    import base64

    caplog.set_level(logging.DEBUG)
    cred = base64.b64encode(f"kv:{PASSWORD}".encode()).decode()
    proxy = _auth_proxy(prom.url, f"Basic {cred}")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "kvplan_prometheus__password").write_text(PASSWORD)
    monkeypatch.setenv("KVPLAN_SECRETS_DIR", str(secrets))
    monkeypatch.setenv("KVPLAN_PROMETHEUS__USERNAME", "kv")
    try:
        conf = _config(tmp_path, proxy.url)
        r = CliRunner().invoke(app, ["ingest", "--deployment", "prom", "--from", T0.isoformat(),
                                     "--to", END.isoformat(), "--config", str(conf)])
        assert r.exit_code == 0, r.output
        db = Database(tmp_path / "k.duckdb")
        assert stats(db, "prom", T0, END).prefix_cache_hits > 0
        _secret_free(db, r.output + caplog.text)
        assert cred not in caplog.text
    finally:
        proxy.close()


def test_a_secret_in_the_config_file_is_refused(tmp_path):
    conf = tmp_path / "kvplan.toml"
    conf.write_text(f'[prometheus]\nurl = "http://127.0.0.1:9"\nbearer_token = "{TOKEN}"\n')
    r = CliRunner().invoke(app, ["config", "check", "--config", str(conf)])
    assert r.exit_code == 2 and "prometheus.bearer_token: secrets do not belong in the config file" in r.output
    assert TOKEN not in r.output


# -- recorded real payloads ------------------------------------------------------------------
def _recorded_cases() -> list[str]:
    from tests import recorded

    return recorded.cases()


def _created_openmetrics(scrapes) -> str:
    """The ``X_created`` series a Prometheus scraping the text format stores (to_openmetrics
    writes values only)."""
    rows: dict[str, set] = {}
    for ts, extra, payload in scrapes:
        for s in payload.samples:
            if s.created is None or s.name.endswith(("_sum", "_count")) or (s.le is not None and s.le != math.inf):
                continue
            labels = dict(s.labels) | extra | {k: v for k, v in (("model_name", s.model_name),
                                                                 ("engine", s.engine)) if v is not None}
            lab = "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
            rows.setdefault(f"{s.family}_created", set()).add((lab, ts.timestamp(), s.created))
    out = []
    for name in sorted(rows):
        out.append(f"# TYPE {name} unknown")
        out += [f"{name}{lab} {v!r} {t:.3f}" for lab, t, v in sorted(rows[name])]
    return "\n".join(out) + "\n"


@pytest.mark.prometheus
@pytest.mark.parametrize("case", _recorded_cases())
def test_recorded_real_payloads_ingested_from_prometheus_equal_their_direct_import(case, tmp_path):
    """Each step of a recorded case (all its targets) placed at the whole second of its first
    scrape (one second later if that second is taken); Prometheus also holds the _created
    series. Every window between two steps: (a) equals the direct import; (b) equals PromQL
    where no counter restarted."""
    from tests import recorded

    by_step: dict[int, list] = {}
    for f in recorded.manifest(case)["files"]:
        by_step.setdefault(f["step"], []).append(f)
    times, last = {}, 0
    for k, fs in sorted(by_step.items()):  # whole seconds, strictly increasing
        last = max(math.floor(min(f["scraped_at"] for f in fs)), last + 1)
        times[k] = datetime.fromtimestamp(last, UTC)
    rows = []
    for k, fs in sorted(by_step.items()):
        for f in fs:
            path = recorded.PAYLOADS / case / f["file"]
            rows.append((times[k], f["target"], parse_payload(path.read_text(), str(path),
                                                               content_type=f.get("content_type"))))
    om = [(t, {"job": "kvplan", "instance": target}, p) for t, target, p in rows]
    create_blocks(to_openmetrics(om).removesuffix("# EOF\n") + _created_openmetrics(om) + "# EOF\n", tmp_path)
    server = start_prometheus(tmp_path, storage=tmp_path / "tsdb")
    try:
        db = Database(tmp_path / "k.duckdb")
        db.migrate()
        for t, target, p in rows:
            store_payload(db, deployment="direct", target=target, ts=t, payload=p, sha256=str(p.source),
                          source="import")
        dep = DeploymentConfig(name="prom", prometheus_selector='job="kvplan"')
        steps = sorted(times.values())
        res = ingest_range(db, cfg(server.url, step="1s", chunk="1h", lookback="1h"), dep, steps[0], steps[-1])
        assert res.failed == 0 and res.increments > 0
        checked = 0
        for i, a in enumerate(steps):
            for b in steps[i + 1:]:
                got = stats(db, "prom", a, b).to_dict()
                want = stats(db, "direct", a, b).to_dict()
                # resets are counted over every family by the direct import, over kvplan's by ingestion
                got.pop("counter_resets"), want.pop("counter_resets")
                assert same(got, want), (case, a, b, {k: (got[k], want[k]) for k in got if not same(got[k], want[k])})
                s = stats(db, "direct", a, b)
                if s.counter_resets == 0 and s.prefix_cache_queries:
                    w = f"{int((b - a).total_seconds())}s"
                    assert got["prefix_cache_queries"] == scalar(
                        server.url, f"sum(increase(vllm:prefix_cache_queries_total[{w}]))", b.timestamp())
                    if got["requests"]:
                        assert math.isclose(got["ttft_p99_s"], scalar(server.url, (
                            f"histogram_quantile(0.99, sum by (le) "
                            f"(increase(vllm:time_to_first_token_seconds_bucket[{w}])))"), b.timestamp()))
                checked += 1
        assert checked >= 1
    finally:
        server.stop()


# -- the benchmark, at a tiny size --------------------------------------------------------------
@pytest.mark.prometheus
def test_the_benchmark_runs_at_a_tiny_size():
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, str(root / "bench/prom_bench.py"), "--days", "1", "--engines", "2",
                        "--per-node", "2", "--interval", "600"], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "KVPLAN_BENCH_RESULTS": "off"})  # a smoke run files no result
    assert r.returncode == 0, r.stdout + r.stderr
    for line in ("history:", "backfill  1 days:", "rollups", "night", "raw read", "daily"):
        assert line in r.stdout, r.stdout
    assert "0 failed" in r.stdout and "values agree: 1 of 1 days" in r.stdout, r.stdout


@pytest.mark.prometheus
def test_a_directly_scraped_target_is_never_overwritten_by_prometheus_data(prom, tmp_path):
    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    text = vllm_payload(0, "m1", (0,))
    store_payload(db, deployment="prom", target="vllm/a:8000", ts=T0, payload=parse_payload(text, "x"),
                  sha256=payload_sha256(text), source="scrape")
    with pytest.raises(KvplanError, match="target .vllm/a:8000. already holds direct scrapes"):
        ingest_range(db, cfg(prom.url), DEP, T0, at(20))
    assert counts(db)["prom_increments"] == 0


# -- hostile or careless inputs --------------------------------------------------------------
def test_prometheus_ingestion_applies_the_same_decrease_rule():
    import numpy as np

    from kvplan.collectors.prometheus.step_math import step_increments

    t = np.array([60_000, 120_000, 180_000], dtype=np.int64)
    v = np.array([100.0, 40.0, 50.0])
    same = np.array([5_000.0] * 3)                   # _created known and unchanged: not a restart
    _, delta, _, resets, _ = step_increments(t, v, same, 60_000, 180_000, 60_000, 600_000)
    # the climb back to 100 (where the same process already was) is no new traffic (issue 27, case 2)
    assert delta.tolist() == [0.0, 0.0] and resets.tolist() == [0, 0]
    _, delta, _, resets, _ = step_increments(t, v, np.full(3, np.nan), 60_000, 180_000, 60_000, 600_000)
    assert delta.tolist() == [40.0, 10.0] and resets.tolist() == [1, 0]   # unknown: Prometheus's rule
