"""What GPU time, cache memory and operations cost: the price book.

Every price here is an input the user owns. The defaults are placeholders of the right order
of magnitude (assumed by us, not published anywhere) so that a plan can run before anyone
has typed their own prices in; the app shows them as editable and the report prints them.

Two ways of paying for a GPU:

* ``cloud``: you rent GPU-hours; one GPU-hour costs ``usd_per_gpu_hour``.
* ``owned``: you bought the GPU. Its monthly cost is the capital annuity (the capex paid back
  over ``amortisation_months`` at ``cost_of_capital_annual``, i.e. depreciation plus
  interest) plus power and hosting. Dividing by the hours in a month gives an effective
  $/GPU-hour, so both modes price a GPU-hour the same way downstream.

A month is 30.44 days (365.25 / 12, rounded) everywhere in ``models``.

What this module cannot know: discounts, reserved-instance terms, resale value of owned GPUs,
whether spare host RAM really has another use. Set the numbers accordingly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..core import fields as _fields
from ..core.calendar import HOURS_PER_MONTH
from ..core.fields import FieldSpec
from ..core.fields import spec as _f

PRICING_MODES = ("cloud", "owned")


@dataclass(frozen=True)
class PriceBook:
    """Prices and cost assumptions for one deployment. Per-field docs: ``FIELDS``."""

    gpu_type: str = _f("H100-80GB", "", "GPU model the prices refer to (a label only).",
                       kind="str", minimum=None)
    pricing_mode: str = _f("cloud", "", "'cloud' = rented by the hour (usd_per_gpu_hour); "
                           "'owned' = bought (capex, amortisation, power and hosting).",
                           kind="choice", minimum=None, choices=PRICING_MODES)
    usd_per_gpu_hour: float = _f(2.50, "$/GPU-hour", "Cloud price of one GPU for one hour "
                                 "(used when pricing_mode is 'cloud'). Default: assumed "
                                 "on-demand H100 order of magnitude.", maximum=1000.0)
    capex_usd_per_gpu: float = _f(30000.0, "$/GPU", "Purchase price of one GPU including its "
                                  "share of the server (used when pricing_mode is 'owned').", maximum=10_000_000.0)
    amortisation_months: int = _f(36, "months", "Months over which the capex is paid back "
                                  "(owned mode).", kind="int", minimum=1, maximum=240)
    power_hosting_usd_per_gpu_month: float = _f(300.0, "$/GPU-month", "Power, cooling, rack "
                                                "space and hosting per GPU per month (owned "
                                                "mode).", maximum=100_000.0)
    usd_per_gb_month_cpu_memory: float = _f(2.0, "$/GB-month", "Cost of host RAM given to the "
                                            "KV cache tier. Set 0 if that RAM is idle anyway.", maximum=10_000.0)
    usd_per_gb_month_ssd: float = _f(0.10, "$/GB-month", "Cost of local SSD / disk given to "
                                     "the KV cache tier.", maximum=10_000.0)
    cache_tier_gb_cpu: float = _f(0.0, "GB", "Host RAM dedicated to the KV cache across the "
                                  "fleet (e.g. LMCache L1: 8 ranks x 50 GB = 400 GB).", maximum=10_000_000.0)
    cache_tier_gb_ssd: float = _f(0.0, "GB", "Disk dedicated to the KV cache across the fleet "
                                  "(e.g. LMCache L2 local disk).", maximum=100_000_000.0)
    cache_service_node_usd_per_month: float = _f(0.0, "$/node-month", "Running cost of the "
                                                 "cache service on one node (CPU cores, a "
                                                 "remote store). 0 for vLLM's built-in "
                                                 "prefix cache.", maximum=10_000_000.0)
    ops_hours_per_month: float = _f(4.0, "hours/month", "Engineer time spent operating the "
                                    "cache layer (upgrades, incidents, monitoring).", maximum=744.0)
    usd_per_ops_hour: float = _f(100.0, "$/hour", "Loaded cost of one hour of that engineer "
                                 "time.", maximum=10_000.0)
    cost_of_capital_annual: float = _f(0.08, "1/year", "Annual cost of capital: the interest "
                                       "part of an owned GPU's annuity, i.e. what buying later "
                                       "is worth.", maximum=1.0)
    gpu_memory_gb: float = _f(80.0, "GB", "Memory of one GPU of gpu_type (H100: 80, H200: 141, L40S: 48, A100: 40 "
                              "or 80): the replica memory check sizes GPUs per replica with it.",
                              minimum=1.0, maximum=10_000.0)
    gpus_per_node: int = _f(8, "GPUs/node", "GPUs in one server; one cache service runs per "
                            "node.", kind="int", minimum=1, maximum=1024)

    def __post_init__(self) -> None:
        _fields.check_all(self)

    # ---- derived prices -------------------------------------------------------------
    def capital_usd_per_gpu_month(self) -> float:
        """Owned mode: monthly annuity that pays back the capex at the cost of capital.

        annuity = capex * i / (1 - (1 + i) ** -n), i = cost_of_capital_annual / 12,
        n = amortisation_months; with i = 0 it is capex / n (straight-line)."""
        i = self.cost_of_capital_annual / 12.0
        n = self.amortisation_months
        if i == 0:
            return self.capex_usd_per_gpu / n
        return self.capex_usd_per_gpu * i / (1.0 - (1.0 + i) ** -n)

    def usd_per_gpu_month(self) -> float:
        """What one GPU costs for a whole month in the chosen pricing mode."""
        if self.pricing_mode == "cloud":
            return self.usd_per_gpu_hour * HOURS_PER_MONTH
        return self.capital_usd_per_gpu_month() + self.power_hosting_usd_per_gpu_month

    def effective_usd_per_gpu_hour(self) -> float:
        """$/GPU-hour either way: the cloud price, or the owned monthly cost / 730.56 h."""
        if self.pricing_mode == "cloud":
            return self.usd_per_gpu_hour
        return self.usd_per_gpu_month() / HOURS_PER_MONTH

    def nodes_for(self, num_gpus: int) -> int:
        """Nodes needed to hold ``num_gpus`` GPUs (one cache service each)."""
        return math.ceil(num_gpus / self.gpus_per_node) if num_gpus > 0 else 0

    def cache_overhead_usd_per_month(self, num_gpus: int) -> float:
        """Fixed monthly cost of running the cache layer for a fleet of ``num_gpus``:
        service per node + cache memory + disk + operations time. The per-hit GPU cost
        (lookup/transfer) is not here: it depends on traffic and is added in ``benefit``."""
        return (self.cache_service_node_usd_per_month * self.nodes_for(num_gpus)
                + self.usd_per_gb_month_cpu_memory * self.cache_tier_gb_cpu
                + self.usd_per_gb_month_ssd * self.cache_tier_gb_ssd
                + self.ops_hours_per_month * self.usd_per_ops_hour)

    # ---- persistence ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-serialisable), one key per field."""
        return _fields.to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PriceBook:
        """Build from a dict; missing keys take defaults. Raises ``KvplanError`` naming the
        offending field for unknown keys, wrong types or out-of-range values."""
        return _fields.from_dict(cls, data)


FIELDS: tuple[FieldSpec, ...] = _fields.specs(PriceBook)
"""One row per ``PriceBook`` field: name, unit, help, kind, default, bounds, choices."""
