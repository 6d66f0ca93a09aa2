"""Issue 27, the adversary's cases 9 to 13 (Prometheus ingestion), against a REAL Prometheus
(Debian's) loaded with 30 minutes of history by ``promtool tsdb create-blocks-from
openmetrics``; each test failed on the code before its fix.

The history, one sample a minute (k = 0..40, times T0 + k min), all labelled
``kvplan_deployment``; every figure is read over the 30 minutes from k = 5 to k = 35 (inside the
history, so the rule pack's evaluation phase moves no increase out of the window):

* deployment ``mix``: engine ``a:8000`` is vLLM 0.32 (it has ``vllm:prompt_tokens_cached``),
  engine ``b:8000`` is vLLM 0.15 (it has not), and the vLLM production-stack router
  ``router:8001`` reports copies of the engines' prefix-cache counters as gauges
  (``vllm:gpu_prefix_cache_hits_total``), per-server running requests and its own markers
  (``vllm:healthy_pods_total``, ``vllm:current_qps``). Per minute: a has 1,000 prompt tokens,
  600 prefix-cache hits, 100 external (LMCache) hits and 700 cached tokens; b has 1,000 prompt
  tokens, 500 hits and 0 external hits. Over the 30 minutes, by hand:
  prompt tokens 2 x 30 x 1,000 = 60,000; cached tokens a: 30 x 700 = 21,000 plus b by its
  release's rule (hits + external hits) 30 x 500 = 15,000, so 36,000 and a hit rate of 0.6;
  2 engines. The router is refused (raw mode already does).
* deployment ``bad``: one 0.32 engine whose ``vllm:prompt_tokens_total`` has a NaN sample at
  k = 10, +Inf at k = 20 and 1e300 at k = 25 (1,000 a minute otherwise), as a broken exporter
  writes them. A direct import refuses such a payload; ingestion must not take them either.
  Raw mode pairs the good samples around each refused one: 30 x 1,000 = 30,000 prompt tokens.
"""

from __future__ import annotations

import json
import math
import socket
import struct
import threading
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.data.window import engines_in_window, stats
from kvplan.collectors.prometheus.ingest import PromClient, PromError, ingest_range
from kvplan.collectors.prometheus.rules import render
from kvplan.models.inputs.settings import DeploymentConfig, PrometheusConfig
from kvplan.sql.db import Database
from tests.prom_fixtures import create_blocks, prometheus_bin, start_prometheus

pytestmark = pytest.mark.prometheus

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
N = 40
W0, W1 = T0 + timedelta(minutes=5), T0 + timedelta(minutes=35)  # the window: 30 whole minutes inside
END = T0 + timedelta(minutes=N)
CREATED = T0.timestamp() - 86400


def _line(name: str, labels: dict, v: float, k: int) -> str:
    lab = ",".join(f'{a}="{b}"' for a, b in sorted(labels.items()))
    return f"{name}{{{lab}}} {v!r} {T0.timestamp() + 60 * k:.3f}"


def _engine(dep: str, inst: str, per_min: dict[str, float], *, bad: dict[int, float] | None = None) -> list[str]:
    """One vLLM engine: counters growing by ``per_min`` a minute (``bad``: prompt_tokens samples
    replaced by these values at these k), with their _created, and the running-requests gauge."""
    base = {"job": "vllm", "instance": inst, "kvplan_deployment": dep, "engine": "0", "model_name": "m"}
    out = []
    for fam, step in per_min.items():
        for k in range(N + 1):
            v = step * k + 5000.0
            if fam == "vllm:prompt_tokens" and bad and k in bad:
                v = bad[k]
            out.append(_line(f"{fam}_total", base, v, k))
            out.append(_line(f"{fam}_created", base, CREATED, k))
    out += [_line("vllm:num_requests_running", base, 2.0, k) for k in range(N + 1)]
    return out


