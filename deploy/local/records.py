"""What a local stack runs and where: the Server and Stack records, saved as the run
dir's stack.json (pids, ports, urls, commands)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STACK_JSON = "stack.json"


# --------------------------------------------------------------------------- data


@dataclass
class Server:
    name: str
    kind: str  # 'vllm' | 'lmcache' | 'prometheus'
    base_url: str
    metrics_url: str
    pid: int | None
    log_path: str
    port: int
    connector: bool = False
    health_url: str = ""
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # overrides on top of os.environ
    rpc_port: int | None = None  # LMCache's ZMQ port (vLLM's connector talks to it)
    started_at: float | None = None  # unix time of the last start
    ready_s: float | None = None  # seconds from start to healthy

    @property
    def openai_url(self) -> str:
        return self.base_url + "/v1"


@dataclass
class Stack:
    run_dir: str
    model_name: str
    model_path: str
    servers: list[Server]
    prometheus_url: str | None
    stack_id: str = ""
    scrape_interval: str = "2s"
    created_at: float | None = None
    stopped_at: float | None = None

    def vllm(self) -> list[Server]:
        return [s for s in self.servers if s.kind == "vllm"]

    def lmcache(self) -> Server | None:
        return next((s for s in self.servers if s.kind == "lmcache"), None)

    def prometheus(self) -> Server | None:
        return next((s for s in self.servers if s.kind == "prometheus"), None)

    def server(self, name: str) -> Server:
        for s in self.servers:
            if s.name == name:
                return s
        raise KeyError(f"no server named {name!r} in this stack ({[s.name for s in self.servers]})")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Stack:
        d = dict(d)
        d["servers"] = [Server(**s) for s in d.get("servers", [])]
        return cls(**d)

    @classmethod
    def from_json(cls, text: str | bytes | Mapping[str, Any]) -> Stack:
        if isinstance(text, Mapping):
            return cls.from_dict(text)
        return cls.from_dict(json.loads(text))

    @classmethod
    def load(cls, run_dir: str | os.PathLike[str]) -> Stack:
        return cls.from_json((Path(run_dir) / STACK_JSON).read_text())

    def save(self) -> Path:
        path = Path(self.run_dir) / STACK_JSON
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(self.to_json())
        tmp.replace(path)
        return path
