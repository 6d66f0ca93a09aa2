"""The files under deploy/ a user applies, checked by the real validators that run here
(``promtool check config``, ``systemd-analyze verify``, ``kvplan config check``) and, for
compose and Kubernetes YAML, parsed and checked for the structure that makes them work.

The YAML is read with PyYAML (a test dependency, not a kvplan one).
"""

from __future__ import annotations

import configparser
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.config import load_settings

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
KVPLAN = Path(sys.executable).with_name("kvplan")


# -- YAML ----------------------------------------------------------------------------------------
def read_yaml(text: str) -> list:
    """Every document of a YAML text."""
    return list(yaml.safe_load_all(text))


YAML_FILES = sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yml", ".yaml") and "local" not in p.parts)


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_files_parse(path):
    docs = read_yaml(path.read_text())
    assert docs and all(isinstance(d, dict) for d in docs)


# -- Prometheus --------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [DEPLOY / "prometheus/prometheus.yml", DEPLOY / "compose/prometheus.yml"],
                         ids=["prometheus", "compose"])
def test_prometheus_configs_pass_promtool_and_scrape_vllm_and_lmcache(path):
    r = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = {j["job_name"]: j for j in read_yaml(path.read_text())[0]["scrape_configs"]}
    assert set(jobs) == {"vllm", "lmcache"}
    ports = {t.rsplit(":", 1)[1] for t in jobs["lmcache"]["static_configs"][0]["targets"]}
    assert ports == {"8090"}                                   # LMCache MP: metrics on its HTTP port


# -- systemd -------------------------------------------------------------------------------------
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))


def _exec_args(unit: Path) -> list[list[str]]:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str
    cp.read_string(unit.read_text())
    return [v.split()[1:] for k, v in cp["Service"].items() if k.startswith("ExecStart")]


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_systemd_units_verify(unit, tmp_path):
    text = unit.read_text()
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.read_string(text)
    assert {"Unit", "Service", "Install"} <= set(cp.sections())
    assert cp["Service"]["ExecStart"].startswith("/opt/kvplan/.venv/bin/kvplan ")
    assert cp["Install"]["WantedBy"] == "multi-user.target"
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze not installed: the configparser checks above ran")
    local = tmp_path / unit.name                               # the real kvplan instead of /opt/kvplan
    local.write_text(text.replace("/opt/kvplan/.venv/bin/kvplan", str(KVPLAN)))
    r = subprocess.run([tool, "verify", str(local)], capture_output=True, text=True)
    assert r.returncode == 0 and not r.stderr.strip() and not r.stdout.strip(), r.stdout + r.stderr


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_systemd_commands_are_kvplan_commands(unit):
    for args in _exec_args(unit):
        r = CliRunner().invoke(app, args + ["--help"])
        assert r.exit_code == 0, (args, r.output)


# -- the kvplan.toml examples -----------------------------------------------------------------
def _configmap_toml(tmp_path) -> Path:
    cm = next(d for d in read_yaml((DEPLOY / "k8s/kvplan.yaml").read_text()) if d["kind"] == "ConfigMap")
    p = tmp_path / "kvplan.toml"
    p.write_text(cm["data"]["kvplan.toml"])
    return p


@pytest.mark.parametrize("where", ["systemd", "compose", "k8s"])
def test_example_configs_pass_config_check(where, tmp_path):
    path = _configmap_toml(tmp_path) if where == "k8s" else DEPLOY / where / "kvplan.toml"
    r = CliRunner().invoke(app, ["config", "check", "--config", str(path)])
    assert r.exit_code == 0 and "configuration OK" in r.output, r.output
    s = load_settings(path)
    assert s.prometheus.url and any(d.prometheus_selector for d in s.deployments)


