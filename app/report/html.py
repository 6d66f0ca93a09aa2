"""The capacity report as one self-contained HTML document (charts inline as SVG rendered
by vl-convert from the dashboard's own Altair specs). Deterministic: the same data gives
the same bytes; nothing depends on the clock unless ``generated_at`` is passed."""

from __future__ import annotations

from datetime import datetime
from html import escape

from ...models.decision.plan import PlanResult, tier_attribution
from ...models.inputs.planning import PLANNING_FIELDS
from ...models.inputs.pricebook import FIELDS
from ...models.metrics.runs import CPU_NOTE, compare_runs
from .. import charts, charts_cost
from ..views.cache import REQUEST_WEIGHTED_NOTE
from ..views.cost import capacity_schedule
from . import fmt
from .data import ReportData
from .render import charts_in_background, svg, table

CSS = """
@page { size: A4; margin: 16mm 14mm;
        @bottom-right { content: "page " counter(page) " of " counter(pages); font-size: 8pt; } }
body { font-family: 'DejaVu Sans', sans-serif; font-size: 9.5pt; color: #222; }
h1 { font-size: 17pt; margin-bottom: 2pt; } h2 { font-size: 13pt; border-bottom: 1px solid #999; margin-top: 16pt; }
h3 { font-size: 10.5pt; margin-bottom: 3pt; }
table { border-collapse: collapse; margin: 4pt 0 8pt; width: 100%; }
th, td { border: 1px solid #ccc; padding: 2pt 4pt; text-align: left; vertical-align: top; font-size: 8.5pt; }
td.n { text-align: right; white-space: nowrap; }
.meta { color: #555; } .note { background: #fff4e0; border-left: 4px solid #e69500; padding: 4pt 6pt; }
.badge { display: inline-block; padding: 2pt 8pt; border-radius: 8pt; color: white; font-weight: bold; }
.BUY { background: #c62828; } .REUSE { background: #2e7d32; } .NOT_WORTH_IT { background: #616161; }
.NEED_DATA { background: #e69500; }
.chart svg { max-width: 100%; height: auto; } .chart { page-break-inside: avoid; }
code { font-size: 8pt; }
"""


def ts(v: datetime | None) -> str:
    return "" if v is None else f"{v:%Y-%m-%d %H:%M}"


def _decision(d: ReportData) -> str:
    p = d.overview.plan
    flips = "".join(f"<li>{escape(f)}</li>" for f in p.decision.flips)
    return (f'<h2>Decision</h2><p><span class="badge {p.decision.kind}">{p.decision.kind}</span> '
            f"{escape(p.decision.reason)}</p>"
            f"<p>Monthly benefit: <b>{fmt.usd(p.monthly_benefit_usd)}</b> "
            f"(band {fmt.usd_band(p.monthly_benefit_low_usd, p.monthly_benefit_high_usd)}), "
            f"realised as {escape(p.realisation.replace('_', ' '))}.</p>"
            + _figures(d)
            + _tier_decisions(p)
            + (f"<p>What would change the verdict:</p><ul>{flips}</ul>" if flips else ""))


def _figures(d: ReportData) -> str:
    """The numbers every surface gives for the window (stats, plan, Overview): hit rate over
    every tier, cached prompt tokens, saved prefill GPU-hours per month."""
    p, s = d.overview.plan, d.overview.window.stats
    return (f'<p class="figures">Hit rate (all tiers): <b>{fmt.pct(p.hit_rate)}</b>; cached prompt tokens: '
            f"<b>{fmt.number(s.cached_prompt_tokens)}</b> of {fmt.number(s.prompt_tokens)}; saved prefill: "
            f"<b>{fmt.number(p.saved_prefill_gpu_hours)}</b> GPU-h/month.</p>")


def _tier_decisions(p: PlanResult) -> str:
    """One decision per cache tier: vLLM's prefix cache (free) and LMCache (on its margin)."""
    rows = [[t.label, t.kind or "not in this window", fmt.usd(t.monthly_benefit_usd), t.reason]
            for t in p.decision_by_tier.values()]
    if not rows:
        return ""
    return (f"<h3>Decision by cache tier</h3><p>{escape(p.headline)}</p>"
            + table(["tier", "decision", "$ / month", "reason"], rows, {2}))


