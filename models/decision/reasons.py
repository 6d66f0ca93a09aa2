"""The verdict's sentences: one function per rule of ``kvplan.models.decision.verdict`` (which
picks the rule, in one order, with ``verdict_rule``), the data gate's NEED_DATA, and the flips
(break-even values of the money, ``break_even``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from ..capacity.fleet import CapacityResult, growth_that_lasts, hit_rate_that_lasts
from ..capacity.horizon import HorizonPlan, beyond_note, purchase_text
from ..core.timeutil import duration
from ..inputs.planning import PlanningInputs
from ..prefill.savings import PrefillSavings
from .benefit import Benefit


class Verdict(StrEnum):
    """The four answers. A ``StrEnum``: each equals its name as a string, so JSON and text
    output read ``"BUY"`` as before."""

    BUY = "BUY"
    REUSE = "REUSE"
    NOT_WORTH_IT = "NOT_WORTH_IT"
    NEED_DATA = "NEED_DATA"


@dataclass(frozen=True)
class Decision:
    """The verdict."""

    kind: Verdict
    """``BUY``, ``REUSE``, ``NOT_WORTH_IT`` or ``NEED_DATA``."""
    reason: str
    """One sentence."""
    flips: list[str]
    """Input changes that would change the verdict."""


def pct(x: float) -> str:
    """0.123 -> "12.3 %"."""
    return f"{x * 100:.1f} %"


def usd(x: float) -> str:
    """-403.2 -> "-$403"."""
    return f"-${-x:,.0f}" if x < 0 else f"${x:,.0f}"


def _months(x: float, horizon: int) -> str:
    return "today" if x <= 0 else f"in month {x:.1f} of the {horizon}-month horizon"


# ---- NEED_DATA: the data gate --------------------------------------------------------------
def data_gate(savings: PrefillSavings, capacity: CapacityResult | None, benefit: Benefit | None,
              p: PlanningInputs) -> Decision | None:
    """Rule 1: NEED_DATA when the window is too short or too small, or a metric is missing;
    None when the data suffice."""
    missing: list[str] = []
    if savings.requests <= 0:
        missing.append("no requests in the window")
    if savings.window_seconds < p.min_window_seconds:
        missing.append(f"window is {duration(savings.window_seconds)} "
                       f"(need >= {duration(p.min_window_seconds)})")
    if 0 < savings.requests < p.min_requests:
        missing.append(f"only {math.floor(savings.requests):,.0f} requests (need >= {math.ceil(p.min_requests):,.0f})")
    model = savings.cost_model
    if not savings.available:
        if model is not None and not model.identified:
            missing.append(f"the prefill cost model is not identified ({model.reason})")
        else:
            missing.append("no estimate of prefill cost per token (need the prefill timer, or "
                           "vLLM FLOPs / model params with gpu_peak_flops)")
    if not missing and ((capacity is not None and benefit is not None) or savings.source == "no_hits"):
        return None
    if not missing:
        missing.append("load or hit rate unavailable")
    flips = [f"measure at least {p.min_window_seconds / 3600:g} h and "
             f"{p.min_requests:.0f} requests with prefill timing or FLOPs metrics"]
    if model is not None and not model.identified and model.fix:
        flips.append(model.fix)
    return Decision(Verdict.NEED_DATA, "Not enough data to price reuse: " + "; ".join(missing) + ".", flips)


def no_hits(savings: PrefillSavings, p: PlanningInputs) -> Decision:
    """Nothing was cached and no cost model prices a token: reuse saved 0 (LMCache, when in
    the window, cost its lookups), which no cost per token changes, so it does not pay. The
    fleet's size is not checked (that needs the cost per token)."""
    months = savings.gpu_hours_per_month or 0.0
    lookups = f" and LMCache's lookups cost {-months:,.2f} GPU-h/month" if months < 0 else ""
    return Decision(
        Verdict.NOT_WORTH_IT,
        f"No cache hits in this window ({math.floor(savings.requests):,.0f} requests): reuse saved "
        f"0 GPU-h/month{lookups}, whatever a prompt token costs; whether the fleet holds the "
        f"{p.ttft_p99_slo_seconds:g} s p99 TTFT target is not checked (no prefill cost model).",
        ["requests that share a prefix (a hit rate above 0)"])


