"""Where the benchmarks write what they measured: one dated results file per area.

Each bench/*.py runs its main through ``record(area, main)``: what the benchmark prints goes to
the terminal as before, and, when it finishes without error, also into
``bench/results/<area>.md`` as one section headed by the benchmark, its arguments, the date and
the machine (cores, memory, load average at the end). A later run of the same benchmark with the
same arguments on the same day replaces that section; any other run is appended, so the file
keeps the dated history while the folder READMEs say only what a figure means and how to
reproduce it.

KVPLAN_BENCH_RESULTS=off writes nothing (a test running a benchmark at a tiny size);
KVPLAN_BENCH_RESULTS=DIR writes into DIR instead of bench/results/.
"""

from __future__ import annotations

import contextlib
import io
import os
import platform
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
AREAS = ("ingestion", "dashboard", "validation", "whatif", "plan", "prompts", "sweep", "topology")


class _Tee(io.TextIOBase):
    def __init__(self, *streams: io.TextIOBase) -> None:
        self.streams = streams

    def write(self, s: str) -> int:
        for st in self.streams:
            st.write(s)
        return len(s)

    def flush(self) -> None:
        for st in self.streams:
            st.flush()


def machine() -> str:
    """The machine a figure was measured on, in words: cores, memory, load average at the end."""
    cores = os.cpu_count() or 0
    mem = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(next(x for x in Path("/proc/meminfo").read_text().splitlines()
                      if x.startswith("MemTotal:")).split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB"
    load = ""
    with contextlib.suppress(OSError, AttributeError):
        load = f", load average {os.getloadavg()[0]:.1f} at the end"
    return f"{cores}-core {platform.machine()}{mem}{load}, Python {platform.python_version()}"


def write_section(area: str, heading: str, body: str, folder: Path | None = None) -> Path:
    """Put the section `heading` (replacing one of the same heading) into <area>.md."""
    if area not in AREAS:
        raise ValueError(f"unknown results area {area!r} (one of {', '.join(AREAS)})")
    folder = folder or RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{area}.md"
    text = path.read_text(encoding="utf-8") if path.exists() else (
        f"# {area}: dated results\n\nWritten by the benchmarks (bench/results.py): one section per "
        "run, newest last. What the figures mean and how to reproduce them: the folder READMEs.\n")
    section = f"## {heading}\n\n{body.rstrip()}\n"
    pattern = re.compile(rf"^## {re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text, encoding="utf-8")
    return path


def record(area: str, main: Callable[[], object], argv: list[str] | None = None) -> int:
    """Run a benchmark's main, teeing its output, and file it under `area` when it succeeds."""
    argv = sys.argv[1:] if argv is None else argv
    name = Path(sys.argv[0]).name
    out = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, out)):  # type: ignore[type-var]
        rc = main()
    code = rc if isinstance(rc, int) else 0
    where = os.environ.get("KVPLAN_BENCH_RESULTS", "")
    if code == 0 and where != "off" and out.getvalue().strip():
        day = datetime.now(UTC).date().isoformat()
        args = " ".join(argv)
        heading = f"{day}: `{name}{' ' + args if args else ''}`"
        body = f"Measured on {machine()}.\n\n```\n{out.getvalue().rstrip()}\n```"
        path = write_section(area, heading, body, Path(where) if where else None)
        print(f"(recorded in {path})", file=sys.stderr)
    return code
