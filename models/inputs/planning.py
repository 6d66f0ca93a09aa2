"""What the user decides, not what is measured: SLO targets, growth, horizon, how freed GPU
time is realised, the data gates and the uncertainty ranges (``PlanningInputs``); and the
config's flat ``[prices]`` table read as a price book plus planning inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core import fields as _fields
from ..core.errors import KvplanError
from ..core.fields import spec
from .pricebook import FIELDS as PRICEBOOK_FIELDS
from .pricebook import PriceBook

REALISATIONS = ("shrink", "absorb_growth")
"""Freed GPU time is either a smaller fleet (shrink) or more traffic on the same one
(absorb_growth), never both."""



@dataclass(frozen=True)
class PlanningInputs:
    """What the user decides (not measured): target, growth, horizon, how to realise savings.

    The fleet's GPU count is not here: it is a deployment fact (``PrefillMeasurement.num_gpus``,
    resolved once by ``kvplan.app.data.store.fleet``)."""

    ttft_p99_slo_seconds: float = spec(2.0, "s", "p99 time-to-first-token target. Default assumed: "
                                       "interactive chat.", minimum=0.0, exclusive_minimum=True, maximum=3600.0)
    tpot_p99_slo_seconds: float = spec(0.1, "s", "p99 time-per-output-token target (a request's decode time / "
                                       "(output tokens - 1); 0.1 s = 10 tokens/s, a vLLM TPOT bucket bound). "
                                       "Default assumed: interactive chat.", minimum=0.0, exclusive_minimum=True,
                                       maximum=3600.0)
    growth_rate_per_month: float = spec(0.0, "1/month", "Expected compound monthly growth of requests "
                                        "(0.05 = +5 %/month).", minimum=-0.99, maximum=2.0)
    growth_source: str = spec("planning", "", "planning (growth_rate_per_month above) or measured_trend (the "
                              "deployment's daily requests, log-linear fit over at least 14 whole days; the "
                              "planning figure when there are fewer).", kind="choice", minimum=None,
                              choices=("planning", "measured_trend"))
    horizon_months: int = spec(24, "months", "Planning horizon.", kind="int", minimum=1, maximum=120)
    realisation: str = spec("shrink", "", "shrink (fewer GPUs) or absorb_growth (same GPUs, more traffic).",
                            kind="choice", minimum=None, choices=REALISATIONS)
    prefill_capacity_share: float = spec(1.0, "0-1", "Share of GPU time available to prefill (rest: decode). "
                                         "1 = optimistic.", minimum=0.0, exclusive_minimum=True, maximum=1.0)
    headroom_fill_fraction: float = spec(0.0, "0-1", "absorb_growth: share of idle freed headroom extra "
                                         "traffic will use (0 = none).", maximum=1.0)
    min_window_seconds: float = spec(3600.0, "s", "Shorter windows give NEED_DATA (one hour).",
                                     maximum=366 * 86400.0)
    min_requests: float = spec(100.0, "requests", "Fewer requests give NEED_DATA (sampling error "
                               "1/sqrt(100) = 10 %).", maximum=1e12)
    min_benefit_share_of_fleet_cost: float = spec(0.01, "0-1", "A benefit below this share of the fleet's "
                                                  "monthly cost is NOT_WORTH_IT (1 %).", maximum=1.0)
    headroom: float = spec(0.2, "0-1", "Spare capacity kept above the busiest hour's demand when sizing from a "
                           "measured goodput (0.2 = 20 %). The queueing fallback sizes to the p99 instead.",
                           maximum=10.0)
    hit_rate_range: float = spec(0.1, "0-1", "Uncertainty: hit rate drawn within +- this share of the saving "
                                 "over the baseline (0.1 = +-10 %).", maximum=1.0)
    price_range: float = spec(0.2, "0-1", "Uncertainty: GPU price drawn within +- this share (0.2 = +-20 %).",
                              maximum=0.99)
    growth_range: float = spec(0.05, "1/month", "Uncertainty: monthly growth drawn within +- this many points "
                               "(0.05 = +-5 %/month).", maximum=1.0)

    def __post_init__(self) -> None:
        _fields.check_all(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlanningInputs:
        """From a form, TOML table or saved JSON; ``KvplanError`` names the field."""
        return _fields.from_dict(cls, data)

    def to_dict(self) -> dict[str, Any]:
        return _fields.to_dict(self)


PLANNING_FIELDS = _fields.specs(PlanningInputs)
"""One ``FieldSpec`` per ``PlanningInputs`` field (form, validation, docs)."""


def prices_from_table(values: dict[str, Any]) -> tuple[PriceBook, PlanningInputs]:
    """One flat table of price-book and planning fields (the config's ``[prices]``) as both;
    ``KvplanError`` names an unknown key or the field out of bounds."""
    pb_keys = {f.name for f in PRICEBOOK_FIELDS}
    known = pb_keys | {f.name for f in PLANNING_FIELDS}
    unknown = sorted(set(values) - known)
    if unknown:
        raise KvplanError(f"not a price-book or planning field (known: {', '.join(sorted(known))})",
                          source=unknown[0])
    return (PriceBook.from_dict({k: v for k, v in values.items() if k in pb_keys}),
            PlanningInputs.from_dict({k: v for k, v in values.items() if k not in pb_keys}))
