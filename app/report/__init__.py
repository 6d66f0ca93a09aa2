"""The capacity report: one deployment, one UTC month, as HTML or PDF.

Contents follow the evaluation in the domain notes: measured reuse (hit rates by tier), the
tail baseline (TTFT p50/p99 with their buckets), topology (servers and engines per node,
shared or private caches), the pilot comparison (workload runs, each with ``measured_on``),
pricing (benefit waterfall, capacity, deferral, decision, sensitivity), assumptions and the
price book, and data provenance (window, scrape counts, gaps, the queries used). Charts are
the dashboard's own Altair specs rendered to SVG by vl-convert; the PDF is WeasyPrint's.
The same data gives the same report: nothing reads the clock unless ``generated_at`` is
passed.
"""

from __future__ import annotations

from models.errors import KvplanError

from datetime import datetime
from pathlib import Path

from sql.db import Database

from app.report.data import ReportData, build  # noqa: F401  (re-exported)


def render_html(data: ReportData, generated_at: datetime | None = None) -> str:
    from app.report.html import render_html as _render

    return _render(data, generated_at)


def render_pdf(html: str) -> bytes:
    """The HTML report as PDF bytes (WeasyPrint)."""
    import logging

    import weasyprint

    logging.getLogger("weasyprint").setLevel(logging.ERROR)
    logging.getLogger("fontTools").setLevel(logging.ERROR)
    return weasyprint.HTML(string=html).write_pdf()


def write_report(db: Database, deployment: str, month: str, path: str | Path, *, model: str | None = None,
                 generated_at: datetime | None = None, measured_on: str | None = None) -> Path:
    """Write the capacity report of ``deployment`` for the UTC month ``month`` ('YYYY-MM')
    to ``path``: PDF if it ends in .pdf, HTML if it ends in .html/.htm. Returns the path.
    ``ValueError`` for an unknown deployment, a month without data or another suffix."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".pdf", ".html", ".htm"):
        raise ValueError(f"{path}: the report is written as .pdf or .html (got {suffix or 'no suffix'!r})")
    _check_writable(path)
    html = render_html(build(db, deployment, month, model=model, measured_on=measured_on), generated_at)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if suffix == ".pdf":
            path.write_bytes(render_pdf(html))
        else:
            path.write_text(html, encoding="utf-8")
    except OSError as e:
        raise KvplanError(f"cannot write the report: {e.strerror or e}", source=str(path)) from None
    return path


def _check_writable(path: Path) -> None:
    """Refuse, before any rendering, an output that is a directory or lies under a file."""
    if path.is_dir():
        raise KvplanError("cannot write the report: it is a directory (give a file name such as "
                          "report.pdf)", source=str(path))
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise KvplanError(f"cannot write the report: {parent} is a file, not a folder", source=str(path))
            break