def _reuse(d: ReportData) -> str:
    c = d.cache
    tiers = [[t.label, fmt.pct(t.hit_rate), fmt.number(t.hits), fmt.number(t.queries)] for t in c.tiers]
    s = c.window.stats
    cached = sum(s.cached_tokens_by_tier.values())
    by_tier = [[k, fmt.number(v), fmt.pct(v / cached if cached else None)]
               for k, v in sorted(s.cached_tokens_by_tier.items())]
    by_src = [[k, fmt.number(v)] for k, v in sorted(s.prompt_tokens_by_source.items())]
    runs = [[r["label"], r["measured_on"], fmt.pct(r["requests_with_cache_share"], "not recorded"),
             fmt.pct(r["cached_token_share"], "not recorded")] for r in c.runs]
    return ("<h2>1. Measured reuse</h2><p>Hit rates are token-weighted: the window's summed hit tokens / "
            "summed looked-up tokens, per tier.</p>"
            + table(["tier", "hit rate", "hit tokens", "looked-up tokens"], tiers, {1, 2, 3})
            + "<h3>Cached prompt tokens by tier</h3>" + table(["tier (source)", "tokens", "share"], by_tier, {1, 2})
            + "<h3>Prompt tokens by source</h3>" + table(["source", "tokens"], by_src, {1})
            + svg(charts.tier_hit_rate_chart(c.tier_points, tl=d.timeline))
            + f"<h3>Request-weighted</h3><p>{escape(REQUEST_WEIGHTED_NOTE)}</p>"
            + table(["run", "measured on", "requests with cached tokens", "cached / prompt tokens"], runs, {2, 3}))


def _tail(d: ReportData) -> str:
    lv = d.latency
    rows = [[k, fmt.reported_quantile(q), fmt.bucket(q)] for k, q in lv.quantiles.items()]
    means = [[k, fmt.secs(v, "not reported")] for k, v in lv.means.items()]
    warn = "".join(f'<p class="note">{escape(w)}</p>' for w in lv.warnings)
    slo = lv.slo
    return ("<h2>2. Tail baseline</h2>"
            f"<p>TTFT p50 <b>{fmt.quantile(lv.quantiles['TTFT p50'])}</b>, p99 "
            f"<b>{fmt.quantile(lv.quantiles['TTFT p99'])}</b> over {fmt.count(d.overview.window.stats.requests)} "
            "requests. A histogram quantile is only as precise as the bucket it lies in.</p>"
            + table(["quantile", "value", "lies in"], rows, {1}) + warn
            + f"<p>SLO attainment: <b>{fmt.pct(slo.share, 'no requests')}</b> of requests had TTFT ≤ "
              f"{'n/a' if slo.bound_s is None else f'{slo.bound_s:g} s'} ({escape(slo.note)}).</p>"
            + "<h3>Means (histogram sum / count)</h3>" + table(["histogram", "mean"], means, {1})
            + svg(charts.quantile_band_chart(lv.points, "TTFT", "Time to first token: p50, p99 and their buckets",
                                             slo.target_s, tl=d.timeline))
            + _decode(d))


def _decode(d: ReportData) -> str:
    """Decode speed: TPOT (per request) and ITL (per token) p50/p99, the TPOT SLO, their charts."""
    lv, q, ts = d.latency, d.latency.quantiles, d.latency.tpot_slo
    head = "<h3>Decode speed: time per output token (TPOT) and inter-token latency (ITL)</h3>"
    if q["TPOT p50"] is None and q["ITL p50"] is None:
        return head + ('<p class="meta">Not reported: these servers expose neither '
                       "vllm:request_time_per_output_token_seconds nor vllm:inter_token_latency_seconds.</p>")
    bound = "n/a" if ts.bound_s is None else f"{ts.bound_s:g} s"
    return (head
            + f"<p>TPOT p50 <b>{fmt.reported_quantile(q['TPOT p50'])}</b>, p99 "
              f"<b>{fmt.reported_quantile(q['TPOT p99'])}</b> (one value per request: decode time / (output "
              f"tokens - 1)); ITL p50 <b>{fmt.reported_quantile(q['ITL p50'])}</b>, p99 "
              f"<b>{fmt.reported_quantile(q['ITL p99'])}</b> (one value per generated token).</p>"
            + f"<p>TPOT SLO attainment: <b>{fmt.pct(ts.share, 'no requests')}</b> of requests had TPOT ≤ "
              f"{bound} ({escape(ts.note)}).</p>"
            + svg(charts.quantile_band_chart(lv.points, "TPOT", "Time per output token: p50, p99 and their buckets",
                                             ts.target_s, tl=d.timeline))
            + svg(charts.quantile_band_chart(lv.points, "ITL", "Inter-token latency: p50, p99 and their buckets",
                                             tl=d.timeline)))


