"""kvplan's settings: one object, every field documented.

Precedence, highest first: CLI flags (passed as overrides) > environment variables
(``KVPLAN_*``, nested with ``__``: ``KVPLAN_PROMETHEUS__URL``) > the TOML file
(``--config``, ``KVPLAN_CONFIG`` or ``./kvplan.toml``) > defaults.

Secrets (Prometheus bearer token, basic-auth password) are read from the environment or a
secrets file and are ``SecretStr``: they never print, and kvplan never writes them to
DuckDB, logs or reports.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

DEFAULT_CONFIG = Path("kvplan.toml")


class TargetConfig(BaseModel):
    """One /metrics endpoint kvplan scrapes directly."""

    name: str = Field(description="Name of the target inside its deployment, e.g. node1-vllm-0.")
    url: str = Field(description="Full /metrics URL, e.g. http://10.0.0.5:8000/metrics.")
    kind: Literal["vllm", "lmcache_mp", "lmcache_inproc"] | None = Field(
        default=None, description="Force the payload kind; by default detected from the metric names.")


class DeploymentConfig(BaseModel):
    """A serving deployment: the vLLM and LMCache servers whose economics are modelled together."""

    name: str = Field(description="Deployment name used in the database, CLI and dashboard.")
    targets: list[TargetConfig] = Field(default_factory=list, description="Endpoints scraped directly.")
    prometheus_selector: str = Field(
        default="", description="PromQL label selector picking this deployment's series in Prometheus, "
                                "e.g. job=\"vllm\",namespace=\"prod\".")
    gpus: int | None = Field(default=None, description="GPUs currently serving this deployment (for capacity).")


class PrometheusConfig(BaseModel):
    """Where kvplan queries an existing Prometheus (or Thanos/Mimir) for range ingestion."""

    url: str | None = Field(default=None, description="Base URL, e.g. http://prometheus:9090.")
    step: str = Field(default="1m", description="Resolution of ingested increases (PromQL duration).")
    timeout_s: float = Field(default=30.0, description="Seconds before one Prometheus query is abandoned.")
    verify_tls: bool = Field(default=True, description="Verify the server's TLS certificate.")
    ca_file: str | None = Field(default=None, description="CA bundle for a private TLS certificate.")
    username: str | None = Field(default=None, description="Basic-auth user (password from the environment).")
    password: SecretStr | None = Field(default=None, description="Basic-auth password: env KVPLAN_PROMETHEUS__PASSWORD only.")
    bearer_token: SecretStr | None = Field(default=None, description="Bearer token: env KVPLAN_PROMETHEUS__BEARER_TOKEN only.")


class ScheduleConfig(BaseModel):
    """What the collector daemon runs when."""

    scrape_interval_s: float = Field(default=15.0, description="Seconds between direct scrapes of every target.")
    nightly_cron: str = Field(default="0 2 * * *", description="Cron expression (local time) of the nightly ingestion.")


class Settings(BaseSettings):
    """Everything kvplan can be configured with."""

    model_config = SettingsConfigDict(env_prefix="KVPLAN_", env_nested_delimiter="__",
                                      secrets_dir=os.environ.get("KVPLAN_SECRETS_DIR") or None,
                                      extra="forbid")

    db: Path = Field(default=Path("kvplan.duckdb"), description="DuckDB file kvplan reads and writes.")
    scrape_timeout_s: float = Field(default=10.0, description="Seconds before a /metrics scrape is abandoned.")
    lock_timeout_s: float = Field(default=30.0, description="Seconds to wait for the DuckDB file when another "
                                                            "process holds it.")
    deployments: list[DeploymentConfig] = Field(default_factory=list, description="Deployments and their targets.")
    prometheus: PrometheusConfig = Field(default_factory=PrometheusConfig, description="Prometheus to ingest from.")
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig, description="Collector daemon schedule.")

    _toml_file: Path | None = None

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = TomlConfigSettingsSource(settings_cls, toml_file=_CONFIG_PATH[0]) if _CONFIG_PATH[0] else None
        sources = [init_settings, env_settings, file_secret_settings]
        if toml is not None:
            sources.append(toml)
        return tuple(sources)

    def deployment(self, name: str) -> DeploymentConfig | None:
        return next((d for d in self.deployments if d.name == name), None)


_CONFIG_PATH: list[Path | None] = [None]


class ConfigError(ValueError):
    """Invalid configuration; the message names the file and every bad key."""


def load_settings(config: Path | None = None, **overrides) -> Settings:
    """Settings from (in order of precedence) ``overrides``, env, ``config`` TOML."""
    path = config or (Path(os.environ["KVPLAN_CONFIG"]) if os.environ.get("KVPLAN_CONFIG") else None)
    if path is None and DEFAULT_CONFIG.exists():
        path = DEFAULT_CONFIG
    if path is not None and not path.exists():
        raise ConfigError(f"{path}: config file not found (from --config or KVPLAN_CONFIG)")
    _CONFIG_PATH[0] = path
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as e:
        where = str(path) if path else "environment"
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())
        raise ConfigError(f"{where}: invalid configuration: {problems}") from None
    except Exception as e:  # a TOML syntax error
        if path is not None and type(e).__name__ == "TOMLDecodeError":
            raise ConfigError(f"{path}: not valid TOML: {e}") from None
        raise
    finally:
        _CONFIG_PATH[0] = None