def _router(dep: str, per_min: dict[str, float] | None = None, markers_at: range | tuple[int, ...] = range(N + 1)
            ) -> list[str]:
    """The production-stack router's /metrics as Prometheus stores it (tests/fixtures/payloads/
    engines/router-production-stack): per-server gauges copied from the engines (``per_min``:
    what each copied series grows by a minute), its running requests, and its marker gauges at
    the minutes ``markers_at``."""
    per_min = per_min or {"vllm:gpu_prefix_cache_hits_total": 300.0, "vllm:gpu_prefix_cache_queries_total": 600.0}
    out = []
    for server in ("http://a:8000", "http://b:8000"):
        lab = {"job": "router", "instance": "router:8001", "kvplan_deployment": dep, "server": server}
        for k in range(N + 1):
            out += [_line(name, lab, step * k, k) for name, step in per_min.items()]
            out.append(_line("vllm:num_requests_running", lab, 3.0, k))
            if k in markers_at:
                out += [_line("vllm:healthy_pods_total", lab, 1.0, k), _line("vllm:current_qps", lab, 0.5, k)]
    return out


def _proxy(dep: str) -> list[str]:
    """A production-stack router that also re-exports the engines' token counters (labelled
    ``server``) and writes its marker gauges only now and then (k = 0 and 20: 20 minutes apart,
    beyond the 10-minute lookback), as a router that sets them only when it polls its pods does.
    Raw mode refuses the whole target once any marker is in the chunk."""
    return _router(dep, {"vllm:prompt_tokens_total": 1000.0, "vllm:prefix_cache_queries_total": 1000.0,
                         "vllm:prefix_cache_hits_total": 900.0}, markers_at=(0, 20))


A = {"vllm:prompt_tokens": 1000, "vllm:prefix_cache_queries": 1000, "vllm:prefix_cache_hits": 600,
     "vllm:external_prefix_cache_queries": 400, "vllm:external_prefix_cache_hits": 100,
     "vllm:prompt_tokens_cached": 700}
B = {"vllm:prompt_tokens": 1000, "vllm:prefix_cache_queries": 1000, "vllm:prefix_cache_hits": 500,
     "vllm:external_prefix_cache_queries": 0, "vllm:external_prefix_cache_hits": 0}


def history() -> str:
    lines = (_engine("mix", "a:8000", A) + _engine("mix", "b:8000", B) + _router("mix")
             + _engine("proxy", "a:8000", A) + _engine("proxy", "b:8000", B) + _proxy("proxy")
             + _engine("bad", "c:8000", A, bad={10: math.nan, 20: math.inf, 25: 1e300}))
    by_name: dict[str, list[str]] = {}
    for x in lines:
        by_name.setdefault(x.split("{", 1)[0], []).append(x)
    out = []
    for name in sorted(by_name):
        out.append(f"# TYPE {name} unknown")
        out += sorted(by_name[name], key=lambda x: (x.rsplit(" ", 2)[0], float(x.rsplit(" ", 1)[1])))
    return "\n".join(out).replace(" nan ", " NaN ").replace(" inf ", " +Inf ") + "\n# EOF\n"