def _topology(d: ReportData) -> str:
    t = d.topology
    nodes = [[n["host"], n["vllm_servers"], n["engines"], n["lmcache_mp"], "yes" if n["kv_connector"] else "no"]
             for n in t.nodes]
    targets = [[r["target"], r["kind"], r["url"] or "(imported)", r["engines"], r["models"] or ""] for r in t.targets]
    return ("<h2>3. Topology</h2>" + f"<p>{escape(t.verdict)}</p>"
            + table(["node (host)", "vLLM servers", "engines", "LMCache MP servers", "KV connector"], nodes, {1, 2, 3})
            + table(["target", "kind", "URL", "engines", "models"], targets, {3}))


def _pilot(d: ReportData) -> str:
    runs = d.runs.runs
    if not runs:
        return ("<h2>4. Pilot comparison</h2><p>No workload-driver runs recorded for this deployment "
                "(<code>kvplan pilot</code> stores them).</p>")
    rows = [[r["run_id"], r["label"], r["scenario"], ts(r["started_at"]), r["requests"], r["failed"],
             fmt.secs(r["wall_s"]), fmt.secs(r["ttft_p50_s"]), fmt.number(r["tokens_per_s_p50"]),
             fmt.number(r["aggregate_tokens_per_s"]), fmt.pct(r["requests_with_cache_share"], "not recorded")]
            for r in runs]
    where: dict[str, list[str]] = {}
    for r in runs:
        where.setdefault(r["measured_on"], []).append(f"#{r['run_id']}")
    out = ("<h2>4. Pilot comparison</h2>"
           + table(["run", "label", "scenario", "started (UTC)", "requests", "failed", "total time",
                    "TTFT p50", "tok/s p50 per user", "aggregate tok/s", "requests with cached tokens"], rows,
                   {4, 5, 6, 7, 8, 9, 10})
           + "".join(f"<p>Runs {', '.join(ids)} measured on: {escape(m)}.</p>" for m, ids in sorted(where.items())))
    pair = d.runs.default_pair()
    if pair:
        a, b = pair
        cmp = [[r["metric"], fmt.number(r["baseline"], r["unit"]), fmt.number(r["candidate"], r["unit"]),
                fmt.change(r["factor"], r["better"], r["metric"] == "total time")] for r in compare_runs(a, b)]
        out += (f"<h3>{escape(a['label'])} (baseline) vs {escape(b['label'])}</h3>"
                + table(["metric", a["label"], b["label"], "change"], cmp, {1, 2, 3}))
    if any(r["cpu_scale"] for r in runs):
        out += f'<p class="note">{escape(CPU_NOTE)}</p>'
    return out


