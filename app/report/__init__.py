"""The capacity report: one deployment, one UTC month, as HTML or PDF.

Contents follow the evaluation in the domain notes: measured reuse (hit rates by tier), the
tail baseline (TTFT, TPOT and ITL p50/p99 with their buckets), topology (servers and engines per node,
shared or private caches), the pilot comparison (workload runs, each with ``measured_on``),
pricing (benefit waterfall, capacity, deferral, decision, sensitivity), assumptions and the
price book, and data provenance (window, scrape counts, gaps, the queries used). Charts are
the dashboard's own Altair specs rendered to SVG by vl-convert; the PDF is WeasyPrint's.
The same data gives the same report: nothing reads the clock unless ``generated_at`` is
passed.
"""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ...models.core.errors import KvplanError
from ...models.inputs.settings import DeploymentSettings, deployment_settings
from ...sql.db import Database
from .data import ReportData, build

if TYPE_CHECKING:
    from ...models.inputs.settings import Settings

__all__ = ["ReportData", "build", "nightly_reports", "render_html", "render_pdf", "write_report"]


def render_html(data: ReportData, generated_at: datetime | None = None) -> str:
    from .html import render_html as _render

    return _render(data, generated_at)


def render_pdf(html: str) -> bytes:
    """The HTML report as PDF bytes (WeasyPrint)."""
    import logging

    import weasyprint

    logging.getLogger("weasyprint").setLevel(logging.ERROR)
    logging.getLogger("fontTools").setLevel(logging.ERROR)
    return weasyprint.HTML(string=html).write_pdf()


def write_report(db: Database, deployment: str, month: str, path: str | Path, *, model_name: str | None = None,
                 generated_at: datetime | None = None, measured_on: str | None = None,
                 cfg: DeploymentSettings = DeploymentSettings(), prompts_check: dict | None = None) -> Path:
    """Write the capacity report of ``deployment`` for the UTC month ``month`` ('YYYY-MM')
    to ``path``: PDF if it ends in .pdf, HTML if it ends in .html/.htm. Returns the path.
    ``KvplanError`` for an unknown deployment, a month without data or another suffix."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".pdf", ".html", ".htm"):
        raise KvplanError(f"the report is written as .pdf or .html (got {suffix or 'no suffix'!r})", source=str(path))
    _check_writable(path)
    html = render_html(build(db, deployment, month, model_name=model_name, measured_on=measured_on, cfg=cfg,
                             prompts_check=prompts_check),
                       generated_at)
    data = render_pdf(html) if suffix == ".pdf" else html.encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_new(path, data)
    except OSError as e:
        raise KvplanError(f"cannot write the report: {e.strerror or e}", source=str(path)) from None
    return path


def _write_new(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file next to ``path`` and rename it over ``path``: never through a
    symbolic link or into a FIFO or device, and a reader never sees half a report."""
    import os
    import tempfile

    _check_writable(path)  # again: the path may have changed while the report rendered
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _check_writable(path: Path) -> None:
    """Refuse, before any rendering, an output that is a directory, a symbolic link, anything but
    a regular file (a FIFO blocked forever), or lies under a file."""
    if path.is_symlink():
        raise KvplanError("cannot write the report: it is a symbolic link (kvplan does not write through "
                          "links; give the target's path)", source=str(path))
    if path.is_dir():
        raise KvplanError("cannot write the report: it is a directory (give a file name such as "
                          "report.pdf)", source=str(path))
    if path.exists() and not path.is_file():
        raise KvplanError("cannot write the report: it exists and is not a regular file (a FIFO, socket or "
                          "device)", source=str(path))
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise KvplanError(f"cannot write the report: {parent} is a file, not a folder", source=str(path))
            break


def report_file_name(deployment: str, month: str, fmt: str) -> str:
    """The nightly report's file name: the deployment name with anything but letters, digits,
    '.', '_' and '-' replaced by '_' and no leading '.', plus a short hash of the real name when
    that changed it (two names never share a file); it never holds a '/' or starts with '..', so
    it stays inside report_dir (a deployment named '../../escaped' wrote outside it)."""
    import hashlib
    import re

    safe = re.sub(r"[^A-Za-z0-9._-]", "_", deployment).lstrip(".")[:80] or "deployment"
    if safe != deployment:
        safe += "-" + hashlib.sha256(deployment.encode()).hexdigest()[:8]
    return f"{safe}-{month}.{fmt}"


def nightly_reports(settings: Settings, day: date) -> list[Path]:
    """The nightly job's report step (``kvplan.collectors.schedule.scheduler.NightlyJobs.report``): each
    deployment's capacity report for the month of ``day`` (so far) into
    ``schedule.report_dir``. A deployment without data that month is skipped."""
    import logging

    from ...collectors.schedule.scheduler import fetch_rw  # the daemon's scrape threads hold read-write connections

    log = logging.getLogger("kvplan.report")
    db = Database(settings.db, lock_timeout_s=settings.lock_timeout_s)
    month = day.strftime("%Y-%m")
    folder = settings.schedule.report_dir or Path(settings.db).parent / "reports"
    written = []
    for name in sorted({d["deployment"] for d in fetch_rw(db, "deployments")}):
        path = folder / report_file_name(name, month, settings.schedule.report_format)
        try:
            written.append(write_report(db, name, month, path, cfg=deployment_settings(settings, name)))
        except KvplanError as e:  # no data that month
            log.info("report for %s %s not written: %s", name, month, e)
    return written
