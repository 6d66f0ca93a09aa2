"""Helpers of the hostile-input tests: loopback servers that misbehave in bounded ways (an
endless body, a one-byte-a-second drip, an echo of the request headers), payload editors and
small readers of what a scrape stored. Servers are real loopback HTTP servers bounded in time
and bytes, so a regression fails a test instead of eating the machine. The ``server`` fixture
that makes them is in tests/conftest.py."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.collectors.scrape.scrape import import_file
from kvplan.sql.db import Database
from tests.conftest import PAYLOADS
from tests.loopback import Loopback
from tests.payloads import vllm_text

GOOD = PAYLOADS / "restart" / "00_start_vllm-0.prom"


AT = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


class Server(Loopback):
    """A loopback HTTP server; ``mode`` picks the behaviour of GET:

    * ``endless``: 200 text/plain, 64 KiB chunks with no end, up to ``limit`` bytes;
    * ``trickle``: 200 text/plain, one byte a second, up to ``limit`` seconds;
    * ``ok``: the good payload.
    Every response's bytes sent are counted in ``sent``."""

    def __init__(self, mode: str, limit: float, body: Path = GOOD):
        outer = self
        self.sent = 0
        self.finished = threading.Event()

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    if mode == "ok":
                        data = body.read_bytes()
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    self.end_headers()
                    t0 = time.monotonic()
                    line = b"# HELP x a comment line that never ends the payload, sent again and again\n"
                    chunk = line * (65536 // len(line))
                    while True:
                        if mode == "endless":
                            if outer.sent >= limit:
                                break
                            self.wfile.write(chunk)
                            outer.sent += len(chunk)
                        else:
                            if time.monotonic() - t0 >= limit:
                                break
                            self.wfile.write(b"#")
                            self.wfile.flush()
                            outer.sent += 1
                            time.sleep(1.0)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    outer.finished.set()

            def log_message(self, *a):
                pass

        super().__init__(H)
        self.url += "/metrics"





def gaps(db: Database) -> list[str]:
    with db.read() as con:
        return [r[0] for r in con.execute("SELECT error FROM scrapes WHERE NOT ok ORDER BY ts").fetchall()]


CREATED = 1.7e9  # 2023-11-14


def payload(tmp_path: Path, name: str = "v.prom", **v) -> Path:
    p = tmp_path / name
    p.write_text(vllm_text({("m", "0"): {"created": CREATED, "hits": 10, "queries": 20, "ttft": [1, 2, 2], **v}}))
    return p


def replace_line(path: Path, start: str, value: str) -> int:
    """Set the value of the first sample line starting with ``start``; returns its line number."""
    lines = path.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(start))
    lines[i] = lines[i].rsplit(" ", 1)[0] + " " + value
    path.write_text("\n".join(lines) + "\n")
    return i + 1


def poison(db: Database, **set_sql) -> None:
    """What an older kvplan let in: rewrite stored samples in place."""
    with db.write() as con:
        for col, (expr, where) in set_sql.items():
            con.execute(f"UPDATE samples SET {col} = {expr} WHERE series_id IN "
                        f"(SELECT series_id FROM series WHERE {where})")


def two_scrapes(db, tmp_path, first: dict, second: dict, target: str = "v"):
    from datetime import timedelta

    from kvplan.app.data.window import stats

    import_file(db, "d", payload(tmp_path, "a.prom", **first), AT, target=target)
    import_file(db, "d", payload(tmp_path, "b.prom", **second), AT + timedelta(minutes=5), target=target)
    return stats(db, "d", AT - timedelta(hours=1), AT + timedelta(hours=1))


runner = CliRunner()


def targets(db: Database) -> dict[str, int]:
    with db.read() as con:
        return dict(con.execute("SELECT t.name, count(sc.scrape_id) FROM targets t "
                                "LEFT JOIN scrapes sc USING (target_id) GROUP BY 1").fetchall())


def stats_json(db: Database, *extra: str) -> dict:
    r = runner.invoke(app, ["stats", "--deployment", "d", "--from", "2026-01-05T11:00:00Z",
                            "--to", "2026-01-05T13:00:00Z", "--json", "--db", str(db.path), *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def bucket_line(path: Path, new: str) -> int:
    lines = path.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("vllm:time_to_first_token_seconds_bucket"))
    lines[i] = new
    path.write_text("\n".join(lines) + "\n")
    return i + 1


TOKEN = "tok-h4rden-Zq81xv"


PASSWORD = "pw-h4rden-Hh27kd"


class Echo(Loopback):
    """Answers every request with ``status`` and a body echoing the request's headers, as a
    careless server or proxy does in its error pages."""

    def __init__(self, status: int, ctype: str = "text/plain"):
        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                echoed = "".join(f"{k}: {v}\n" for k, v in self.headers.items())
                body = (json.dumps({"status": "error", "errorType": "bad_data", "error": "denied; you sent " + echoed})
                        if ctype == "application/json" else "denied; you sent\n" + echoed).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET

            def log_message(self, *a):
                pass

        super().__init__(H)


def secret_free(db: Database, *texts: str) -> None:
    import base64

    b64 = base64.b64encode(f"bob:{PASSWORD}".encode()).decode()
    with db.read() as con:
        for table in ("scrapes", "gaps", "prom_chunks", "collector_runs", "targets"):
            for row in con.execute(f"SELECT * FROM {table}").fetchall():
                for v in row:
                    assert not (isinstance(v, str) and (TOKEN in v or PASSWORD in v or b64 in v)), (table, row)
    for t in texts:
        assert TOKEN not in t and PASSWORD not in t and b64 not in t, t
