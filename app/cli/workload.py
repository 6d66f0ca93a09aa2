"""kvplan CLI: `kvplan pilot`, the workload driver (evaluation step 4: pilot on a slice)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from app.cli.common import ConfigOpt, DbOpt, err, open_db, out, settings
from models.errors import KvplanError


def pilot(
    deployment: Annotated[str, typer.Option(help="Deployment the run is stored under.")],
    server: Annotated[list[str], typer.Option(help="OpenAI-compatible base URL (repeat for several servers).")],
    model: Annotated[str, typer.Option(help="Served model name.")],
    scenario: Annotated[str, typer.Option(help="shared_prefix | unique | multi_turn")] = "shared_prefix",
    users: Annotated[int, typer.Option(help="Concurrent streaming users.")] = 10,
    turns: Annotated[int, typer.Option(help="Turns per user (sequential).")] = 3,
    output_tokens: Annotated[int, typer.Option(help="Tokens generated per request (ignore_eos).")] = 16,
    prefix_chars: Annotated[int, typer.Option(help="Shared prefix / opening context length in characters.")] = 4000,
    tail_chars: Annotated[int, typer.Option(help="Per-request tail in characters.")] = 200,
    routing: Annotated[str, typer.Option(help="round_robin | random | affinity")] = "round_robin",
    seed: Annotated[int, typer.Option(help="Prompt text seed.")] = 0,
    max_requests: Annotated[int, typer.Option(help="Hard bound on requests sent.")] = 1000,
    max_seconds: Annotated[float, typer.Option(help="Hard bound on wall time.")] = 600.0,
    label: Annotated[str | None, typer.Option(help="Run label (default: the scenario).")] = None,
    measured_on: Annotated[str, typer.Option(help="What the numbers were measured on, e.g. '8x H100, Qwen3-235B'.")] = "unspecified hardware",
    scrape: Annotated[list[str] | None, typer.Option(help="/metrics URL to scrape right before and after the run.")] = None,
    reuse: Annotated[str | None, typer.Option(help="Side of a measured A/B: 'off' (prefix caching / LMCache off on "
                                                    "the servers) or 'on'. Needs --ab-pair.")] = None,
    ab_pair: Annotated[str | None, typer.Option(help="Name both sides of a measured A/B share: the newest pair "
                                                      "overrides the modelled saved prefill, labelled 'measured'.")] = None,
    engine_seconds: Annotated[float | None, typer.Option(help="Engine time the run took, seconds (e.g. GPU busy "
                                                               "time from DCGM). Default: the run's wall time.")] = None,
    engine_seconds_source: Annotated[str | None, typer.Option(help="How --engine-seconds was measured.")] = None,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Drive N concurrent streaming users for T turns against the servers, store the run
    (client-side TTFT, total time, tokens/s per request) and optionally scrape the servers'
    /metrics right before and after it, so the run's window has server-side numbers too."""
    from collectors import workload as wl
    from collectors.runs import save_run
    from collectors.scrape import Target, default_target_name, scrape_target

    if (reuse is None) != (ab_pair is None):
        raise KvplanError("a measured A/B side needs both --reuse off|on and --ab-pair NAME",
                          source="--reuse" if reuse is None else "--ab-pair")
    if reuse not in (None, "off", "on"):
        raise KvplanError(f"must be 'off' or 'on'; got {reuse!r}", source="--reuse")
    if engine_seconds is not None and not engine_seconds > 0:
        raise KvplanError(f"must be > 0 seconds; got {engine_seconds!r}", source="--engine-seconds")
    s = settings(config, db)
    database = open_db(s)
    w = wl.Workload(scenario=scenario, users=users, turns=turns, output_tokens=output_tokens,
                    prefix_chars=prefix_chars, tail_chars=tail_chars, routing=routing, seed=seed,
                    max_requests=max_requests, max_seconds=max_seconds)
    targets = [Target(default_target_name(u), u) for u in scrape or []]
    for t in targets:
        scrape_target(database, deployment, t, timeout_s=s.scrape_timeout_s)
    with err.status(f"{scenario}: {users} users x {turns} turns against {len(server)} server(s)..."):
        run = wl.run(server, model, w)
    for t in targets:
        scrape_target(database, deployment, t, timeout_s=s.scrape_timeout_s)
    ab = {}
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
