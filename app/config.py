"""Loading kvplan's settings: ``load_settings`` (precedence: overrides > env > secret files >
the TOML file > defaults), the refusal of secrets in the config file, the checks that need the
file system or the scheduler (ca_file exists, nightly_cron parses, timezone is known), and
ConfigError messages that blame the file or the environment variable that set each bad key.
The settings themselves are pure data: ``kvplan.models.inputs.settings``."""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NestedSecretsSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from pydantic_settings.exceptions import SettingsError

from ..models.core.errors import KvplanError
from ..models.core.redact import register_secret
from ..models.inputs.settings import PrometheusConfig, ScheduleConfig, Settings

DEFAULT_CONFIG = Path("kvplan.toml")
SECRET_KEYS = ("password", "bearer_token")


class ConfigError(KvplanError):
    """Invalid configuration; the message names the file and every bad key."""


class _PrometheusChecked(PrometheusConfig):
    """PrometheusConfig, plus the check that reads the file system."""

    @field_validator("ca_file")
    @classmethod
    def _ca_exists(cls, v: str | None) -> str | None:
        if v is not None and not Path(v).is_file():
            raise ValueError(f"{v!r}: no such file")
        return v


class _ScheduleChecked(ScheduleConfig):
    """ScheduleConfig, plus the checks that need the scheduler and the time-zone database."""

    @field_validator("nightly_cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        from apscheduler.triggers.cron import CronTrigger

        try:
            CronTrigger.from_crontab(v)
        except ValueError as e:
            raise ValueError(f"{v!r} is not a 5-field cron expression (minute hour day month weekday): {e}") from None
        return v

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from zoneinfo import ZoneInfo

        try:
            ZoneInfo(v)
        except Exception:
            raise ValueError(f"{v!r} is not an IANA time zone such as Europe/Madrid or UTC") from None
        return v


_CONFIG_PATH: list[Path | None] = [None]
_ENV_PREFIX = "KVPLAN_"


def _env_number(v: Any) -> Any:
    """A price from the environment ("2.5") as the number it spells; anything else unchanged
    (the price checks then name it). ``[prices]`` is a free table, so pydantic cannot know."""
    if isinstance(v, str):
        try:
            x = json.loads(v)
        except ValueError:
            return v
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            return x
    return v


def _patch(base: Any, env: Any, var: str) -> Any:
    """``env`` (what ``KVPLAN_A__0__B=...`` variables give: dicts, list indices as digit keys)
    laid over ``base`` (the file's value): a digit key patches that element of the file's list,
    so ``KVPLAN_DEPLOYMENTS__0__GPUS=4`` changes the first deployment's gpus and keeps the rest."""
    if isinstance(env, dict) and env and all(isinstance(k, str) and k.isdigit() for k in env):
        items = list(base) if isinstance(base, list) else []
        for k in sorted(env, key=int):
            i = int(k)
            if i >= len(items):
                names = sorted(v for v in os.environ
                               if v.upper().startswith(f"{var}__{k}__") or v.upper() == f"{var}__{k}")
                raise ConfigError(f"{', '.join(names) or f'{var}__{k}'}: the configuration has no "
                                  f"{var.removeprefix(_ENV_PREFIX).lower().replace('__', '.')}.{k} "
                                  f"({len(items)} given): the environment can change an element, not add one")
            items[i] = _patch(items[i], env[k], f"{var}__{k}")
        return items
    if isinstance(env, dict) and isinstance(base, dict):
        out = dict(base)
        for k, v in env.items():
            out[k] = _patch(base.get(k), v, f"{var}__{k.upper()}")
        return out
    return env


class _EnvSource(EnvSettingsSource):
    """The KVPLAN_* variables, with list elements addressed by index (laid over the TOML file's
    lists) and prices read as numbers."""

    def __init__(self, settings_cls: type[BaseSettings], file: PydanticBaseSettingsSource | None):
        super().__init__(settings_cls)
        self._file = file

    def __call__(self) -> dict[str, Any]:
        data = super().__call__()
        if isinstance(data.get("prices"), dict):
            data["prices"] = {k: _env_number(v) for k, v in data["prices"].items()}
        if any(isinstance(v, dict) for v in data.values()):
            file = self._file() if self._file is not None else {}
            for key, v in data.items():
                if isinstance(v, dict):
                    data[key] = _patch(file.get(key), v, _ENV_PREFIX + key.upper())
        return data


class _Sources(Settings, BaseSettings):
    """Settings read from the sources, in precedence order; load_settings returns a plain Settings."""

    model_config = SettingsConfigDict(env_prefix="KVPLAN_", env_nested_delimiter="__",
                                      secrets_nested_delimiter="__", extra="forbid", allow_inf_nan=False)

    prometheus: _PrometheusChecked = Field(default_factory=_PrometheusChecked,
                                           description=Settings.model_fields["prometheus"].description)
    schedule: _ScheduleChecked = Field(default_factory=_ScheduleChecked,
                                       description=Settings.model_fields["schedule"].description)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = TomlConfigSettingsSource(settings_cls, toml_file=_CONFIG_PATH[0]) if _CONFIG_PATH[0] else None
        secrets = NestedSecretsSettingsSource(file_secret_settings)
        sources = [init_settings, _EnvSource(settings_cls, toml), secrets]
        if toml is not None:
            sources.append(toml)
        return tuple(sources)


def _refuse_secrets_in_file(path: Path) -> None:
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a UTF-8 text file (byte {e.start}): a config file is TOML text") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    prom = data.get("prometheus")
    bad = [f"prometheus.{k}" for k in SECRET_KEYS if isinstance(prom, dict) and k in prom]
    urls = [("prometheus.url", prom.get("url") if isinstance(prom, dict) else None)]
    for i, d in enumerate(data.get("deployments") or []):
        for j, t in enumerate((d.get("targets") or []) if isinstance(d, dict) else []):
            urls.append((f"deployments.{i}.targets.{j}.url", t.get("url") if isinstance(t, dict) else None))
    in_url = [k for k, u in urls if isinstance(u, str) and _has_password(u)]
    if in_url:
        raise ConfigError(f"{path}: {', '.join(in_url)}: a password inside a URL is a secret and does not belong "
                          "in the config file; put the user in prometheus.username and the password in "
                          "KVPLAN_PROMETHEUS__PASSWORD or a file under KVPLAN_SECRETS_DIR")
    if bad:
        raise ConfigError(f"{path}: {', '.join(bad)}: secrets do not belong in the config file; set "
                          + " / ".join(f"KVPLAN_PROMETHEUS__{k.split('.')[1].upper()}" for k in bad)
                          + " or put them in files under KVPLAN_SECRETS_DIR")


def _has_password(url: str) -> bool:
    try:
        return bool(urlsplit(url).password)
    except ValueError:
        return False


def _blame(err: ErrorDetails, path: Path | None) -> tuple[str, str]:
    """(where, problem) of one validation error: the environment variable that set the key
    when there is one (KVPLAN_SCHEDULE__SCRAPE_INTERVAL_S=...), else the config file."""
    loc = _loc(err)
    msg = err["msg"].removeprefix("Value error, ")
    parts = [str(p) for p in err["loc"] if not str(p).startswith("function-")]
    for n in range(len(parts), 0, -1):
        var = "KVPLAN_" + "__".join(parts[:n]).upper()
        if var in os.environ:
            return var, f"{loc or '(top level)'} (from the environment variable {var}): {msg}"
        # a free table ([prices]) is checked whole: the variable that set the key the message names
        under = [v for v in os.environ if v.upper().startswith(var + "__")
                 and re.search(rf"\b{re.escape(v[len(var) + 2:].lower())}\b", msg)]
        if under:
            return under[0], f"{loc or '(top level)'} (from the environment variable {under[0]}): {msg}"
    return str(path) if path else "defaults", f"{loc or '(top level)'}: {msg}"


def _loc(err: ErrorDetails) -> str:
    # pydantic puts the failing validator's name in loc for model validators; drop it
    return ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))