def _pricing(d: ReportData) -> str:
    p = d.overview.plan
    wf = [[r.label, fmt.usd(r.usd), fmt.usd_band(r.low, r.high)] for r in p.waterfall]
    cap = [["GPUs today", fmt.gpus(p.current_gpus)],
           ["GPUs needed today with reuse", fmt.gpus(p.gpus_needed_with_reuse, p.why_no_gpus_with_reuse)],
           ["GPUs needed today without reuse", fmt.gpus(p.gpus_needed_without_reuse, p.why_no_gpus_without_reuse)],
           ["fleet runs out with reuse", fmt.months(p.runout_month_with_reuse)],
           ["fleet runs out without reuse", fmt.months(p.runout_month_without_reuse)],
           ["purchase deferred by", "n/a" if p.deferral_months is None else f"{p.deferral_months:.1f} months"],
           ["sized by", fmt.capacity_method(p)],
           ["GPUs per replica",
            fmt.gpus(p.gpus_per_replica) + (f" ({p.replica_message})" if p.replica_message else "")],
           ["busiest hour", fmt.number(p.peak_hour_requests_per_s, "req/s")],
           ["purchases without reuse", fmt.schedule(p.purchase_schedule_without_reuse)],
           ["purchases with reuse", fmt.schedule(p.purchase_schedule_with_reuse)],
           ["cost over the horizon without / with reuse",
            f"{fmt.usd((p.horizon_cost_usd or {}).get('baseline'))} / "
            f"{fmt.usd((p.horizon_cost_usd or {}).get('reuse'))}"],
           ["decision flips in", f"{fmt.pct(p.flip_probability)} of resampled scenarios"],
           ["saved prefill GPU-hours / month", f"{fmt.number(p.saved_prefill_gpu_hours)} "
            f"({fmt.number(p.saved_prefill_gpu_hours_low)} .. {fmt.number(p.saved_prefill_gpu_hours_high)})"]]
    sens = [[r.name, f"{r.low_input:.4g} .. {r.high_input:.4g} {r.unit}", fmt.usd(r.low_benefit),
             fmt.usd(r.high_benefit)] for r in p.sensitivity]
    schedule = capacity_schedule(p)
    return ("<h2>5. Pricing</h2>" + _saved_prefill(d) + "<h3>Monthly benefit</h3>"
            + table(["term", "$ / month", "band"], wf, {1})
           + (svg(charts_cost.waterfall_chart(p.waterfall)) if p.waterfall else "")
           + "<h3>Capacity and deferral</h3>" + table(["", ""], cap, {1})
           + (svg(charts_cost.capacity_chart(schedule, p.current_gpus)) if schedule else "") + _sweep(d)
           + "<h3>Sensitivity</h3>" + table(["input moved", "range", "benefit at low", "benefit at high"], sens, {2, 3})
           + (svg(charts_cost.tornado_chart(p.sensitivity)) if p.sensitivity else ""))


def _saved_prefill(d: ReportData) -> str:
    """The saved prefill by tier, $ per 1M tokens and the cost model it rests on."""
    p = d.overview.plan
    tiers = [[r["tier"], fmt.number(r["gpu_hours_per_month"]), f"{fmt.number(r['low'])} .. {fmt.number(r['high'])}",
              fmt.usd(r["usd_per_month"]), f"{r['note']} ({r['source']})"] for r in tier_attribution(p)]
    per_token = [["prompt tokens", fmt.usd_cents(p.usd_per_1m_prompt_tokens_with_reuse),
                  fmt.usd_cents(p.usd_per_1m_prompt_tokens_without_reuse)],
                 ["output tokens", fmt.usd_cents(p.usd_per_1m_output_tokens_with_reuse),
                  fmt.usd_cents(p.usd_per_1m_output_tokens_without_reuse)]]
    return ("<h3>Saved prefill by cache tier</h3>"
            + (table(["tier", "GPU-h / month", "band", "$ / month", ""], tiers, {1, 3}) if tiers
               else "<p>No tier attribution: the saved prefill could not be modelled for this window.</p>")
            + f"<p>{escape(fmt.cost_model_line(p))} Deployment facts: "
            + f"{escape(d.overview.facts.origin if d.overview.facts else 'defaults')}.</p>"
            + "<h3>$ per 1M tokens</h3>" + table(["", "with reuse", "without reuse"], per_token, {1, 2}))


def _sweep(d: ReportData) -> str:
    """The load sweep the fleet was sized from (goodput per replica at the SLOs), if any."""
    sw = d.sweep
    if sw is None or sw.pair is None:
        return ("<p>No load sweep stored: the fleet was sized with the queueing formula (a labelled fallback). "
                "<code>kvplan pilot --sweep</code> measures each replica's goodput at the SLOs.</p>")
    rows = [[r["side"], fmt.number(r["goodput_rps"]), r["limited_by"] or "", r["note"]] for r in sw.goodput_rows]
    cpu = " CPU-scale seconds from a tiny model, not GPU results." if sw.cpu_scale else ""
    return (f"<h3>Load sweep</h3><p>{escape(sw.pair.label)}.{cpu}</p>"
            + table(["side", "goodput (req/s)", "limited by", "note"], rows, {1})
            + svg(charts_cost.sweep_curves_chart(sw.rows, sw.ttft_slo_s, sw.goodput_rows,
                                                 sw.load_kind or "concurrency")))


