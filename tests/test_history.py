"""One measured history per command, on the recorded topology A/B (tests/fixtures/topology-ab):

* ``kvplan whatif --json`` gives exactly the JSON it gave before the what-if became a dataclass
  (the files in tests/fixtures/whatif-golden were written by the dict-returning code, commit
  5dfa47a, and is compared key by key, floats to 1e-9 relative); the keys the TTFT calibration
  changed on purpose were regenerated when branch ``ttft`` merged (each set-up's ttft_mean_s /
  p50 / p99 / p99_as_histogram calibrated, their *_raw equal to 5dfa47a's values, *_interval and
  ``calibrated`` beside them; today.ttft_calibration; engines_needed.p99_ratio and its rule; the
  finding's p99s), everything else is still 5dfa47a's. When the fixture was re-recorded
  (2026-12-02) both files were written again the same way: 5dfa47a's code run on the new
  recording for every key (its "dollars" kept), the merged code's for the calibration's keys only,
  each *_raw checked equal to 5dfa47a's value and each calibrated one to it times today's ratio
  (62 and 66 values). When the replay began modelling the wait before a burst's lookups
  (branch ttftq, ``latency.queued_arrival``), ab-shared-l1-l2.json's TTFT keys only (each set-up's
  raw, calibrated and interval TTFTs, today's predicted TTFTs and calibration, the p99 ratio and
  the finding's p99s: 268 values) were written again with the new code; the sequential window's
  file did not change (no lookup there waits);
* ``kvplan plan``, ``kvplan plan --topology``, ``kvplan whatif`` and ``kvplan report`` each fit
  the deployment's prefill cost model once and read the price book once: counted by wrapping
  ``kvplan.models.prefill.fit.fit_prefill_cost`` (in every module that holds it) and the named
  queries run through ``Database.fetch`` / ``Snapshot.fetch``;
* ``plan --topology --json`` prints only JSON on stdout (issue 27, case 17), and without any
  trace the plan still stands, with a note saying why the topology part is missing.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.models.core.timeutil import from_epoch_s
from kvplan.models.prefill import fit as fit_module
from kvplan.sql import db as sqldb

GOLDEN_DIR = Path(__file__).resolve().parent / "fixtures" / "whatif-golden"
SIDE = "shared"
DEPLOYMENT = "ab-shared"


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 keeps stderr apart already
        return CliRunner()


@pytest.fixture
def side_db(topology_ab, tmp_path) -> tuple[Path, dict]:
    dbs, metas = topology_ab
    path = tmp_path / f"{SIDE}.duckdb"
    shutil.copy(dbs[SIDE].path, path)
    return path, metas[SIDE]


def _window(m: dict, phase: str = "sequential") -> list[str]:
    sp = m["phases"][phase]
    return ["--from", from_epoch_s(sp["start"] - 1.2).isoformat(), "--to", from_epoch_s(sp["end"] + 3).isoformat()]


@pytest.fixture
def counted(monkeypatch) -> Counter:
    """Fits of the prefill cost model (key ``fit``) and named queries run (key: the query's name)."""
    counts: Counter = Counter()
    original = fit_module.fit_prefill_cost

    def counting(*a, **kw):
        counts["fit"] += 1
        return original(*a, **kw)

    for mod in [m for name, m in sys.modules.items() if name.startswith("kvplan")]:
        if getattr(mod, "fit_prefill_cost", None) is original:
            monkeypatch.setattr(mod, "fit_prefill_cost", counting)

    snap_fetch = sqldb.Snapshot.fetch

    def snapshot_fetch(self, query, /, **params):
        counts[query] += 1
        return snap_fetch(self, query, **params)

    def database_fetch(self, query, /, **params):  # counted once: it does not go through Snapshot.fetch
        counts[query] += 1
        with self.read() as con:
            return sqldb._rows(self.run(con, query, **params))

    monkeypatch.setattr(sqldb.Snapshot, "fetch", snapshot_fetch)
    monkeypatch.setattr(sqldb.Database, "fetch", database_fetch)
    return counts


def _same(a, b, path="$"):
    """``a`` equals ``b`` key by key; floats to 1e-9 relative."""
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), f"{path}: {a!r} != {b!r}"
        return
    assert type(a) is type(b) or (isinstance(a, (int, float)) and isinstance(b, (int, float))), \
        f"{path}: {type(a).__name__} != {type(b).__name__} ({a!r} / {b!r})"
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), f"{path}: keys {sorted(set(a) ^ set(b))} differ"
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


