"""Turn one /metrics payload (Prometheus text exposition) into typed samples.

Parsing is prometheus_client's (``text_fd_to_metric_families``, or the OpenMetrics parser
when the server says so). This module adds what the parser does not check and what kvplan
needs to stay exact:

* every error names the source (file or URL) and, where the parser stopped, the line;
* counters and histograms must hold finite values, histograms must end in ``+Inf`` with
  ``_count`` equal to it, and the same series may appear only once;
* ``X_created`` samples (process start of a counter or histogram series, exposed by
  prometheus_client as a separate gauge family) are attached to their series as
  ``created`` and never stored as values: they are how a restart is recognised;
* the payload kind (vLLM, LMCache multi-process, LMCache in-process, SGLang) is read off the
  family names; a router's or gateway's /metrics (production-stack router, llm-d EPP, Dynamo
  frontend) is refused with a message naming what it is (``router_of``);
* a vLLM V1 0.7-0.8 prefix-cache counter that counts blocks (its HELP says so) is stored as
  ``<family>_blocks`` so it is never read as tokens.

Nothing here does I/O: callers pass text in and get a :class:`Payload` or a
:class:`PayloadError` back.

The payload's types are in payload.py, the checks beyond the parser's in parse_checks.py.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from prometheus_client.openmetrics.parser import (
    text_fd_to_metric_families as _openmetrics_families,
)
from prometheus_client.parser import text_fd_to_metric_families as _text_families

from ...models.metrics.catalog import COUNTERS
from .parse_checks import (
    check_histograms,
    check_hits,
    created_time,
    part_exceeds_whole,
    refuse_routers,
    refuse_what_is_not_metrics,
    regroup_strays,
    value_is_kept,
)
from .payload import Payload, PayloadError, Sample, find_line, fmt_labels
from .relabel import model_label

KINDS = ("vllm", "lmcache_mp", "lmcache_inproc", "sglang")

# Content types a /metrics endpoint may answer with. Anything else (text/html from a
# login page or a proxy, application/json from an API) is not metrics.
_TEXT_TYPES = ("text/plain",)
_OPENMETRICS_TYPES = ("application/openmetrics-text",)


_ENGINE_NAME = re.compile(r"^((?:# (?:HELP|TYPE|UNIT) )?)(vllm|sglang)([_:])([A-Za-z0-9_:]*)", re.MULTILINE)
"""A line naming a vLLM or SGLang metric (or its HELP/TYPE/UNIT): prefix, engine, separator, rest."""


class _CountingLines:
    """Feeds lines to the parser while remembering which one it is reading, so a
    parser error can be reported with its line number."""

    def __init__(self, text: str):
        self._lines = text.splitlines(keepends=True)
        self.lineno = 0

    def __iter__(self) -> Iterator[str]:
        for i, line in enumerate(self._lines, start=1):
            self.lineno = i
            yield line


def detect_kind(families: dict[str, str]) -> str | None:
    """vLLM if any ``vllm:`` family is present (an in-process LMCache registers its
    ``lmcache:`` families inside vLLM), else LMCache multi-process (``lmcache_mp_``),
    else LMCache in-process alone (``lmcache:``)."""
    names = families.keys()
    if any(n.startswith("vllm:") for n in names):
        return "vllm"
    if any(n.startswith("sglang:") for n in names):
        return "sglang"
    if any(n.startswith("lmcache_mp_") for n in names):
        return "lmcache_mp"
    if any(n.startswith("lmcache:") for n in names):
        return "lmcache_inproc"
    return None


def _blocks_as_blocks(raw_families: list[Any]) -> tuple[list[Any], list[str]]:
    """vLLM V1 0.7-0.8 count ``vllm:gpu_prefix_cache_queries/hits`` in blocks (their HELP says
    "blocks"; 0.9.0+ count tokens under the same names): such a family is renamed
    ``<family>_blocks`` so nothing reads it as tokens."""
    notes = []
    for fam in raw_families:
        if fam.name in _BLOCK_FAMILIES and "block" in (fam.documentation or "").lower():
            new = fam.name + "_blocks"
            fam.samples = [x._replace(name=new + x.name[len(fam.name):]) for x in fam.samples]
            notes.append(f"{fam.name} counts blocks in this release (its HELP: {fam.documentation!r}): stored as "
                         f"{new}, a block hit rate, never as tokens")
            fam.name = new
    return raw_families, notes


_BLOCK_FAMILIES = ("vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_hits")


def _untyped_counters(raw_families: list[Any]) -> tuple[list[Any], list[str]]:
    """Samples of a counter kvplan knows (``catalog.COUNTERS``) written without a TYPE line, or
    without ``_total`` under a TYPE line that has it: the text parser makes them an untyped family,
    which no total reads. They are read as that counter (``<family>_total``), with a warning."""
    notes = []
    for fam in raw_families:
        if fam.type != "unknown":
            continue
        base = fam.name[: -len("_total")] if fam.name.endswith("_total") else fam.name
        if base not in COUNTERS or any(x.name not in (base, base + "_total") for x in fam.samples):
            continue
        fam.samples = [x._replace(name=base + "_total") for x in fam.samples]
        fam.name, fam.type = base, "counter"
        notes.append(f"{base}: written without a counter TYPE line or without _total; read as the counter "
                     f"{base}_total")
    return raw_families, notes


def check_content_type(source: str, content_type: str | None) -> str:
    """Return ``'text'`` or ``'openmetrics'`` for a response's Content-Type, or raise."""
    if not content_type:
        return "text"
    base = content_type.split(";")[0].strip().lower()
    if base in _TEXT_TYPES:
        return "text"
    if base in _OPENMETRICS_TYPES:
        return "openmetrics"
    raise PayloadError(
        source,
        f"Content-Type {content_type!r} is not Prometheus metrics "
        "(expected text/plain or application/openmetrics-text): is this the /metrics URL?",
    )


