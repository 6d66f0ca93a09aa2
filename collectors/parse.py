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
"""

from __future__ import annotations

import itertools
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client.openmetrics.parser import (
    text_fd_to_metric_families as _openmetrics_families,
)
from prometheus_client.parser import text_fd_to_metric_families as _text_families

from kvplan.collectors.relabel import model_label
from kvplan.models.core.errors import KvplanError
from kvplan.models.metrics.window import parts_above_whole

KINDS = ("vllm", "lmcache_mp", "lmcache_inproc", "sglang")

# Content types a /metrics endpoint may answer with. Anything else (text/html from a
# login page or a proxy, application/json from an API) is not metrics.
_TEXT_TYPES = ("text/plain",)
_OPENMETRICS_TYPES = ("application/openmetrics-text",)


_UNDERSCORED = re.compile(r"^(?:# (?:HELP|TYPE|UNIT) )?vllm_", re.MULTILINE)
_COLON = re.compile(r"^(?:# (?:HELP|TYPE|UNIT) )?vllm:", re.MULTILINE)
_UNDERSCORED_SUB = re.compile(r"^((?:# (?:HELP|TYPE|UNIT) )?)vllm_", re.MULTILINE)


class PayloadError(KvplanError):
    """A payload kvplan refuses to store. ``str()`` names the source and the line."""

    def __init__(self, source: str, message: str, line: int | None = None):
        super().__init__(message, source=f"{source}:{line}" if line is not None else source)
        self.source = source  # the file or URL; the line is apart
        self.line = line


@dataclass(frozen=True)
class Sample:
    """One value of one series in one payload.

    ``name`` is the sample name as exposed (``vllm:prefix_cache_hits_total``,
    ``vllm:time_to_first_token_seconds_bucket``); ``family`` is the family it belongs to
    (``vllm:prefix_cache_hits``); ``labels`` excludes ``model_name``, ``engine`` and
    ``le``, which have their own fields because every query filters or groups on them.
    """

    name: str
    family: str
    type: str
    value: float
    model_name: str | None = None
    engine: str | None = None
    le: float | None = None
    labels: tuple[tuple[str, str], ...] = ()
    created: float | None = None

    @property
    def key(self) -> tuple:
        """What identifies the series inside one target."""
        return (self.name, self.model_name, self.engine, self.le, self.labels)


@dataclass
class Payload:
    """A parsed, validated payload of one target."""

    source: str
    kind: str
    samples: list[Sample]
    families: dict[str, str] = field(default_factory=dict)  # family -> type
    warnings: list[str] = field(default_factory=list)

    def values(self, name: str) -> list[Sample]:
        return [s for s in self.samples if s.name == name]


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


_PSTACK = "the vLLM production-stack router"
_ROUTER_FAMILIES = {  # families only a router or gateway declares -> what it is
    "vllm:healthy_pods_total": _PSTACK, "vllm:current_qps": _PSTACK, "vllm:avg_latency": _PSTACK,
    "vllm:num_incoming_requests": _PSTACK, "vllm:routing_decisions": _PSTACK,
}
_ROUTER_PREFIXES = {"inference_pool_": "an llm-d / Gateway API Inference Extension endpoint picker (EPP)",
                    "inference_model_": "an llm-d / Gateway API Inference Extension endpoint picker (EPP)",
                    "inference_objective_": "an llm-d / Gateway API Inference Extension endpoint picker (EPP)",
                    "dynamo_frontend_": "an NVIDIA Dynamo frontend"}


def router_of(families: dict[str, str]) -> tuple[str, list[str]] | None:
    """(what it is, the families that say so) when the payload is a router's or a gateway's,
    not an engine's: its vllm:* families, if any, are gauges it copied from the engines or its
    own request averages."""
    for name in sorted(families):
        hit = _ROUTER_FAMILIES.get(name) or next((w for p, w in _ROUTER_PREFIXES.items() if name.startswith(p)), None)
        if hit:
            return hit, [n for n in sorted(families) if n in _ROUTER_FAMILIES or n.startswith(tuple(_ROUTER_PREFIXES))]
    return None


def _refuse_routers(source: str, families: dict[str, str]) -> None:
    found = router_of(families)
    if found is None:
        return
    what, names = found
    raise PayloadError(source, f"this is {what}'s /metrics ({', '.join(names[:4])}"
                               f"{' ...' if len(names) > 4 else ''}), not an engine's: its figures are routing "
                               "estimates and gauges copied from the engines (e.g. vllm:gpu_prefix_cache_hits_total as "
                               "a gauge). Point kvplan at each engine's own /metrics (vLLM, SGLang, LMCache) instead")


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
        where = _find_line(text, s.name, labels)
        raise PayloadError(source, f"{s.name}{_fmt_labels(labels)}: a histogram bucket without an le label",
                           line=where[0] if where else None)
    if le_raw is not None:
        try:
            le = float(le_raw)
        except ValueError:
            le = None
        if le is None or math.isnan(le):
            where = _find_line(text, s.name, labels)
            raise PayloadError(source, f"{s.name}{_fmt_labels(labels)}: le={le_raw!r} is not a number",
                               line=where[0] if where else None)
    rest = tuple(sorted((k, v) for k, v in labels.items() if k not in ("model_name", "engine", "le")))
    return model_name, engine, le, rest


def _find_line(text: str, sample_name: str, labels: dict[str, str]) -> list[int]:
    """Line numbers of exposition lines for this sample (used to point at duplicates)."""
    hits = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.startswith(sample_name):
            continue
        rest = line[len(sample_name):]
        if rest[:1] not in ("{", " ", "\t"):
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            hits.append(i)
    return hits


MAX_COUNTER = float(2**53)
"""The largest counter value kept: above 2**53 a double cannot count by one any more, so
such a value is corrupt (or a test of 1e308), not traffic."""
CREATED_AHEAD_S = 366 * 86400
"""A ``_created`` time more than this after the scrape time is impossible: refused."""
HIT_PAIRS = (
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    ("vllm:external_prefix_cache_hits_total", "vllm:external_prefix_cache_queries_total"),
    ("lmcache_mp_lookup_hit_tokens_total", "lmcache_mp_lookup_requested_tokens_total"),
    ("lmcache_mp_lookup_hit_l1_tokens_total", "lmcache_mp_lookup_requested_tokens_total"),
    ("lmcache_mp_lookup_hit_l2_tokens_total", "lmcache_mp_lookup_requested_tokens_total"),
    ("lmcache:num_hit_tokens_total", "lmcache:num_requested_tokens_total"),
)
"""(hits, queries) counters of one series: hits can never exceed queries in one payload."""


def _le(s: Sample) -> float:
    """A bucket sample's upper bound (``+Inf`` for a sample without one)."""
    return math.inf if s.le is None else s.le


SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "summary": ("", "_count", "_sum"),
            "gaugehistogram": ("_bucket", "_gcount", "_gsum"), "gauge": ("",), "info": ("_info",),
            "stateset": ("",)}


def _regroup_strays(text: str, raw_families: list[Any]) -> tuple[list[Any], list[str]]:
    """Samples written outside their family's block (after another family's lines): the text
    parser makes each such run a new family of type unknown, which was stored untyped and left out
    of every total. Exposition requires a family's lines together; Prometheus itself reads the
    samples by name. Here they join the family their name belongs to (its type), with a warning."""
    owner: dict[str, Any] = {}
    for fam in raw_families:
        if fam.type != "unknown":
            for suffix in SUFFIXES.get(fam.type, ("",)):
                owner.setdefault(fam.name + suffix, fam)
    kept, warnings = [], []
    for fam in raw_families:
        homes = {id(owner[x.name]): owner[x.name] for x in fam.samples if x.name in owner}
        if fam.type != "unknown" or len(homes) != 1 or any(x.name not in owner for x in fam.samples):
            kept.append(fam)
            continue
        (target,) = homes.values()
        target.samples.extend(fam.samples)
        first = fam.samples[0]
        where = _find_line(text, first.name, first.labels)
        more = f" and {len(fam.samples) - 1} more sample(s)" if len(fam.samples) > 1 else ""
        warnings.append(f"{first.name}{_fmt_labels(first.labels)}" + (f" (line {where[-1]})" if where else "")
                        + f"{more} outside the lines of its family {target.name} ({target.type}; another family's "
                        "lines come between, or its TYPE line names it differently): read as part of it")
    return kept, warnings


