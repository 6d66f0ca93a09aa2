"""A real Prometheus (Debian's package) for tests: started on a free port over a TSDB
directory, once per use, with its log printed if it does not come up."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PromServer:
    url: str
    proc: subprocess.Popen
    log: Path

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def prometheus_bin(name: str = "prometheus") -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: `make test` installs Debian's prometheus package (apt-get)")
    return path


def start_prometheus(workdir: Path, *, config: str = "global: {}\n", storage: Path | None = None,
                     timeout_s: float = 60.0) -> PromServer:
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = workdir / "prometheus.yml"
    cfg.write_text(config)
    port = free_port()
    log = workdir / "prometheus.log"
    proc = subprocess.Popen(
        [prometheus_bin(), f"--config.file={cfg}", f"--storage.tsdb.path={storage or workdir / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y",
         "--web.enable-admin-api"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return PromServer(url, proc, log)
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"Prometheus did not become ready at {url} (exit {proc.poll()}); log {log}:\n"
                + "\n".join(log.read_text().splitlines()[-60:]))


def create_blocks(openmetrics_text: str, workdir: Path) -> Path:
    """promtool tsdb create-blocks-from openmetrics: history into a TSDB directory."""
    src = workdir / "history.om.txt"
    src.write_text(openmetrics_text)
    out = workdir / "tsdb"
    r = subprocess.run([prometheus_bin("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(src), str(out)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"promtool create-blocks-from failed:\n{r.stdout}\n{r.stderr}")
    return out


def promql(url: str, expr: str, at: float) -> list[dict]:
    r = httpx.get(f"{url}/api/v1/query", params={"query": expr, "time": f"{at:.3f}"}, timeout=30)
    body = r.json()
    assert body.get("status") == "success", f"{expr}: {body}"
    return body["data"]["result"]


def scalar(url: str, expr: str, at: float) -> float | None:
    res = promql(url, expr, at)
    if not res:
        return None
    assert len(res) == 1, f"{expr}: {res}"
    return float(res[0]["value"][1])
