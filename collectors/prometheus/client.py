"""The Prometheus (Thanos, Mimir) HTTP client of range ingestion: auth, TLS, retries, and
answers decoded as a stream (``collectors.prometheus.stream``). ``str()`` and every error show the
URL without credentials."""

from __future__ import annotations

import requests
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from ...models.core.timeutil import from_epoch_s
from ...models.inputs.settings import PrometheusConfig
from ..scrape.scrape import redact_url
from .step_math import Raw
from .stream import PromError as PromError  # (importers take it from here)


class PromClient:
    """Range-vector instant queries with the configured auth and TLS. ``str()`` and every
    error show the URL without credentials."""

    def __init__(self, cfg: PrometheusConfig):
        if not cfg.url:
            raise PromError("no Prometheus URL configured (prometheus.url / KVPLAN_PROMETHEUS__URL)")
        self.url = cfg.url.rstrip("/")
        self.safe_url = redact_url(self.url)
        self.timeout_s = cfg.timeout_s
        session = requests.Session()
        session.verify = cfg.ca_file if cfg.ca_file else cfg.verify_tls
        headers = {}
        if cfg.bearer_token is not None:
            headers["Authorization"] = f"Bearer {cfg.bearer_token.get_secret_value()}"
        auth = (cfg.username, cfg.password.get_secret_value() if cfg.password else "") if cfg.username else None
        # a query that timed out is not retried (it would time out again); refused
        # connections and 429/5xx answers are
        retry = Retry(total=cfg.retries, read=False, backoff_factor=0.5, status_forcelist=(429, 500, 502, 503, 504),
                      allowed_methods=("GET", "POST"), raise_on_status=False)
        self._api = PrometheusConnect(self.url, headers=headers, auth=auth, retry=retry, session=session,
                                      timeout=cfg.timeout_s, method="POST")

    def __repr__(self) -> str:
        return f"PromClient({self.safe_url})"

    def range_vector(self, query: str, at: float) -> list[Raw]:
        """The raw samples of a range-vector query evaluated at unix time ``at`` (decoded one
        series at a time while the answer arrives: numpy arrays, never the whole JSON)."""
        from .stream import stream_matrix

        where = f"{self.safe_url}/api/v1/query {query!r} at {iso(at)}"
        return list(stream_matrix(self, "/api/v1/query", {"query": query, "time": f"{at:.3f}"}, where))


def iso(t: float) -> str:
    return from_epoch_s(t).isoformat().replace("+00:00", "Z")


