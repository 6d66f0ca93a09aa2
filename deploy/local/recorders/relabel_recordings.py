"""Rewrite recordings made before ``kvplan.collectors.scrape.relabel`` existed into the relabelled form the
recorders now write: every ``model_name="<path>"`` label becomes its last component. Touches
nothing else in a body. Idempotent.

    .venv/bin/python deploy/local/recorders/relabel_recordings.py [deploy/demo/kvplan-demo.jsonl.gz]
        [tests/fixtures/payloads]
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

from kvplan.collectors.scrape.relabel import relabel_exposition

ROOT = Path(__file__).resolve().parents[3]
def relabel_demo(path: Path) -> int:
    """Rewrite the demo dataset's scrape bodies; returns how many changed."""
    lines, changed = [], 0
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("type") == "scrape":
                new = relabel_exposition(rec["body"])
                changed += new != rec["body"]
                rec["body"] = new
            lines.append(json.dumps(rec))
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(("\n".join(lines) + "\n").encode())
    return changed


def relabel_fixtures(root: Path) -> int:
    """Rewrite the payload files under ``root`` (and the byte counts in their manifests)."""
    changed = 0
    for manifest in sorted(root.glob("*/manifest.json")):
        m = json.loads(manifest.read_text())
        for entry in m.get("files", []):
            p = manifest.parent / entry["file"]
            text = p.read_bytes().decode()
            new = relabel_exposition(text)
            if new != text:
                p.write_bytes(new.encode())
                entry["bytes"] = len(new.encode())
                changed += 1
        manifest.write_text(json.dumps(m, indent=2) + "\n")
    return changed


def main(argv: list[str]) -> int:
    demo = Path(argv[0]) if argv else ROOT / "deploy/demo/kvplan-demo.jsonl.gz"
    fixtures = Path(argv[1]) if len(argv) > 1 else ROOT / "tests/fixtures/payloads"
    print(f"{demo}: {relabel_demo(demo)} scrape bodies relabelled")
    print(f"{fixtures}: {relabel_fixtures(fixtures)} payload files relabelled")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