def promtool(*args: str) -> None:
    import subprocess

    r = subprocess.run([prometheus_bin("promtool"), *args], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    """A Prometheus holding the history and the rule pack's outputs over it."""
    import shutil

    work = tmp_path_factory.mktemp("adv-prom")
    create_blocks(history(), work)
    p = start_prometheus(work, storage=work / "tsdb")
    try:
        (work / "kvplan.rules.yml").write_text(render())
        promtool("tsdb", "create-blocks-from", "rules", f"--url={p.url}", f"--start={int(T0.timestamp())}",
                 f"--end={int(END.timestamp()) + 600}", f"--output-dir={work / 'rb'}", str(work / "kvplan.rules.yml"))
    finally:
        p.stop()
    for blk in (work / "rb").iterdir():
        if blk.is_dir():
            shutil.copytree(blk, work / "tsdb" / blk.name)
    p = start_prometheus(work, storage=work / "tsdb")
    yield p
    p.stop()


def cfg(url: str, **kw) -> PrometheusConfig:
    return PrometheusConfig(url=url, step="1m", chunk="1h", lookback="10m", gap_after="5m", retries=0, **kw)


MODES = {"raw": {}, "query": {"prometheus_mode": "aggregated", "prometheus_sums": "query"},
         "rules": {"prometheus_mode": "aggregated", "prometheus_sums": "rules"}}


def ingest(prom, tmp_path, dep: str, mode: str) -> Database:
    db = Database(tmp_path / f"{dep}-{mode}.duckdb")
    db.migrate()
    res = ingest_range(db, cfg(prom.url), DeploymentConfig(name=dep, prometheus_selector=f'kvplan_deployment="{dep}"',
                                                            **MODES[mode]), T0, END)
    assert res.failed == 0, res.errors
    return db


# -- 9 and 10: aggregated mode keeps the router out and reads each engine by its release -------------
@pytest.mark.parametrize("mode", list(MODES))
def test_a_mixed_fleet_behind_a_router_gives_the_same_figures_in_every_mode(prom, tmp_path, mode):
    db = ingest(prom, tmp_path, "mix", mode)
    st = stats(db, "mix", W0, W1)
    assert st.prompt_tokens == pytest.approx(60_000)
    assert st.cached_prompt_tokens == pytest.approx(36_000)          # 21,000 (a) + 15,000 (b), by hand
    assert st.cached_prompt_tokens / st.prompt_tokens == pytest.approx(0.6)
    assert st.prefix_cache_hit_rate == pytest.approx(1100 / 2000)     # the router's copies add nothing
    with db.snapshot() as s:
        assert engines_in_window(s, "mix", W0, W1) == 2                 # the router is not an engine


@pytest.mark.parametrize("mode", list(MODES))
def test_a_router_whose_markers_come_and_go_is_left_out_in_every_mode(prom, tmp_path, mode):
    """Issue 33, F16: the router's re-exported token counters must not join the fleet at the
    steps where its markers are older than the lookback. The figures are deployment ``mix``'s,
    worked by hand in the module doc (the engines are the same)."""
    db = ingest(prom, tmp_path, "proxy", mode)
    st = stats(db, "proxy", W0, W1)
    assert st.prompt_tokens == pytest.approx(60_000)
    assert st.cached_prompt_tokens == pytest.approx(36_000)
    assert st.prefix_cache_hit_rate == pytest.approx(1100 / 2000)
    with db.snapshot() as s:
        assert engines_in_window(s, "proxy", W0, W1) == 2


# -- 12: NaN, Inf and 1e300 counter samples ------------------------------------------------------
@pytest.mark.parametrize("mode", list(MODES))
def test_non_finite_and_absurd_counter_samples_are_refused_in_every_mode(prom, tmp_path, mode):
    db = ingest(prom, tmp_path, "bad", mode)
    st = stats(db, "bad", W0, W1)
    assert st.prompt_tokens is not None and math.isfinite(st.prompt_tokens)
    if mode == "raw":
        assert st.prompt_tokens == pytest.approx(30_000)              # the good samples paired across each gap
    else:
        # a step sum cannot skip one sample: the bad one and the step after it are left out
        assert 30_000 * 0.8 <= st.prompt_tokens <= 30_000
    assert st.cached_prompt_tokens == pytest.approx(21_000)           # the other counters are untouched


@pytest.mark.parametrize("mode", list(MODES))
def test_non_finite_and_absurd_counter_samples_are_noted_in_every_mode(prom, tmp_path, mode):
    # three bad prompt-token samples were written (k = 10, 20, 25), each the latest sample at
    # one step end of the 1-minute steps: raw mode refuses the three samples, aggregated mode
    # leaves them out of its sums; both say so, naming the metric (and, aggregated, the query)
    db = Database(tmp_path / f"note-{mode}.duckdb")
    db.migrate()
    res = ingest_range(db, cfg(prom.url), DeploymentConfig(name="bad", prometheus_selector='kvplan_deployment="bad"',
                                                            **MODES[mode]), T0, END)
    assert res.failed == 0, res.errors
    assert res.refused_samples == 3
    assert res.refused_examples and all("vllm:prompt_tokens_total" in e for e in res.refused_examples)
    if mode != "raw":
        (ex,) = res.refused_examples
        assert ex.startswith("vllm:prompt_tokens_total: 3 step end(s) whose latest sample was left out of the sums")
        assert "/api/v1/query_range (samples not finite, negative or above 2**53" in ex


def test_stats_json_never_prints_nan(prom, tmp_path):
    db = ingest(prom, tmp_path, "bad", "raw")
    with db.write() as con:  # what an older kvplan stored: a NaN increase
        con.execute("UPDATE prom_increments SET delta = 'NaN'::DOUBLE WHERE series_id IN "
                    "(SELECT series_id FROM series WHERE name = 'vllm:prompt_tokens_total') AND ts = "
                    "(SELECT min(ts) FROM prom_increments)")
    r = CliRunner().invoke(app, ["stats", "--deployment", "bad", "--from", T0.isoformat(), "--to", END.isoformat(),
                                 "--json", "--db", str(db.path)])
    assert r.exit_code == 0, r.output
    assert "NaN" not in r.stdout and "Infinity" not in r.stdout
    json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))


