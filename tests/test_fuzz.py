"""Fuzzing in the suite: mutated real payloads (tests/fixtures/payloads) go through
import, stats, plan and the capacity report.

Each mutated payload is either rejected with a message naming the file, or accepted and then
read by stats, plan and the report without an exception, with every hit rate in [0, 1].
Hypothesis with a fixed seed (derandomize), KVPLAN_FUZZ_EXAMPLES examples, bounded by the test's
timeout; no example database is kept.

Whole families dropped from a middle scrape of a recorded history (a proxy cutting a body short, a
server skipping a family): the window's totals must equal those of the unmutated history, series
by series (a series seen before continues from its last value), and the gap must be said.
KVPLAN_FUZZ_DROPS drops (single families, then random sets of families, seeded), or ``all``: every
family of every middle scrape of every recorded case.

The fast layer runs a few of each (10 and 6; defaults 30 and 24); ``make test`` sets 100 and
``all``.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kvplan.app.data.plan import plan_range
from kvplan.app.data.window import stats as window_stats
from kvplan.app.report.data import build
from kvplan.app.report.html import render_html
from kvplan.collectors.scrape.scrape import import_file
from kvplan.models.core.errors import KvplanError
from kvplan.models.metrics.window import RATE_FIELDS
from kvplan.sql.db import Database
from tests.conftest import PAYLOADS

EXAMPLES = int(os.environ.get("KVPLAN_FUZZ_EXAMPLES", "30"))
DROPS = os.environ.get("KVPLAN_FUZZ_DROPS", "24")
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


def check_one(pair: tuple[Path, Path], ops: list[tuple], mutate_first: bool, migrated: Path) -> None:
    base, later = pair
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        shutil.copyfile(migrated, tmp / "k.duckdb")  # conftest's migrated_template: not migrated per example
        db = Database(tmp / "k.duckdb")
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
def test_mutated_real_payloads_are_rejected_naming_the_file_or_read_cleanly(migrated_template):
    Tally.accepted = Tally.rejected = 0
    Tally.started = time.monotonic()

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, print_blob=True,
              phases=[Phase.explicit, Phase.generate, Phase.shrink],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(pair=st.sampled_from(PAIRS), ops=st.lists(op, min_size=1, max_size=4), mutate_first=st.booleans())
    def run(pair, ops, mutate_first):
        check_one(pair, ops, mutate_first, migrated_template)

    run()
    took = time.monotonic() - Tally.started
    print(f"fuzz: {Tally.accepted + Tally.rejected} mutated payloads, {Tally.rejected} rejected naming the file, "
          f"{Tally.accepted} accepted and read by stats/plan/report, {took:.0f}s")
    assert Tally.accepted + Tally.rejected >= EXAMPLES
    assert Tally.accepted >= EXAMPLES // 10 and Tally.rejected >= EXAMPLES // 10   # both paths exercised


# ---- whole families dropped from middle scrapes ------------------------------------------------------
def _histories() -> list[tuple[str, str, list[tuple[Path, datetime]]]]:
    """(case, target, [(file, scraped at)]) of every recorded target with at least three scrapes."""
    out = []
    for manifest in sorted(PAYLOADS.glob("*/manifest.json")):
        files = json.loads(manifest.read_text())["files"]
        by_target: dict[str, list] = {}
        for f in sorted(files, key=lambda f: f["scraped_at"]):
            by_target.setdefault(f["target"], []).append(
                (manifest.parent / f["file"], datetime.fromtimestamp(f["scraped_at"], UTC)))
        out += [(manifest.parent.name, t, seq) for t, seq in sorted(by_target.items()) if len(seq) >= 3]
    return out


def _families(text: str) -> list[str]:
    """Counter and histogram families of a payload as its TYPE lines name them."""
    return [line.split()[2] for line in text.splitlines()
            if line.startswith("# TYPE ") and line.split()[3] in ("counter", "histogram")]


def _drop(text: str, families: set[str]) -> str:
    """The payload without every line of those families (HELP, TYPE, samples, their _created)."""
    def family_of(line: str) -> str:
        name = line.split()[2] if line.startswith("# ") and len(line.split()) > 2 else line.split("{")[0].split()[0]
        for fam in families:
            for root in {fam, fam.removesuffix("_total")}:
                if name == root or (name.startswith(root + "_") and name[len(root) + 1:] in (
                        "bucket", "count", "sum", "created", "total")):
                    return fam
        return ""
    return "".join(line + "\n" for line in text.splitlines() if not line or not family_of(line))


def _series(f: tuple[Path, datetime], target: str) -> dict[tuple, tuple[float, float | None]]:
    """(value, created) of every sample of a recorded payload, keyed like ``_totals``."""
    from kvplan.collectors.scrape.parse import parse_payload

    p = parse_payload(f[0].read_text(), str(f[0]), at=f[1])
    return {(x.name, x.model_name, x.engine, x.le, json.dumps(dict(x.labels), sort_keys=True, separators=(",", ":")),
             target): (x.value, x.created) for x in p.samples}


def _reset_between(scrapes: list[tuple[Path, datetime]], target: str) -> set[tuple]:
    """Series (as ``_totals`` keys) whose increase up to the dropped scrape (the middle of three
    unmutated ones) no later scrape carries: gone from the next one, or restarted around it (a new
    _created, or a value below the one before)."""
    before, dropped, after = (_series(f, target) for f in scrapes)

    def reset(a, b) -> bool:
        return b[0] < a[0] or b[1] != a[1]
    # what a series counted up to the dropped scrape is lost when it is not carried by the next one: the
    # series is gone there, or its process restarted (around the dropped scrape)
    return ({k for k in dropped if k not in after or reset(dropped[k], after[k])}
            | {k for k in dropped.keys() & before.keys() if reset(before[k], dropped[k])})


def _created(path: Path, family: str) -> set[str]:
    base = family.removesuffix("_total")
    return {line.rsplit(" ", 1)[-1] for line in path.read_text().splitlines() if line.startswith(base + "_created")}


def drop_cases(limit: str) -> list[tuple[str, str, int, tuple[str, ...]]]:
    """(case, target, middle scrape, families dropped): every single family of every middle scrape,
    then as many random sets of 2-5 families (seeded); ``limit`` of them (or ``all`` singles)."""
    import random

    singles, sets = [], []
    rng = random.Random(20)
    for case, target, seq in _histories():
        for i in range(1, len(seq) - 1):
            fams = _families(seq[i][0].read_text())
            singles += [(case, target, i, (f,)) for f in fams]
            if len(fams) >= 2:
                sets.append((case, target, i, tuple(sorted(rng.sample(fams, rng.randint(2, min(5, len(fams))))))))
    if limit == "all":
        return singles + sets
    n = int(limit)
    rng.shuffle(singles)
    rng.shuffle(sets)
    return singles[: n - n // 3] + sets[: n // 3]


def _totals(db: Database, deployment: str, t0: datetime, t1: datetime) -> dict[tuple, float]:
    from kvplan.app.data.window import window_increases

    return {(r.name, r.model_name, r.engine, r.le, r.labels, r.target): r.increase
            for r in window_increases(db, deployment, t0, t1)}


@pytest.mark.timeout(1800)
def test_families_dropped_from_a_middle_scrape_change_no_total():
    cases = drop_cases(DROPS)
    assert cases
    histories = {(c, t): seq for c, t, seq in _histories()}
    with tempfile.TemporaryDirectory() as d:
        db = Database(Path(d) / "k.duckdb")
        db.migrate()
        base: dict[tuple, dict] = {}
        for n, (case, target, middle, families) in enumerate(cases):
            seq = histories[(case, target)]
            t0, t1 = seq[0][1] - timedelta(minutes=1), seq[-1][1] + timedelta(minutes=1)
            if (case, target) not in base:
                for f, at in seq:
                    import_file(db, f"base-{case}-{target}", f, at, target=target)
                base[(case, target)] = _totals(db, f"base-{case}-{target}", t0, t1)
            dep = f"drop-{n}"
            for i, (f, at) in enumerate(seq):
                text = f.read_text()
                if i == middle:
                    text = _drop(text, set(families))
                path = Path(d) / f"{n}-{i}-{f.name}"
                path.write_text(text)
                import_file(db, dep, path, at, target=target)
            got, want = _totals(db, dep, t0, t1), base[(case, target)]
            # a family whose process restarted right after the dropped scrape (a new _created next): what it
            # counted between the scrape before and the restart went unseen, so its total may fall short,
            # never above; every other series' total is exact
            short = _reset_between(seq[middle - 1: middle + 2], target)
            wrong = {k: (want.get(k), got.get(k)) for k in set(got) | set(want)
                     if (got.get(k) != want.get(k)) and not (k in short and got.get(k, 0.0) <= want[k])}
            assert not wrong, (case, target, middle, families, wrong)
            st = window_stats(db, dep, t0, t1)
            # the gap is said when a dropped series was in the scrape before and comes back in the next
            # one from the same process (same _created: it continues from its last value); one that comes
            # back with a new _created is counted from its zero point, as after any restart
            mutated = Path(d) / f"{n}-{middle}-{seq[middle][0].name}"
            dropped_keys = set(_series(seq[middle], target)) - set(_series((mutated, seq[middle][1]), target))
            before, after = _series(seq[middle - 1], target), _series(seq[middle + 1], target)
            if any(k in before and k in after and before[k][1] == after[k][1] for k in dropped_keys):
                assert any("missing from a scrape" in note for note in st.notes), (case, target, middle, families)