def _settings_error(e: SettingsError) -> str:
    """pydantic-settings' "error parsing value for field X from source EnvSettingsSource" (a
    complex field's variable that is not JSON) as the variable and what is wrong with it."""
    m = re.search(r'field "([^"]+)"', str(e))
    var = _ENV_PREFIX + (m.group(1).upper() if m else "")
    if m and var in os.environ:
        try:
            json.loads(os.environ[var])
        except ValueError as je:
            return f"{var}: not valid JSON ({je}); a list or table setting is JSON in the environment"
        return f"{var}: {e}"
    return f"environment: invalid configuration: {e}"


def load_settings(config: Path | None = None, **overrides: Any) -> Settings:
    """Settings from (in order of precedence) ``overrides``, env, secret files, ``config`` TOML."""
    path = config or (Path(os.environ["KVPLAN_CONFIG"]) if os.environ.get("KVPLAN_CONFIG") else None)
    if path is None and DEFAULT_CONFIG.exists():
        path = DEFAULT_CONFIG
    if path is not None and not path.exists():
        raise ConfigError(f"{path}: config file not found (from --config or KVPLAN_CONFIG)")
    if path is not None and path.is_dir():
        raise ConfigError(f"{path}: is a directory, not a TOML config file (from --config or KVPLAN_CONFIG)")
    if path is not None:
        _refuse_secrets_in_file(path)
    secrets_dir = os.environ.get("KVPLAN_SECRETS_DIR") or None
    if secrets_dir is not None and not Path(secrets_dir).is_dir():
        raise ConfigError(f"KVPLAN_SECRETS_DIR={secrets_dir}: not a directory")
    _CONFIG_PATH[0] = path
    try:
        # BaseSettings.__init__ takes _secrets_dir; pydantic's dataclass_transform signature leaves it out
        read = _Sources(_secrets_dir=secrets_dir,  # type: ignore[call-arg]
                        **{k: v for k, v in overrides.items() if v is not None})
        s = Settings.model_validate(read.model_dump())  # the plain data, every value already checked
        for secret in (s.prometheus.bearer_token, s.prometheus.password):
            if secret is not None:
                register_secret(secret.get_secret_value())
        if s.prometheus.url:
            register_secret(urlsplit(s.prometheus.url).password)
        return s
    except SettingsError as e:
        raise ConfigError(_settings_error(e)) from None
    except ValidationError as e:
        blamed = [_blame(err, path) for err in e.errors()]
        from_env = {w for w, _ in blamed if w.startswith("KVPLAN_")}
        where = str(path) if path and len(from_env) < len(blamed) else "environment"
        problems = "; ".join(p for _, p in blamed)
        raise ConfigError(f"{where}: invalid configuration: {problems}") from None
    finally:
        _CONFIG_PATH[0] = None