# ---- break-even values (the flips of the money) ------------------------------------------
@dataclass(frozen=True)
class BreakEven:
    """Input values at which the monthly benefit would equal a target (linear approximation:
    benefit ~= s * k * net - fixed, with ``net`` = gains - hit cost today, ``s`` the
    incremental hit rate relative to today's and ``k`` the GPU price relative to today's;
    gains and hit cost are GPU-hours x price, the fixed overhead depends on neither, and the
    target -- a share of the fleet's cost -- scales with ``k``). Exact while no cap binds."""

    hit_rate: float | None
    """Hit rate giving the target (may exceed 1: unreachable); None if hits save nothing."""
    usd_per_gpu_hour: float | None
    """GPU price giving the target; None if no price does (net <= target)."""
    fixed_overhead_usd: float | None
    """Fixed cache overhead giving the target; None if hits save nothing."""


def break_even(savings: PrefillSavings, benefit: Benefit, target_usd: float) -> BreakEven:
    """Where the benefit crosses ``target_usd`` (see ``BreakEven``)."""
    gains = benefit.saved_prefill_usd + benefit.throughput_usd + benefit.deferral_usd
    net = gains - benefit.hit_cost_usd
    fixed = benefit.fixed_overhead_usd
    h, h0 = savings.hit_rate or 0.0, savings.baseline_hit_rate or 0.0
    hit = h0 + (h - h0) * (fixed + target_usd) / net if net > 0 and h > h0 else None
    price = benefit.usd_per_gpu_hour * fixed / (net - target_usd) if net > target_usd else None
    overhead = max(0.0, net - target_usd) if net > 0 else None
    return BreakEven(hit, price, overhead)


def _hit_flip(savings: PrefillSavings, benefit: Benefit, be: BreakEven, verb: str, above: bool,
              goal: Callable[[], str]) -> list[str]:
    h, h0 = savings.hit_rate or 0.0, savings.baseline_hit_rate or 0.0
    gains = benefit.saved_prefill_usd + benefit.throughput_usd + benefit.deferral_usd
    net = gains - benefit.hit_cost_usd
    if be.hit_rate is not None and be.hit_rate <= 1:
        return [f"hit rate {verb} ~{pct(be.hit_rate)} (now {pct(h)})"]
    if be.hit_rate is not None:  # above 100 %: report what 100 % would give instead
        at_full = net * (1.0 - h0) / (h - h0) - benefit.fixed_overhead_usd
        return [f"no hit rate would do it: even every prompt token from the cache (100 %, now {pct(h)}) "
                f"would net ~{usd(at_full)}/month, under {goal()}"]
    if above and gains <= 0 < (savings.gpu_hours_per_month or 0.0) and benefit.realisation == "shrink":
        return ["no hit rate would do it at today's load: the prefill the cache saves frees no GPU to give back "
                "(shrink); traffic growth that needs more GPUs, or realisation absorb_growth, would"]
    if above:
        return [f"a hit rate above the baseline's {pct(h0)} (now {pct(h)}): the cache saved nothing in this "
                "window, so the hit rate that would pay cannot be read from it; measure a window with cache hits"
                if h <= h0 else "no hit rate would do it: each hit's lookup/transfer costs as much GPU time "
                "as the prefill it saves"]
    return []


