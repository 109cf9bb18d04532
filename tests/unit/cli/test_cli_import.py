"""``cronfleet jobs import FILE.jsonl``: many jobs, checked whole before any is created,
every problem named by its line; ``--dry-run`` creates nothing."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from cronfleet.cli import main
from cronfleet.store.factory import open_api_store


def line(job_id: str, **fields: Any) -> str:
    return json.dumps({"id": job_id, "schedule": "17 * * * *",
                       "http": {"url": "https://example.com/hook"}, **fields})


def stored(tmp_path: Path) -> tuple[list[str], list[str]]:
    async def go() -> tuple[list[str], list[str]]:
        api = open_api_store(f"sqlite:///{tmp_path / 'ops.db'}")
        try:
            return ([d.id for d in await api.job_defs()],
                    [e.action for e in await api.audit_entries("ops")])
        finally:
            await api.close()

    return asyncio.run(go())


def test_a_good_file_is_created_in_batches(cli: Callable[..., Result], project: Path,
                                           write: Callable[..., Path],
                                           tmp_path: Path) -> None:
    lines = [line(f"imp{i:02d}", schedule=f"{i} * * * *") for i in range(25)]
    path = write("jobs.jsonl", "\n".join(lines[:10]) + "\n\n" + "\n".join(lines[10:]) + "\n")
    r = cli("jobs", "import", str(path), "--batch-size", "10", "--team", "ops", "--by", "al",
            "--json")
    assert r.exit_code == 0, r.stderr
    summary = json.loads(r.stdout)
    assert (summary["created"], summary["batches"], summary["dry_run"]) == (25, 3, False)
    ids, audit = stored(tmp_path)
    assert ids == [f"imp{i:02d}" for i in range(25)]
    assert audit == ["job.create_batch"] * 3
    r = cli("jobs", "import", str(write("more.jsonl", line("imp99"))), "--team", "ops")
    assert r.exit_code == 0 and "created 1 jobs (team ops) in 1 batches" in r.stdout


def test_an_unreadable_line_stops_before_anything_is_created(
        cli: Callable[..., Result], project: Path, write: Callable[..., Path],
        tmp_path: Path) -> None:
    good = [line(f"g{i}") for i in range(3)]
    path = write("bad.jsonl", "\n".join([*good, '{"id": "x", "schedule": }', line("g9")]))
    r = cli("jobs", "import", str(path))
    assert r.exit_code == 2
    assert f"{path}:4:25: invalid JSON: Expecting value; nothing was created" in r.stderr
    path = write("list.jsonl", "\n".join([*good, "[1, 2]"]))
    r = cli("jobs", "import", str(path))
    assert r.exit_code == 2 and f"{path}:4: expected a JSON object (a job), got list" in r.stderr
    path = write("noid.jsonl", "\n".join([good[0], '{"schedule": "@daily"}']))
    r = cli("jobs", "import", str(path))
    assert r.exit_code == 2 and f"{path}:2: id: is missing" in r.stderr
    assert stored(tmp_path)[0] == []


def test_problems_are_named_by_line_and_nothing_is_created(
        cli: Callable[..., Result], project: Path, write: Callable[..., Path],
        tmp_path: Path) -> None:
    lines = [line(f"p{i}") for i in range(7)]
    lines[2] = line("p2", schedule="61 * * * *")  # the second batch (of 2)
    lines[4] = line("p4", timeout="soon")
    lines[5] = line("p0")  # repeats line 1
    lines[6] = line("tick")  # declared in the config
    path = write("jobs.jsonl", "\n".join(lines))
    for dry in ((), ("--dry-run",)):
        r = cli("jobs", "import", str(path), "--batch-size", "2", *dry)
        assert r.exit_code == 2
        assert f"{path}:3: schedule: " in r.stderr
        assert f"{path}:5: timeout: " in r.stderr
        assert f"{path}:6: id: job id 'p0' is already on line 1" in r.stderr
        assert f"{path}:7: id: job id 'tick' is already taken" in r.stderr
        assert "problem(s) in 4 job(s); nothing was created" in r.stderr
        assert stored(tmp_path)[0] == []


def test_dry_run_creates_nothing_and_sees_taken_ids(cli: Callable[..., Result],
                                                    project: Path, write: Callable[..., Path],
                                                    tmp_path: Path) -> None:
    path = write("jobs.jsonl", "\n".join(line(f"d{i}") for i in range(5)))
    r = cli("jobs", "import", str(path), "--dry-run", "--team", "ops")
    assert r.exit_code == 0, r.stderr
    assert "dry run: 5 jobs valid in 1 batches" in r.stdout and "nothing was created" in r.stdout
    assert stored(tmp_path) == ([], [])
    assert cli("jobs", "import", str(write("one.jsonl", line("d3"))), "--team",
               "ops").exit_code == 0
    r = cli("jobs", "import", str(path), "--dry-run", "--team", "ops")
    assert r.exit_code == 2 and f"{path}:4: id: job id 'd3' is already taken" in r.stderr
    assert stored(tmp_path)[0] == ["d3"]


def test_standard_input(project: Path, tmp_path: Path) -> None:
    old_click = "mix_stderr" in inspect.signature(CliRunner).parameters
    runner = CliRunner(**({"mix_stderr": False} if old_click else {}))
    r = runner.invoke(main, ["jobs", "import", "-", "--team", "ops"],
                      input=line("s0") + "\n" + line("s1") + "\n", catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    assert stored(tmp_path)[0] == ["s0", "s1"]
    r = runner.invoke(main, ["jobs", "import", "-"], input="nope\n", catch_exceptions=False)
    assert r.exit_code == 2 and "<stdin>:1:1: invalid JSON" in r.stderr
