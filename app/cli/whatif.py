"""kvplan CLI: `kvplan import-trace` and `kvplan whatif` (cache size and topology what-if)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from kvplan.app.cli.common import SEED_MAX, ConfigOpt, DbOpt, json_text, open_db, out, positive, settings
from kvplan.app.data.store import deployment_settings

MAX_RANKS = 4096
"""Most private caches a what-if compares (the replay is linear in ranks x requests)."""
MAX_GB = 1e6
"""Largest cache capacity an option takes, GB (a petabyte)."""


def import_trace(
    deployment: Annotated[str, typer.Option(help="Deployment the trace belongs to.")],
    paths: Annotated[list[Path], typer.Argument(help="Trace files, or an LMCache --lookup-hash-log-dir.")],
    trace: Annotated[str | None, typer.Option(help="Trace name (default: 'lmcache' for lookup-hash logs, the "
                                                   "file name for Mooncake).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="auto, lmcache or mooncake.")] = "auto",
    bytes_per_chunk: Annotated[int | None, typer.Option(min=1, max=2**40,
                                                   help="KV bytes of one chunk (default: from shapes/dtypes).")] = None,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Import request traces with prefix-chunk hashes (LMCache lookup-hash logs, Mooncake
    format). Every file is validated first; re-importing is a no-op; a log that has grown is
    imported from where the last import stopped."""
    from kvplan.collectors.traces import import_trace as do_import

    database = open_db(settings(config, db))
    r = do_import(database, deployment, paths, name=trace, fmt=fmt, bytes_per_chunk=bytes_per_chunk)
    for f in r.files:
        tail = " (an incomplete last line is left for the next import)" if f.partial_tail else ""
        out.print(f"{f.file}: {f.status}, {f.requests} request(s){tail}")
    bpc = f"{r.bytes_per_chunk:,} bytes per chunk" if r.bytes_per_chunk else "bytes per chunk unknown"
    out.print(f"trace {r.trace!r} ({r.format}) of {deployment}: {r.requests} new request(s); {bpc}")


def whatif(
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
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Hit rate against cache capacity (exact, every capacity in one pass, LMCache's hit rule),
    one shared pool against private caches, and the capacity that pays best."""
    from kvplan.app.views.whatif import whatif as run

    s = settings(config, db)
    d = run(open_db(s), deployment, trace, model_name=model_name, ranks=ranks, capacity_gb=capacity_gb,
            configured_gb=configured_gb, bytes_per_chunk=bytes_per_chunk,
            seconds_per_cached_token=seconds_per_token, tokens_per_month=tokens_per_month,
            points=points, seed=seed, l2_gb=l2_gb, cfg=deployment_settings(s, deployment))
    if as_json:
        sys.stdout.write(json_text(d, indent=2, sort_keys=True) + "\n")
        return
    t = d["trace"]
    out.print(f"trace {t['name']!r}: {t['requests']:,} requests, {t['chunk_references']:,} chunk "
              f"references, {t['unique_chunks']:,} distinct chunks of {t['chunk_tokens']} tokens")
    sat = d["saturation"]
    out.print(f"infinite-capacity hit rate {d['infinite_hit_rate']:.1%}, reached at "
              f"{_cap(sat['capacity_gb'], sat['capacity_tokens'])}")
    out.print(f"{'capacity':>22}  {'hit rate':>8}")
    for p in d["points"]:
        out.print(f"{_cap(p['capacity_gb'], p['capacity_tokens']):>22}  {p['hit_rate']:>8.1%}")
    if d["configured"]:
        c = d["configured"]
        out.print(f"configured {c['capacity_gb']:g} GB: {c['hit_rate']:.1%}")
    if d["tiers"]:
        t2 = d["tiers"]
        out.print(f"L1 {t2['l1_gb']:g} GB + L2 {t2['l2_gb']:g} GB: {t2['l1_hit_rate']:.1%} from L1, "
                  f"{t2['l2_hit_rate']:.1%} from L2")
    s = d["shared_vs_private"]
    out.print(f"one shared pool of {_cap(s['capacity_gb'], s['capacity_tokens'])}: "
              f"{s['shared_hit_rate']:.1%}; {s['ranks']} private caches of 1/{s['ranks']} each:")
    for p in s["private"]:
        out.print(f"  {p['routing']:<16} {p['hit_rate']:.1%}")
    if d["dollars"]:
        b = d["dollars"]["best"]
        out.print(f"best capacity {b['capacity_gb']:,.2f} GB: net ${b['net_usd_per_month']:,.0f}/month "
                  f"(saves ${b['saved_usd_per_month']:,.0f}, memory ${b['memory_usd_per_month']:,.0f})")
        be = d["dollars"]["break_even"]
        if be:
            out.print(f"past {be['capacity_gb']:,.2f} GB the cache costs more than it saves")
    for n in d["notes"]:
        out.print(f"[dim]note: {n}[/dim]")


def _cap(gb: float | None, tokens: int) -> str:
    return f"{gb:,.3f} GB ({tokens:,} tok)" if gb is not None else f"{tokens:,} tokens"
