"""kvplan CLI: `kvplan import-trace` and `kvplan whatif` (cache size and topology what-if)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ...models.core.errors import KvplanError
from ..data.store import deployment_settings
from .common import (
    SEED_MAX,
    ConfigOpt,
    DbOpt,
    json_text,
    open_reader,
    open_writer,
    out,
    parse_window,
    positive,
    settings,
)

if TYPE_CHECKING:
    from ..views.whatif import WhatIf

MAX_RANKS = 4096
"""Most private caches a what-if compares (the replay is linear in ranks x requests)."""
MAX_GB = 1e6
"""Largest cache capacity an option takes, GB (a petabyte)."""


def import_trace(
    deployment: Annotated[str, typer.Option(help="Deployment the trace belongs to.")],
    paths: Annotated[list[Path], typer.Argument(help="Trace files, an LMCache --lookup-hash-log-dir, or request "
                                                     "logs (chat / completions / Batch API bodies).")],
    trace: Annotated[str | None, typer.Option(help="Trace name (default: 'lmcache' for lookup-hash logs, "
                                                   "'requests' for request logs, the file name for Mooncake).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="auto, lmcache, mooncake or requests.")] = "auto",
    bytes_per_chunk: Annotated[int | None, typer.Option(min=1, max=2**40,
                                                   help="KV bytes of one chunk (default: from shapes/dtypes).")] = None,
    instance: Annotated[str | None, typer.Option(help="The cache instance (LMCache server) these logs come from "
                                                      "(default: each log's directory name).")] = None,
    tokenizer: Annotated[str | None, typer.Option(
        help="Request logs: the model's tokenizer, a local directory or a model id in the local Hugging Face "
             "cache (never downloaded).")] = None,
    chat_template: Annotated[Path | None, typer.Option(
        help="Request logs: the chat template the servers use (vLLM's --chat-template); default the "
             "tokenizer's.")] = None,
    chunk_size: Annotated[int | None, typer.Option(
        min=1, max=1_000_000,
        help="Request logs: tokens per hashed chunk (default 256, LMCache's; the engine's block_size for "
             "vLLM's cache).")] = None,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Import request traces with prefix-chunk hashes (LMCache lookup-hash logs, Mooncake
    format) or request logs (rendered and tokenized as vLLM does, hashed: only hashes, lengths,
    times and the instance are stored, never prompt text). Every file is validated first;
    re-importing is a no-op; a log that has grown is imported from where the last import
    stopped. The logs of several LMCache servers (one directory each, or a directory of them)
    import as one trace, told apart by instance."""
    from ...collectors.traces.ingest import import_trace as do_import

    database = open_writer(settings(config, db))
    r = do_import(database, deployment, paths, name=trace, fmt=fmt, bytes_per_chunk=bytes_per_chunk,
                  instance=instance, tokenizer=tokenizer, chat_template=chat_template, chunk_size=chunk_size)
    for f in r.files:
        tail = " (an incomplete last line is left for the next import)" if f.partial_tail else ""
        out.print(f"{f.instance}/{f.file}: {f.status}, {f.requests} request(s){tail}")
        for note in f.notes:
            out.print(f"  {note}", soft_wrap=True, highlight=False)
    bpc = f"{r.bytes_per_chunk:,} bytes per chunk" if r.bytes_per_chunk else "bytes per chunk unknown"
    out.print(f"trace {r.trace!r} ({r.format}) of {deployment}: {r.requests} new request(s); {bpc}")


