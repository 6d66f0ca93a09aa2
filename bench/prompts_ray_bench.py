"""What ``kvplan prompts check --ray`` costs on this machine: the check with and without Ray on
the thinking agent's log (deploy/local/recorders/thinking_logs.py, 36 requests) and
``prompts_bench.py``'s agent log (``--mb`` and a quarter of it).

Two measurements, each check's output compared with the in-process one (the Ray note aside):
the CLI end to end in its own process, without Ray and with ``--ray local`` (a cluster started
and stopped by the run); and, in this process, the check on a running local cluster of
``--cpus`` CPUs (``prompts_check`` with the cluster's address, started once, not counted),
best of ``--repeat`` runs each. Wall seconds.

    .venv/bin/python bench/prompts_ray_bench.py [--mb 4] [--cpus 2] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prompts_bench import TEMPLATE, TOKENIZER, write_agent_log

KVPLAN = Path(sys.executable).parent / "kvplan"
NOTE = "ran on Ray"


def logs(d: Path, mb: float) -> list[tuple[str, Path, Path | None]]:
    from kvplan.deploy.local.recorders.thinking_logs import THINK_TEMPLATE, agent_log

    (d / "think.jinja").write_text(THINK_TEMPLATE)
    (d / "think.jsonl").write_text("".join(json.dumps(b) + "\n" for b in agent_log()))
    out: list[tuple[str, Path, Path | None]] = [("thinking agent", d / "think.jsonl", d / "think.jinja")]
    for m in (mb / 4, mb):
        write_agent_log(d / f"agent{m}.jsonl", m)
        out.append((f"agent {m} MB", d / f"agent{m}.jsonl", TEMPLATE))
    return out


def same(a: dict, b: dict) -> bool:
    return a == {**b, "notes": [n for n in b["notes"] if NOTE not in n]}


def cli(log: Path, template: Path | None, ray: str | None) -> tuple[float, dict]:
    args = [str(KVPLAN), "prompts", "check", str(log), "--tokenizer", str(TOKENIZER), "--json"]
    args += ["--chat-template", str(template)] if template is not None else []
    args += ["--ray", ray] if ray is not None else []
    t = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if p.returncode:
        raise SystemExit(f"{' '.join(args)}: exit {p.returncode}: {p.stderr[-2000:]}")
    return time.monotonic() - t, json.loads(p.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=4)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    import ray

    from kvplan.app.views.prompts import prompts_check

    with tempfile.TemporaryDirectory(prefix="kvplan-ray-bench-") as tmp:
        runs = logs(Path(tmp), a.mb)
        print("CLI end to end (own process): without Ray, with --ray local")
        print(f"{'log':<26} {'requests':>8} {'no Ray s':>9} {'--ray local s':>14} same")
        for name, log, tpl in runs:
            t0, d0 = cli(log, tpl, None)
            t1, d1 = cli(log, tpl, "local")
            print(f"{name:<26} {d0['requests']:>8,} {t0:>9.2f} {t1:>14.2f} {same(d0, d1)}")
        t = time.monotonic()
        ray.init(num_cpus=a.cpus, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
        addr = ray.get_runtime_context().gcs_address
        print(f"\nIn process, a running local cluster of {a.cpus} CPUs (started in {time.monotonic() - t:.1f} s, "
              f"not counted); best of {a.repeat}")
        print(f"{'log':<26} {'requests':>8} {'no Ray s':>9} {'on Ray s':>9} same")
        try:
            for name, log, tpl in runs:
                best: dict[str | None, float] = {}
                got: dict[str | None, dict] = {}
                for _ in range(a.repeat):
                    for r in (None, addr):
                        t = time.monotonic()
                        got[r] = prompts_check([log], tokenizer=str(TOKENIZER), chat_template=tpl, ray=r)
                        best[r] = min(best.get(r, 1e9), time.monotonic() - t)
                print(f"{name:<26} {got[None]['requests']:>8,} {best[None]:>9.2f} {best[addr]:>9.2f} "
                      f"{same(got[None], got[addr])}")
        finally:
            ray.shutdown()


if __name__ == "__main__":
    from results import record

    raise SystemExit(record("prompts", main))
