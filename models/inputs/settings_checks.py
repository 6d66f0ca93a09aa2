"""The checks settings values go through: PromQL durations, http(s) URLs, PromQL label
selectors, and the note on one server configured under several spellings of its host; and the
default of the labels aggregated ingestion sums away."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from ..core.redact import redact

PER_ENGINE_LABELS = ("instance", "pod", "engine", "worker_id", "tp_rank", "pp_rank", "dp_rank", "moe_ep_rank")
"""Labels that tell one engine (process, pod, rank) from another: summed away."""

_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
# one PromQL label matcher: name op "value"
_MATCHER = re.compile(r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')


def duration_s(text: str) -> float:
    """A PromQL-style duration (``30s``, ``1m``, ``6h``, ``1d``) in seconds."""
    m = _DURATION.match(text.strip())
    if not m or int(m.group(1)) == 0:
        raise ValueError(f"{text!r} is not a positive duration like 30s, 1m, 1h or 1d")
    return int(m.group(1)) * _UNITS[m.group(2)]


_NUMBERS = (int, float, int | None, float | None)


def no_bool_number(cls: Any, v: Any, info: Any) -> Any:
    """A number setting given ``true``/``false``: pydantic reads a bool as 1/0; refused here, so
    ``gpus = true`` is an error, not one GPU. (Apply with ``field_validator("*", mode="before")``.)"""
    if isinstance(v, bool) and cls.model_fields[info.field_name].annotation in _NUMBERS:
        raise ValueError(f"got {str(v).lower()}: expected a number, not true or false")
    return v


def check_duration(v: str) -> str:
    duration_s(v)
    return v


def check_optional_url(v: str | None) -> str | None:
    if v is None:
        return v
    return check_url(v)


def check_url(v: str) -> str:
    """An http(s) URL with a host and a valid port; the message never shows a password."""
    from ..core.redact import redact

    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{redact(v)!r} is not an http(s) URL with a host, e.g. http://10.0.0.5:8000/metrics")
    try:
        _ = parts.port  # urlsplit checks the port only when asked
    except ValueError:
        raise ValueError(f"{redact(v)!r}: the port must be a number from 1 to 65535") from None
    if parts.port == 0:
        raise ValueError(f"{redact(v)!r}: the port must be a number from 1 to 65535")
    return v


def check_selector(v: str) -> str:
    """Comma-separated PromQL label matchers (optionally in braces); returns them unbraced."""
    body = v.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    pos = 0
    while pos < len(body):
        m = _MATCHER.match(body, pos)
        if not m:
            raise ValueError(f"{v!r} is not a list of label matchers like job=\"vllm\",namespace=~\"prod.*\" "
                             f"(stopped at {body[pos:pos + 30]!r})")
        pos = m.end()
        if pos < len(body):
            if body[pos] != ",":
                raise ValueError(f"{v!r}: expected ',' between matchers at {body[pos:pos + 30]!r}")
            pos += 1
    return body.strip()


def _endpoint(url: str) -> tuple[str, str, int | None, str]:
    """(scheme, host, port, path) of a target URL with the host spelled one way: 'localhost', any
    127.0.0.0/8 address and ::1 are the loopback, an IPv4-mapped IPv6 address is its IPv4 address,
    names are lower case (no DNS lookup)."""
    import ipaddress
    from urllib.parse import urlsplit

    u = urlsplit(url)
    host = (u.hostname or "").lower().rstrip(".")
    try:
        ip = ipaddress.ip_address(host)
        ip = getattr(ip, "ipv4_mapped", None) or ip
        host = "loopback" if ip.is_loopback else str(ip)
    except ValueError:
        host = "loopback" if host == "localhost" else host
    port = u.port or {"http": 80, "https": 443}.get(u.scheme)
    return u.scheme, host, port, u.path.rstrip("/") or "/"


def same_server_notes(targets: Iterable[tuple[str, str, str]]) -> list[str]:
    """One server configured under several spellings of its host (localhost, 127.0.0.1,
    [::ffff:127.0.0.1]) is several targets: its counters would be counted once per spelling.
    ``targets``: (deployment, target, url) of every configured target."""
    groups: dict[tuple[str, str, int | None, str], list[tuple[str, str, str]]] = {}
    for d, t, url in targets:
        groups.setdefault(_endpoint(url), []).append((d, t, url))
    out = []
    for (scheme, host, port, path), seen in groups.items():
        if len(seen) > 1:
            names = ", ".join(f"{t!r} ({redact(u)}) of {d!r}" for d, t, u in seen)
            where = f"{scheme}://{'127.0.0.1' if host == 'loopback' else host}:{port}{path}"
            out.append(f"targets {names} are one server ({where}) under {len(seen)} names: its counters are "
                       "counted once per target; keep one")
    return out
