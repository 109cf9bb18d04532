"""Declaring many jobs cheaply (#18): Job.create validates once per distinct set of
arguments (spec.validate_declared) and the registry builds one spec and digest per
distinct spec (registry.declared) -- the reused result is the job the full path builds,
and every bad job still gets its own message."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cronfleet import Scheduler, spec
from cronfleet.model import Job, Locking, Missed, NotifyPolicy, Overlap, RetryPolicy
from cronfleet.runtime import registry
from cronfleet.runtime.registry import declared, declared_spec, digest


def handler(ctx: object) -> None:
    return None


@pytest.fixture(autouse=True)
def empty_caches() -> Iterator[None]:
    spec._declared_fields.clear()
    registry._specs.clear()
    yield
    spec._declared_fields.clear()
    registry._specs.clear()


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every call of the full validate_job (the ids it validated)."""
    calls: list[Any] = []
    full = spec.validate_job

    def counting(fields: Any, **kw: Any) -> Any:
        calls.append(fields.get("id"))
        return full(fields, **kw)

    monkeypatch.setattr(spec, "validate_job", counting)
    return calls


def fields_of(job: Job) -> dict[str, Any]:
    return {f.name: getattr(job, f.name) for f in dataclasses.fields(job)}


def full_path(job_id: str, kwargs: dict[str, Any]) -> Job:
    """The job as the full validation builds it (nothing cached)."""
    spec._declared_fields.clear()
    return Job.create(kwargs.pop("schedule", None), handler, id=job_id, **kwargs)


ARGUMENTS: list[dict[str, Any]] = [
    {"schedule": "*/5 * * * *"},
    {"schedule": "0 6 * * MON-FRI", "timezone": "Europe/Paris", "missed": "skip",
     "locking": "node_local", "overlap": "queue_one", "timeout": "90s", "jitter": 2,
     "catch_up_window": timedelta(minutes=5), "enabled": False, "recover": True,
     "description": "nightly", "team": "ops", "auto_pause_after": 3},
    {"schedule": "every weekday at 9am", "timezone": "America/New_York"},
    {"schedule": "15m", "retry": {"attempts": 3, "backoff": "linear", "delay": "2s"},
     "notify": {"on": ["failure"], "webhook": "https://example.com/hook",
                "after_failures": 2}, "config": {"region": "eu", "size": 3}},
    {"schedule": ["0 9 * * 1-5", "0 12 * * 6"], "timezone": "Europe/Paris",
     "start": "2026-01-01", "end": "2026-12-31", "exclude": ["12-25", "2026-12-24"]},
    {"schedule": None, "at": "2026-12-24T18:00"},
    {"schedule": "@hourly", "overlap": Overlap.SKIP, "missed": Missed.RUN_ALL,
     "locking": Locking.PREFER_GLOBAL, "max_instances": 2, "jitter": 1.5},
]


@pytest.mark.parametrize("kwargs", ARGUMENTS)
def test_the_reused_job_is_the_job_the_full_path_builds(
        kwargs: dict[str, Any], validations: list[Any]) -> None:
    first = Job.create(handler=handler, id="first", **kwargs)
    second = Job.create(handler=handler, id="team/second", **kwargs)
    assert validations == ["first"]  # the second one reused the first one's validation
    expected = full_path("team/second", dict(kwargs))
    assert fields_of(second) == fields_of(expected)
    assert second.id == "team/second" and first.id == "first"
    assert second.config is not first.config  # each job its own config dict
    assert declared(second).digest == declared(expected).digest


def test_create_sets_every_field_as_the_dataclass_init_does() -> None:
    """Job.create fills the instance in one update (not the frozen __init__): every field
    but handler and source comes from JobSpec.job_fields, and the job is the same."""
    names = {f.name for f in dataclasses.fields(Job)}
    job = Job.create("*/5 * * * *", handler, id="a", source="config", config={"k": 1})
    assert set(vars(job)) == names
    kwargs = {n: getattr(job, n) for n in names}
    assert fields_of(Job(**kwargs)) == fields_of(job)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.id = "b"  # type: ignore[misc]


