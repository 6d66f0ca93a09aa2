"""The kit the built engine fixtures are made with (build_engine_fixtures.py): the constructed
traffic (the "before" history and the window, worked out by hand in that module's docstring),
``Fam`` (one metric family as a release declares it), ``exposition`` (prometheus_client writes the
payload) and the value helpers the release declarations fill their families with."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

CREATED = 1764580000.0  # fixed _created of every series (2025-12-01T09:06:40Z): builds are reproducible


# ----------------------------------------------------------------------- the constructed traffic

TTFT = {"before": [0.03, 0.05, 0.07, 0.2, 0.3],
        "window": [0.03, 0.05, 0.07, 0.07, 0.09, 0.2, 0.2, 0.3, 0.45, 0.9]}
GAPS = {"before": [0.02] * 50 + [0.04] * 20 + [0.3] * 5,
        "window": [0.02] * 100 + [0.04] * 40 + [0.3] * 10}
E2E = {"before": [0.9, 1.0, 1.1, 1.4, 1.6],
       "window": [0.9, 0.9, 1.0, 1.0, 1.1, 1.2, 1.2, 1.4, 1.6, 2.2]}
TOTALS = {  # per phase: requests, prompt tokens, cached tokens, output tokens
    "before": {"requests": 5, "prompt": 4800, "cached": 1920, "output": 80},
    "window": {"requests": 10, "prompt": 10000, "cached": 6000, "output": 160},
}


def cumulative(phase: str, key: str) -> float:
    """The counter's value in the ``phase`` payload: before, or before + window (after)."""
    v = TOTALS["before"][key]
    return v + TOTALS["window"][key] if phase == "after" else v


def observations(series: dict[str, list[float]], phase: str) -> list[float]:
    return series["before"] + (series["window"] if phase == "after" else [])


# ----------------------------------------------------------------------- family declarations


@dataclass
class Fam:
    """One metric family as a release declares it, and how to fill it for a phase."""

    name: str  # as declared (counters without _total, as prometheus_client's family name)
    type: str  # counter | gauge | histogram
    help: str
    labels: dict[str, str]  # label name -> value of the one series written
    value: Callable[[str], float | list[float]] | None = None  # phase -> value, or observations
    buckets: Sequence[float] = ()
    series: list[dict[str, str]] = field(default_factory=list)  # more series (label overrides)
    per_series: Callable[[str, dict[str, str]], float | list[float]] | None = None


class _Collector:
    def __init__(self, fams: Iterable[Fam], phase: str, created: bool):
        self.fams, self.phase, self.created = list(fams), phase, created

    def _value(self, f: Fam, lab: dict[str, str]) -> float | list[float]:
        if f.per_series:
            return f.per_series(self.phase, lab)
        if f.value is None:
            raise ValueError(f"{f.name}: neither value nor per_series given")
        return f.value(self.phase)

    def collect(self) -> Iterable[Any]:
        for f in self.fams:
            names = list(f.labels)
            all_series = [f.labels] + [{**f.labels, **s} for s in f.series]
            if f.type == "counter":
                cm = CounterMetricFamily(f.name, f.help, labels=names)
                for lab in all_series:
                    cm.add_metric([lab[n] for n in names], _number(f, self._value(f, lab)),
                                  created=CREATED if self.created else None)
                yield cm
            elif f.type == "gauge":
                gm = GaugeMetricFamily(f.name, f.help, labels=names)
                for lab in all_series:
                    gm.add_metric([lab[n] for n in names], _number(f, self._value(f, lab)))
                yield gm
            else:
                hm = HistogramMetricFamily(f.name, f.help, labels=names)
                bounds = [*f.buckets, float("inf")]
                for lab in all_series:
                    values = [lab[n] for n in names]
                    obs = self._value(f, lab)
                    if not isinstance(obs, list):
                        raise TypeError(f"{f.name}: a histogram is filled with a list of observations")
                    counts = [sum(1 for x in obs if x <= b + 1e-12) for b in bounds]
                    hm.add_metric(values, [(_le(b), float(c)) for b, c in zip(bounds, counts, strict=True)],
                                  sum_value=round(sum(obs), 6))
                    if self.created:
                        hm.add_sample(f.name + "_created", dict(zip(names, values, strict=True)), CREATED)
                yield hm


def _number(f: Fam, v: float | list[float]) -> float:
    if isinstance(v, list):
        raise TypeError(f"{f.name}: a {f.type} is filled with one number, not a list")
    return float(v)


def _le(b: float) -> str:
    return "+Inf" if b == float("inf") else repr(float(b))


def exposition(fams: Iterable[Fam], phase: str, created: bool) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(fams, phase, created))
    return generate_latest(reg).decode()


def c(key: str, scale: float = 1.0) -> Callable[[str], float]:
    return lambda phase: cumulative(phase, key) * scale


def const(v: float) -> Callable[[str], float]:
    return lambda phase: v


def obs_of(series: dict[str, list[float]]) -> Callable[[str], list[float]]:
    return lambda phase: observations(series, phase)


def n_obs(key: str, value: float) -> Callable[[str], list[float]]:
    """``count`` observations of one value (request-level token histograms)."""
    return lambda phase: [value] * int(cumulative(phase, "requests"))


def build_1_2_5(max_value: int) -> list[float]:
    """vLLM's build_1_2_5_buckets (vllm/engine/metrics.py, vllm/v1/metrics/loggers.py)."""
    out: list[float] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > max_value:
                return out
            out.append(float(v))
        exp += 1


MODEL = "tiny-llama"
