"""Installing what the local stack serves from: the stack venv (install_stack.sh, keyed by
the hash of requirements-stack.txt) and the tiny random Llama (build_model.py)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .errors import LOG_TAIL_LINES, StackError
from .processes import clean_env, log_line

HERE = Path(__file__).resolve().parent
INSTALL_SCRIPT = HERE / "install_stack.sh"
REQUIREMENTS = HERE / "requirements-stack.txt"
BUILD_MODEL = HERE / "build_model.py"
MODEL_NAME = "tiny-llama"


# --------------------------------------------------------------- install / model


def stack_home() -> Path:
    return Path(os.environ.get("KVPLAN_STACK_HOME") or Path.home() / ".cache" / "kvplan" / "stack")


def stack_venv() -> Path:
    env = os.environ.get("KVPLAN_STACK_VENV")
    if env:
        return Path(env)
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    return Path.home() / ".cache" / "kvplan" / f"stack-venv-{digest}"


def stack_python() -> Path:
    return stack_venv() / "bin" / "python"


def model_dir() -> Path:
    return stack_home() / "models" / MODEL_NAME


def _run_visible(cmd: Sequence[str], what: str) -> None:
    """Run a setup command with its output on our stderr; raise with a tail on failure."""
    log_line(f"{what}: {' '.join(map(str, cmd))}")
    proc = subprocess.run(
        list(map(str, cmd)), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env=clean_env(),
    )
    for line in proc.stdout.splitlines():
        if "is neither a file nor a directory" not in line:
            print(line, file=sys.stderr)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-LOG_TAIL_LINES:])
        raise StackError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def ensure_installed() -> Path:
    """Install the stack venv if needed (deploy/local/install_stack.sh); return its python."""
    venv = stack_venv()
    if not (venv / ".kvplan-ok").exists():
        t0 = time.monotonic()
        _run_visible(["bash", str(INSTALL_SCRIPT)], "installing the stack venv")
        log_line(f"stack venv installed in {time.monotonic() - t0:.0f} s: {venv}")
    py = stack_python()
    if not py.exists():
        raise StackError(f"stack python missing after install: {py}")
    return py


def ensure_model() -> Path:
    """Build the tiny random Llama (deploy/local/build_model.py) if needed; return its dir."""
    out = model_dir()
    if not (out / ".kvplan-ok").exists():
        py = ensure_installed()
        _run_visible([str(py), str(BUILD_MODEL), "--out", str(out)], "building the tiny model")
    return out