# -- compose ----------------------------------------------------------------------------------
def test_compose_file_is_a_gpu_node_with_prometheus_and_kvplan():
    c = read_yaml((DEPLOY / "compose/compose.yaml").read_text())[0]
    svc = c["services"]
    assert set(svc) == {"lmcache", "vllm", "prometheus", "kvplan-collector", "kvplan-dashboard"}
    for name in ("lmcache", "vllm"):
        dev = svc[name]["deploy"]["resources"]["reservations"]["devices"][0]
        assert dev["driver"] == "nvidia" and dev["capabilities"] == ["gpu"]
    cmd = svc["vllm"]["command"]
    kv = json.loads(cmd[cmd.index("--kv-transfer-config") + 1])
    assert kv["kv_connector"] == "LMCacheMPConnector"
    assert str(kv["kv_connector_extra_config"]["lmcache.mp.port"]) in svc["lmcache"]["command"]
    for s in svc.values():
        for dep in s.get("depends_on", []):
            assert dep in svc
        for v in s.get("volumes", []):
            src = v.split(":")[0]
            if src.startswith("./"):
                assert (DEPLOY / "compose" / src).exists(), src
            elif not src.startswith(("/", "$")):
                assert src in c["volumes"], src
    coll, dash = svc["kvplan-collector"], svc["kvplan-dashboard"]
    assert coll["command"] == ["collect", "--daemon"]
    assert [v for v in coll["volumes"] if "kvplan-data" in v] == [v for v in dash["volumes"] if "kvplan-data" in v]
    assert (ROOT / coll["build"]["context"].replace("../..", ".") / coll["build"]["dockerfile"]).exists() or \
        (DEPLOY / "compose" / coll["build"]["context"] / coll["build"]["dockerfile"]).resolve().exists()
    for args in (coll["command"], dash["command"]):
        assert CliRunner().invoke(app, args + ["--help"]).exit_code == 0


# -- Kubernetes -------------------------------------------------------------------------------
def _k8s() -> list[dict]:
    docs = []
    for f in sorted((DEPLOY / "k8s").glob("*.yaml")):
        docs += read_yaml(f.read_text())
    return docs


def test_k8s_objects_are_well_formed():
    for d in _k8s():
        assert d["apiVersion"] and d["kind"] and d["metadata"]["name"] and d["metadata"]["namespace"], d


def test_service_monitors_select_services_by_label_and_port_name():
    docs = _k8s()
    services = [d for d in docs if d["kind"] == "Service"]
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert {m["metadata"]["name"] for m in monitors} == {"vllm", "lmcache"}
    for m in monitors:
        assert m["apiVersion"] == "monitoring.coreos.com/v1" and "release" in m["metadata"]["labels"]
        want = m["spec"]["selector"]["matchLabels"]
        hits = [s for s in services if s["metadata"]["namespace"] in m["spec"]["namespaceSelector"]["matchNames"]
                and want.items() <= s["metadata"].get("labels", {}).items()]
        assert len(hits) == 1, m["metadata"]["name"]
        ports = {p["name"] for p in hits[0]["spec"]["ports"]}
        assert {e["port"] for e in m["spec"]["endpoints"]} <= ports


def test_kvplan_pod_shares_one_volume_and_reads_its_secrets_dir():
    docs = _k8s()
    dep = next(d for d in docs if d["kind"] == "Deployment")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    pod = dep["spec"]["template"]["spec"]
    c = {x["name"]: x for x in pod["containers"]}
    mounts = {n: {m["name"]: m["mountPath"] for m in x["volumeMounts"]} for n, x in c.items()}
    assert mounts["collector"]["data"] == mounts["dashboard"]["data"]
    env = {e["name"]: e["value"] for e in c["collector"]["env"]}
    assert env["KVPLAN_SECRETS_DIR"] == mounts["collector"]["secrets"]
    secret = next(d for d in docs if d["kind"] == "Secret")
    assert all(re.fullmatch(r"kvplan_prometheus__(bearer_token|password)", k) for k in secret["stringData"])
    assert c["collector"]["args"] == ["collect", "--daemon"]
    svc = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "kvplan")
    assert svc["spec"]["ports"][0]["targetPort"] in {p["name"] for p in c["dashboard"]["ports"]}
    for x in c.values():
        assert CliRunner().invoke(app, x["args"] + ["--help"]).exit_code == 0


# -- documentation ----------------------------------------------------------------------------
def test_every_deploy_file_is_explained_in_docs_collect():
    doc = (ROOT / "deploy" / "README.md").read_text()
    for d in ("prometheus", "systemd", "compose", "k8s"):
        for f in sorted((DEPLOY / d).iterdir()):
            assert f"deploy/{d}/{f.name}" in doc, f"deploy/{d}/{f.name} is not explained in deploy/README.md"
