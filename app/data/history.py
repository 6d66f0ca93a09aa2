"""A deployment's measured history, read once per command.

``load_history`` reads, through the one source it is given (a ``Snapshot``: every read sees the
same data), what every priced answer of a command shares, and returns it as a frozen
``History``:

* the prefill intervals of the look-back ending at ``t_to`` (``prefill_table``: named queries
  ``prefill_intervals`` and ``prefill_rollup_rows``, as columns; LMCache's stored tokens counted
  with the deployment's own ``lmcache_chunk_tokens``);
* the prefill cost model fitted on them, once (``kvplan.models.prefill.fit.fit_prefill_cost``);
* the overheads calibrated on the same span (``latency_intervals``, whose "engine alone" shares
  come from the same prefill intervals: no second read), when a TTFT answer needs them, and the
  TTFT latency model from both;
* the price book and planning inputs (``load_pricebook``), the deployment facts (``load_facts``)
  and the latest measured A/B pair.

The plan (``kvplan.app.data.plan``), the what-if, the topology finding (``kvplan plan
--topology``), the cost view and the report all take it, so one command prices every number
with one cost model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from ...models.cache.latency import LatencyInterval, LatencyModel, Overheads, calibrate
from ...models.core.timeutil import aware_utc
from ...models.prefill.fit import PrefillCostModel, fit_prefill_cost
from ...models.prefill.interval import Interval
from ...models.prefill.measurement import PrefillMeasurement, price_window
from ...models.prefill.table import IntervalTable
from ...models.prefill.window import MeasuredAB
from ...sql.db import Source
from .latency import latency_intervals
from .prefill import DEFAULT_LOOKBACK, describe_history, measured_ab, prefill_table
from .store import DeploymentSettings, Facts, Prices, load_facts, load_pricebook


@dataclass(frozen=True)
class History:
    """What one command knows about a deployment's past (module doc)."""

    deployment: str
    model_name: str | None
    t_from: datetime
    """Start of the history read (aware UTC): the look-back before ``t_to``, or the window's
    start when the window is longer."""
    t_to: datetime
    table: IntervalTable
    """Prefill intervals of [t_from, t_to], one per target and scrape interval, as columns (what
    the fit and the priced windows compute on)."""
    cost: PrefillCostModel
    """The prefill cost model, fitted once on ``table``."""
    overheads: Overheads | None
    """TTFT overheads beyond prefill (lookup, load, frontend), calibrated on the same span; None
    until a TTFT answer asks for them (``with_overheads``): a plan does not need them."""
    prices: Prices
    facts: Facts
    measured_ab: MeasuredAB | None
    """The latest measured A/B pair (overrides the modelled saving), None when there is none."""
    cfg: DeploymentSettings = DeploymentSettings()

    @property
    def intervals(self) -> tuple[Interval, ...]:
        """The prefill intervals as ``Interval`` objects (made on each call: the TTFT calibration
        reads them; the fit and the pricing read ``table``)."""
        return tuple(self.table.intervals())

    @property
    def latency(self) -> LatencyModel | None:
        """The TTFT model (cost + overheads); None when the cost model is not identified (or the
        overheads were not calibrated: ``with_overheads``)."""
        if not self.cost.identified or self.overheads is None:
            return None
        return LatencyModel.from_fit(self.cost, self.overheads)

    def with_overheads(self, source: Source) -> History:
        """This history with its overheads calibrated (``latency_intervals`` over the same span,
        the "engine alone" shares from this history's intervals: no second read, no refit)."""
        if self.overheads is not None:
            return self
        return self.with_latency_rows(latency_intervals(source, self.deployment, self.t_from, self.t_to,
                                                        self.model_name, prefill=self.intervals))

    def with_latency_rows(self, rows: list[LatencyInterval]) -> History:
        """This history with its overheads calibrated on ``rows`` (its span's latency intervals,
        already read)."""
        return replace(self, overheads=calibrate(rows))

    def covers(self, t_from: datetime, t_to: datetime) -> bool:
        """Whether [t_from, t_to] is this history's span (its intervals are the window's)."""
        return aware_utc(t_from) == self.t_from and aware_utc(t_to) == self.t_to

    def measurement(self, source: Source, t_from: datetime, t_to: datetime, *, stats: Any = None,
                    num_gpus: int | None = None) -> PrefillMeasurement:
        """The prefill measurement of [t_from, t_to] priced with this history's cost model; the
        window's intervals are the history's when the window is the history's span (no read)."""
        return self.measurement_on(self.table_of(source, t_from, t_to), t_from, t_to, stats=stats, num_gpus=num_gpus)

    def table_of(self, source: Source, t_from: datetime, t_to: datetime) -> IntervalTable:
        """The prefill intervals of [t_from, t_to]: this history's own when it is the window (no
        read), else read with the deployment's LMCache chunk size."""
        if self.covers(t_from, t_to):
            return self.table
        return prefill_table(source, self.deployment, t_from, t_to, self.model_name,
                             chunk_tokens=self.facts.facts.lmcache_chunk_tokens)

    def measurement_on(self, table: IntervalTable, t_from: datetime, t_to: datetime, *, stats: Any = None,
                       num_gpus: int | None = None) -> PrefillMeasurement:
        """The prefill measurement of [t_from, t_to] from its intervals (``table``, already read),
        priced with this history's cost model and its latest measured A/B."""
        return price_window(table, t_from, t_to, self.cost, facts=self.facts.facts, stats=stats,
                            num_gpus=num_gpus, measured=self.measured_ab)


def load_history(source: Source, deployment: str, t_to: datetime, *, t_from: datetime | None = None,
                 model_name: str | None = None, cfg: DeploymentSettings = DeploymentSettings(),
                 lookback: timedelta = DEFAULT_LOOKBACK, overheads: bool = False) -> History:
    """The history of ``deployment`` over the ``lookback`` ending at ``t_to`` (from ``t_from``
    when that is earlier: a window longer than the look-back is the history itself);
    ``overheads``: calibrate the TTFT overheads now (else ``History.with_overheads``)."""
    end = aware_utc(t_to)
    start = end - lookback if t_from is None else min(aware_utc(t_from), end - lookback)
    facts = load_facts(source, deployment, cfg)
    prices = load_pricebook(source, deployment, cfg.prices)
    ivs = prefill_table(source, deployment, start, end, model_name, chunk_tokens=facts.facts.lmcache_chunk_tokens)
    cost = fit_prefill_cost(ivs, history=describe_history(deployment, ivs, start, end))
    h = History(deployment, model_name, start, end, ivs, cost, None, prices, facts,
                measured_ab(source, deployment), cfg)
    return h.with_overheads(source) if overheads else h
