"""The capacity report's what-if section (cache size and topology), as HTML.

Section 8 of every report (``kvplan.app.report.data.build`` calls ``whatif_section``). It renders the
same data (``kvplan.app.views.whatif.whatif``) and charts (``kvplan.app.charts_whatif``) as the What-if page."""

from __future__ import annotations

from html import escape
from typing import Any

from kvplan.app import charts_whatif
from kvplan.app.report import fmt
from kvplan.app.report.render import svg, table
from kvplan.collectors.traces import TraceError
from kvplan.sql.db import Database

TITLE = "8. Cache size and topology what-if"


def _cap(gb, tokens) -> str:
    return f"{gb:,.3f} GB" if gb is not None else f"{tokens:,} tokens"


def render_section(d: dict, charts: bool = True) -> str:
    """The section for an already computed what-if (``kvplan.app.views.whatif.whatif``)."""
    t = d["trace"]
    out = [f"<h2>{TITLE}</h2>",
           f"<p>Replayed trace <b>{escape(t['name'])}</b> ({escape(t['format'])}): {t['requests']:,} requests, "
           f"{t['unique_chunks']:,} distinct chunks of {t['chunk_tokens']} tokens"
           + (f", {t['bytes_per_chunk']:,} bytes each ({escape(str(t['bytes_source']))})"
              if t["bytes_per_chunk"] else "")
           + ". LRU with LMCache's hit rule (a request hits its leading cached chunks), exact at every "
           "capacity; the same numbers as <code>lmcache tool cache-simulator simulate</code>.</p>"]
    sat = d["saturation"]
    rows = [["infinite capacity (ceiling)", _cap(sat["capacity_gb"], sat["capacity_tokens"]),
             fmt.pct(d["infinite_hit_rate"])]]
    if d["configured"]:
        c = d["configured"]
        rows.append(["configured size", _cap(c["capacity_gb"], c["capacity_tokens"]), fmt.pct(c["hit_rate"])])
    if d["dollars"]:
        b = d["dollars"]["best"]
        rows.append(["best $ / month", _cap(b["capacity_gb"], None), fmt.pct(b["hit_rate"])])
    out.append(table(["capacity", "size", "token hit rate"], rows, {1, 2}))
    if charts:
        out.append(svg(charts_whatif.curve_chart(d)))
    s = d["shared_vs_private"]
    out.append(f"<h3>One shared pool of {_cap(s['capacity_gb'], s['capacity_tokens'])} or {s['ranks']} "
               f"private caches of {_cap(s['per_rank_gb'], s['capacity_tokens'] // s['ranks'])}?</h3>")
    out.append(table(["set-up", "token hit rate", "with infinite capacity"],
                     [["one shared pool", fmt.pct(s["shared_hit_rate"]), fmt.pct(s["shared_infinite_hit_rate"])]]
                     + [[charts_whatif.ROUTING_LABELS[p["routing"]], fmt.pct(p["hit_rate"]),
                         fmt.pct(p["infinite_hit_rate"])] for p in s["private"]], {1, 2}))
    if charts and s["points"]:
        out.append(svg(charts_whatif.topology_chart(d)))
    if d["dollars"]:
        dl = d["dollars"]
        b = dl["best"]
        be = dl["break_even"]
        out.append(f"<p>In dollars: {dl['seconds_per_cached_token']:.3g} GPU-s saved per cached token "
                   f"({escape(dl['seconds_per_cached_token_source'])}), "
                   f"{dl['requested_tokens_per_month']:,.0f} prompt tokens / month "
                   f"({escape(dl['requested_tokens_per_month_source'])}), ${dl['usd_per_gpu_hour']:,.2f} per "
                   f"GPU-hour, ${dl['usd_per_gb_month']:,.2f} per GB-month of cache memory. Best: "
                   f"<b>{b['capacity_gb']:,.3f} GB</b>, net {fmt.usd(b['net_usd_per_month'])} / month "
                   f"(saves {fmt.usd(b['saved_usd_per_month'])}, memory {fmt.usd(b['memory_usd_per_month'])}); "
                   "every GB past it costs more than the prefill time it saves"
                   + (f"; past {be['capacity_gb']:,.3f} GB the cache as a whole costs more than it saves."
                      if be else ".") + "</p>")
        if charts:
            out.append(svg(charts_whatif.value_chart(d)))
    for n in d["notes"]:
        out.append(f'<p class="meta">{escape(n)}</p>')
    return "".join(out)


def whatif_section(db: Database, deployment: str, **kw: Any) -> str:
    """The section for a deployment's newest trace, or a one-line note when it has none."""
    from kvplan.app.views.whatif import whatif

    try:
        d = whatif(db, deployment, **kw)
    except TraceError:
        return (f"<h2>{TITLE}</h2><p class=\"meta\">No request trace for this deployment: start "
                "LMCache with <code>--lookup-hash-log-dir</code> and run <code>kvplan import-trace</code>.</p>")
    return render_section(d)
