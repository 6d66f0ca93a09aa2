"""A real HTTP server on a free loopback port for tests (metrics endpoints, faulty
Prometheus answers): one ThreadingHTTPServer in a daemon thread."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer


class Loopback:
    def __init__(self, handler_cls):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
