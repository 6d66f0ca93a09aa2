"""kvplan's settings: one object, every field documented. Pure data: the declarations and their
value checks (pydantic validation, no file system, no environment); ``kvplan.app.config``
loads them.

Precedence, highest first: CLI flags (passed as overrides) > environment variables
(``KVPLAN_*``, nested with ``__``: ``KVPLAN_PROMETHEUS__URL``) > secret files (a
directory named by ``KVPLAN_SECRETS_DIR``, one file per field:
``kvplan_prometheus__bearer_token``) > the TOML file (``--config``, ``KVPLAN_CONFIG`` or
``./kvplan.toml``) > defaults.

Secrets (Prometheus bearer token, basic-auth password) are ``SecretStr``: they never print,
kvplan never writes them to DuckDB, logs or reports, and the TOML file may not hold them
(a config file gets copied, committed and pasted into tickets).

This module holds the settings models (targets, deployments, Prometheus, schedule, Settings);
their value checks are in settings_checks.py; loading (the sources above, the checks that touch
the file system or need the scheduler: ca_file, nightly_cron, timezone) and its error messages
in app/config.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..core.errors import KvplanError
from ..core.fields import name_problem
from .deployment import DeploymentFacts
from .planning import prices_from_table
from .settings_checks import (
    PER_ENGINE_LABELS,
    check_duration,
    check_optional_url,
    check_selector,
    duration_s,
    no_bool_number,
)


class TargetConfig(BaseModel):
    """One /metrics endpoint kvplan scrapes directly."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(description="Name of the target inside its deployment, e.g. node1-vllm-0.")
    url: str = Field(description="Full /metrics URL, e.g. http://10.0.0.5:8000/metrics.")
    kind: Literal["vllm", "lmcache_mp", "lmcache_inproc", "sglang"] | None = Field(
        default=None, description="Force the payload kind; by default detected from the metric names.")

    _url = field_validator("url")(check_optional_url)


