"""Configuration: one TOML file, overridden by KVPLAN_* variables and secret files; errors
name the key; every setting is documented; secrets never print."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.config import ConfigError, load_settings
from kvplan.models.inputs.settings import Settings
from kvplan.models.inputs.settings_checks import check_selector, duration_s
from tests.hostile import PASSWORD, runner

ROOT = Path(__file__).resolve().parents[1]
GOOD = '''
db = "k.duckdb"
[prometheus]
url = "http://127.0.0.1:9090"
step = "1m"
[schedule]
scrape_interval_s = 15
[[deployments]]
name = "prod"
prometheus_selector = 'job="vllm"'
[[deployments.targets]]
name = "v0"
url = "http://10.0.0.5:8000/metrics"
[[deployments.targets]]
name = "lm"
url = "http://10.0.0.5:8090/metrics"
kind = "lmcache_mp"
[prices]
usd_per_gpu_hour = 2.5
horizon_months = 12
'''


def write(tmp_path, text: str) -> Path:
    p = tmp_path / "kvplan.toml"
    p.write_text(text)
    return p


def error(tmp_path, text: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_settings(write(tmp_path, text))
    return str(e.value)


def test_a_good_file_loads_with_its_default_prices(tmp_path):
    s = load_settings(write(tmp_path, GOOD))
    assert [t.name for t in s.deployment("prod").targets] == ["v0", "lm"]
    assert s.prometheus.step_s() == 60 and s.schedule.nightly_cron == "0 2 * * *"
    assert s.prices == {"usd_per_gpu_hour": 2.5, "horizon_months": 12}


@pytest.mark.parametrize("line, message", [
    ("gpu_hour_usd = 2.5", "prices: gpu_hour_usd: not a price-book or planning field"),  # was read by nothing before
    ("usd_per_gpu_hour = -1", "prices: PriceBook.usd_per_gpu_hour: must be >= 0"),
    ("growth_rate_per_month = 1e6", "prices: PlanningInputs.growth_rate_per_month: must be >= -0.99 and <= 2"),
])
def test_prices_are_price_book_and_planning_fields_in_bounds(tmp_path, line, message):
    assert message in error(tmp_path, GOOD.replace("usd_per_gpu_hour = 2.5", line))


@pytest.mark.parametrize("bad, key", [
    (GOOD.replace('url = "http://10.0.0.5:8090/metrics"', 'url = "10.0.0.5:8090/metrics"'),
     "deployments.0.targets.1.url: '10.0.0.5:8090/metrics' is not an http(s) URL"),
    (GOOD.replace('kind = "lmcache_mp"', 'kind = "tgi"'), "deployments.0.targets.1.kind: Input should be"),
    (GOOD.replace("job=\"vllm\"", "job=vllm"), "deployments.0.prometheus_selector: 'job=vllm' is not a list"),
    (GOOD.replace('step = "1m"', 'step = "7s"\nchunk = "1h"'), "prometheus.chunk: '1h' must be a multiple of step"),
    (GOOD.replace('step = "1m"', 'step = "one minute"'), "prometheus.step: 'one minute' is not a positive duration"),
    (GOOD.replace("scrape_interval_s = 15", 'nightly_cron = "0 25 * * *"'), "schedule.nightly_cron: '0 25 * * *'"),
    (GOOD.replace("scrape_interval_s = 15", 'timezone = "Mars/Olympus"'), "schedule.timezone: 'Mars/Olympus'"),
    (GOOD.replace("scrape_interval_s = 15", "scrape_interval_s = 0"), "schedule.scrape_interval_s: Input should be"),
    (GOOD.replace('step = "1m"', 'stepp = "1m"'), "prometheus.stepp: Extra inputs are not permitted"),
    (GOOD.replace('name = "lm"', 'name = "v0"'), "deployments.0: target name 'v0' appears twice"),
    (GOOD + '[[deployments]]\nname = "prod"\n', "deployment name 'prod' appears twice"),
    (GOOD.replace('prometheus_selector', 'facts = { tensor_parallel = 0 }\nprometheus_selector'),
     "deployments.0.facts: facts: DeploymentFacts.tensor_parallel: must be >= 1"),
    (GOOD.replace('prometheus_selector', 'facts = { tp = 2 }\nprometheus_selector'),
     "deployments.0.facts: facts: DeploymentFacts.tp: unknown field"),
    (GOOD.replace('prometheus_selector', 'gpus_per_engine = 4\nfacts = { tensor_parallel = 2 }\nprometheus_selector'),
     "deployments.0: gpus_per_engine = 4 but facts give tensor_parallel x pipeline_parallel = 2"),
])
def test_errors_name_the_file_and_the_key(tmp_path, bad, key):
    msg = error(tmp_path, bad)
    assert msg.startswith(f"{tmp_path / 'kvplan.toml'}: invalid configuration: ") and key in msg, msg


def test_toml_syntax_error_names_file_and_line(tmp_path):
    msg = error(tmp_path, GOOD.replace('[schedule]', '[schedule'))
    assert f"{tmp_path / 'kvplan.toml'}: not valid TOML" in msg and "line 6" in msg


def test_environment_overrides_the_file_and_secrets_come_from_a_directory(tmp_path, monkeypatch):
    conf = write(tmp_path, GOOD)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "kvplan_prometheus__bearer_token").write_text("from-file-tok\n")
    monkeypatch.setenv("KVPLAN_SECRETS_DIR", str(secrets))
    monkeypatch.setenv("KVPLAN_PROMETHEUS__URL", "https://prom.internal:9090")
    monkeypatch.setenv("KVPLAN_SCHEDULE__SCRAPE_INTERVAL_S", "5")
    s = load_settings(conf)
    assert s.prometheus.url == "https://prom.internal:9090" and s.schedule.scrape_interval_s == 5
    assert s.prometheus.step == "1m"                          # untouched keys keep the file's value
    assert s.prometheus.bearer_token.get_secret_value() == "from-file-tok"
    assert "from-file-tok" not in repr(s) and "from-file-tok" not in s.model_dump_json()
    monkeypatch.setenv("KVPLAN_PROMETHEUS__BEARER_TOKEN", "from-env-tok")
    assert load_settings(conf).prometheus.bearer_token.get_secret_value() == "from-env-tok"
    assert load_settings(conf, db=tmp_path / "flag.duckdb").db == tmp_path / "flag.duckdb"   # flags win


def test_secrets_in_the_file_and_a_missing_secrets_dir_are_refused(tmp_path, monkeypatch):
    msg = error(tmp_path, GOOD.replace('step = "1m"', 'step = "1m"\npassword = "hunter2"'))
    assert "prometheus.password: secrets do not belong in the config file" in msg and "hunter2" not in msg
    monkeypatch.setenv("KVPLAN_SECRETS_DIR", str(tmp_path / "nope"))
    assert "KVPLAN_SECRETS_DIR" in error(tmp_path, GOOD)


def test_selector_and_duration_parsing():
    assert check_selector('{job="vllm", namespace=~"prod-.*"}') == 'job="vllm", namespace=~"prod-.*"'
    assert check_selector('a!="x\\"y",b!~"z"') == 'a!="x\\"y",b!~"z"'
    for bad in ('job="vllm" namespace="x"', 'job=', '"x"="y"', "job='v'"):
        with pytest.raises(ValueError):
            check_selector(bad)
    assert [duration_s(x) for x in ("15s", "1m", "6h", "1d")] == [15, 60, 21600, 86400]
    with pytest.raises(ValueError):
        duration_s("0m")


def _fields(model: type[BaseModel], prefix: str = ""):
    for name, f in model.model_fields.items():
        yield prefix + name, f
        ann = f.annotation
        for sub in getattr(ann, "__args__", ()) + (ann,):
            if isinstance(sub, type) and issubclass(sub, BaseModel):
                yield from _fields(sub, f"{prefix}{name}.")


def test_every_setting_is_documented():
    undocumented = [n for n, f in _fields(Settings) if not (f.description or "").strip()]
    assert undocumented == []
    doc = (ROOT / "collectors" / "README.md").read_text()
    for n, _ in _fields(Settings):
        if n.startswith(("prometheus.", "schedule.")):
            assert f"`{n}`" in doc, f"{n} is not in the settings table of collectors/README.md"


def test_config_check_command(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPLAN_PROMETHEUS__BEARER_TOKEN", "tok-never-printed")
    r = CliRunner().invoke(app, ["config", "check", "--config", str(write(tmp_path, GOOD))])
    assert r.exit_code == 0, r.output
    assert "configuration OK: 1 deployment(s), 2 direct target(s)" in r.output and "bearer token set" in r.output
    assert "tok-never-printed" not in r.output
    bad = write(tmp_path, GOOD.replace('url = "http://10.0.0.5:8000/metrics"', 'url = "nope"'))
    r = CliRunner().invoke(app, ["config", "check", "--config", str(bad)])
    assert r.exit_code == 2 and "deployments.0.targets.0.url" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["config", "check", "--config", str(tmp_path / "missing.toml")])
    assert r.exit_code == 2 and "config file not found" in r.output


def test_deployment_facts_come_from_the_config_with_gpus_per_engine_as_shorthand(tmp_path):
    from kvplan.app.data.store import deployment_settings

    s = load_settings(write(tmp_path, GOOD.replace(
        'prometheus_selector', 'facts = { tensor_parallel = 4, pipeline_parallel = 2, gpu_peak_flops = 989e12 }\n'
        'prometheus_selector')))
    cfg = deployment_settings(s, "prod")
    assert (cfg.gpus_per_engine, cfg.facts.gpu_peak_flops, cfg.facts_origin) == (
        8, 989e12, "config deployments.0.facts")
    s = load_settings(write(tmp_path, GOOD.replace('prometheus_selector', 'gpus_per_engine = 4\nprometheus_selector')))
    cfg = deployment_settings(s, "prod")
    assert (cfg.facts.tensor_parallel, cfg.gpus_per_engine, cfg.facts_origin) == (
        4, 4, "config deployments.0.gpus_per_engine")


# -- hostile or careless inputs --------------------------------------------------------------
def test_scrape_limits_have_defaults_and_bounds():
    s = Settings()
    assert s.scrape_timeout_s == 10 and s.scrape_max_bytes == 16 * 2**20
    with pytest.raises(ValueError, match='scrape_max_bytes'):
        Settings(scrape_max_bytes=0)


@pytest.mark.parametrize("value", ["inf", "nan", "1e12"])
def test_scrape_interval_must_be_finite_and_bounded(tmp_path, value):
    cfg = tmp_path / "k.toml"
    cfg.write_text(f"[schedule]\nscrape_interval_s = {value}\n")
    r = runner.invoke(app, ["config", "check", "--config", str(cfg)])
    assert r.exit_code == 2 and "schedule.scrape_interval_s" in r.output, r.output


def test_password_inside_prometheus_url_is_refused_in_the_toml(tmp_path):
    cfg = tmp_path / "k.toml"
    cfg.write_text(f'[prometheus]\nurl = "http://bob:{PASSWORD}@prom:9090"\n')
    r = runner.invoke(app, ["config", "check", "--config", str(cfg)])
    assert r.exit_code == 2 and "prometheus.url" in r.output and PASSWORD not in r.output, r.output


@pytest.mark.parametrize("toml, key", [
    ('[[deployments]]\nname = "p"\ngpus = -5\n', "deployments.0.gpus"),
    ('[[deployments]]\nname = "p"\ngpus = 1000000000\n', "deployments.0.gpus"),
    ('[[deployments]]\nname = " "\n', "deployments.0.name"),
    ('[[deployments]]\nname = "p"\n[[deployments.targets]]\nname = "t"\nurl = "http://h:99999/metrics"\n',
     "deployments.0.targets.0.url"),
])
def test_impossible_config_values_are_refused(tmp_path, toml, key):
    cfg = tmp_path / "k.toml"
    cfg.write_text(toml)
    r = runner.invoke(app, ["config", "check", "--config", str(cfg)])
    assert r.exit_code == 2 and key in r.output, r.output


def test_environment_errors_blame_the_variable(tmp_path, monkeypatch):
    cfg = tmp_path / "k.toml"
    cfg.write_text('[schedule]\nnightly_cron = "0 2 * * *"\n')
    monkeypatch.setenv("KVPLAN_SCHEDULE__SCRAPE_INTERVAL_S", "-1")
    r = runner.invoke(app, ["config", "check", "--config", str(cfg)])
    assert r.exit_code == 2 and "KVPLAN_SCHEDULE__SCRAPE_INTERVAL_S" in r.output, r.output
    assert f"{cfg}:" not in r.output


def test_auth_secrets_are_checked(tmp_path):
    bad = tmp_path / "s.toml"
    bad.write_text('[auth]\nclient_id = "x"\n')
    r = runner.invoke(app, ["dashboard", "--headless", "--auth-secrets", str(bad), "--db", str(tmp_path / "k.duckdb")])
    assert r.exit_code == 2 and "cookie_secret" in r.output and "--auth-secrets" in r.output, r.output


# ---- deployment facts have upper bounds -------------------------------------------------
@pytest.mark.parametrize("key, value", [("total_model_params", "1e308"), ("model_params", "1e308"),
                                        ("gpu_peak_flops", "1e300"), ("kv_bytes_per_token", "1e300"),
                                        ("max_context_tokens", "10000000000"), ("model_layers", "10000000"),
                                        ("hidden_size", "10000000000"), ("lmcache_chunk_tokens", "1000000000")])
def test_config_check_refuses_a_deployment_fact_beyond_its_bound(tmp_path, key, value):
    # total_model_params = 1e308 passed `config check` and overflowed every later plan
    cfg = write(tmp_path, GOOD.replace("prometheus_selector", f"facts = {{ {key} = {value} }}\nprometheus_selector"))
    r = CliRunner().invoke(app, ["config", "check", "--config", str(cfg)])
    assert r.exit_code == 2, r.output
    assert f"DeploymentFacts.{key}: must be" in r.output and "Traceback" not in r.output


def test_a_deployment_name_with_a_bidi_override_is_refused(tmp_path):
    msg = error(tmp_path, GOOD.replace('name = "prod"', 'name = "prod\\u202e"'))
    assert "deployments.0.name" in msg and "U+202E" in msg


def test_config_check_says_when_one_server_is_configured_under_several_host_names(tmp_path):
    # localhost, 127.0.0.1 and [::ffff:127.0.0.1] became three targets of one server: counted three times
    three = GOOD + "".join(f'[[deployments.targets]]\nname = "t{i}"\nurl = "http://{h}:8000/metrics"\n'
                           for i, h in enumerate(("localhost", "127.0.0.1", "[::ffff:127.0.0.1]")))
    r = CliRunner().invoke(app, ["config", "check", "--config", str(write(tmp_path, three))])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "are one server (http://127.0.0.1:8000/metrics) under 3 names" in text
    assert "'t0'" in text and "'t1'" in text and "'t2'" in text
    r = CliRunner().invoke(app, ["config", "check", "--config", str(write(tmp_path, GOOD))])
    assert "one server" not in r.output  # 10.0.0.5:8000 and :8090 are two servers
