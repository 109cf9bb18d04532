"""bext's example ``bext.config.toml`` (seed 003) loads as written: ``[scheduled]`` is the
other name of ``[scheduler]``, and its three ``[[tasks]]`` without a handler run the
functions of a ``handlers`` module named after their ids.

``bext/bext.config.toml`` is the seed's two snippets (its lines 82-96, the ``[[tasks]]``,
and 100-102, the ``dev`` ``[scheduled]`` table) joined by a blank line, byte for byte; the
digest below keeps it so."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cronfleet import ConfigError, FakeClock, RunStatus, load_config
from cronfleet.config import check_config

SEED = Path(__file__).parent / "bext" / "bext.config.toml"
SEED_SHA256 = "5b596ece2675e95cd00daa99036ee5f300b7defbe905ecabd410e3460c8c770a"

HANDLERS = '''
import json, os

def _note(ctx):
    with open(os.environ["BEXT_OUT"], "a") as f:
        f.write(json.dumps({"id": ctx.schedule_id, "config": ctx.config,
                            "slot": ctx.slot.isoformat()}) + "\\n")
    return ctx.schedule_id

def gc(ctx):
    return _note(ctx)

def daily_report(ctx):
    return _note(ctx)

def cache_warm(ctx):
    return _note(ctx)
'''


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The seed's file next to a ``bext_tasks`` module, in a directory of its own."""
    for name in [k for k in os.environ if k.startswith("CRONFLEET_")]:
        monkeypatch.delenv(name)
    (tmp_path / "bext.config.toml").write_bytes(SEED.read_bytes())
    (tmp_path / "bext_tasks.py").write_text(HANDLERS)
    monkeypatch.setenv("BEXT_OUT", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("CRONFLEET_STORE", f"sqlite:///{tmp_path / 'bext.db'}")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path / "bext.config.toml"


def calls(project: Path) -> list[dict[str, object]]:
    out = project.parent / "calls.jsonl"
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def test_the_file_is_the_seeds_byte_for_byte() -> None:
    data = SEED.read_bytes()
    assert hashlib.sha256(data).hexdigest() == SEED_SHA256
    assert b"[scheduled]\nprovider = \"cron\"\n" in data and b"handler" not in data


def test_check_accepts_it_as_written_and_warns_of_the_handlers(project: Path) -> None:
    report = check_config(project)
    assert report.valid, [p.message for p in report.problems]
    assert [(w.task, w.line) for w in report.warnings] == [
        ("gc", 1), ("daily-report", 6), ("cache-warm", 12)]
    assert all("handlers = \"myapp.tasks\" in [scheduled]" in w.message
               for w in report.warnings)
    result = subprocess.run(
        [sys.executable, "-m", "cronfleet.cli", "check", "--config", str(project)],
        capture_output=True, text=True, cwd=project.parent, env=dict(os.environ), timeout=60)
    assert result.returncode == 0, result.stderr
    assert "function 'daily_report' here" in result.stderr


def test_run_refuses_it_without_handlers(project: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(project).load()
    assert [p.task for p in info.value.problems] == ["gc", "daily-report", "cache-warm"]


def test_a_handlers_module_runs_every_task_by_its_id(project: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONFLEET_HANDLERS", "bext_tasks")
    loaded = load_config(project).load()
    assert sorted(j.id for j in loaded.jobs) == ["cache-warm", "daily-report", "gc"]
    clock = FakeClock(datetime(2026, 3, 1, 23, 59, 50, tzinfo=UTC))
    s = loaded.scheduler(clock=clock, instance_id="bext")

    async def go() -> dict[str, list[datetime]]:
        async with s:
            for _ in range(20):  # 23:59:50 -> 00:00:10: every task's slot at midnight
                clock.advance(1)
                for _ in range(4):
                    for _ in range(10):
                        await asyncio.sleep(0)
                    await s.wait_idle()
            return {jid: [r.slot for r in await s.runs_async(jid)
                          if r.status is RunStatus.SUCCEEDED] for jid in s.jobs}

    runs = asyncio.run(go())
    midnight = datetime(2026, 3, 2, tzinfo=UTC)
    assert runs == {"gc": [midnight], "daily-report": [midnight], "cache-warm": [midnight]}
    seen = {c["id"]: c["config"] for c in calls(project)}  # counted on the handler side
    assert seen == {"gc": {}, "daily-report": {"recipients": ["ops@example.com"]},
                    "cache-warm": {}}
    assert len(calls(project)) == 3


def test_a_missing_function_is_named(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project.parent / "partial_tasks.py").write_text("def gc(ctx):\n    pass\n")
    monkeypatch.setenv("CRONFLEET_HANDLERS", "partial_tasks")
    with pytest.raises(ConfigError) as info:
        load_config(project)
    problems = {p.task: p.message for p in info.value.problems}
    assert set(problems) == {"daily-report", "cache-warm"}
    assert "partial_tasks:daily_report" in problems["daily-report"]


def test_scheduled_and_scheduler_in_one_file(tmp_path: Path) -> None:
    path = tmp_path / "both.toml"
    path.write_text('[scheduler]\ntimezone = "UTC"\n\n[scheduled]\nprovider = "cron"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    [problem] = info.value.problems
    assert problem.line == 4 and "two names of the same table" in problem.message


@pytest.mark.slow
def test_cronfleet_run_runs_the_seeds_file(project: Path) -> None:
    """A real `cronfleet run` of the file as written, the handlers' module from the
    environment; a manual trigger from another process reaches the handler."""
    env = {**os.environ, "CRONFLEET_HANDLERS": "bext_tasks",
           "PYTHONPATH": str(project.parent)}
    log = project.parent / "run.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cronfleet.cli", "run", "--config", str(project), "--port", "0"],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"), cwd=project.parent, env=env)
    try:
        deadline = time.time() + 60
        while "API listening" not in log.read_text() and time.time() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
        trigger = subprocess.run(
            [sys.executable, "-m", "cronfleet.cli", "trigger", "daily-report", "--config",
             str(project)], capture_output=True, text=True, cwd=project.parent, env=env,
            timeout=90)
        assert trigger.returncode == 0, trigger.stdout + trigger.stderr
        assert [c["id"] for c in calls(project)] == ["daily-report"]
    finally:
        proc.terminate()
        code = proc.wait(timeout=60)
    text = log.read_text()
    assert code == 0, text
    assert "provider 'cron' (built-in, priority 1000): 3 job(s)" in text
