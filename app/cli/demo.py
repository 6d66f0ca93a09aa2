"""kvplan CLI: `kvplan demo` (recorded real data in a DuckDB file, then the dashboard) and
`kvplan stack` (the real local vLLM + LMCache + Prometheus stack)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress

from .common import ConfigOpt, DbOpt, err, open_writer, out, settings


def demo(
    db: DbOpt = None, config: ConfigOpt = None,
    load_only: Annotated[bool, typer.Option("--load-only",
                                            help="Only load the data; do not start the dashboard.")] = False,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Dashboard port.")] = 8501,
    headless: Annotated[bool, typer.Option(help="Do not open a browser.")] = False,
    dataset: Annotated[Path | None, typer.Option(
        help="Dataset file (default: the one shipped in deploy/demo).")] = None,
) -> None:
    """Load the demo dataset (recorded from the real vLLM + LMCache stack on CPU with a tiny
    model; time axis stretched, see its header) into the DuckDB file and open the dashboard."""
    from ...collectors.demo import DEMO_FILE, load_demo
    from .dashboard import dashboard

    s = settings(config, db)
    database = open_writer(s)
    with Progress(console=err, transient=True) as bar:
        task = bar.add_task("loading demo scrapes", total=None)
        res = load_demo(database, dataset or DEMO_FILE,
                        progress=lambda i, n: bar.update(task, completed=i, total=n))
    out.print(f"demo deployment {res['deployment']!r} in {s.db}: {res['scrapes']} scrapes stored, "
              f"{res['duplicates']} already there, {res['failures']} failed scrapes (gaps), {res['runs']} runs, "
              f"{res.get('lookups', 0)} LMCache lookups (the What-if page's trace)")
    if "request_log_requests" in res:
        from ...collectors.demo import PROMPTS_DEPLOYMENT

        out.print(f"recorded request logs: {res['request_log_requests']} request(s) hashed into the trace 'requests' "
                  f"of {PROMPTS_DEPLOYMENT!r} (vLLM only, no LMCache); the Prompts page reads the logs themselves")
    out.print(f"[dim]{res['header']['note']}[/dim]")
    if not load_only:
        dashboard(db=Path(s.db), config=config, port=port, headless=headless)



RunDir = Annotated[Path, typer.Option(help="Where the stack keeps its logs, pids and generated kvplan.toml.")]


def stack_up(run_dir: RunDir = Path("var/stack"),
             vllm: Annotated[int, typer.Option(min=0, max=16, help="vLLM servers connected to LMCache.")] = 2,
             plain: Annotated[int, typer.Option(
                 min=0, max=16, help="vLLM servers with vLLM's own prefix cache only.")] = 0,
             nocache: Annotated[int, typer.Option(
                 min=0, max=16, help="vLLM servers with no reuse (prefix caching off).")] = 0) -> None:
    """Install (first time, ~3 min), build the tiny model and start the stack on free ports."""
    from ...deploy.local import stack as stk

    st = stk.up(run_dir, n_vllm=vllm, n_vllm_plain=plain, n_vllm_nocache=nocache)  # StackError: exit 2
    for s_ in st.servers:
        out.print(f"{s_.name:<16} {s_.kind:<10} {s_.metrics_url}")
    out.print(f"kvplan config: {Path(run_dir) / stk.KVPLAN_TOML}  (kvplan collect --daemon --config ...)")


def stack_down(run_dir: RunDir = Path("var/stack")) -> None:
    """Stop exactly the processes `kvplan stack up` started (by pid)."""
    from ...deploy.local import stack as stk

    for line in stk.down(run_dir):
        out.print(line)


def stack_status(run_dir: RunDir = Path("var/stack")) -> None:
    """Health of every server of the stack."""
    from ...deploy.local import stack as stk

    for row in stk.status(run_dir):
        out.print(row)