def part_exceeds_whole(samples: list[Sample]) -> list[str]:
    """Sums that cannot be, within one payload (``kvplan.models.metrics.window.parts_above_whole``)."""
    return parts_above_whole((x.name, x.model_name, x.engine, x.labels, x.value) for x in samples)


def _monotonic(fam_type: str, name: str) -> bool:
    """Samples that only count up from 0: counters, histogram buckets and counts, summary counts."""
    return fam_type == "counter" or (fam_type in ("histogram", "summary") and name.endswith(("_bucket", "_count")))


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
    _refuse_what_is_not_metrics(source, text)
    text, mapped = _colon_names(text)
    raw_families, strays = _regroup_strays(text, _read_families(source, text, fmt))
    raw_families, blocks = _blocks_as_blocks(raw_families)
    families, created, plain = _split_created(source, text, raw_families, at_s)
    _refuse_routers(source, families)
    kind = kind or _detected_kind(source, families)
    samples, warnings = _checked_samples(source, text, plain, created)
    _check_histograms(source, samples)
    _check_hits(source, text, samples)
    return Payload(source=source, kind=kind, samples=samples, families=families,
                   warnings=mapped + strays + blocks + warnings + part_exceeds_whole(samples))


def _refuse_what_is_not_metrics(source: str, text: str) -> None:
    if not text.strip():
        raise PayloadError(source, "empty body: no metrics at all")
    head = text.lstrip()[:200].lower()
    if head.startswith("<!doctype") or head.startswith("<html") or "<html" in head:
        raise PayloadError(source, "this is an HTML page, not Prometheus metrics: "
                                   "is this the /metrics URL (not a login page or proxy)?", line=1)
    if head.startswith("{") or head.startswith("["):
        raise PayloadError(source, "this looks like JSON, not Prometheus text exposition", line=1)


def _colon_names(text: str) -> tuple[str, list[str]]:
    """prometheus_client (OpenMetrics, or UTF-8 name escaping) may write vLLM's names with
    '_' for ':'. vLLM names every metric vllm:..., so map them back and say so."""
    if _UNDERSCORED.search(text) and not _COLON.search(text):
        return _UNDERSCORED_SUB.sub(r"\1vllm:", text), [
            "metric names written vllm_... were read as vLLM's vllm:... (saved by a client that "
            "replaced ':' with '_')"]
    return text, []


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
                created[(base, tuple(sorted(s.labels.items())))] = _created_time(source, text, s, at_s)
                continue
            plain.append((fam.name, fam.type, s))
            if fam.name.endswith("_created"):
                families[fam.name] = fam.type
    return families, created, plain


def _created_time(source: str, text: str, s: Any, at_s: float) -> float:
    c = float(s.value)
    why = ("is not a number" if math.isnan(c) else "is not finite" if not math.isfinite(c)
           else "is before 1970" if c <= 0
           else "is more than a year after the scrape time" if c > at_s + CREATED_AHEAD_S else None)
    if why:
        where = _find_line(text, s.name, s.labels)
        raise PayloadError(source, f"{s.name}{_fmt_labels(s.labels)} = {s.value}: a _created time "
                                   f"(unix seconds of the series' start) {why}",
                           line=where[0] if where else None)
    return c


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
        if not _value_is_kept(source, text, s, fam_type, value, warnings):
            continue
        labels_no_le = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
        sample = Sample(
            name=s.name, family=fam_name, type=fam_type, value=value, model_name=model_name,
            engine=engine, le=le, labels=rest, created=created.get((fam_name, labels_no_le)),
        )
        if sample.key in seen:
            where = _find_line(text, s.name, s.labels)
            at = f" (lines {', '.join(map(str, where))})" if len(where) > 1 else ""
            raise PayloadError(source, f"duplicate series {s.name}{_fmt_labels(s.labels)}{at}",
                               line=where[-1] if where else None)
        seen[sample.key] = sample
        samples.append(sample)
    return samples, warnings


