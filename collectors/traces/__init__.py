"""Request traces for the cache-size what-if: LMCache lookup-hash logs and Mooncake traces,
found (``paths``), read line by line (``lines``), parsed and checked (``parse``) and imported
into DuckDB (``ingest``; request logs: ``request_logs``; what both store: ``stored``).

The public names of the group, re-exported; each module says more."""

from __future__ import annotations

from .ingest import TraceInfo, import_trace, ingest_trace_dir, load_trace
from .parse import TraceError

__all__ = ["TraceError", "TraceInfo", "import_trace", "ingest_trace_dir", "load_trace"]
