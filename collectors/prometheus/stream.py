"""Prometheus answers decoded as a stream: one series at a time, never the whole document.

A chunk's answer can be hundreds of megabytes of JSON (``[[1700000000.123, "12345"], ...]`` is
about 30 bytes a sample, several times that once ``json.loads`` made Python objects of it).
``ijson`` (yajl2 C backend) reads the HTTP body as it arrives and yields each element of
``data.result`` on its own; it becomes a :class:`Raw` of two numpy arrays (16 bytes a sample)
before the next one is read. Peak memory of one query is therefore one series' JSON plus the
arrays of the series read so far, not the document.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Protocol

import ijson
import numpy as np
import requests
import urllib3.exceptions

from ...models.core.errors import KvplanError
from .step_math import Raw


class PromError(KvplanError):
    """A Prometheus query that failed; the message names the URL and the query."""


class PromSession(Protocol):
    """What ``stream_matrix`` needs of ``collectors.prometheus.client.PromClient``: its
    prometheus-api-client connection (session, headers, auth, TLS), URL and timeout."""

    _api: Any
    url: str
    timeout_s: float


def _errno(e: Exception) -> str:
    """The OS reason inside requests' long ConnectionError text (which repeats the query)."""
    m = re.search(r"\[Errno -?\d+\][^'\")]*", str(e))
    return m.group(0).strip() if m else _short(e, 200)


def _short(e: Exception, n: int = 300) -> str:
    s = str(e)
    return s if len(s) <= n else s[:n] + "..."


def series_of(item: dict, where: str) -> Raw:
    """One ``{"metric": {...}, "values": [[t, "v"], ...]}`` element as a Raw (times in ms)."""
    metric, values = item.get("metric"), item.get("values")
    if not isinstance(metric, dict) or not isinstance(values, list):
        raise PromError(f"{where}: malformed response (expected a matrix of series with 'values')")
    n = len(values)
    t = np.fromiter((round(float(x[0]) * 1000) for x in values), np.int64, n)
    v = np.fromiter((float(x[1]) for x in values), np.float64, n)
    if n > 1 and np.any(np.diff(t) < 0):
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
    labels = {k: str(x) for k, x in metric.items()}
    return Raw(labels.get("__name__", ""), labels, t, v)


_HEAD = re.compile(rb'^\s*\{\s*"status"\s*:\s*"success"\s*,\s*"data"\s*:\s*\{\s*"resultType"\s*:\s*"matrix"\s*,'
                   rb'\s*"result"\s*:\s*\[')


class _Prefixed:
    """A file-like of ``head`` then the rest of ``raw``."""

    def __init__(self, head: bytes, raw):
        self.head, self.raw = head, raw

    def read(self, n: int = -1) -> bytes:
        if self.head:
            out, self.head = self.head[:n] if n >= 0 else self.head, self.head[n:] if n >= 0 else b""
            return out
        return self.raw.read(n)


def stream_matrix(client: PromSession, path: str, form: dict[str, str], where: str) -> Iterator[Raw]:
    """POST ``form`` to ``<url><path>`` (``/api/v1/query`` with a range vector, or
    ``/api/v1/query_range``) and yield each series of the matrix as it is decoded. Every
    failure is a PromError naming ``where`` (URL, query, time), never the credentials.

    Prometheus, Thanos and Mimir write ``{"status":"success","data":{"resultType":"matrix",
    "result":[`` first: when the body starts so, the series are decoded one by one; any other
    start (an error document, another key order) is read whole and checked like before."""
    api = client._api
    try:
        r = api._session.post(f"{client.url}{path}", data=form, headers=api.headers, auth=api.auth,
                              timeout=client.timeout_s, stream=True)
    except requests.Timeout:
        raise PromError(f"{where}: no answer within {client.timeout_s:g}s (timeout)") from None
    except requests.ConnectionError as e:
        raise PromError(f"{where}: cannot connect ({_errno(e)})") from None
    except (requests.RequestException, urllib3.exceptions.HTTPError) as e:
        raise PromError(f"{where}: {type(e).__name__}: {_short(e)}") from None
    with r:
        try:
            if r.status_code != 200:
                raise PromError(f"{where}: HTTP Status Code {r.status_code} ({_short(r.content, 300)!r})")
            r.raw.decode_content = True
            head = r.raw.read(256)
            while len(head) < 256 and not _HEAD.match(head):
                more = r.raw.read(256)
                if not more:
                    break
                head += more
            m = _HEAD.match(head)
            if m is None:
                yield from _whole(head + r.raw.read(), where)
                return
            # the document's own opening, shortened to what the rest closes: {"data":{"result":[
            rest = _Prefixed(b'{"data":{"result":[' + head[m.end():], r.raw)
            for item in ijson.items(rest, "data.result.item", use_float=True):
                yield series_of(item, where)
        except ijson.JSONError as e:
            raise PromError(f"{where}: malformed response (JSON: {_short(e)})") from None
        except (requests.RequestException, OSError, urllib3.exceptions.HTTPError) as e:
            # urllib3's ProtocolError ("Connection broken: ConnectionResetError ...", an IncompleteRead)
            # is neither an OSError nor a requests error: a connection reset mid-answer lands here
            raise PromError(f"{where}: the answer broke off ({type(e).__name__}: {_short(e)})") from None
        except (TypeError, ValueError, IndexError) as e:
            raise PromError(f"{where}: malformed response ({type(e).__name__}: {_short(e)})") from None


def _whole(body: bytes, where: str) -> Iterator[Raw]:

    try:
        doc = json.loads(body)
    except ValueError as e:
        raise PromError(f"{where}: malformed response (not JSON: {type(e).__name__})") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise PromError(f"{where}: malformed response (no data.result)")
    if data.get("resultType") != "matrix":
        raise PromError(f"{where}: malformed response (a {data.get('resultType')}, expected a matrix)")
    for item in data["result"]:
        if not isinstance(item, dict):
            raise PromError(f"{where}: malformed response (expected a matrix of series with 'values')")
        yield series_of(item, where)