def money_flips(savings: PrefillSavings, benefit: Benefit, target_usd: float,
                above: bool, threshold: str = "") -> list[str]:
    """Break-even values as sentences, one per input (hit rate, GPU price, fixed overhead):
    the value that would change the verdict, or plainly that no value of that input would
    (and why). ``above``: the benefit must rise to the target; ``threshold``: how the target
    reads (e.g. "$146/month, 1.0 % of the fleet's $14,611/month")."""
    be = break_even(savings, benefit, target_usd)
    verb = "rises to" if above else "falls to"
    said: list[str] = []

    def goal() -> str:  # the target in full the first time, short after
        if not above:
            return f"${target_usd:,.0f}/month"
        if said:
            return f"the ${target_usd:,.0f}/month threshold"
        said.append("x")
        return f"the ${target_usd:,.0f}/month that makes reuse worth it" + (f" ({threshold})" if threshold else "")

    net = benefit.saved_prefill_usd + benefit.throughput_usd + benefit.deferral_usd - benefit.hit_cost_usd
    out = _hit_flip(savings, benefit, be, verb, above, goal)
    if be.usd_per_gpu_hour is not None:
        out.append(f"GPU price {verb} ~${be.usd_per_gpu_hour:,.2f}/GPU-hour "
                   f"(now ${benefit.usd_per_gpu_hour:,.2f})")
    elif above and net > 0:
        out.append(f"no GPU price would do it: the saved GPU time (${net:,.0f}/month at "
                   f"${benefit.usd_per_gpu_hour:,.2f}/GPU-hour) stays under {goal()} at any price, as both "
                   "scale with the price")
    if be.fixed_overhead_usd is not None and (be.fixed_overhead_usd > 0 or not above):
        out.append(f"fixed cache overhead {'falls' if above else 'rises'} to "
                   f"~${be.fixed_overhead_usd:,.0f}/month (now ${benefit.fixed_overhead_usd:,.0f})")
    elif above and benefit.fixed_overhead_usd > 0:
        out.append(f"no fixed cache overhead would do it: even at $0/month (now "
                   f"${benefit.fixed_overhead_usd:,.0f}) the saved GPU time (${max(net, 0):,.0f}/month) stays "
                   f"under {goal()}")
    return out


# ---- the sentences of rules 2-6 ----------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """What every rule's sentence reads from (built once by ``verdict.decide``)."""

    savings: PrefillSavings
    """Saved prefill of the window."""
    capacity: CapacityResult
    """The fleet with and without reuse."""
    benefit: Benefit
    """The monthly benefit, read off ``horizon``."""
    horizon: HorizonPlan
    """Both paths."""
    planning: PlanningInputs
    """Thresholds."""
    fleet_cost: float
    """$/month of today's fleet."""
    meaningful: float
    """The money threshold, $/month."""
    switch: list[str]
    """"realising the savings as ... instead" when the other realisation crosses the threshold."""
    flip_probability: float | None = None
    """Rule 4's share of resampled scenarios that flip (None: not computed)."""

    @property
    def slo(self) -> str:
        return f"{self.capacity.inputs.ttft_p99_slo_seconds:g} s p99 TTFT target"

    @property
    def months(self) -> int:
        return self.capacity.inputs.horizon_months

    def money(self) -> str:
        b, r = self.horizon.baseline, self.horizon.reuse
        if not b.holds and r.holds:
            return f"the reuse path costs ${r.cost_usd:,.0f} over the {self.months}-month horizon"
        return (f"${b.cost_usd:,.0f} over the {self.months}-month horizon without reuse vs "
                f"${r.cost_usd:,.0f} with it, cache overhead included")

    def growth_ok(self) -> float | None:
        g = growth_that_lasts(self.capacity.inputs, self.capacity.inputs.hit_rate)
        return g if g is not None and g >= 0 else None

    def growth_flip(self) -> list[str]:
        g = self.growth_ok()
        now = pct(self.capacity.inputs.growth_rate_per_month)
        if g is None:
            return []
        return [f"growth above ~{pct(g)}/month (now {now}) would make even the reuse fleet run out"]

    def buy_flips(self) -> list[str]:
        cap = self.capacity.inputs
        out = []
        g = self.growth_ok()
        if g is not None:
            out.append(f"growth at or below ~{pct(g)}/month (now {pct(cap.growth_rate_per_month)})")
        h_need = hit_rate_that_lasts(cap)
        if h_need is not None and h_need > cap.hit_rate:
            out.append(f"hit rate of ~{pct(h_need)} (now {pct(cap.hit_rate)})")
        return out