def test_a_bad_job_after_1000_good_identical_ones_fails_with_its_own_id() -> None:
    for i in range(1000):
        Job.create("*/5 * * * *", handler, id=f"good-{i}", timezone="Europe/Paris")
    with pytest.raises(ValueError) as bad_id:
        Job.create("*/5 * * * *", handler, id="bad id!", timezone="Europe/Paris")
    assert str(bad_id.value).startswith("job id 'bad id!' is invalid")
    with pytest.raises(ValueError) as bad_value:
        Job.create("*/5 * * * *", handler, id="good-1000", timezone="Europe/Paris",
                   timeout=0)
    assert str(bad_value.value) == "job 'good-1000': timeout: must be positive (got 0)"
    # both problems of one job at once, as the full path words them
    with pytest.raises(ValueError) as both:
        Job.create("*/5 * * * *", handler, id="", timezone="Europe/Paris", jitter="soon")
    spec._declared_fields.clear()
    with pytest.raises(ValueError) as uncached:
        Job.create("*/5 * * * *", handler, id="", timezone="Europe/Paris", jitter="soon")
    assert str(both.value) == str(uncached.value) and "jitter" in str(both.value)
    assert Job.create("*/5 * * * *", handler, id="good-1001",
                      timezone="Europe/Paris").id == "good-1001"


def test_a_bad_id_never_takes_the_reuse_path(validations: list[Any]) -> None:
    Job.create("@daily", handler, id="ok")
    for bad in ("", "a b", "/x", "x" * 201, 7):
        with pytest.raises(ValueError, match=r"job id .* is invalid"):
            Job.create("@daily", handler, id=bad)  # type: ignore[arg-type]
    assert validations == ["ok", "", "a b", "/x", "x" * 201, 7]


@pytest.mark.parametrize(("good", "bad", "message"), [
    ({"jitter": 1}, {"jitter": True}, "jitter: expected a duration"),
    ({"max_instances": 1}, {"max_instances": True}, "max_instances: expected a whole"),
    ({"enabled": False}, {"enabled": 0}, "enabled: expected true or false"),
    ({"auto_pause_after": 1}, {"auto_pause_after": True}, "auto_pause_after: expected"),
])
def test_equal_values_of_another_type_are_validated_apart(
        good: dict[str, Any], bad: dict[str, Any], message: str) -> None:
    """``1 == True`` and ``0 == False`` in Python: the type is part of the key."""
    Job.create("@daily", handler, id="good", **good)
    with pytest.raises(ValueError, match=f"job 'bad': {message}"):
        Job.create("@daily", handler, id="bad", **bad)


def test_equal_policies_stay_each_jobs_own() -> None:
    """RetryPolicy(delay=1) equals RetryPolicy(delay=1.0), which the registry writes
    apart: a policy object is keyed by identity, each job keeps the one it was given."""
    one, one_f = RetryPolicy(attempts=2, delay=1), RetryPolicy(attempts=2, delay=1.0)
    a = Job.create("@daily", handler, id="a", retry=one)
    b = Job.create("@daily", handler, id="b", retry=one_f)
    assert a.retry is one and b.retry is one_f
    assert declared(a).spec["retry"] == {"attempts": 2, "backoff": "exponential",
                                         "delay": 1}
    assert declared(a).digest != declared(b).digest
    hook = NotifyPolicy(webhook="https://example.com/hook")
    assert Job.create("@daily", handler, id="c", notify=hook).notify is hook


def test_arguments_that_cannot_be_keyed_take_the_full_path(
        validations: list[Any]) -> None:
    tags = ["a", "b"]
    at = datetime(2026, 12, 24, 18, tzinfo=UTC)
    for job_id in ("x", "y"):
        job = Job.create("@daily", handler, id=job_id, config={"tags": tags})
        assert job.config == {"tags": ["a", "b"]} and job.config["tags"] is tags
        Job.create(None, handler, id=f"{job_id}-once", at=at)
    assert validations == ["x", "x-once", "y", "y-once"]