def _value_is_kept(source: str, text: str, s: Any, fam_type: str, value: float, warnings: list[str]) -> bool:
    quantile = fam_type == "summary" and "quantile" in s.labels
    if not math.isfinite(value):
        if fam_type in ("counter", "histogram", "summary") and not quantile:
            lines_at = _find_line(text, s.name, s.labels)
            raise PayloadError(source, f"{s.name}{_fmt_labels(s.labels)} is {s.value}: a {fam_type} "
                                       "must be a finite number", line=lines_at[0] if lines_at else None)
        # a gauge, or a summary quantile (NaN when nothing was observed lately): kept out
        warnings.append(f"{s.name}{_fmt_labels(s.labels)} is {s.value}; not stored")
        return False
    too_big = abs(value) > MAX_COUNTER
    if _monotonic(fam_type, s.name) and (value < 0 or too_big):
        lines_at = _find_line(text, s.name, s.labels)
        why = "negative" if value < 0 else f"above 2**53 ({MAX_COUNTER:.4g}), beyond exact counting"
        raise PayloadError(source, f"{s.name}{_fmt_labels(s.labels)} = {s.value}: a {fam_type} value cannot be "
                                   f"{why}", line=lines_at[0] if lines_at else None)
    if too_big:
        warnings.append(f"{s.name}{_fmt_labels(s.labels)} is {s.value} (above 2**53); not stored")
        return False
    return True


def _fmt_labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _check_histograms(source: str, samples: list[Sample]) -> None:
    """Each histogram series needs a ``+Inf`` bucket equal to its ``_count`` and
    non-decreasing cumulative buckets; a payload cut off mid-histogram fails here."""
    buckets: dict[tuple, list[Sample]] = {}
    counts: dict[tuple, float] = {}
    for s in samples:
        if s.type != "histogram":
            continue
        ident = (s.family, s.model_name, s.engine, s.labels)
        if s.name.endswith("_bucket"):
            buckets.setdefault(ident, []).append(s)
        elif s.name.endswith("_count"):
            counts[ident] = s.value
    for ident, bs in buckets.items():
        family = ident[0]
        bs = sorted(bs, key=_le)
        label = f"{family} (model_name={ident[1]}, engine={ident[2]})"
        if not math.isinf(_le(bs[-1])):
            raise PayloadError(source, f"histogram {label} has no le=\"+Inf\" bucket: payload truncated?")
        for a, b in itertools.pairwise(bs):
            if b.value < a.value:
                raise PayloadError(source, f"histogram {label}: bucket le={b.le} ({b.value}) is below "
                                           f"le={a.le} ({a.value}); buckets must be cumulative")
        if ident in counts and counts[ident] != bs[-1].value:
            raise PayloadError(source, f"histogram {label}: _count {counts[ident]} != +Inf bucket {bs[-1].value}")
        if ident not in counts:
            raise PayloadError(source, f"histogram {label} has buckets but no _count: payload truncated?")


def _check_hits(source: str, text: str, samples: list[Sample]) -> None:
    """Within one payload, a hits counter never exceeds the queries counter of its series."""
    by_key = {(x.name, x.model_name, x.engine, x.labels): x for x in samples}
    for hits_name, queries_name in HIT_PAIRS:
        for (name, model_name, engine, labels), h in by_key.items():
            if name != hits_name:
                continue
            q = by_key.get((queries_name, model_name, engine, labels))
            if q is not None and h.value > q.value:
                lbl = dict(labels, **({"model_name": model_name} if model_name is not None else {}),
                           **({"engine": engine} if engine is not None else {}))
                where = _find_line(text, hits_name, lbl)
                raise PayloadError(source, f"{hits_name}{_fmt_labels(lbl)} = {h.value:g} is above "
                                           f"{queries_name} = {q.value:g}: hits cannot exceed queries",
                                   line=where[0] if where else None)
