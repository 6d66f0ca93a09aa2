"""Issue 27, part 3.2: one number per question. For every recorded case (tests/recorded.py)
and every engine fixture (tests/engines.py), and the adversary's mid-window upgrade (issue 27 case
4), ``kvplan stats --json``, ``kvplan plan --json``
(top level, ``decision_by_tier``, ``headline``), the Overview page's view and the report's HTML
give the same hit rate, cached prompt tokens, saved prefill GPU-hours and decision.

The range is the calendar month the data lies in (what the report covers), so every surface
reads the same span. One database holds every case, built once for the module."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from html import unescape

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.report import fmt
from kvplan.app.report.data import build
from kvplan.app.report.html import render_html
from kvplan.app.views.overview import overview
from kvplan.sql.db import Database
from tests import engines, recorded

ROUTERS = {"router-production-stack", "gateway-llm-d-epp", "frontend-dynamo"}  # refused by name
CASES = ([("case", c) for c in recorded.cases()] + [("engine", r) for r in engines.releases() if r not in ROUTERS]
         + [("upgrade", "upgrade_0.15_to_0.16")])  # issue 27 case 4 (tests/test_adversary_metrics.py)
PARAMS = [pytest.param(k, n, id=n) for k, n in CASES]


@pytest.fixture(scope="module")
def store(tmp_path_factory, migrated_template):
    import shutil
    path = tmp_path_factory.mktemp("one-number") / "kvplan.duckdb"
    shutil.copyfile(migrated_template, path)
    db = Database(path)
    months = {}
    for kind, name in CASES:
        if kind == "case":
            ss = recorded.import_case(db, name)
            months[name] = ss[0].at
        elif kind == "engine":
            engines.import_release(db, name)
            months[name] = engines.T0
        else:  # vLLM 0.15 -> 0.16 with a restart mid-window: the cached-tokens rule per stretch
            from tests import test_adversary_metrics as adv
            work = tmp_path_factory.mktemp(name)
            adv.store(db, work, adv._upgrade(adv.DAY_OLD), dep=name)
            months[name] = adv.T0
    return db, months


def _month(at: datetime) -> tuple[str, datetime, datetime]:
    start = datetime(at.year, at.month, 1, tzinfo=UTC)
    end = datetime(at.year + (at.month == 12), at.month % 12 + 1, 1, tzinfo=UTC)
    return f"{at:%Y-%m}", start, end


def _cli(db: Database, *args: str) -> dict:
    r = CliRunner().invoke(app, [*args, "--db", str(db.path)])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize(("kind", "name"), PARAMS)
def test_every_surface_gives_the_same_numbers(store, kind, name):
    db, months = store
    month, t_from, t_to = _month(months[name])
    window = ["--deployment", name, "--from", t_from.isoformat(), "--to", t_to.isoformat(), "--json"]
    st = _cli(db, "stats", *window)
    pl = _cli(db, "plan", *window)
    with db.snapshot() as src:
        ov = overview(src, name, t_from, t_to)
    raw = render_html(build(db, name, month))
    html = unescape(re.sub(r"<[^>]+>", "", raw))  # the report's text
    p = ov.plan

    # hit rate over every tier: plan JSON = Overview = report = stats' cached / prompt
    assert pl["hit_rate"] == p.hit_rate
    if pl["hit_rate"] is None:  # the plan could read no interval (no prefill timer): it prices nothing
        assert pl["decision"] == "NEED_DATA" and pl["saved_prefill_gpu_hours"] is None
    elif st["cached_prompt_tokens"] is not None and st["prompt_tokens"]:
        assert pl["hit_rate"] == pytest.approx(st["cached_prompt_tokens"] / st["prompt_tokens"], abs=1e-9)
    assert f"Hit rate (all tiers): {fmt.pct(p.hit_rate)}" in html

    # cached prompt tokens: stats = Overview = the plan's window = report
    assert st["cached_prompt_tokens"] == ov.window.stats.cached_prompt_tokens
    if pl["hit_rate"] is not None:
        assert pl["inputs"]["measurement"]["cached_prompt_tokens"] == pytest.approx(st["cached_prompt_tokens"])
    assert f"cached prompt tokens: {fmt.number(st['cached_prompt_tokens'])}" in html

    # saved prefill GPU-hours per month: plan top level = Overview = report = the tiers' sum
    saved = pl["saved_prefill_gpu_hours"]
    assert saved == (None if p.saved_prefill_gpu_hours is None else pytest.approx(p.saved_prefill_gpu_hours))
    assert f"saved prefill: {fmt.number(p.saved_prefill_gpu_hours)} GPU-h/month" in html
    tiers = pl["decision_by_tier"]
    dev, lm = tiers["device"], tiers["lmcache"]
    if saved is not None and dev["gpu_hours_per_month"] is not None:
        parts = dev["gpu_hours_per_month"] + (lm["gpu_hours_per_month"] or 0.0)
        assert parts == pytest.approx(saved, rel=1e-6, abs=1e-9)
    if pl["hit_rate"] == 0.0:
        assert saved is not None and saved <= 0.0  # no hits: 0 (LMCache: its measured cost)

    # decision: plan = Overview = report badge; the headline names each tier's; the tiers agree
    assert pl["decision"] == p.decision.kind
    assert f'class="badge {p.decision.kind}"' in raw
    assert pl["headline"] == p.headline and unescape(pl["headline"]) in html
    assert pl["headline"].startswith(f"vLLM prefix cache: {dev['kind']} ")
    if lm["kind"] is not None:
        assert f"LMCache: {lm['kind']}" in pl["headline"]
        assert lm["kind"] == pl["decision"]  # the plan prices what LMCache adds: one answer
    assert (pl["decision"] == "NEED_DATA") == (dev["kind"] == "NEED_DATA") or lm["kind"] is not None
