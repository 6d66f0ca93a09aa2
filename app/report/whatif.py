"""The capacity report's what-if section (cache size and topology), as HTML.

Section 8 of every report (``kvplan.app.report.data.build`` calls ``whatif_section``). It renders the
same data (``kvplan.app.views.whatif.whatif``) and charts (``kvplan.app.charts_whatif``) as the What-if page."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from ...collectors.traces.ingest import TraceError
from ...sql.db import Database, Snapshot
from .. import charts_whatif
from . import fmt
from .render import svg, table

if TYPE_CHECKING:
    from ..views.whatif import WhatIf, WhatIfQuery

TITLE = "8. Cache size and topology what-if"


def _cap(gb: float | None, tokens: int | None) -> str:
    return f"{gb:,.3f} GB" if gb is not None else f"{tokens:,} tokens"


def render_section(d: WhatIf, charts: bool = True) -> str:
    """The section for an already computed what-if (``kvplan.app.views.whatif.whatif``)."""
    t = d.trace
    out = [f"<h2>{TITLE}</h2>",
           f"<p>Replayed trace <b>{escape(t.name)}</b> ({escape(t.format)}): {t.requests:,} requests, "
           f"{t.unique_chunks:,} distinct chunks of {t.chunk_tokens} tokens"
           + (f", {t.bytes_per_chunk:,} bytes each ({escape(str(t.bytes_source))})"
              if t.bytes_per_chunk else "")
           + ". LRU with LMCache's hit rule (a request hits its leading cached chunks), exact at every "
           "capacity; the same numbers as <code>lmcache tool cache-simulator simulate</code>.</p>"]
    sat = d.saturation
    rows = [["infinite capacity (ceiling)", _cap(sat.capacity_gb, sat.capacity_tokens), fmt.pct(d.infinite_hit_rate)]]
    if d.configured:
        c = d.configured
        rows.append(["configured size", _cap(c.capacity_gb, c.capacity_tokens), fmt.pct(c.hit_rate)])
    if d.dollars:
        b = d.dollars.best
        rows.append(["best $ / month", _cap(b.capacity_gb, None), fmt.pct(b.hit_rate)])
    out.append(table(["capacity", "size", "token hit rate"], rows, {1, 2}))
    if charts:
        out.append(svg(charts_whatif.curve_chart(d)))
    s = d.shared_vs_private
    out.append(f"<h3>One shared pool of {_cap(s.capacity_gb, s.capacity_tokens)} or {s.ranks} "
               f"private caches of {_cap(s.per_rank_gb, s.capacity_tokens // s.ranks)}?</h3>")
    out.append(table(["set-up", "token hit rate", "with infinite capacity"],
                     [["one shared pool", fmt.pct(s.shared_hit_rate), fmt.pct(s.shared_infinite_hit_rate)]]
                     + [[charts_whatif.ROUTING_LABELS[p.routing], fmt.pct(p.hit_rate),
                         fmt.pct(p.infinite_hit_rate)] for p in s.private], {1, 2}))
    if charts and s.points:
        out.append(svg(charts_whatif.topology_chart(d)))
    out += _topology(d, charts)
    if d.dollars:
        dl = d.dollars
        b = dl.best
        be = dl.break_even
        out.append(f"<p>In dollars: {dl.seconds_per_cached_token:.3g} GPU-s saved per cached token "
                   f"({escape(dl.seconds_per_cached_token_source)}), "
                   f"{dl.requested_tokens_per_month:,.0f} prompt tokens / month "
                   f"({escape(dl.requested_tokens_per_month_source)}), ${dl.usd_per_gpu_hour:,.2f} per "
                   f"GPU-hour, ${dl.usd_per_gb_month:,.2f} per GB-month of cache memory. Best: "
                   f"<b>{b.capacity_gb:,.3f} GB</b>, net {fmt.usd(b.net_usd_per_month)} / month "
                   f"(saves {fmt.usd(b.saved_usd_per_month)}, memory {fmt.usd(b.memory_usd_per_month)}); "
                   "every GB past it costs more than the prefill time it saves"
                   + (f"; past {be.capacity_gb:,.3f} GB the cache as a whole costs more than it saves."
                      if be else ".") + "</p>")
        if charts:
            out.append(svg(charts_whatif.value_chart(d)))
    for n in d.notes:
        out.append(f'<p class="meta">{escape(n)}</p>')
    return "".join(out)


def _topology(d: WhatIf, charts: bool) -> list[str]:
    """Today's topology from the data against what it measured, and TTFT per set-up."""
    tw = d.topology
    if tw is None:
        return []
    t = tw.today
    cal = t.ttft_calibration
    out = [f"<h3>Today's topology, from the data: {t.instances} cache instance(s), {t.engines} engine(s)</h3>",
           table(["", "measured", "predicted (today replayed)", "measured / predicted"],
                 [["token hit rate (LMCache)", fmt.pct(t.hit_rate_measured), fmt.pct(t.hit_rate_predicted), ""],
                  ["TTFT mean", fmt.ttft_s(t.ttft_mean_s_measured), fmt.ttft_s(t.ttft_mean_s_predicted),
                   fmt.calibration_ratio(cal.mean if cal else None)],
                  ["TTFT p50", fmt.ttft_s(t.ttft_p50_s_measured), fmt.ttft_s(t.ttft_p50_s_predicted),
                   fmt.calibration_ratio(cal.p50 if cal else None)],
                  ["TTFT p99", fmt.ttft_s(t.ttft_p99_s_measured), fmt.ttft_s(t.ttft_p99_s_predicted),
                   fmt.calibration_ratio(cal.p99 if cal else None)]],
                 {1, 2, 3}),
           f'<p class="meta">Instances: {escape(", ".join(t.instance_names))}; engines: '
           f'{escape(t.engine_routing)}; capacity per instance: {escape(t.capacity_source or "unbounded")}. '
           "Predicted with the deployment's fitted prefill cost over the trace's arrivals; the gap between "
           "measured and predicted today (its ratio, per statistic) is carried into every set-up below.</p>"]
    if not tw.latency:
        return out
    slo = tw.slo.ttft_p99_s
    out.append(f"<h3>TTFT for each set-up (the same requests; p99 SLO {slo:g} s)</h3>")
    out.append(table(["set-up", "token hit rate", "TTFT mean", "(interval)", "mean raw", "p50", "p50 raw", "p99",
                      "(interval)", "p99 raw", "holds the SLO"],
                     [[charts_whatif.SETUP_LABELS.get(r.topology, r.topology)
                       + (f", {r.ranks} private caches, {r.routing.replace('_', ' ')}" if r.routing else ""),
                       fmt.pct(r.hit_rate), *fmt.ttft_side_by_side(r),
                       "yes" if r.holds_slo else "no"] for r in tw.latency], set(range(1, 10))))
    out.append('<p class="meta">TTFT mean, p50 and p99 calibrated on today: the replay\'s (raw) times today\'s '
               "measured / predicted for the same statistic; the interval holds 80 % of a block bootstrap over "
               "today's span (how steady today's error was, not what an effect of the set-up itself adds). "
               + escape(" ".join(cal.notes if cal else ())) + "</p>")
    if charts and tw.latency_curve:
        out.append(svg(charts_whatif.ttft_capacity_chart(d)))
    e = tw.engines_needed
    if e:
        def k(v: int | None) -> str:
            return str(v) if v is not None else f"more than {e.searched_up_to}"
        out.append(f"<p>Engines that hold the SLO on this traffic: today's caches {k(e.today)}, one shared pool "
                   f"{k(e.shared)} (today: {e.engines_today}).</p>")
    return out


def no_trace_section(why: str) -> str:
    return (f"<h2>{TITLE}</h2><p class=\"meta\">No request trace to replay ({escape(why)}): start LMCache with "
            "<code>--lookup-hash-log-dir</code> and run <code>kvplan import-trace</code>.</p>")


def whatif_section(source: Database | Snapshot, deployment: str, query: WhatIfQuery | None = None) -> str:
    """The section for one query of the what-if (default: the newest trace, whole), or a note when
    the deployment has no trace to replay. The report itself renders its month's what-if
    (``kvplan.app.views.whatif.month_whatif``, the page's month too) with ``render_section``."""
    from ..views.whatif import WhatIfQuery, whatif

    try:
        d = whatif(source, deployment, query or WhatIfQuery())
    except TraceError as e:
        return no_trace_section(e.message)
    return render_section(d)