def buy_unreachable(c: Case) -> Decision:
    """Rule 2: with reuse no number of these GPUs (or none below the limit) meets the SLO."""
    cap, r = c.capacity, c.horizon.reuse
    if cap.beyond_limit_with_reuse:
        return Decision(Verdict.BUY, f"Even with reuse today's load needs {beyond_note(r)}: buy, and size a "
                        "fleet that large by hand.", c.growth_flip())
    if cap.inputs.goodput is not None:
        return Decision(Verdict.BUY, f"The measured goodput with reuse is 0 requests/s per replica "
                        f"({cap.inputs.goodput.source}): no number of these replicas meets the SLO.",
                        ["a sweep with a goodput above 0"])
    s = cap.service_seconds_with_reuse
    return Decision(Verdict.BUY, f"Even with reuse one prefill takes {s:.2f} s, above the {c.slo}: no number of "
                    "these GPUs meets it; buy faster GPUs (or more per replica).",
                    [f"a TTFT target of at least {s:.2f} s", "a higher hit rate or shorter prompts"])


def buy_today(c: Case) -> Decision:
    """Rule 2: the reuse path too must add GPUs now."""
    cap, b, r = c.capacity, c.horizon.baseline, c.horizon.reuse
    cheaper = "with reuse" if c.horizon.reuse_cheaper else "without reuse"
    without = purchase_text(b) if b.purchases else "none"
    return Decision(
        Verdict.BUY, f"Even with reuse the {cap.inputs.current_gpus} GPUs miss the {c.slo} today "
        f"(today's load needs {cap.gpus_needed_with_reuse}, {cap.inputs.gpus_per_replica} per replica): "
        f"buy {purchase_text(r)} with reuse ({without} without; "
        f"{b.gpus_bought if b.holds else 'beyond the search'} GPUs over the horizon). "
        f"Cheaper {cheaper}: {c.money()}.", c.buy_flips())


def buy_both_break(c: Case) -> Decision:
    """Rule 2: growth outruns both paths."""
    b, r = c.horizon.baseline, c.horizon.reuse
    return Decision(Verdict.BUY, f"Growth outruns both paths: without reuse {beyond_note(b)}, with reuse "
                    f"{beyond_note(r)}. Buy {purchase_text(r) or 'as growth demands'} and re-plan before then.",
                    c.buy_flips())


def _reuse_how(c: Case) -> str:
    b, r, cap, months = c.horizon.baseline, c.horizon.reuse, c.capacity, c.months
    if not b.holds:
        return (f"without reuse {beyond_note(b)}; with reuse the fleet "
                + (f"holds by buying {purchase_text(r)}" if r.purchases else
                   f"holds the {c.slo} for the {months}-month horizon"))
    rb, bb = r.first_purchase, b.first_purchase
    if rb is not None and bb is not None:
        s = "s" if rb.gpus != 1 else ""
        return (f"BUY {rb.gpus} GPU{s} in month {rb.month} instead of {bb.gpus} in month {bb.month}"
                if rb.gpus != bb.gpus else f"BUY {rb.gpus} GPU{s} in month {rb.month} instead of month {bb.month}")
    if bb is not None:
        return (f"without reuse the fleet misses the {c.slo} "
                f"{_months(cap.runout_month_without_reuse or bb.month, months)} "
                f"(buy {purchase_text(b)}); with reuse it holds for the {months}-month horizon")
    wo, w = cap.gpus_needed_without_reuse, cap.gpus_needed_with_reuse
    return (f"the {c.slo} needs {w} GPU{'s' if w != 1 else ''} with reuse instead of {wo} without"
            + (f" (release {r.released_gpus - b.released_gpus} more)" if r.released_gpus > b.released_gpus else ""))


