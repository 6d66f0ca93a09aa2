"""A parsed /metrics payload's types: PayloadError (names the source and the line), Sample,
Payload, and the helpers that point an error at its exposition line."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...models.core.errors import KvplanError


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


def find_line(text: str, sample_name: str, labels: dict[str, str]) -> list[int]:
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


def fmt_labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