class DeploymentConfig(BaseModel):
    """A serving deployment: the vLLM and LMCache servers whose economics are modelled together."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    _no_bool = field_validator("*", mode="before")(no_bool_number)

    name: str = Field(min_length=1, description="Deployment name used in the database, CLI and dashboard.")
    targets: list[TargetConfig] = Field(default_factory=list, description="Endpoints scraped directly.")
    prometheus_selector: str = Field(
        default="", description="PromQL label matchers picking this deployment's series in Prometheus, "
                                "e.g. job=\"vllm\",namespace=\"prod\". Empty: not ingested from Prometheus.")
    prometheus_mode: Literal["raw", "aggregated"] = Field(
        default="raw", description="raw: every engine's raw samples, exact per series (default; small fleets, and "
                                   "checking). aggregated: per-step sums across the engines by deployment, model and "
                                   "bucket, computed by Prometheus, stored as one fleet target per engine kind and "
                                   "model (per-engine detail and exact restart handling inside a step are lost).")
    prometheus_sums: Literal["query", "rules"] = Field(
        default="query", description="Aggregated mode: where the sums come from. query: PromQL at ingestion time "
                                     "(Prometheus reads every raw sample then); rules: the outputs of "
                                     "deploy/prometheus/rules/kvplan.rules.yml (needs step a multiple of 1m).")
    prometheus_per_engine_labels: list[str] = Field(
        default_factory=lambda: list(PER_ENGINE_LABELS),
        description="Aggregated query mode: labels summed away (what tells one engine from another); every "
                    "other label is kept. The rule pack's are fixed when it is generated (kvplan rules).")
    gpus: int | None = Field(default=None, ge=1, le=100_000,
                             description="GPUs currently serving this deployment (for capacity); default: the "
                                         "vLLM engines seen x gpus_per_engine.")
    lookup_hash_log_dir: Path | None = Field(
        default=None, description="LMCache's --lookup-hash-log-dir: the nightly job imports its request trace "
                                  "for the cache-size what-if (kvplan whatif).")
    gpus_per_engine: int = Field(default=1, ge=1, le=1024,
                                 description="GPUs one vLLM engine runs on: tensor parallel x pipeline parallel "
                                             "(not in vLLM's metrics). Shorthand for facts.tensor_parallel.")
    facts: dict[str, Any] | None = Field(
        default=None, description="What the metrics cannot know (kvplan.models.inputs.deployment.DeploymentFacts): "
                                  "tensor_parallel, pipeline_parallel, gpu_type, gpu_peak_flops, model_params, "
                                  "model_layers, hidden_size, assumed_prefill_mfu, lmcache_chunk_tokens.")

    _sel = field_validator("prometheus_selector")(check_selector)

    @field_validator("prometheus_per_engine_labels")
    @classmethod
    def _label_names(cls, v: list[str]) -> list[str]:
        bad = [x for x in v if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", x)]
        if bad:
            raise ValueError(f"{bad}: not Prometheus label names")
        if {"model_name", "le"} & set(v):
            raise ValueError("model_name and le are what the sums are split by; they cannot be summed away")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        why = name_problem(v)
        if why is not None:
            raise ValueError(f"{v!r} is not a usable deployment name: {why}")
        return v

    @field_validator("facts")
    @classmethod
    def _facts(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            try:
                DeploymentFacts.from_dict(v)
            except KvplanError as e:
                raise ValueError(f"facts: {e}") from None
        return v

    @model_validator(mode="after")
    def _facts_agree(self) -> DeploymentConfig:
        if self.facts and {"tensor_parallel", "pipeline_parallel"} & set(self.facts) and self.gpus_per_engine != 1:
            per = DeploymentFacts.from_dict(self.facts).gpus_per_engine
            if per != self.gpus_per_engine:
                raise ValueError(f"gpus_per_engine = {self.gpus_per_engine} but facts give tensor_parallel x "
                                 f"pipeline_parallel = {per}: give one of them")
        return self

    def deployment_facts(self) -> DeploymentFacts:
        """The facts table, with ``gpus_per_engine`` as the tensor-parallel size when the table
        does not give the parallelism."""
        d = dict(self.facts or {})
        if not {"tensor_parallel", "pipeline_parallel"} & set(d):
            d["tensor_parallel"] = self.gpus_per_engine
        return DeploymentFacts.from_dict(d)

    @model_validator(mode="after")
    def _unique_targets(self) -> DeploymentConfig:
        seen: set[str] = set()
        for t in self.targets:
            if t.name in seen:
                raise ValueError(f"target name {t.name!r} appears twice in deployment {self.name!r}")
            seen.add(t.name)
        return self


class PrometheusConfig(BaseModel):
    """Where kvplan queries an existing Prometheus (or Thanos/Mimir) for range ingestion."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    _no_bool = field_validator("*", mode="before")(no_bool_number)

    url: str | None = Field(default=None, description="Base URL, e.g. http://prometheus:9090.")
    step: str = Field(default="1m", description="Resolution of ingested increases (PromQL duration).")
    chunk: str = Field(default="1h", description="Range fetched per query and written per transaction; "
                                                 "a multiple of step.")
    lookback: str = Field(default="10m", description="How far before a chunk to look for each series' previous "
                                                     "sample; two samples further apart than this are a gap, "
                                                     "not an increase.")
    gap_after: str = Field(default="5m", description="A target silent for longer than this is recorded as a gap.")
    timeout_s: float = Field(default=30.0, gt=0, le=3600,
                             description="Seconds before one Prometheus query is abandoned.")
    retries: int = Field(default=2, ge=0, le=10, description="Retries of a query that failed with a connection error "
                                                      "or HTTP 429/5xx.")
    max_concurrency: int = Field(default=4, ge=1, le=64,
                                 validation_alias=AliasChoices("max_concurrency", "concurrency"),
                                 description="Chunks fetched at once (each its queries one after another); "
                                             "peak memory is about this many chunks (old name: concurrency).")
    verify_tls: bool = Field(default=True, description="Verify the server's TLS certificate.")
    ca_file: str | None = Field(default=None, description="CA bundle for a private TLS certificate.")
    username: str | None = Field(default=None, description="Basic-auth user (password from the environment).")
    password: SecretStr | None = Field(
        default=None, description="Basic-auth password: env KVPLAN_PROMETHEUS__PASSWORD or a secret file only.")
    bearer_token: SecretStr | None = Field(
        default=None, description="Bearer token: env KVPLAN_PROMETHEUS__BEARER_TOKEN or a secret file only.")

    _url = field_validator("url")(check_optional_url)
    _durations = field_validator("step", "chunk", "lookback", "gap_after")(check_duration)

    @field_validator("step")
    @classmethod
    def _whole_seconds(cls, v: str) -> str:
        if duration_s(v) < 1 or duration_s(v) != int(duration_s(v)):
            raise ValueError(f"{v!r} must be whole seconds")
        return v

    @field_validator("chunk")
    @classmethod
    def _whole_steps(cls, v: str, info: ValidationInfo) -> str:
        step = info.data.get("step")
        if step and duration_s(v) % duration_s(step):
            raise ValueError(f"{v!r} must be a multiple of step {step!r}")
        return v

    @model_validator(mode="after")
    def _user_with_password(self) -> PrometheusConfig:
        if self.password is not None and not self.username:
            raise ValueError("password is set but username is not")
        return self

    def step_s(self) -> int:
        return int(duration_s(self.step))