def reuse(c: Case) -> Decision:
    """Rule 3 (and rule 4 when the verdict flips in half the scenarios)."""
    saving = c.horizon.saving_usd
    saved = "" if math.isinf(saving) else f"${saving:,.0f} cheaper ({c.money()}); "
    flips = money_flips(c.savings, c.benefit, c.meaningful, above=False) + c.switch + c.growth_flip()
    if c.flip_probability is not None and c.flip_probability >= 0.5:
        return Decision(
            Verdict.NEED_DATA, f"Reuse is cheaper in the centre ({saved.rstrip('; ') or c.money()}), but the "
            f"verdict flips in {c.flip_probability:.0%} of resampled scenarios: measure a longer window "
            "to be sure.", ["a window of a day or more (narrows the band)"] + flips)
    return Decision(Verdict.REUSE, f"REUSE now; {_reuse_how(c)}: {saved}saved prefill worth "
                    f"${c.benefit.monthly_benefit_usd:,.0f}/month (net, freed GPU-hours).", flips)


def buy_later(c: Case) -> Decision:
    """Rule 5: reuse does not pay and the baseline must add GPUs."""
    b, r = c.horizon.baseline, c.horizon.reuse
    later = ""
    if r.holds and b.first_purchase is not None and (
            r.first_purchase is None or r.first_purchase.month > b.first_purchase.month):
        later = (" Reuse would defer it" + (f" to month {r.first_purchase.month}" if r.first_purchase
                                            else " past the horizon")
                 + ", but its overhead costs more than the GPUs it defers.")
    return Decision(Verdict.BUY, f"Buy {purchase_text(b) or beyond_note(b)} without reuse: reuse does not pay for "
                    f"itself ({c.money()}).{later}", c.buy_flips() + c.switch)


def _nothing_to_gain(c: Case) -> str:
    s, ben = c.savings, c.benefit
    h, h0 = s.hit_rate or 0.0, s.baseline_hit_rate or 0.0
    hours = s.gpu_hours_per_month or 0.0
    if h <= h0:
        why = (f"the cache saved no prefill in this window (hit rate {pct(h)}, baseline without it "
               f"{pct(h0)})")
    elif hours > 0 and ben.realisation == "shrink":
        n = c.capacity.gpus_needed_with_reuse
        needed = f"{n} GPU{'s' if n != 1 else ''}" if n is not None else "the same GPUs"
        why = (f"the {hours:,.2f} GPU-hours/month of prefill it saves (before its own cost) free no GPU "
               f"({needed} needed with or without reuse)")
    else:
        why = f"the cache saved no prefill GPU time at a {pct(h)} hit rate"
    cost = (f" and costs ${ben.overhead_usd:,.0f}/month" if ben.overhead_usd > 0
            else "; no overhead is priced either")
    return f"Nothing to gain: {why}{cost} ({ben.realisation})."


def not_worth_it(c: Case) -> Decision:
    """Rule 6: reuse does not pay and no purchase is due."""
    ben, p = c.benefit, c.planning
    threshold = f"{pct(p.min_benefit_share_of_fleet_cost)} of the fleet's ${c.fleet_cost:,.0f}/month"
    total = ben.monthly_benefit_usd
    if total <= 0:
        saved = total + ben.overhead_usd
        reason = _nothing_to_gain(c) if saved <= 0 else (
            f"The cache costs ${ben.overhead_usd:,.0f}/month and saves ${saved:,.0f}/month at a "
            f"{pct(c.savings.hit_rate or 0.0)} hit rate ({ben.realisation}): overhead exceeds the saved prefill.")
    elif total < c.meaningful:
        reason = f"Reuse nets only ${total:,.0f}/month, under {threshold}: effort is better spent elsewhere."
    else:
        reason = (f"Reuse frees GPU time worth ${total:,.0f}/month net, but no whole GPU: no purchase is due "
                  f"without it and it frees no replica the baseline would keep ({c.money()}).")
    return Decision(Verdict.NOT_WORTH_IT, reason,
                    money_flips(c.savings, ben, c.meaningful, above=True, threshold=threshold) + c.switch)


SENTENCES: dict[str, Callable[[Case], Decision]] = {
    "buy_unreachable": buy_unreachable, "buy_today": buy_today, "buy_both_break": buy_both_break,
    "reuse": reuse, "buy_later": buy_later, "not_worth_it": not_worth_it,
}
"""The sentence of each rule ``verdict.verdict_rule`` returns."""
