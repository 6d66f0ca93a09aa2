"""The engine-release payloads (tests/fixtures/payloads/engines/<release>/): a before and an
after /metrics body per release, recorded from a real server where the release runs here,
built from its source where it cannot (README there)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kvplan.collectors.scrape.scrape import import_file
from kvplan.sql.db import Database

ENGINES = Path(__file__).parent / "fixtures" / "payloads" / "engines"
T0 = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
T1 = T0 + timedelta(hours=1)
"""The before payload is stored at T0, the after one at T1: the window is exactly the pair."""


def releases() -> list[str]:
    return sorted(p.name for p in ENGINES.iterdir() if (p / "00_before.prom").exists())


def facts(release: str) -> dict:
    return json.loads((ENGINES / release / "workload.json").read_text())


def import_release(db: Database, release: str, deployment: str | None = None) -> str:
    """Store the release's pair as one target of ``deployment`` (default: the release name)."""
    dep = deployment or release
    import_file(db, dep, ENGINES / release / "00_before.prom", T0, target=release)
    import_file(db, dep, ENGINES / release / "01_after.prom", T1, target=release)
    return dep


def raw(release: str, file: str, name: str, **labels: str) -> float:
    """A sample's value read straight off the payload text (no parser, no database); summed over
    the series that carry ``labels``."""
    total, found = 0.0, False
    for line in (ENGINES / release / file).read_text().splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    if not found:
        raise KeyError((release, file, name, labels))
    return total


def delta(release: str, name: str, **labels: str) -> float:
    return raw(release, "01_after.prom", name, **labels) - raw(release, "00_before.prom", name, **labels)