def _split_labels(source: str, text: str, s, fam_type: str) -> tuple[str | None, str | None, float | None, tuple]:
    labels = s.labels
    model_name = model_label(labels.get("model_name"))  # a path becomes its last component
    engine = labels.get("engine")
    le_raw = labels.get("le")
    le = None
    if fam_type == "histogram" and s.name.endswith("_bucket") and le_raw is None:
        where = find_line(text, s.name, labels)
        raise PayloadError(source, f"{s.name}{fmt_labels(labels)}: a histogram bucket without an le label",
                           line=where[0] if where else None)
    if le_raw is not None:
        try:
            le = float(le_raw)
        except ValueError:
            le = None
        if le is None or math.isnan(le):
            where = find_line(text, s.name, labels)
            raise PayloadError(source, f"{s.name}{fmt_labels(labels)}: le={le_raw!r} is not a number",
                               line=where[0] if where else None)
    rest = tuple(sorted((k, v) for k, v in labels.items() if k not in ("model_name", "engine", "le")))
    return model_name, engine, le, rest


def parse_payload(text: str, source: str, *, content_type: str | None = None,
                  kind: str | None = None, at: datetime | None = None) -> Payload:
    """Parse and validate one payload taken at ``at`` (default now). ``kind`` forces the
    payload kind; otherwise it is detected from the family names. Raises :class:`PayloadError`
    naming the source, the line and the series of the first impossible value.

    The stages run in the order a payload is checked: it is metrics at all; the parser reads
    its families; ``_created`` samples become series start times; the kind; every sample's
    value (type, finiteness, sign and size, duplicates); histograms and hit pairs."""
    at_s = at.timestamp() if at is not None else time.time()
    if kind is not None and kind not in KINDS:
        raise PayloadError(source, f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    fmt = check_content_type(source, content_type)
    refuse_what_is_not_metrics(source, text)
    text, mapped = _colon_names(text)
    raw_families, strays = regroup_strays(text, _read_families(source, text, fmt))
    raw_families, blocks = _blocks_as_blocks(raw_families)
    raw_families, untyped = _untyped_counters(raw_families)
    families, created, plain = _split_created(source, text, raw_families, at_s)
    refuse_routers(source, families)
    kind = kind or _detected_kind(source, families)
    samples, warnings = _checked_samples(source, text, plain, created)
    check_histograms(source, samples)
    check_hits(source, text, samples)
    return Payload(source=source, kind=kind, samples=samples, families=families,
                   warnings=mapped + strays + blocks + untyped + warnings + part_exceeds_whole(samples))


def _colon_names(text: str) -> tuple[str, list[str]]:
    """prometheus_client (OpenMetrics, or UTF-8 name escaping) may write vLLM's and SGLang's
    names with '_' for ':'. Both engines name every metric vllm:... / sglang:..., so map them
    back and say so, name by name: a payload can hold ``vllm_x`` beside ``vllm:y`` (a client or
    relabelling that rewrote some families). A name present both ways is read once, as the
    colon one, and the other is named in a warning."""
    names = {m.group(2) + m.group(3) + m.group(4) for m in _ENGINE_NAME.finditer(text)}
    mapped: dict[str, set[str]] = {}
    twins: set[str] = set()

    def sub(m: re.Match) -> str:
        engine, sep, rest = m.group(2), m.group(3), m.group(4)
        if sep == ":":
            return m.group(0)
        if f"{engine}:{rest}" in names:
            twins.add(f"{engine}_{rest}")
            return m.group(0)
        mapped.setdefault(engine, set()).add(f"{engine}_{rest}")
        return f"{m.group(1)}{engine}:{rest}"

    text = _ENGINE_NAME.sub(sub, text)
    warnings = [f"metric names written {engine}_... were read as {'vLLM' if engine == 'vllm' else 'SGLang'}'s "
                f"{engine}:... (saved by a client that replaced ':' with '_'): {', '.join(sorted(ns)[:6])}"
                + (f" and {len(ns) - 6} more" if len(ns) > 6 else "") for engine, ns in sorted(mapped.items())]
    if twins:
        warnings.append(f"{', '.join(sorted(twins)[:6])}{' ...' if len(twins) > 6 else ''}: also written with ':' in "
                        "this payload; the ':' names are read, these are not (one quantity is never read twice)")
    return text, warnings


def _read_families(source: str, text: str, fmt: str) -> list[Any]:
    """prometheus_client's families; a parse error names the line the parser stopped on."""
    lines = _CountingLines(text)
    parser = _openmetrics_families if fmt == "openmetrics" else _text_families
    try:
        return list(parser(lines))  # type: ignore[arg-type]  # the parsers only iterate (TextIO in their stub)
    except (ValueError, IndexError, KeyError) as e:
        bad = text.splitlines()[lines.lineno - 1] if lines.lineno else ""
        raise PayloadError(source, f"cannot parse {bad[:120]!r}: {e}", line=lines.lineno or None) from None


def _split_created(source: str, text: str, raw_families: list[Any], at_s: float
                   ) -> tuple[dict[str, str], dict[tuple, float], list[tuple[str, str, Any]]]:
    """(family -> type, (base family, labels without le) -> _created, the other samples).

    prometheus_client exposes X_created as its own gauge family in the text format and as a
    sample of the family in OpenMetrics; either way it is the series' start time."""
    kept = {f.name: f.type for f in raw_families if not f.name.endswith("_created")}
    families: dict[str, str] = dict(kept)
    created: dict[tuple, float] = {}
    plain: list[tuple[str, str, Any]] = []  # (family, type, sample)
    for fam in raw_families:
        for s in fam.samples:
            base = s.name[: -len("_created")] if s.name.endswith("_created") else None
            if base is not None and kept.get(base) in ("counter", "histogram", "summary"):
                created[(base, tuple(sorted(s.labels.items())))] = created_time(source, text, s, at_s)
                continue
            plain.append((fam.name, fam.type, s))
            if fam.name.endswith("_created"):
                families[fam.name] = fam.type
    return families, created, plain


def _detected_kind(source: str, families: dict[str, str]) -> str:
    detected = detect_kind(families)
    if detected is None:
        raise PayloadError(source, "no vLLM (vllm:*), SGLang (sglang:*) or LMCache (lmcache_mp_*, lmcache:*) "
                                   "metrics in this payload; pass --kind to force one")
    return detected


def _checked_samples(source: str, text: str, plain: list[tuple[str, str, Any]], created: dict[tuple, float]
                     ) -> tuple[list[Sample], list[str]]:
    """Every sample's value checked (finite, not negative, at most 2**53 for counters) and
    duplicates refused; gauges and summary quantiles that are not finite are left out, with a
    warning."""
    samples: list[Sample] = []
    seen: dict[tuple, Sample] = {}
    warnings: list[str] = []
    for fam_name, fam_type, s in plain:
        model_name, engine, le, rest = _split_labels(source, text, s, fam_type)
        value = float(s.value)
        if not value_is_kept(source, text, s, fam_type, value, warnings):
            continue
        labels_no_le = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
        sample = Sample(
            name=s.name, family=fam_name, type=fam_type, value=value, model_name=model_name,
            engine=engine, le=le, labels=rest, created=created.get((fam_name, labels_no_le)),
        )
        if sample.key in seen:
            where = find_line(text, s.name, s.labels)
            at = f" (lines {', '.join(map(str, where))})" if len(where) > 1 else ""
            raise PayloadError(source, f"duplicate series {s.name}{fmt_labels(s.labels)}{at}",
                               line=where[-1] if where else None)
        seen[sample.key] = sample
        samples.append(sample)
    return samples, warnings
