"""Regression tests of issue 13 (hardening): hostile or careless inputs.

Each test names the item of the issue it covers. Servers are real loopback HTTP servers
bounded in time and bytes, so a regression fails the test instead of eating the machine.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from collectors.config import DeploymentConfig, ScheduleConfig, Settings, TargetConfig
from collectors.scrape import Target, scrape_target
from sql.db import Database
from tests.conftest import PAYLOADS

GOOD = PAYLOADS / "restart" / "00_start_vllm-0.prom"
AT = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


class Server:
    """A loopback HTTP server; ``mode`` picks the behaviour of GET:

    * ``endless``: 200 text/plain, 64 KiB chunks with no end, up to ``limit`` bytes;
    * ``trickle``: 200 text/plain, one byte a second, up to ``limit`` seconds;
    * ``ok``: the good payload.
    Every response's bytes sent are counted in ``sent``."""

    def __init__(self, mode: str, limit: float):
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
                        body = GOOD.read_bytes()
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body)
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

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(request):
    made = []

    def make(mode: str, limit: float = 0) -> Server:
        made.append(Server(mode, limit))
        return made[-1]

    yield make
    for s in made:
        s.close()


def gaps(db: Database) -> list[str]:
    with db.read() as con:
        return [r[0] for r in con.execute("SELECT error FROM scrapes WHERE NOT ok ORDER BY ts").fetchall()]


# -- 1. scrapes: a total deadline and a body-size cap ------------------------------------------
def test_endless_body_stops_at_the_cap_and_is_a_gap(db, server):
    srv = server("endless", limit=64 * 2**20)      # the server gives up after 64 MiB
    t0 = time.monotonic()
    r = scrape_target(db, "d", Target("t", srv.url), timeout_s=20, max_bytes=2**20)
    assert time.monotonic() - t0 < 10
    assert r.status == "failed-recorded"
    [error] = gaps(db)
    assert "1 MiB" in error and "scrape_max_bytes" in error
    srv.finished.wait(5)
    assert srv.sent < 16 * 2**20                     # reading stopped near the cap, not at the end


def test_trickling_body_stops_at_the_total_deadline(db, server):
    srv = server("trickle", limit=12)
    t0 = time.monotonic()
    r = scrape_target(db, "d", Target("t", srv.url), timeout_s=2, max_bytes=2**20)
    took = time.monotonic() - t0
    assert took < 3.5, took
    assert r.status == "failed-recorded"
    [error] = gaps(db)
    assert "2s" in error and "scrape_timeout_s" in error


def test_daemon_round_applies_the_cap(db, server):
    from collectors.scheduler import Scraper

    srv = server("endless", limit=64 * 2**20)
    ok = server("ok")
    s = Settings(db=db.path, scrape_timeout_s=20, scrape_max_bytes=2**20,
                 deployments=[DeploymentConfig(name="d", targets=[TargetConfig(name="big", url=srv.url),
                                                                  TargetConfig(name="good", url=ok.url)])],
                 schedule=ScheduleConfig(scrape_interval_s=30.0))
    scraper = Scraper(s, db)
    scraper.ensure_targets()
    out = scraper.round()
    scraper.close()
    assert out.errors == 1 and out.rows > 0
    [error] = gaps(db)
    assert "scrape_max_bytes" in error


def test_scrape_limits_have_defaults_and_bounds():
    s = Settings()
    assert s.scrape_timeout_s == 10 and s.scrape_max_bytes == 16 * 2**20
    with pytest.raises(Exception):
        Settings(scrape_max_bytes=0)
