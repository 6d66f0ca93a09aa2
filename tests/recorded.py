"""The recorded real payloads (tests/fixtures/payloads/<case>/manifest.json): load a case
into a kvplan database, or into Prometheus's TSDB, exactly as it was scraped."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kvplan.collectors.scrape.parse import parse_payload
from kvplan.collectors.scrape.scrape import import_file
from kvplan.sql.db import Database

PAYLOADS = Path(__file__).parent / "fixtures" / "payloads"


def cases() -> list[str]:
    return sorted(p.parent.name for p in PAYLOADS.glob("*/manifest.json"))


@dataclass(frozen=True)
class Scrape:
    file: Path
    target: str
    kind: str
    at: datetime  # rounded to the millisecond, like Prometheus's TSDB
    content_type: str | None


def manifest(case: str) -> dict:
    return json.loads((PAYLOADS / case / "manifest.json").read_text())


def scrapes(case: str) -> list[Scrape]:
    out = []
    for f in manifest(case)["files"]:
        at = datetime.fromtimestamp(round(f["scraped_at"], 3), tz=UTC)
        out.append(Scrape(PAYLOADS / case / f["file"], f["target"], f["kind"], at, f.get("content_type")))
    return sorted(out, key=lambda s: s.at)


def import_case(db: Database, case: str, deployment: str | None = None) -> list[Scrape]:
    ss = scrapes(case)
    for s in ss:
        import_file(db, deployment or case, s.file, s.at, target=s.target)
    return ss


def parsed(s: Scrape):
    return parse_payload(s.file.read_text(), str(s.file), content_type=s.content_type)
