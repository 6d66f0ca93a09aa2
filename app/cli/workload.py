"""kvplan CLI: `kvplan pilot`, the workload driver (evaluation step 4: pilot on a slice)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import typer

from ...models.core.errors import KvplanError
from ...models.core.vocabulary import Routing
from .common import SEED_MAX, ConfigOpt, DbOpt, err, open_writer, out, positive, routing_option, settings


def pilot(
    deployment: Annotated[str, typer.Option(help="Deployment the run is stored under.")],
    model_name: Annotated[str, typer.Option("--model", help="Served model name.")],
    server: Annotated[list[str] | None, typer.Option(
        help="OpenAI-compatible base URL (repeat for several servers).")] = None,
    scenario: Annotated[Literal["shared_prefix", "unique", "multi_turn"], typer.Option(
        help="What the users send.")] = "shared_prefix",
    users: Annotated[int, typer.Option(min=1, max=10_000, help="Concurrent streaming users.")] = 10,
    turns: Annotated[int, typer.Option(min=1, max=1_000, help="Turns per user (sequential).")] = 3,
    output_tokens: Annotated[int, typer.Option(min=1, max=1_000_000,
                                               help="Tokens generated per request (ignore_eos).")] = 16,
    prefix_chars: Annotated[int, typer.Option(min=0, max=100_000_000,
                                              help="Shared prefix / opening context length in characters.")] = 4000,
    tail_chars: Annotated[int, typer.Option(min=0, max=100_000_000, help="Per-request tail in characters.")] = 200,
    routing: Annotated[str, typer.Option(
        help="How a user's turns are routed across the servers: round_robin, random or prefix_affinity "
             "('affinity' is the older spelling).", callback=routing_option)] = "round_robin",
    seed: Annotated[int, typer.Option(min=0, max=SEED_MAX, help="Prompt text seed.")] = 0,
    max_requests: Annotated[int, typer.Option(min=1, max=100_000_000, help="Hard bound on requests sent.")] = 1000,
    max_seconds: Annotated[float, typer.Option(max=30 * 86400.0, callback=positive,
                                             help="Hard bound on wall time, s.")] = 600.0,
    label: Annotated[str | None, typer.Option(help="Run label (default: the scenario).")] = None,
    measured_on: Annotated[str, typer.Option(
        help="What the numbers were measured on, e.g. '8x H100, Qwen3-235B'.")] = "unspecified hardware",
    scrape: Annotated[list[str] | None, typer.Option(
        help="/metrics URL to scrape right before and after the run.")] = None,
    reuse: Annotated[Literal["off", "on"] | None, typer.Option(
        help="Side of a measured A/B: 'off' (prefix caching / LMCache off on the servers) or 'on'. "
             "Needs --ab-pair.")] = None,
    ab_pair: Annotated[str | None, typer.Option(
        help="Name both sides of a measured A/B share: the newest pair overrides the modelled saved "
             "prefill, labelled 'measured'.")] = None,
    engine_seconds: Annotated[float | None, typer.Option(
        callback=positive, help="Engine time the run took, seconds (e.g. GPU busy time from DCGM). "
                                "Default: the run's wall time.")] = None,
    engine_seconds_source: Annotated[str | None, typer.Option(help="How --engine-seconds was measured.")] = None,
    sweep: Annotated[bool, typer.Option(
        "--sweep", help="Load sweep: raise the load in levels against --off-url (reuse off) and --on-url "
                        "(reuse on); store both curves and print the goodputs.")] = False,
    off_url: Annotated[str | None, typer.Option(help="--sweep: the replica with KV reuse off.")] = None,
    on_url: Annotated[str | None, typer.Option(help="--sweep: the replica with KV reuse on.")] = None,
    levels: Annotated[str | None, typer.Option(help="--sweep: concurrency levels (closed loop), e.g. 1,2,4,8.")] = None,
    rates: Annotated[str | None, typer.Option(
        help="--sweep: request rates per second (open loop, Poisson), e.g. 2,4,8.")] = None,
    requests_per_level: Annotated[int, typer.Option(
        min=1, max=1_000_000, help="--sweep: requests per level (at least).")] = 24,
    level_seconds: Annotated[float, typer.Option(
        max=86400.0, callback=positive, help="--sweep: rate levels send for about this long.")] = 10.0,
    ttft_slo: Annotated[float | None, typer.Option(
        max=3600.0, callback=positive, help="--sweep: p99 TTFT SLO, s (default: the planning inputs').")] = None,
    tpot_slo: Annotated[float | None, typer.Option(
        max=3600.0, callback=positive, help="--sweep: p99 TPOT SLO, s (default: not checked).")] = None,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Drive N concurrent streaming users for T turns against the servers, store the run
    (client-side TTFT, total time, tokens/s per request) and optionally scrape the servers'
    /metrics right before and after it, so the run's window has server-side numbers too.

    With --sweep: raise the offered load in levels (--levels: concurrent users, or --rates:
    requests/s) against one replica with reuse off (--off-url) and one with reuse on (--on-url),
    the same prompts on both (--scenario shared_prefix or unique, with this command's prompt and
    output shape); store both curves and print each side's goodput at the SLOs."""
    if sweep:
        _sweep(deployment=deployment, model_name=model_name, off_url=off_url, on_url=on_url, levels=levels, rates=rates,
               scenario=scenario, output_tokens=output_tokens, prefix_chars=prefix_chars, tail_chars=tail_chars,
               seed=seed, requests_per_level=requests_per_level, level_seconds=level_seconds,
               ttft_slo=ttft_slo, tpot_slo=tpot_slo, label=label, measured_on=measured_on, db=db, config=config)
        return
    if not server:
        raise KvplanError("give at least one --server (or --sweep with --off-url and --on-url)", source="--server")
    from ...collectors.loadgen import client as lg_client
    from ...collectors.loadgen import workload as wl
    from ...collectors.loadgen.runs import save_run
    from ...collectors.scrape.scrape import Target, default_target_name, scrape_target

    if (reuse is None) != (ab_pair is None):
        raise KvplanError("a measured A/B side needs both --reuse off|on and --ab-pair NAME",
                          source="--reuse" if reuse is None else "--ab-pair")
    s = settings(config, db)
    database = open_writer(s)
    w = wl.Workload(scenario=scenario, users=users, turns=turns, output_tokens=output_tokens,
                    prefix_chars=prefix_chars, tail_chars=tail_chars, routing=Routing.parse(routing), seed=seed,
                    max_requests=max_requests, max_seconds=max_seconds)
    targets = [Target(default_target_name(u), u) for u in scrape or []]
    for t in targets:
        scrape_target(database, deployment, t, timeout_s=s.scrape_timeout_s)
    with err.status(f"{scenario}: {users} users x {turns} turns against {len(server)} server(s)..."):
        run = lg_client.run(server, model_name, w)
    for t in targets:
        scrape_target(database, deployment, t, timeout_s=s.scrape_timeout_s)
    ab: dict[str, Any] = {}
    if reuse is not None:
        wall = run.ended_at - run.started_at
        ab = {"reuse": reuse, "ab_pair": ab_pair,
              "engine_seconds": engine_seconds if engine_seconds is not None else wall,
              "engine_seconds_source": engine_seconds_source or ("given (--engine-seconds)" if engine_seconds
                                                                 else "wall time of the run (servers saturated "
                                                                      "by this run alone)")}
    run_id = save_run(database, deployment, run, label=label, measured_on=measured_on, **ab)
    summary = run.summary()
    summary.update(run_id=run_id, measured_on=measured_on, **ab)
    out.print_json(json.dumps(summary))
    if run.errors:
        err.print(f"[yellow]{len(run.errors)} request(s) failed; first: {run.errors[0].error}[/yellow]")