@pytest.mark.parametrize("golden, options", [
    ("ab-shared-sequential.json", ["--ranks", "2", "window"]),
    ("ab-shared-l1-l2.json", ["--ranks", "3", "--configured-gb", "0.05", "--l2-gb", "0.1", "--points", "8"]),
])
def test_whatif_json_is_unchanged(side_db, golden, options):
    path, m = side_db
    opts = [x for o in options for x in (_window(m) if o == "window" else [o])]
    r = _runner().invoke(app, ["whatif", "--db", str(path), "--deployment", DEPLOYMENT, "--json", *opts])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["today"]["ttft_p99_s_predicted"] is not None and got["finding"] is not None  # the TTFT half ran
    want = json.loads((GOLDEN_DIR / golden).read_text())
    got_dollars, want_dollars = got.pop("dollars"), want.pop("dollars")
    _same(got, want)
    # the dollars: the same keys, the same inputs but the GPU-seconds per token, which is the
    # one history's (module doc)
    assert sorted(got_dollars) == sorted(want_dollars)
    assert [sorted(p) for p in got_dollars["points"]] == [sorted(p) for p in want_dollars["points"]]
    for k in ("requested_tokens_per_month", "requested_tokens_per_month_source", "usd_per_gpu_hour",
              "usd_per_gb_month", "seconds_per_cached_token_source"):
        _same(got_dollars[k], want_dollars[k], k)
    assert got_dollars["seconds_per_cached_token"] == pytest.approx(
        _seconds_per_token(path, got["trace"], got["today"]["span"]), rel=1e-9)


def _seconds_per_token(path: Path, trace: dict, span: list[str]) -> float:
    """GPU-seconds per cached token over the trace's first to last request, priced with the cost
    model fitted on the 7 days before the measured span's end: from the building blocks."""
    from datetime import datetime, timedelta

    from kvplan.app.data.prefill import describe_history, prefill_intervals
    from kvplan.app.data.window import engines_in_window, load_window
    from kvplan.models.inputs.deployment import DeploymentFacts
    from kvplan.models.prefill import PricedWindow, estimate_savings, fit_prefill_cost, measurement_from_window
    from kvplan.sql.db import Database

    db = Database(path)
    end = datetime.fromisoformat(span[1])
    ivs = prefill_intervals(db, DEPLOYMENT, end - timedelta(days=7), end)
    cost = fit_prefill_cost(ivs, history=describe_history(DEPLOYMENT, ivs, end - timedelta(days=7), end))
    a, b = from_epoch_s(trace["first_ts"]), from_epoch_s(trace["last_ts"])
    window = PricedWindow.from_intervals(prefill_intervals(db, DEPLOYMENT, a, b), t_from=a.timestamp(),
                                         t_to=b.timestamp())
    m = measurement_from_window(window, cost, facts=DeploymentFacts(), stats=load_window(db, DEPLOYMENT, a, b).stats,
                                engines=max(1, engines_in_window(db, DEPLOYMENT, a, b)))
    return estimate_savings(m).gpu_seconds_per_token


