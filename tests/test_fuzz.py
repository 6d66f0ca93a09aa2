"""Fuzzing in the suite: mutated real payloads (tests/fixtures/payloads) go through
import, stats, plan and the capacity report.

Each mutated payload is either rejected with a message naming the file, or accepted and then
read by stats, plan and the report without an exception, with every hit rate in [0, 1].
Hypothesis with a fixed seed (derandomize), KVPLAN_FUZZ_EXAMPLES examples (default 300),
bounded by the test's timeout; no example database is kept.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kvplan.app.data.window import stats as window_stats
from kvplan.app.report.data import build
from kvplan.app.report.html import render_html
from kvplan.app.views.overview import plan_range
from kvplan.collectors.scrape import import_file
from kvplan.models.core.errors import KvplanError
from kvplan.models.metrics.window import RATE_FIELDS
from kvplan.sql.db import Database
from tests.conftest import PAYLOADS

EXAMPLES = int(os.environ.get("KVPLAN_FUZZ_EXAMPLES", "300"))
AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _pairs() -> list[tuple[Path, Path]]:
    """Consecutive recorded payloads of one target: (earlier, later)."""
    out = []
    for manifest in sorted(PAYLOADS.glob("*/manifest.json")):
        files = json.loads(manifest.read_text())["files"]
        by_target: dict[str, list] = {}
        for f in sorted(files, key=lambda f: f["scraped_at"]):
            by_target.setdefault(f["target"], []).append(manifest.parent / f["file"])
        for paths in by_target.values():
            out += list(itertools.pairwise(paths))
    return out


PAIRS = _pairs()
VALUES = ["-1", "-0.5", "0", "1", "1e308", "-1e308", "9.9e12", "1e26", "NaN", "+Inf", "-Inf", "abc", "",
          "9007199254740993", "1e-300", "0x10", "3.5"]
OPS = ["value", "delete", "duplicate", "swap", "truncate", "le", "rename", "insert", "type", "scale", "label"]


def mutate(text: str, ops: list[tuple]) -> str:
    lines = text.splitlines()
    for op, i, j, value, junk, factor in ops:
        if not lines:
            break
        k = i % len(lines)
        samples = [n for n, line in enumerate(lines) if line and not line.startswith("#")]
        s = samples[i % len(samples)] if samples else k
        if op == "value" and samples:
            lines[s] = lines[s].rsplit(" ", 1)[0] + " " + value
        elif op == "delete":
            del lines[k]
        elif op == "duplicate":
            lines.insert(k, lines[k])
        elif op == "swap":
            m = j % len(lines)
            lines[k], lines[m] = lines[m], lines[k]
        elif op == "truncate":
            cut = "\n".join(lines)
            lines = cut[: j % (len(cut) + 1)].splitlines()
        elif op == "le":
            buckets = [n for n, line in enumerate(lines) if 'le="' in line]
            if buckets:
                n = buckets[i % len(buckets)]
                head, rest = lines[n].split('le="', 1)
                lines[n] = head + (f'le="{value}"' if j % 2 else "")[:] + rest.split('"', 1)[1].lstrip(",")
        elif op == "rename":
            lines = [line.replace("vllm:", "vllm_") for line in lines] if j % 2 else \
                [line.replace("vllm:", "vllm_", 1) if n == k else line for n, line in enumerate(lines)]
        elif op == "insert":
            lines.insert(k, junk)
        elif op == "type":
            types = [n for n, line in enumerate(lines) if line.startswith("# TYPE ")]
            if types:
                n = types[i % len(types)]
                lines[n] = lines[n].rsplit(" ", 1)[0] + " " + ["counter", "gauge", "histogram", "summary",
                                                                 "untyped", "info"][j % 6]
        elif op == "scale" and samples:
            name, _, v = lines[s].rpartition(" ")
            try:
                lines[s] = f"{name} {float(v) * factor!r}"
            except ValueError:
                pass
        elif op == "label" and samples:
            lines[s] = lines[s].replace('model_name="', f'model_name="{junk[:8]}', 1)
    return "\n".join(lines) + ("\n" if lines else "")


op = st.tuples(st.sampled_from(OPS), st.integers(0, 10**6), st.integers(0, 10**6), st.sampled_from(VALUES),
               st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40),
               st.sampled_from([0.0, 0.5, -1.0, 2.0, 1e300, 1e-9]))


class Tally:
    accepted = rejected = 0
    started = 0.0


def check_one(pair: tuple[Path, Path], ops: list[tuple], mutate_first: bool) -> None:
    base, later = pair
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        db = Database(tmp / "k.duckdb")
        db.migrate()
        first = tmp / f"a-{base.name}"
        second = tmp / f"b-{later.name}"
        first.write_text(mutate(base.read_text(), ops) if mutate_first else base.read_text())
        second.write_text(later.read_text() if mutate_first else mutate(later.read_text(), ops))
        try:
            import_file(db, "f", first, AT, target="t")
            import_file(db, "f", second, AT + timedelta(minutes=1), target="t")
        except KvplanError as e:
            mutated = first if mutate_first else second
            assert str(mutated) in str(e), f"the error does not name the file: {e}"
            Tally.rejected += 1
            return
        Tally.accepted += 1
        t0, t1 = AT - timedelta(hours=1), AT + timedelta(hours=1)
        stats = window_stats(db, "f", t0, t1)
        for name in RATE_FIELDS:
            v = getattr(stats, name)
            assert v is None or 0.0 <= v <= 1.0, (name, v, stats.notes)
        plan = plan_range(db, "f", t0, t1)
        assert plan.hit_rate is None or 0.0 <= plan.hit_rate <= 1.0, plan.hit_rate
        try:
            render_html(build(db, "f", "2026-11"), None)
        except KvplanError as e:   # a window without any counter increase writes no report
            assert "no counter increase" in str(e) or "no data" in str(e), e


@pytest.mark.timeout(900)
def test_mutated_real_payloads_are_rejected_naming_the_file_or_read_cleanly():
    Tally.accepted = Tally.rejected = 0
    Tally.started = time.monotonic()

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, print_blob=True,
              phases=[Phase.explicit, Phase.generate, Phase.shrink],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(pair=st.sampled_from(PAIRS), ops=st.lists(op, min_size=1, max_size=4), mutate_first=st.booleans())
    def run(pair, ops, mutate_first):
        check_one(pair, ops, mutate_first)

    run()
    took = time.monotonic() - Tally.started
    print(f"fuzz: {Tally.accepted + Tally.rejected} mutated payloads, {Tally.rejected} rejected naming the file, "
          f"{Tally.accepted} accepted and read by stats/plan/report, {took:.0f}s")
    assert Tally.accepted + Tally.rejected >= EXAMPLES
    assert Tally.accepted >= EXAMPLES // 10 and Tally.rejected >= EXAMPLES // 10   # both paths exercised
