"""The ``kvplan`` command line: a thin layer over collectors, sql and models.

Every error a user can act on (bad file, unreachable URL, bad config key, locked database)
ends the command with its message and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from collectors.config import ConfigError, Settings, load_settings
from collectors.parse import KINDS, PayloadError
from collectors.store import ConflictError
from models.errors import KvplanError
from models.redact import redact
from sql.db import Database, DatabaseError

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="kvplan: measure KV-cache reuse on vLLM/LMCache and decide: buy GPUs or reuse.")
err = Console(stderr=True)
out = Console()

USER_ERRORS = (KvplanError, PayloadError, ConfigError, DatabaseError, ConflictError, OSError, ValueError)

DbOpt = Annotated[Optional[Path], typer.Option("--db", help="DuckDB file (env KVPLAN_DB; default ./kvplan.duckdb).")]
ConfigOpt = Annotated[Optional[Path], typer.Option("--config", help="TOML config (env KVPLAN_CONFIG; default ./kvplan.toml).")]


def parse_time(value: str, what: str) -> datetime:
    """ISO 8601; a time without zone is UTC."""
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(f"{what}: {value!r} is not an ISO 8601 time (e.g. 2026-11-30T10:00:00Z)") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def parse_window(from_: str, to: str) -> tuple[datetime, datetime]:
    """--from / --to as UTC times; --to must come after --from."""
    t0, t1 = parse_time(from_, "--from"), parse_time(to, "--to")
    if t1 <= t0:
        fail(f"--to ({to}) must be after --from ({from_})")
    return t0, t1


def require_deployment(database: Database, deployment: str) -> None:
    """Exit with the known names when the database holds no such deployment."""
    known = {d["deployment"] for d in database.fetch("deployments")}
    if deployment not in known:
        fail(f"no deployment {deployment!r} in {database.path} (known: {', '.join(sorted(known)) or 'none'})")


def settings(config: Path | None, db: Path | None) -> Settings:
    return load_settings(config, db=db)


def open_db(s: Settings, migrate: bool = True) -> Database:
    db = Database(s.db, lock_timeout_s=s.lock_timeout_s)
    if migrate:
        db.migrate()
    return db


def fail(message: str) -> None:
    err.print(f"[red]error:[/red] {redact(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


@app.command("import-metrics")
def import_metrics(
    files: Annotated[list[Path], typer.Argument(help="Saved /metrics payloads (one vLLM or LMCache server each).")],
    deployment: Annotated[str, typer.Option(help="Deployment the scrapes belong to.")],
    at: Annotated[Optional[str], typer.Option(help="Time the payloads were taken (ISO 8601; UTC if no zone); not needed for files named NAME@TIME.prom.")] = None,
    target: Annotated[Optional[str], typer.Option(help="Target name (default: NAME of NAME@TIME.prom, else the file's name without extension).")] = None,
    kind: Annotated[Optional[str], typer.Option(help=f"Force the kind: {', '.join(KINDS)}.")] = None,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Import saved /metrics texts as scrapes taken at --at (air-gapped clusters: curl now, import later).

    Importing the same file for the same time again changes nothing."""
    from collectors.scrape import import_files

    ts = parse_time(at, "--at") if at else None
    try:
        s = settings(config, db)
        database = open_db(s)
        results = import_files(database, deployment, [(f, ts, target) for f in files], kind=kind,
                               max_bytes=s.scrape_max_bytes)
    except USER_ERRORS as e:
        fail(str(e))
    for f, r in zip(files, results):
        out.print(f"{f}: {r.status} ({r.samples} samples) as target {r.target!r} at {r.ts.isoformat()}Z")


