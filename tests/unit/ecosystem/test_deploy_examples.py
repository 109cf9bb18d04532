"""The deployment examples are checked, not just written: the systemd unit passes
`systemd-analyze verify`; the Kubernetes manifests load and their probes, ports, roles and
settings agree with what cronfleet serves and reads. Also `make run PORT=… ARGS=…`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cronfleet.config.env import ENV_SETTINGS

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "examples" / "deploy"
KNOWN_ENV = {s.name for s in ENV_SETTINGS} | {
    "CRONFLEET_CONFIG", "CRONFLEET_SCHEDULER", "CRONFLEET_SECRET_KEY",
    "CRONFLEET_SECRET_KEY_FILE", "CRONFLEET_SECRET_KEYS"}


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    text = (DEPLOY / "cronfleet.service").read_text()
    assert "ExecStart=/opt/cronfleet/venv/bin/cronfleet run" in text
    # verify checks that the command exists: point it at this checkout's cronfleet
    exe = Path(sys.executable).with_name("cronfleet")
    unit = tmp_path / "cronfleet.service"
    unit.write_text(text.replace("/opt/cronfleet/venv/bin/cronfleet", str(exe)))
    result = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    problems = [line for line in result.stderr.splitlines() if str(unit) in line
                or "cronfleet.service" in line]
    assert not problems, problems
    settings = [line.split("=", 2)[1] for line in text.splitlines()
                if line.startswith("Environment=")]
    assert set(settings) <= KNOWN_ENV


def _docs() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        out += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return out


def _deployments() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in _docs() if d["kind"] == "Deployment"}


def test_kubernetes_probes_are_on_the_metrics_port() -> None:
    deployments = _deployments()
    assert set(deployments) == {"cronfleet-api", "cronfleet-worker"}
    for name, d in deployments.items():
        spec = d["spec"]
        assert spec["selector"]["matchLabels"].items() <= \
            spec["template"]["metadata"]["labels"].items(), name
        (container,) = spec["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in container.get("env", [])}
        assert set(env) <= KNOWN_ENV, name
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["metrics"] == int(env["CRONFLEET_METRICS_PORT"]), name
        probes = {kind: container[kind]["httpGet"] for kind in ("livenessProbe",
                                                                 "readinessProbe")}
        assert probes["livenessProbe"]["path"] == "/healthz"
        assert probes["readinessProbe"]["path"] == "/readyz"
        for probe in probes.values():
            port = probe["port"]
            assert (ports[port] if isinstance(port, str) else port) == ports["metrics"]
        annotations = spec["template"]["metadata"].get("annotations", {})
        assert int(annotations["prometheus.io/port"]) == ports["metrics"]
        assert annotations["prometheus.io/path"] == "/metrics"
        # room for the shutdown grace (30 s by default)
        assert spec["template"]["spec"]["terminationGracePeriodSeconds"] > 30
        assert container["envFrom"] == [{"secretRef": {"name": "cronfleet"}}]


def test_kubernetes_roles_and_the_secret() -> None:
    deployments = _deployments()
    worker = deployments["cronfleet-worker"]["spec"]["template"]["spec"]["containers"][0]
    api = deployments["cronfleet-api"]["spec"]["template"]["spec"]["containers"][0]
    assert worker["args"][-2:] == ["--role", "worker"]
    assert "http" not in {p["name"] for p in worker["ports"]}  # a worker serves no API
    assert api["args"][-2:] == ["--role", "api"]
    api_env = {e["name"]: e["value"] for e in api["env"]}
    http_port = {p["name"]: p["containerPort"] for p in api["ports"]}["http"]
    assert int(api_env["CRONFLEET_API_PORT"]) == http_port
    assert api_env["CRONFLEET_API_HOST"] == "0.0.0.0"
    (service,) = [d for d in _docs() if d["kind"] == "Service"]
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert service["spec"]["selector"].items() <= \
        deployments["cronfleet-api"]["spec"]["template"]["metadata"]["labels"].items()
    (secret,) = [d for d in _docs() if d["kind"] == "Secret"]
    assert secret["metadata"]["name"] == "cronfleet"
    assert set(secret["stringData"]) == {"CRONFLEET_SECRET_KEY", "CRONFLEET_STORE"}


def test_the_roles_in_the_examples_are_real_options() -> None:
    from click.testing import CliRunner

    from cronfleet.cli import main

    for d in _deployments().values():
        args = d["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[:2] == ["cronfleet", "run"]
        result = CliRunner().invoke(main, [*args[1:], "--help"])
        assert result.exit_code == 0, result.output


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_run_passes_port_and_args() -> None:
    env = {**os.environ, "MAKEFLAGS": ""}
    result = subprocess.run(
        ["make", "-n", "-o", ".venv/.installed", "run", "PORT=9001",
         "ARGS=--role worker --metrics-port 9100"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert ("cronfleet run --config examples/cronfleet.toml --port 9001 --role worker "
            "--metrics-port 9100") in result.stdout
    default = subprocess.run(["make", "-n", "-o", ".venv/.installed", "run"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60, env=env)
    assert "--port 8080" in default.stdout
