"""A job's fields are declared once (``cronfleet.spec.FIELDS``, ``JobFields``): every
face derives its names from them, and a ``[[tasks]]`` entry is validated once on its way
to a job."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from cronfleet import load_config, spec
from cronfleet.config.keys import TASK_KEYS
from cronfleet.model import Job
from cronfleet.plugins import Schedule

TOML = """
[[tasks]]
id = "report"
cron = "0 6 * * *"
handler = "handlers:work"
retry = { attempts = 3, delay = "5s" }
timeout = "1m"
config_json = '{"to": "ops"}'

[[tasks]]
id = "backup"
cron = "@daily"
command = ["true"]
timeout = "30s"
"""


def test_each_face_names_the_spec_fields() -> None:
    assert tuple(f.key for f in spec.FIELDS) == spec.SPEC_KEYS
    assert set(TASK_KEYS) == {f.task for f in spec.FIELDS} | {"handler"}
    assert {f.name for f in dataclasses.fields(Schedule)} == {
        f.schedule for f in spec.FIELDS if f.schedule is not None}
    job_fields = {f.name for f in dataclasses.fields(spec.JobFields)}
    assert {f.name for f in dataclasses.fields(Job)} == job_fields | {"handler", "source"}
    assert {f.name for f in dataclasses.fields(spec.JobSpec)} == job_fields | {
        "allow_private_targets", "http", "command"}


def test_a_task_is_validated_once(write: Callable[..., Path],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    write("handlers.py", "def work(ctx):\n    pass\n")
    calls: list[str] = []
    validate = spec.validate_job

    def counted(fields: object, **kwargs: object) -> object:
        calls.append(str(dict(fields).get("id")))  # type: ignore[call-overload]
        return validate(fields, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(spec, "validate_job", counted)
    config = load_config(write("cronfleet.toml", TOML))
    with config.load() as loaded:
        jobs = {j.id: j for j in loaded.jobs}
    assert sorted(calls) == ["backup", "report"]  # once each: reading the file
    report = jobs["report"]
    assert report.retry is not None and report.retry.attempts == 3
    assert report.timeout == 60.0 and report.config == {"to": "ops"}
    assert report.source.rpartition(":")[0].endswith("cronfleet.toml")
    # a command task's job keeps the net behind the command's own timeout
    assert jobs["backup"].timeout is not None and jobs["backup"].timeout > 30.0