COMMANDS = {
    "plan": lambda m: ["plan", "--deployment", DEPLOYMENT, *_window(m), "--json"],
    "plan --topology": lambda m: ["plan", "--deployment", DEPLOYMENT, *_window(m), "--topology", "--json"],
    "whatif": lambda m: ["whatif", "--deployment", DEPLOYMENT, "--ranks", "2", *_window(m), "--json"],
    "report": lambda m: ["report", "--deployment", DEPLOYMENT, "--month", "2026-12", "-o", "{tmp}/report.html"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_one_fit_and_one_price_book_per_command(side_db, counted, tmp_path, command):
    """Before (5dfa47a) on this database: plan 1 fit, plan --topology 3, whatif 2, report 3 (and
    the price book read 1, 3, 2, 3 times; the history's prefill intervals 2, 6, 4, 6 times);
    before the snapshot's memo (``sql.db.remember``), plan --topology read the window 3 times."""
    path, m = side_db
    args = [a.replace("{tmp}", str(tmp_path)) for a in COMMANDS[command](m)]
    r = _runner().invoke(app, [args[0], "--db", str(path), *args[1:]])
    assert r.exit_code == 0, r.output
    assert counted["fit"] == 1, counted
    assert counted["get_pricebook"] == 1 and counted["get_facts"] == 1, counted
    # the history once; beside it, only the priced windows' own intervals (the plan's window, the
    # trace's span for the what-if's dollars), each read once. The report prices the whole month,
    # longer than the 7-day look-back: the month is the history itself, read once for both
    windows = {"plan": 1, "plan --topology": 1, "whatif": 1, "report": 1}[command]
    assert counted["prefill_intervals"] == 1 + windows, counted
    assert counted["latency_intervals"] == (0 if command == "plan" else 1), counted
    if command == "plan --topology":
        # one history per command: the what-if measures the plan's own window through the same
        # snapshot (before: load_window's queries 3 times, the prefill intervals 3, the engines 3);
        # only the history's 7-day look-back and the window are two reads of the prefill intervals
        # (each checks first that its raw span has a sample: span_has_points)
        twice = {"prefill_intervals", "prefill_rolled_days", "span_has_points"}
        assert {q: n for q, n in counted.items() if n != (2 if q in twice else 1)} == {}, counted


def test_the_history_counts_lmcache_chunks_with_the_deployments_chunk_size(side_db):
    """``lmcache_chunk_tokens`` set for the deployment: the history's stored tokens are write
    chunks x that size (5dfa47a's TTFT fit used the default 256 whatever the facts said)."""
    from kvplan.app.data.history import load_history
    from kvplan.app.data.store import DeploymentSettings
    from kvplan.models.inputs.deployment import DeploymentFacts
    from kvplan.sql.db import Database

    path, m = side_db
    end = from_epoch_s(m["phases"]["sequential"]["end"] + 3)
    with Database(path).snapshot() as src:
        default = load_history(src, DEPLOYMENT, end)
        cfg = DeploymentSettings(facts=DeploymentFacts(lmcache_chunk_tokens=64))
        mine = load_history(src, DEPLOYMENT, end, cfg=cfg)
    stored = [(a.stored_tokens, b.stored_tokens) for a, b in zip(default.intervals, mine.intervals, strict=True)
              if a.stored_tokens]
    assert stored, "the recording has LMCache write chunks"
    assert default.facts.facts.lmcache_chunk_tokens == 256
    for a, b in stored:
        assert b == pytest.approx(a * 64 / 256)


def test_plan_topology_json_without_a_ttft_prediction_prints_only_json(side_db):
    """Issue 27, case 17: no prefill-time histogram, so no cost model and no TTFT prediction:
    stdout is the plan's JSON alone; the note goes to stderr."""
    from kvplan.sql.db import Database

    path, m = side_db
    with Database(path).write() as con:
        con.execute("DELETE FROM samples WHERE series_id IN (SELECT series_id FROM series "
                    "WHERE name LIKE 'vllm:request_prefill_time_seconds%')")
    r = _runner().invoke(app, ["plan", "--db", str(path), "--deployment", DEPLOYMENT, *_window(m), "--topology",
                               "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["decision"] in ("BUY", "REUSE", "NOT_WORTH_IT", "NEED_DATA") and not d.get("topology_finding")
    assert "note: --topology: no TTFT prediction for this window" in r.stderr


def test_plan_topology_without_any_trace_still_plans(db):
    """Issue 27, case 17: a deployment with metrics and no trace: the plan stands (exit 0, the
    same JSON as without --topology) and a note on stderr says why the topology part is missing."""
    from tests.recorded import import_case

    ss = import_case(db, "shared_vs_unique", "p")
    window = ["--from", ss[0].at.isoformat(), "--to", ss[-1].at.isoformat()]
    base = _runner().invoke(app, ["plan", "--db", str(db.path), "--deployment", "p", *window, "--json"])
    r = _runner().invoke(app, ["plan", "--db", str(db.path), "--deployment", "p", *window, "--topology", "--json"])
    assert base.exit_code == 0 and r.exit_code == 0, r.output
    assert json.loads(r.stdout) == json.loads(base.stdout)
    assert "note: --topology: no topology finding" in r.stderr and "has no trace" in r.stderr
    text = _runner().invoke(app, ["plan", "--db", str(db.path), "--deployment", "p", *window, "--topology"])
    assert text.exit_code == 0 and "monthly benefit" in text.stdout and "no topology finding" in text.stderr


def test_verdicts_and_statuses_are_str_enums():
    from enum import StrEnum

    from kvplan.models.decision import Verdict
    from kvplan.models.prefill import CostStatus

    assert issubclass(Verdict, StrEnum) and issubclass(CostStatus, StrEnum)
    assert [v.value for v in Verdict] == ["BUY", "REUSE", "NOT_WORTH_IT", "NEED_DATA"]
    assert json.dumps({"d": Verdict.NOT_WORTH_IT, "s": CostStatus.NO_DATA}) == '{"d": "NOT_WORTH_IT", "s": "no_data"}'
    assert f"{Verdict.BUY}: {CostStatus.FITTED}" == "BUY: fitted"