def whatif_command(
    deployment: Annotated[str, typer.Option(help="Deployment name.")],
    trace: Annotated[str | None, typer.Option(help="Trace name (default: the newest).")] = None,
    model_name: Annotated[str | None, typer.Option("--model", help="Only this model_name.")] = None,
    ranks: Annotated[int, typer.Option(
        min=1, max=MAX_RANKS, help="Private caches to compare with one shared pool.")] = 8,
    capacity_gb: Annotated[float | None, typer.Option(
        max=MAX_GB, callback=positive,
        help="Total capacity compared shared vs private (default: configured size).")] = None,
    configured_gb: Annotated[float | None, typer.Option(
        max=MAX_GB, callback=positive,
        help="The cache size you run today, GB (default: price book cache_tier_gb_cpu).")] = None,
    bytes_per_chunk: Annotated[int | None, typer.Option(
        min=1, max=2**40, help="KV bytes of one chunk (default: the trace's).")] = None,
    l2_gb: Annotated[float | None, typer.Option(
        max=MAX_GB, callback=positive,
        help="An L2 (disk) tier of this size under the configured L1: hits split by tier.")] = None,
    seconds_per_token: Annotated[float | None, typer.Option(
        max=1.0, callback=positive,
        help="GPU-seconds one cached prompt token saves (default: from the deployment's metrics).")] = None,
    tokens_per_month: Annotated[float | None, typer.Option(
        max=1e18, callback=positive, help="Prompt tokens per month (default: the trace's rate).")] = None,
    points: Annotated[int, typer.Option(
        min=1, max=10_000, help="Capacities listed (the curve itself is exact at all).")] = 30,
    seed: Annotated[int, typer.Option(min=0, max=SEED_MAX, help="Seed of the random routing.")] = 0,
    from_: Annotated[str | None, typer.Option("--from", help="Window start (ISO 8601; UTC if no zone): the "
                                                            "trace's requests and the metrics in it.")] = None,
    to: Annotated[str | None, typer.Option("--to", help="Window end (ISO 8601).")] = None,
    month: Annotated[str | None, typer.Option(help="A UTC month, YYYY-MM, as the report and the page's month "
                                                   "read it: the newest trace with a request in it, its requests "
                                                   "and the metrics of the month (instead of --from/--to).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Hit rate against cache capacity (exact, every capacity in one pass, LMCache's hit rule),
    one shared pool against private caches, the capacity that pays best; today's topology from
    the trace against what the deployment measured, and TTFT for today and every alternative."""
    from ..views.whatif import WhatIfQuery, month_whatif
    from ..views.whatif import whatif as run

    if month is not None and (from_ is not None or to is not None or trace is not None):
        raise KvplanError("--month picks the trace and the window itself: give it without --trace, --from, --to",
                          source="--month")
    if (from_ is None) != (to is None):
        raise KvplanError("give both --from and --to, or neither (the whole trace)", source="--from/--to")
    t0, t1 = parse_window(from_, to) if from_ is not None and to is not None else (None, None)
    s = settings(config, db)
    with open_reader(s).snapshot() as src:
        q = WhatIfQuery(
            trace=trace, model_name=model_name, ranks=ranks, capacity_gb=capacity_gb, configured_gb=configured_gb,
            bytes_per_chunk=bytes_per_chunk, seconds_per_cached_token=seconds_per_token,
            tokens_per_month=tokens_per_month, points=points, seed=seed, l2_gb=l2_gb, t_from=t0, t_to=t1)
        cfg = deployment_settings(s, deployment)
        d = (month_whatif(src, deployment, month, q, cfg=cfg) if month is not None
             else run(src, deployment, q, cfg=cfg))
    if as_json:
        sys.stdout.write(json_text(d.to_dict(), indent=2, sort_keys=True) + "\n")
        return
    t = d.trace
    out.print(f"trace {t.name!r}: {t.requests:,} requests, {t.chunk_references:,} chunk "
              f"references, {t.unique_chunks:,} distinct chunks of {t.chunk_tokens} tokens")
    sat = d.saturation
    out.print(f"infinite-capacity hit rate {d.infinite_hit_rate:.1%}, reached at "
              f"{_cap(sat.capacity_gb, sat.capacity_tokens)}")
    out.print(f"{'capacity':>22}  {'hit rate':>8}")
    for p in d.points:
        out.print(f"{_cap(p.capacity_gb, p.capacity_tokens):>22}  {p.hit_rate:>8.1%}")
    if d.configured:
        c = d.configured
        out.print(f"configured {c.capacity_gb:g} GB: {c.hit_rate:.1%}")
    if d.tiers:
        t2 = d.tiers
        out.print(f"L1 {t2.l1_gb:g} GB + L2 {t2.l2_gb:g} GB: {t2.l1_hit_rate:.1%} from L1, "
                  f"{t2.l2_hit_rate:.1%} from L2")
    sp = d.shared_vs_private
    out.print(f"one shared pool of {_cap(sp.capacity_gb, sp.capacity_tokens)}: "
              f"{sp.shared_hit_rate:.1%}; {sp.ranks} private caches of 1/{sp.ranks} each:")
    for pc in sp.private:
        out.print(f"  {pc.routing:<16} {pc.hit_rate:.1%}")
    if d.dollars:
        b = d.dollars.best
        out.print(f"best capacity {b.capacity_gb:,.2f} GB: net ${b.net_usd_per_month:,.0f}/month "
                  f"(saves ${b.saved_usd_per_month:,.0f}, memory ${b.memory_usd_per_month:,.0f})")
        be = d.dollars.break_even
        if be:
            out.print(f"past {be.capacity_gb:,.2f} GB the cache costs more than it saves")
    _print_topology(d)
    for n in d.notes:
        out.print(f"[dim]note: {n}[/dim]")


def _s(v: float | None) -> str:
    return f"{v:.3f} s" if v is not None else "-"


def _pct(v: float | None) -> str:
    return f"{v:.1%}" if v is not None else "-"


def _print_topology(d: WhatIf) -> None:
    """Today's topology against what it measured, then TTFT for every alternative."""
    if d.topology is None:
        return
    tw = d.topology
    t = tw.today
    out.print(f"today: {t.instances} cache instance(s) ({', '.join(t.instance_names)}), {t.engines} "
              f"engine(s); hit rate {_pct(t.hit_rate_predicted)} replayed, {_pct(t.hit_rate_measured)} "
              "measured (LMCache counters)")
    out.print(f"today's TTFT: mean {_s(t.ttft_mean_s_predicted)} predicted, {_s(t.ttft_mean_s_measured)} "
              f"measured; p99 {_s(t.ttft_p99_s_predicted)} predicted, {_s(t.ttft_p99_s_measured)} measured "
              "(histogram)")
    if tw.latency:
        slo = tw.slo.ttft_p99_s
        cal = t.ttft_calibration
        if cal is not None and cal.calibrated:
            out.print("TTFTs calibrated on today (raw x today's measured / predicted): mean x"
                      f"{cal.mean.ratio or 1:.2f}, p50 x{cal.p50.ratio or 1:.2f}, p99 x{cal.p99.ratio or 1:.2f}")
        out.print(f"{'set-up':<28} {'hit rate':>8} {'TTFT mean':>10} {'(raw)':>8} {'p50':>8} {'(raw)':>8} {'p99':>8} "
                  f"{'(raw)':>8}  p99 <= {slo:g} s SLO")
        for r in tw.latency:
            out.print(f"{r.name:<28} {_pct(r.hit_rate):>8} {_s(r.ttft_mean_s):>10} {_s(r.ttft_mean_s_raw):>8} "
                      f"{_s(r.ttft_p50_s):>8} {_s(r.ttft_p50_s_raw):>8} {_s(r.ttft_p99_s):>8} "
                      f"{_s(r.ttft_p99_s_raw):>8}  {'yes' if r.holds_slo else 'no'}")
    e = tw.engines_needed
    if e:
        def k(v: int | None) -> str:
            return str(v) if v is not None else f"more than {e.searched_up_to}"

        out.print(f"engines that hold the SLO: today's caches {k(e.today)}, one shared pool {k(e.shared)} "
                  f"(today: {e.engines_today})")


def _cap(gb: float | None, tokens: int) -> str:
    return f"{gb:,.3f} GB ({tokens:,} tok)" if gb is not None else f"{tokens:,} tokens"
