"""examples/plugin_pkg, installed through its entry points and found by real discovery.

Installing writes what pip would: the package and a ``.dist-info`` directory with
``METADATA`` and ``entry_points.txt`` (taken from the example's pyproject.toml), in a
temporary site directory put on ``sys.path`` (or ``PYTHONPATH`` for a real process). It
needs no network and no build backend, and leaves the project's virtualenv untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from cronfleet import RunStatus, load_config
from cronfleet.plugins import discover_entry_points

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "plugin_pkg"


def install(site: Path) -> None:
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    shutil.copytree(EXAMPLE / "cronfleet_example_plugin", site / "cronfleet_example_plugin")
    info = site / f"cronfleet_example_plugin-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    groups = project["entry-points"]
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in eps.items())
        for group, eps in groups.items()
    ))


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_entry_points: None) -> Path:
    path = tmp_path / "site"
    install(path)
    monkeypatch.syspath_prepend(str(path))
    return path


HANDLERS = '''
TRIES = []


def gc(ctx):
    return "gc"


def flaky(ctx):
    TRIES.append(1)
    if len(TRIES) == 1:
        raise ConnectionError("first try fails")
    return "second try"
'''

CONFIG = '''
[scheduler]
store = "sqlite:///fleet.db"
provider = "{provider}"

[[tasks]]
id = "gc"
cron = "5m"
handler = "handlers:gc"

[[tasks]]
id = "flaky"
cron = "1h"
handler = "handlers:flaky"
config_json = '{{"retries": 1}}'
'''


def test_entry_points_are_discovered(site: Path) -> None:
    found = [s for s in discover_entry_points() if s.dist == "cronfleet-example-plugin 0.1.0"]
    assert [(s.name, s.value) for s in found] == [
        ("reports", "cronfleet_example_plugin:Reports"),
        ("retrying", "cronfleet_example_plugin:RetryingProvider"),
    ]


def test_plugin_jobs_load_and_run(site: Path, write: Callable[..., Path]) -> None:
    write("handlers.py", HANDLERS)
    path = write("cronfleet.toml", CONFIG.format(provider="cron"))
    with load_config(path).load() as loaded:
        assert loaded.job_ids() == ["gc", "flaky", "reports/pulse", "reports/daily-traffic"]
        reports = next(p for p in loaded.plugins if p.name == "reports")
        assert reports.origin == ("entry point 'reports' (cronfleet_example_plugin:Reports) of "
                                  "cronfleet-example-plugin 0.1.0")
        run = loaded.scheduler(timers=False).trigger("reports/daily-traffic")
        assert run.status is RunStatus.SUCCEEDED
        assert run.result == {"sent_to": ["ops@example.com"]}
        # 'retrying' advertises itself too, but only runs tasks when it is the provider
        assert next(p for p in loaded.plugins if p.name == "retrying").jobs == []


def test_switch_to_the_installed_provider(site: Path, write: Callable[..., Path]) -> None:
    write("handlers.py", HANDLERS)
    path = write("cronfleet.toml", CONFIG.format(provider="retrying"))
    with load_config(path).load() as loaded:
        assert loaded.job_ids()[:2] == ["gc", "flaky"]  # same tasks, same ids
        run = loaded.scheduler(timers=False).trigger("flaky")
    assert run.status is RunStatus.SUCCEEDED and run.result == "second try"
    assert "attempt 1 failed (ConnectionError('first try fails')); retrying" in run.logs


@pytest.mark.slow
def test_a_real_process_finds_the_installed_plugin(site: Path, write: Callable[..., Path],
                                                   tmp_path: Path) -> None:
    write("handlers.py", HANDLERS)
    path = write("cronfleet.toml", CONFIG.format(provider="retrying"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONFLEET_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-m", "cronfleet.cli", "check", str(path), "--json", "--no-history"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert [j["id"] for j in report["jobs"]] == ["gc", "flaky", "reports/pulse",
                                                 "reports/daily-traffic"]
    assert [(p["name"], p["provider"]) for p in report["plugins"]] == [
        ("retrying", True), ("reports", False)]
