"""Scraping and reading the Prometheus exposition format: direct /metrics scrapes and saved
payload files (``scrape``), parsing and its checks (``parse``, ``parse_checks``, ``payload``),
``model_name`` shortening (``relabel``), writing payloads back as OpenMetrics (``openmetrics``)
and storing samples, targets and failed scrapes in DuckDB (``store``).

The public names of the group, re-exported; each module says more."""

from __future__ import annotations

from .openmetrics import to_openmetrics
from .parse import check_content_type, detect_kind, parse_payload
from .payload import Payload, PayloadError, Sample
from .relabel import model_label, relabel_exposition
from .scrape import Target, default_target_name, import_file, import_files, redact_url, scrape_target
from .store import ConflictError, check_name, ensure_target, insert_failure, insert_payload, payload_sha256, series_id

__all__ = [
    "ConflictError", "Payload", "PayloadError", "Sample", "Target", "check_content_type", "check_name",
    "default_target_name", "detect_kind", "ensure_target", "import_file", "import_files", "insert_failure",
    "insert_payload", "model_label", "parse_payload", "payload_sha256", "redact_url", "relabel_exposition",
    "scrape_target", "series_id", "to_openmetrics"
]