# -- 11: a connection reset in the middle of the answer ---------------------------------------------
class ResetMidAnswer:
    """A loopback server that answers 200 with the start of a matrix, then resets the connection
    (SO_LINGER 0: a TCP RST, what a crashing proxy or a killed Prometheus gives)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            try:
                c.settimeout(2)
                c.recv(65536)
                body = (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"x"},'
                        b'"values":[' + b'[1,"1"],' * 2000)
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
                          + body)
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            finally:
                c.close()

    def close(self):
        self.stop.set()
        self.sock.close()


@pytest.mark.parametrize("mode", list(MODES))
def test_a_connection_reset_mid_answer_is_a_gap_naming_url_and_query(tmp_path, mode):
    srv = ResetMidAnswer()
    try:
        with pytest.raises(PromError) as e:
            PromClient(cfg(srv.url)).range_vector('{__name__="up"}[60s]', END.timestamp())
        assert srv.url + "/api/v1/query" in str(e.value) and "up" in str(e.value)
        assert "broke off" in str(e.value)
        db = Database(tmp_path / "k.duckdb")
        db.migrate()
        dep = DeploymentConfig(name="d", prometheus_selector='job="vllm"', **MODES[mode])
        res = ingest_range(db, cfg(srv.url), dep, T0, END)
        assert (res.chunks, res.failed) == (1, 1) and srv.url in res.errors[0] and "broke off" in res.errors[0]
        gaps = db.fetch("ingest_gaps", deployment="d", t_from=T0, t_to=END)
        assert len(gaps) == 1 and srv.url in gaps[0]["reason"] and "query" in gaps[0]["reason"]
    finally:
        srv.close()


# -- 13: Prometheus failures exit 2, as the README says ---------------------------------------------
def test_a_failed_ingestion_exits_2_naming_the_url(tmp_path):
    from tests.prom_fixtures import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    conf = tmp_path / "kvplan.toml"
    conf.write_text(f'db = "{tmp_path / "k.duckdb"}"\n[prometheus]\nurl = "{dead}"\nretries = 0\n'
                    '[[deployments]]\nname = "d"\nprometheus_selector = \'job="vllm"\'\n')
    r = CliRunner().invoke(app, ["ingest", "--deployment", "d", "--from", T0.isoformat(), "--to", END.isoformat(),
                                 "--config", str(conf)])
    assert r.exit_code == 2 and dead in r.output and "Connection refused" in r.output, r.output
    r = CliRunner().invoke(app, ["collect", "--nightly", "--day", "2026-03-02", "--config", str(conf)])
    assert r.exit_code == 2 and "24 errors" in r.output and dead in r.output, r.output   # one per hour of the day