class ScheduleConfig(BaseModel):
    """What the collector daemon runs when."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    _no_bool = field_validator("*", mode="before")(no_bool_number)

    scrape_interval_s: float = Field(default=15.0, gt=0, le=86400, description="Seconds between direct scrapes of "
                                                                      "every target.")
    nightly_cron: str = Field(default="0 2 * * *", description="Cron expression (local time) of the nightly "
                                                               "ingestion, rollups and report.")
    timezone: str | None = Field(default=None, description="Time zone of nightly_cron (IANA name); default: "
                                                           "the machine's.")
    misfire_grace_s: float = Field(default=6 * 3600, gt=0, le=7 * 86400,
                                   description="A nightly run missed by less than this (daemon busy or down) "
                                               "still runs.")
    catchup_days: int = Field(default=7, ge=1, le=366, description="On start, missed or failed nightly days up to this "
                                                          "many back are run again.")
    report_dir: Path | None = Field(default=None, description="Where the nightly job writes capacity reports "
                                                            "(default: reports/ next to the database).")
    report_format: Literal["pdf", "html"] = Field(default="pdf", description="Format of the nightly reports.")
    keep_scrape_runs_days: int = Field(default=14, ge=1, le=3650, description="Scrape-round rows in collector_runs are "
                                                                     "kept this many days.")


class Settings(BaseModel):
    """Everything kvplan can be configured with."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    _no_bool = field_validator("*", mode="before")(no_bool_number)

    db: Path = Field(default=Path("kvplan.duckdb"), description="DuckDB file kvplan reads and writes.")
    scrape_timeout_s: float = Field(default=10.0, gt=0, le=3600, description="Total seconds one /metrics scrape may "
                                    "take (connect, headers and body together); past it the scrape is a recorded gap.")
    scrape_max_bytes: int = Field(default=16 * 2**20, ge=1024, le=2**31, description="Largest /metrics body read "
                                  "(bytes, after decompression; default 16 MiB, a vLLM payload is ~60 KB); a larger "
                                  "one is a recorded gap and reading stops at the cap.")
    lock_timeout_s: float = Field(default=30.0, gt=0, le=3600,
                                  description="Seconds to wait for the DuckDB file when another process holds it.")
    deployments: list[DeploymentConfig] = Field(default_factory=list, description="Deployments and their targets.")
    prometheus: PrometheusConfig = Field(default_factory=PrometheusConfig, description="Prometheus to ingest from.")
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig, description="Collector daemon schedule.")
    prices: dict[str, Any] = Field(default_factory=dict, description="Default price-book and planning fields "
                                   "(kvplan.models.inputs.pricebook.PriceBook, "
                                   "kvplan.models.inputs.planning.PlanningInputs) for deployments "
                                   "with none saved from the dashboard.")

    @field_validator("prices")
    @classmethod
    def _prices(cls, v: dict[str, Any]) -> dict[str, Any]:
        """Every key a PriceBook or PlanningInputs field, every value in its bounds."""
        try:
            prices_from_table(v)
        except KvplanError as e:
            raise ValueError(str(e)) from None
        return v

    @model_validator(mode="after")
    def _unique_deployments(self) -> Settings:
        seen: set[str] = set()
        for d in self.deployments:
            if d.name in seen:
                raise ValueError(f"deployment name {d.name!r} appears twice")
            seen.add(d.name)
        return self

    def deployment(self, name: str) -> DeploymentConfig | None:
        return next((d for d in self.deployments if d.name == name), None)


@dataclass(frozen=True)
class DeploymentSettings:
    """What the config file says about one deployment that the metrics cannot know. Read
    once (``deployment_settings``) and handed to every plan: CLI, pages, report, nightly job.
    Facts saved on the dashboard override ``facts`` (``load_facts``)."""

    configured_gpus: int | None = None
    """``deployments[].gpus``: the fleet's GPUs, when the config gives them."""
    prices: dict[str, Any] | None = None
    """The config's ``[prices]`` table (price-book and planning fields), None when it has none."""
    config_key: str = "deployments.N.gpus"
    """The config key that set ``configured_gpus`` (named in the plan's assumptions)."""
    facts: DeploymentFacts = DeploymentFacts()
    """The config's ``[deployments.facts]`` (or its parallelism), else the defaults."""
    facts_origin: str = "defaults (1 GPU per engine; FLOP estimators off)"
    """Where ``facts`` came from."""

    @property
    def gpus_per_engine(self) -> int:
        return self.facts.gpus_per_engine


def deployment_settings(settings: Settings | None, deployment: str) -> DeploymentSettings:
    """The ``DeploymentSettings`` of ``deployment`` in a loaded ``kvplan.models.inputs.settings.Settings``
    (defaults when the config does not list it)."""
    prices = dict(settings.prices) if settings is not None and settings.prices else None
    deps = list(settings.deployments) if settings is not None else []
    for i, d in enumerate(deps):
        if d.name == deployment:
            return DeploymentSettings(d.gpus, prices, f"deployments.{i}.gpus", d.deployment_facts(),
                                      f"config deployments.{i}" + (".facts" if d.facts else ".gpus_per_engine"))
    return DeploymentSettings(prices=prices)