@app.command()
def scrape(
    urls: Annotated[list[str], typer.Argument(help="/metrics URLs of vLLM or LMCache servers.")],
    deployment: Annotated[str, typer.Option(help="Deployment the scrapes belong to.")],
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Scrape /metrics URLs once and store the result (a failed scrape is recorded as a gap)."""
    from collectors.config import check_url
    from collectors.scrape import Target, default_target_name, redact_url, scrape_target

    try:
        for url in urls:
            check_url(url)
        s = settings(config, db)
        database = open_db(s)
        failed = 0
        for url in urls:
            r = scrape_target(database, deployment, Target(default_target_name(url), url),
                              timeout_s=s.scrape_timeout_s, max_bytes=s.scrape_max_bytes)
            if r.status == "failed-recorded":
                failed += 1
                last = database.fetch("scrape_log", deployment=deployment, limit=50)
                msg = next((x["error"] for x in last if x["target"] == r.target and not x["ok"]), "failed")
                err.print(f"[red]{redact_url(url)}[/red]: {msg}", highlight=False, soft_wrap=True)
            else:
                out.print(f"{redact_url(url)}: {r.status} ({r.samples} samples) as target {r.target!r}")
    except USER_ERRORS as e:
        fail(str(e))
    if failed:  # every URL was tried; a failed one is a recorded gap and exit 2
        raise typer.Exit(2)


@app.command()
def stats(
    deployment: Annotated[str, typer.Option(help="Deployment name.")],
    from_: Annotated[str, typer.Option("--from", help="Window start (ISO 8601).")],
    to: Annotated[str, typer.Option(help="Window end (ISO 8601).")],
    model: Annotated[Optional[str], typer.Option(help="Only this model_name.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Hit rates, cached tokens and TTFT p50/p99 of a deployment over a window (exact: sums of
    counter increases between scrapes inside the window, then ratios)."""
    from app.service import stats as window

    t0, t1 = parse_window(from_, to)
    try:
        database = open_db(settings(config, db))
        require_deployment(database, deployment)
        st = window(database, deployment, t0, t1, model)
    except USER_ERRORS as e:
        fail(str(e))
    d = st.to_dict()
    d.update(deployment=deployment, model=model, window_from=t0.isoformat(), window_to=t1.isoformat())
    if as_json:
        sys.stdout.write(json.dumps(d, indent=2, sort_keys=True, default=str) + "\n")
        return
    from rich.table import Table

    table = Table(title=f"{deployment} {t0.isoformat()} .. {t1.isoformat()}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k in ("prefix_cache_hit_rate", "external_prefix_cache_hit_rate", "lmcache_lookup_hit_rate",
              "cached_prompt_tokens", "prompt_tokens", "requests", "ttft_p50_s", "ttft_p99_s"):
        v = d[k]
        table.add_row(k, "not reported" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v)))
    out.print(table)
    for note in st.notes:
        err.print(note, highlight=False, soft_wrap=True)


@app.command()
def dashboard(
    db: DbOpt = None, config: ConfigOpt = None,
    port: Annotated[int, typer.Option(help="Port to serve on.")] = 8501,
    headless: Annotated[bool, typer.Option(help="Do not open a browser.")] = False,
    address: Annotated[str, typer.Option(help="Address to listen on: 127.0.0.1 (this machine only) unless you "
                                              "put it behind a login (--auth-secrets or a proxy), e.g. 0.0.0.0.")] = "127.0.0.1",
    auth_secrets: Annotated[Optional[Path], typer.Option(
        envvar="KVPLAN_DASHBOARD_AUTH_SECRETS",
        help="Streamlit secrets file with an [auth] table (OpenID Connect): every page asks for a login.")] = None,
) -> None:
    """Open the Streamlit dashboard on the DuckDB file."""
    import os
    import subprocess
    import threading
    import webbrowser

    from app.auth import ENV, check_auth_secrets

    try:
        s = settings(config, db)
        secrets_file = check_auth_secrets(auth_secrets) if auth_secrets else None
    except USER_ERRORS as e:
        fail(str(e))
    env = dict(os.environ, KVPLAN_DB=str(Path(s.db).resolve()), **{ENV: "1" if secrets_file else "0"})
    if config:
        env["KVPLAN_CONFIG"] = str(config.resolve())
    script = Path(__file__).with_name("streamlit_app.py")
    cmd = [sys.executable, "-m", "streamlit", "run", str(script), *streamlit_flags(address, port)]
    if secrets_file:
        cmd += ["--secrets.files", str(secrets_file)]
    url = f"http://{'localhost' if address in ('127.0.0.1', '0.0.0.0', '::') else address}:{port}"
    out.print(f"kvplan dashboard on {url} (database {s.db}); Ctrl+C stops it")
    if not headless:
        threading.Thread(target=_open_when_up, args=(url, webbrowser.open), daemon=True).start()
    raise typer.Exit(subprocess.call(cmd, env=env, stdin=subprocess.DEVNULL))


def streamlit_flags(address: str, port: int) -> list[str]:
    """Streamlit's flags: headless (its first start would otherwise ask for an e-mail on
    stdin; kvplan opens the browser itself), listening on ``address`` only, and no outbound
    call: no usage statistics, and no welcome message (for a headless server on 0.0.0.0 it
    looks up the machine's external IP at checkip.amazonaws.com)."""
    if not 1 <= port <= 65535:
        raise typer.BadParameter(f"--port {port}: must be from 1 to 65535")
    return ["--server.address", address, "--server.port", str(port), "--server.headless", "true",
            "--browser.gatherUsageStats", "false", "--logger.hideWelcomeMessage", "true"]


def _open_when_up(url: str, opener, timeout_s: float = 60.0) -> bool:
    """Open ``url`` in a browser once Streamlit's health endpoint answers."""
    import time

    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/_stcore/health", timeout=1).status_code == 200:
                opener(url)
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False


# Command groups live in their own modules and register themselves on ``app``.
from app import cli_collect, cli_demo, cli_plan, cli_report, cli_workload  # noqa: E402,F401


def main() -> None:
    app()


if __name__ == "__main__":
    main()