def _assumptions(d: ReportData) -> str:
    inp = d.overview.plan.inputs
    pb = [[f.name, str(getattr(inp.pricebook, f.name)), f.unit, f.help] for f in FIELDS]
    pl = [[f.name, str(getattr(inp.planning, f.name)), f.unit, f.help] for f in PLANNING_FIELDS]
    items = "".join(f"<li>{escape(a)}</li>" for a in d.overview.plan.assumptions)
    return ("<h2>6. Assumptions and price book</h2>"
            f"<p>Price book: {escape(d.overview.pricebook_origin)}.</p>"
            + table(["field", "value", "unit", "meaning"], pb) + "<h3>Planning inputs</h3>"
            + table(["field", "value", "unit", "meaning"], pl) + f"<h3>Model assumptions</h3><ul>{items}</ul>")


def _provenance(d: ReportData) -> str:
    w = d.overview.window
    sc = [[r["target"], r["ok"], r["failed"]] for r in d.scrape_counts]
    gaps = [[g["target"] or "(whole deployment)", ts(g["t_from"]), ts(g["t_to"]), g["reason"]]
            for g in (d.collection.gaps or [])]
    gaps += [[f["target"], ts(f["ts"]), ts(f["ts"]), f"failed scrape: {f['error']}"]
             for f in d.collection.failed_scrapes]
    ledger = [[ts(c["t_from"]), ts(c["t_to"]), c["step_s"], "ok" if c["ok"] else f"failed: {c['error']}", c["n_series"]]
              for c in d.ledger]
    qs = [[n, f, doc] for n, f, doc in d.queries_used()]
    return ("<h2>7. Data provenance</h2>"
            f"<p>Window {ts(d.t_from)} .. {ts(d.t_to)} UTC: the whole month {d.month}, as kvplan stats and plan "
            f"read it{_data_span(d)}; "
            f"{escape(w.source_note)}. Counter resets (server restarts) inside it: {w.stats.counter_resets}. "
            "Measured on: "
            f"{escape(d.measured_on or 'not recorded (the metrics do not say which hardware served them)')}.</p>"
            + "<h3>Direct scrapes per target</h3>" + table(["target", "ok", "failed"], sc, {1, 2})
            + "<h3>Prometheus ingestion</h3>" + table(["from", "to", "step s", "status", "series"], ledger, {2, 4})
            + "<h3>Gaps (never filled with zeros)</h3>" + table(["target", "from", "to", "reason"], gaps)
            + "<h3>Queries used</h3>" + table(["named query", "file", "what it returns"], qs))


def _data_span(d: ReportData) -> str:
    """' (data from .. to)': the first and last data point inside the month, what the charts span."""
    if d.data_from is None or d.data_to is None:
        return ""
    return f" (data {ts(d.data_from)} .. {ts(d.data_to)})"


def render_html(d: ReportData, generated_at: datetime | None = None) -> str:
    """The report as HTML (deterministic for the same data and ``generated_at``)."""
    model_name = d.model_name or "all models"
    gen = f" Generated at {generated_at:%Y-%m-%d %H:%M} UTC." if generated_at else ""
    body_note = CPU_NOTE.removeprefix("CPU-scale: ")
    cpu = (f'<p class="note"><b>CPU-scale numbers.</b> Measured on: {escape(d.measured_on or "see the runs")}. '
           f"{escape(body_note[0].upper() + body_note[1:])}</p>" if d.cpu_scale else "")
    with charts_in_background() as bg:  # vl-convert draws each chart while the next sections are built
        body = "".join(f(d) for f in (_decision, _reuse, _tail, _topology, _pilot, _pricing, _assumptions,
                                      _provenance))
        body = bg.fill(body)
    body += d.whatif_html + d.prompts_html
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>kvplan capacity report: {escape(d.deployment)} {d.month}</title><style>{CSS}</style></head><body>"
            f"<h1>Capacity report: {escape(d.deployment)}, {d.month}</h1>"
            f'<p class="meta">Window {ts(d.t_from)} .. {ts(d.t_to)} UTC{_data_span(d)} · {escape(model_name)} · '
            f"buy more GPUs or reuse cached work (KV-cache reuse).{gen}</p>{cpu}{body}</body></html>")
