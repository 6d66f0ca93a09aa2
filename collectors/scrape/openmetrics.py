"""Write recorded payloads out as timestamped OpenMetrics, the input of
``promtool tsdb create-blocks-from openmetrics``.

This is how kvplan's numbers are checked against Prometheus itself (load the same
payloads into a real Prometheus and ask PromQL), and how a Prometheus is filled with
replayed history for benchmarks. Every sample keeps its exposed name (``..._total``,
``..._bucket``) and is written with type ``unknown``, so PromQL sees exactly the series a
scrape of the server would have produced.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime

from .payload import Payload, Sample


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def label_text(sample: Sample, extra: dict[str, str]) -> str:
    labels = dict(sample.labels)
    if sample.model_name is not None:
        labels["model_name"] = sample.model_name
    if sample.engine is not None:
        labels["engine"] = sample.engine
    if sample.le is not None:
        labels["le"] = "+Inf" if math.isinf(sample.le) else repr(sample.le)
    labels.update(extra)
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items())) + "}"


def to_openmetrics(scrapes: Iterable[tuple[datetime, dict[str, str], Payload]]) -> str:
    """``scrapes``: (time, extra target labels such as instance/job, payload). Returns one
    OpenMetrics text with every sample timestamped, grouped by metric name."""
    by_name: dict[str, list[tuple[float, str, float]]] = {}
    for ts, extra, payload in scrapes:
        t = ts.timestamp()
        for s in payload.samples:
            by_name.setdefault(s.name, []).append((t, label_text(s, extra), s.value))
    out: list[str] = []
    for name in sorted(by_name):
        out.append(f"# TYPE {name} unknown")
        rows = sorted(by_name[name], key=lambda r: (r[1], r[0]))
        out.extend(f"{name}{lab} {val!r} {t:.3f}" for t, lab, val in rows)
    out.append("# EOF")
    return "\n".join(out) + "\n"