def _levels(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise KvplanError("a comma-separated list of numbers, e.g. 1,2,4,8", source=f"{what} {text}") from None


def _sweep(*, deployment: str, model_name: str, off_url: str | None, on_url: str | None, levels: str | None,
           rates: str | None, scenario: str, output_tokens: int, prefix_chars: int, tail_chars: int, seed: int,
           requests_per_level: int, level_seconds: float, ttft_slo: float | None, tpot_slo: float | None,
           label: str | None, measured_on: str, db, config) -> None:
    """``kvplan pilot --sweep``: both sides, stored, with a progress bar per level."""
    from datetime import UTC, datetime

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ...collectors.loadgen.sweep import SweepPlan, run_pair, save_sweep
    from ...models.capacity.goodput import sweep_goodput
    from ..data.store import load_pricebook

    if not off_url or not on_url:
        raise KvplanError("a sweep needs the replica with reuse off and the one with reuse on",
                          source="--off-url/--on-url")
    if (levels is None) == (rates is None):
        raise KvplanError("give either --levels (concurrency) or --rates (requests/s)", source="--levels/--rates")
    kind, text = ("concurrency", levels) if levels is not None else ("rate", rates)
    plan = SweepPlan(levels=_levels(text or "", "--levels" if levels else "--rates"), load_kind=kind,
                     scenario=scenario, prefix_chars=prefix_chars, tail_chars=tail_chars,
                     output_tokens=output_tokens, seed=seed, requests_per_level=requests_per_level,
                     level_seconds=level_seconds)
    s = settings(config, db)
    database = open_writer(s)
    if ttft_slo is None:
        ttft_slo = load_pricebook(database, deployment, s.prices).planning.ttft_p99_slo_seconds
    unit = "users" if kind == "concurrency" else "req/s"
    with Progress(TextColumn("sweep {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("warm-up", total=2 * len(plan.levels))

        def step(reuse: str, k: int, p) -> None:
            bar.update(task, advance=1, description=f"reuse {reuse} at {p.offered:g} {unit}: "
                       f"{p.throughput_rps:.2f} req/s, TTFT p99 {p.ttft_p99_s or float('nan'):.3f} s")

        off, on = run_pair(off_url, on_url, model_name, plan, progress=step)
    pair = label or f"sweep {datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}"
    ids = [save_sweep(database, deployment, side, pair=pair, measured_on=measured_on) for side in (off, on)]
    sg = sweep_goodput(off.points, on.points, ttft_slo, tpot_slo, label=f"load sweep {pair!r} ({measured_on})")
    summary = {
        "pair": pair, "sweep_ids": {"off": ids[0], "on": ids[1]}, "load_kind": kind, "measured_on": measured_on,
        "ttft_slo_s": ttft_slo, "tpot_slo_s": tpot_slo,
        "levels": [{"reuse": side.reuse, "offered": p.offered, "throughput_rps": round(p.throughput_rps, 4),
                    "ttft_p50_s": _r(p.ttft_p50_s), "ttft_p99_s": _r(p.ttft_p99_s), "tpot_p99_s": _r(p.tpot_p99_s),
                    "requests": p.requests, "failed": p.failed}
                   for side in (off, on) for p in side.points],
        "goodput": {"without_reuse_rps": round(sg.goodput.without_reuse_rps, 4),
                    "with_reuse_rps": round(sg.goodput.with_reuse_rps, 4),
                    "limited_by": {"off": sg.off.limited_by, "on": sg.on.limited_by},
                    "notes": {"off": sg.off.note, "on": sg.on.note}, "source": sg.goodput.source},
    }
    out.print_json(json.dumps(summary))
    errors = off.errors + on.errors
    if errors:
        err.print(f"[yellow]{len(errors)} request(s) failed; first: {errors[0]}[/yellow]")


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)