def test_a_calendar_file_is_read_again_for_each_job(tmp_path: Path) -> None:
    days = tmp_path / "holidays.txt"
    days.write_text("12-25\n")
    a = Job.create("@daily", handler, id="a", exclude=f"calendar:{days}")
    days.write_text("12-25\n01-01\n")
    b = Job.create("@daily", handler, id="b", exclude=f"calendar:{days}")
    assert a.schedule.expr != b.schedule.expr


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spec, "DECLARED_CACHE_MAX", 3)
    monkeypatch.setattr(registry, "SPEC_CACHE_MAX", 3)
    for i in range(10):
        declared(Job.create(f"{i} * * * *", handler, id=f"j{i}"))
    assert len(spec._declared_fields) <= 3 and len(registry._specs) <= 3


def test_the_decorator_declares_many_jobs_alike() -> None:
    s = Scheduler(timezone="Europe/Paris")
    for i in range(500):
        s.job(f"{i % 60} * * * * *", id=f"j-{i}")(handler)
    jobs = {j.id: j for j in s.iter_jobs()}
    assert len(jobs) == 500
    assert jobs["j-61"].schedule is jobs["j-1"].schedule  # one parsed expression
    assert str(jobs["j-499"].schedule.tz) == "Europe/Paris"
    assert jobs["j-499"].schedule.expr == "19 * * * * *"


# -- the registry's rows -----------------------------------------------------------------


def test_registry_rows_of_jobs_alike_share_the_spec_computed_once() -> None:
    jobs = [Job.create("*/5 * * * *", handler, id=f"j{i}", team="ops", source="config")
            for i in range(3)]
    rows = [declared(j) for j in jobs]
    assert [r.job_id for r in rows] == ["j0", "j1", "j2"]
    assert {(r.team, r.source) for r in rows} == {("ops", "config")}
    expected = declared_spec(jobs[2])
    assert rows[2].spec == expected and rows[2].digest == digest(expected)
    assert rows[0].spec is rows[2].spec


@pytest.mark.parametrize("change", [
    {"jitter": 1}, {"jitter": 1.0}, {"jitter": -0.0}, {"jitter": True},
    {"catch_up_window": 60}, {"timeout": 60.0}, {"description": "other"},
    {"config": {"a": 1}}, {"config": {"a": 1.0}}, {"config": {"a": [1, 2]}},
    {"retry": RetryPolicy(attempts=2, delay=1)},
    {"notify": NotifyPolicy(webhook="https://example.com/hook")},
    {"max_instances": 2}, {"enabled": False},
])
def test_registry_digests_match_the_uncached_computation(change: dict[str, Any]) -> None:
    """Values Python finds equal but JSON writes apart (1, 1.0, True, -0.0) get their own
    digest, whichever was seen first."""
    base = Job.create("*/5 * * * *", handler, id="base")
    declared(base)
    for job in (dataclasses.replace(base, id="x", jitter=0.0),
                dataclasses.replace(base, id="changed", **change)):
        expected = declared_spec(job)
        row = declared(job)
        assert row.spec == expected and row.digest == digest(expected), change
    registry._specs.clear()
    assert declared(dataclasses.replace(base, id="again", **change)).digest == \
        digest(declared_spec(dataclasses.replace(base, **change)))


def test_a_handler_kind_is_part_of_the_registry_key() -> None:
    class Kinded:
        kind = "http"

        def __call__(self, ctx: object) -> None:
            return None

    a = Job.create("@daily", handler, id="a")
    b = Job.create("@daily", Kinded(), id="b")
    assert declared(a).spec["kind"] == "handler" and declared(b).spec["kind"] == "http"
