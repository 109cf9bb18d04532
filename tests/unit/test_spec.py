"""cronfleet.spec: the one job spec -- every problem at once, the converters, the id rule,
the default id, the pause ``until`` rule."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from cronfleet import spec
from cronfleet.jobs.http import TargetPolicy
from cronfleet.model import Job, RetryPolicy
from cronfleet.plugins import Schedule, schedule_to_job
from cronfleet.spec import FieldError, FieldProblem, validate_job

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
PARIS = ZoneInfo("Europe/Paris")


def keys(problems: list[FieldProblem]) -> list[str]:
    return sorted(p.key for p in problems)


def test_every_problem_at_once() -> None:
    result, problems = validate_job({
        "id": "x", "schedule": "0 6 * * MON-FRY", "timezone": "Mars/Olympus",
        "retry": {"attempts": 20, "backoff": "sometimes"}, "timeout": 0, "missed": "never",
        "enabled": "yes", "colour": "red",
        "http": {"url": "ftp://x", "method": "FETCH", "verb": "GET"},
        "notify": {"on": ["failure"]}, "auto_pause_after": 0,
    }, require_http=True)
    assert result is None
    assert keys(problems) == [
        "auto_pause_after", "colour", "enabled", "http.method", "http.url", "http.verb",
        "missed", "notify", "retry.attempts", "retry.backoff", "schedule", "timeout",
        "timezone"]
    (cron,) = [p for p in problems if p.key == "schedule"]
    assert cron.column == 13 and cron.to_dict()["column"] == 13
    assert str(next(p for p in problems if p.key == "missed")) == (
        "missed: 'never' is not one of skip, run_once, run_all")


def test_a_valid_spec_is_converted() -> None:
    result, problems = validate_job({
        "id": "hook", "schedule": "5m", "timeout": "30s", "jitter": 2, "overlap": "ALLOW",
        "retry": {"attempts": 3, "delay": "10s"}, "notify": {"webhook": "https://h/x"},
        "http": {"url": "https://example.com", "method": "post", "allow_private_targets": True},
    }, catch_up_window=60.0)
    assert problems == [] and result is not None
    assert (result.timeout, result.jitter, result.catch_up_window) == (30.0, 2.0, 60.0)
    assert result.retry == RetryPolicy(attempts=3, delay=10.0)
    assert result.http is not None and result.http.method == "POST"
    assert result.allow_private_targets is True
    assert result.description == "POST https://example.com"


def test_keys_outside_the_face_are_unknown() -> None:
    _, problems = validate_job({"id": "x", "schedule": "5m", "team": "a"},
                               keys=("id", "schedule"))
    assert [str(p) for p in problems] == ["team: unknown key 'team'"]
    _, problems = validate_job({"id": "x", "schedule": "5m", "http": {"url": "https://x",
                                                                      "namespace": "n"}},
                               http_keys=("url",))
    assert keys(problems) == ["http.namespace"]


def test_http_allow_private_targets_inside_http_must_agree() -> None:
    _, problems = validate_job({"id": "x", "schedule": "5m", "allow_private_targets": False,
                                "http": {"url": "https://x", "allow_private_targets": True}})
    assert keys(problems) == ["http.allow_private_targets"]


@pytest.mark.parametrize(("value", "problem"), [
    ({"attempts": 0}, "attempts: expected a whole number from 1 to 10, got 0"),
    ({"attempts": True}, "attempts: expected a whole number from 1 to 10, got a boolean"),
    ({"backoff": "exponentail"}, "backoff: 'exponentail' is not one of exponential, linear, "
                                 "fixed (did you mean 'exponential'?)"),
    ({"delay": "-1s"}, "delay: invalid duration '-1s'"),
    ({"tries": 3}, "tries: unknown key 'tries'"),
    ("3", ": expected a table"),
])
def test_retry_policy_problems(value: object, problem: str) -> None:
    policy, problems = spec.retry_policy(value)
    assert policy is None and str(problems[0]).startswith(problem.lstrip(": ")), problems


def test_an_unknown_backoff_in_a_policy_object_is_a_problem_too() -> None:
    _, problems = spec.retry_policy(RetryPolicy.__new__(RetryPolicy))  # bypass __post_init__
    assert problems == []
    bad = object.__new__(RetryPolicy)
    object.__setattr__(bad, "attempts", 2)
    object.__setattr__(bad, "backoff", "random")
    object.__setattr__(bad, "delay", 1.0)
    _, problems = spec.retry_policy(bad)
    assert keys(problems) == ["backoff"]


def test_notify_policy() -> None:
    policy, problems = spec.notify_policy({
        "on": "failure", "webhook": "https://h",
        "email": {"host": "smtp", "to": "ops@example.com", "from": "cf@x", "port": 587}})
    assert problems == [] and policy is not None
    assert policy.on == ("failure",) and policy.email is not None
    assert policy.email.sender == "cf@x" and policy.email.to == ("ops@example.com",)
    _, problems = spec.notify_policy({"email": {"to": []}, "on": ["sometimes"]})
    assert keys(problems) == ["email.host", "email.to", "on"]


# -- converters ----------------------------------------------------------------------------


def test_durations() -> None:
    assert spec.duration("1m30s") == 90.0 and spec.duration(5) == 5.0
    assert spec.duration(timedelta(hours=1)) == 3600.0
    for bad in (True, None, [], "soon"):
        with pytest.raises(FieldError):
            spec.duration(bad)
    with pytest.raises(FieldError, match="must be positive"):
        spec.duration(0, positive=True)


def test_config_from_json() -> None:
    assert spec.config_from_json('{"a": 1}') == {"a": 1}
    assert spec.config_from_json("  ") == {}
    assert spec.config_from_json("[1]", strict=False) == {}
    with pytest.raises(FieldError, match="must be a JSON object"):
        spec.config_from_json("[1]")
    with pytest.raises(FieldError, match="invalid JSON"):
        spec.config_from_json("{")


# -- the pause until: one rule -------------------------------------------------------------


def test_until_without_an_offset_is_read_in_the_jobs_zone() -> None:
    until = spec.pause_until("2026-03-02T18:00", now=NOW, tz=PARIS)
    assert until == datetime(2026, 3, 2, 17, 0, tzinfo=UTC)
    naive = spec.pause_until(datetime(2026, 3, 2, 18, 0), now=NOW, tz=PARIS)
    assert naive == until


def test_until_with_an_offset_a_datetime_or_a_duration() -> None:
    assert spec.pause_until("2026-03-02T18:00:00Z", now=NOW, tz=PARIS) == \
        datetime(2026, 3, 2, 18, 0, tzinfo=UTC)
    aware = datetime(2026, 3, 3, tzinfo=UTC)
    assert spec.pause_until(aware, now=NOW, tz=PARIS) == aware
    assert spec.pause_until("2h", now=NOW, tz=PARIS) == NOW + timedelta(hours=2)
    assert spec.pause_until(90, now=NOW, tz=PARIS) == NOW + timedelta(seconds=90)
    assert spec.pause_until(timedelta(minutes=1), now=NOW, tz=PARIS) == NOW + timedelta(minutes=1)


@pytest.mark.parametrize(("value", "message"), [
    ("2026-03-01T10:00", "is in the past"),
    ("0s", "must be a positive duration"),
    ("tomorrow", "is neither an ISO 8601 time"),
    (True, "expected a duration"),
])
def test_until_problems(value: object, message: str) -> None:
    with pytest.raises(FieldError, match=message):
        spec.pause_until(value, now=NOW, tz=PARIS)


# -- ids -----------------------------------------------------------------------------------


@pytest.mark.parametrize("job_id", ["cleanup", "a.b:c@d+e-f", "reports/daily", "a/b/c",
                                    "x" * 200, "mymod.Klass.method"])
def test_valid_job_ids(job_id: str) -> None:
    assert spec.check_job_id(job_id) is None


@pytest.mark.parametrize("job_id", ["", "-x", "a b", "a//b", "/a", "a/", "a/.b", "x" * 201,
                                    "é", 3, None])
def test_invalid_job_ids(job_id: object) -> None:
    assert spec.check_job_id(job_id) is not None


def test_a_name_is_a_job_id_without_slash() -> None:
    assert spec.check_name("daily") is None and spec.check_name("x" * 200) is None
    problem = spec.check_name("reports/daily", "id")
    assert problem is not None and "'/' separates a plugin's name" in problem


def test_job_create_names_every_problem_in_one_value_error() -> None:
    with pytest.raises(ValueError) as info:
        Job.create("61 * * * *", None, id="w", timeout=0, missed="never",
                   retry={"attempts": 11})
    text = str(info.value)
    assert text.startswith("job 'w': ")
    for part in ("schedule '61 * * * *': minute", "timeout: must be positive",
                 "missed: 'never'", "retry.attempts: expected a whole number"):
        assert part in text, text
    with pytest.raises(ValueError, match="job id 'bad id' is invalid"):
        Job.create("5m", None, id="bad id")


def test_job_create_takes_the_policies_for_any_handler() -> None:
    job = Job.create("5m", lambda ctx: None, id="plugin/job", retry={"attempts": 3},
                     notify={"webhook": "https://h/x"}, auto_pause_after=2)
    assert job.retry == RetryPolicy(attempts=3)
    assert job.notify is not None and job.notify.webhook == "https://h/x"
    assert job.auto_pause_after == 2


def test_a_plugin_schedule_takes_the_policies() -> None:
    schedule = Schedule("daily", "@daily", retry={"attempts": 2, "backoff": "linear"},
                        auto_pause_after=3)
    job, errors = schedule_to_job(schedule, job_id="p/daily", handler=lambda ctx: None,
                                  timezone="UTC", catch_up_window=60.0, source="plugin p")
    assert errors == [] and job is not None
    assert job.retry == RetryPolicy(attempts=2, backoff="linear") and job.auto_pause_after == 3
    _, errors = schedule_to_job(Schedule("daily", "@daily", retry={"attempts": 0},
                                         notify={"on": ["failure"]}),
                                job_id="p/daily", handler=lambda ctx: None, timezone="UTC",
                                catch_up_window=60.0, source="plugin p")
    assert sorted((e.key, e.message) for e in errors) == [
        ("notify", "no channel: set webhook, slack and/or email"),
        ("retry", "attempts: expected a whole number from 1 to 10, got 0")]


# -- the default id ------------------------------------------------------------------------

SCRIPT = """
from cronfleet.spec import default_job_id


def auto_named(ctx):
    return None


def outer():
    def inner(ctx):
        return None
    return inner


if __name__ == "__main__":
    print(default_job_id(auto_named), default_job_id(outer()))
"""


def _run(args: list[str], cwd: Path) -> str:
    out = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                         timeout=60, check=True)
    return out.stdout.strip()


def test_the_default_id_does_not_depend_on_how_the_module_was_loaded(tmp_path: Path) -> None:
    (tmp_path / "myjobs.py").write_text(SCRIPT)
    as_script = _run(["myjobs.py"], tmp_path)
    as_module = _run(["-m", "myjobs"], tmp_path)
    imported = _run(["-c", "import myjobs\nfrom cronfleet.spec import default_job_id\n"
                           "print(default_job_id(myjobs.auto_named), "
                           "default_job_id(myjobs.outer()))"], tmp_path)
    assert as_script == as_module == imported == "myjobs.auto_named myjobs.outer.inner"
    assert all(spec.check_job_id(i) is None for i in imported.split())


def test_the_default_id_of_a_package_main_and_an_odd_file_name(tmp_path: Path) -> None:
    pkg = tmp_path / "tools"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(SCRIPT)
    assert _run(["-m", "tools"], tmp_path) == "tools.auto_named tools.outer.inner"
    (tmp_path / "my jobs.py").write_text(SCRIPT)
    assert _run(["my jobs.py"], tmp_path) == "my_jobs.auto_named my_jobs.outer.inner"


def test_the_default_id_of_a_lambda_and_a_callable_object() -> None:
    assert spec.default_job_id(lambda ctx: None) == (
        "test_spec.test_the_default_id_of_a_lambda_and_a_callable_object.lambda")

    class Task:
        def __call__(self, ctx: object) -> None:
            return None

    assert spec.check_job_id(spec.default_job_id(Task())) is None


def test_a_config_task_and_an_api_body_make_the_same_job(tmp_path: Path) -> None:
    from cronfleet.catalog import build_job
    from cronfleet.config import load_config

    (tmp_path / "cronfleet.toml").write_text("""
[[tasks]]
id = "hook"
cron = "0 6 * * MON-FRI"
timezone = "Europe/Paris"
recover = true
timeout = "5m"
config_json = '{"a": 1}'
allow_private_targets = true
http = { url = "https://example.com/run", method = "post" }
retry = { attempts = 3, backoff = "linear", delay = "10s" }
notify = { on = ["failure"], webhook = "https://hooks.example.com/x" }
auto_pause_after = 4
""")
    with load_config(tmp_path / "cronfleet.toml").load() as loaded:
        (from_toml,) = loaded.jobs
    from_api = build_job({
        "id": "hook", "schedule": "0 6 * * MON-FRI", "timezone": "Europe/Paris",
        "recover": True, "timeout": "5m", "config": {"a": 1}, "allow_private_targets": True,
        "http": {"url": "https://example.com/run", "method": "post"},
        "retry": {"attempts": 3, "backoff": "linear", "delay": "10s"},
        "notify": {"on": ["failure"], "webhook": "https://hooks.example.com/x"},
        "auto_pause_after": 4})
    fields = ("id", "missed", "catch_up_window", "locking", "overlap", "timeout", "jitter",
              "enabled", "recover", "config", "description", "retry", "notify",
              "auto_pause_after")
    assert {f: getattr(from_toml, f) for f in fields} == {f: getattr(from_api, f)
                                                          for f in fields}
    assert from_toml.schedule.expr == from_api.schedule.expr
    assert str(from_toml.schedule.tz) == str(from_api.schedule.tz)
    for attr in ("url", "method", "retry", "notify", "auto_pause_after"):
        assert getattr(from_toml.handler, attr) == getattr(from_api.handler, attr)
    # the one difference: a stored job's opt-out is not read, the operator's list is
    assert from_toml.handler.allow_private_targets is True
    assert from_api.handler.allow_private_targets is None
    assert from_api.handler.private_targets == TargetPolicy.parse([])


# -- composed schedules -------------------------------------------------------------------


def test_a_schedule_list_at_bounds_and_exclusions_compose() -> None:
    from cronfleet.cron import ComposedSchedule, CronExpr

    result, problems = validate_job({
        "id": "office", "schedule": ["0 9 * * 1-5", "0 12 * * 6"], "timezone": "Europe/Paris",
        "start": "2026-01-01", "end": datetime(2026, 12, 31, 18, tzinfo=UTC),
        "except": ["12-25", "2026-12-24", "0 12 * * 6"]})
    assert problems == [] and result is not None
    s = result.schedule
    assert isinstance(s, ComposedSchedule) and s.tz == PARIS
    assert s.expr == ("0 12 * * 6 | 0 9 * * 1-5 | start 2026-01-01T00:00:00+01:00 | "
                      "end 2026-12-31T19:00:00+01:00 | except 0 12 * * 6 | except "
                      "12-25 | except 2026-12-24")
    one, _ = validate_job({"id": "x", "schedule": ["@hourly"]})
    assert one is not None and type(one.schedule) is CronExpr
    once, _ = validate_job({"id": "x", "at": "2026-12-24T18:00"})
    assert once is not None and once.schedule.expr == "at 2026-12-24T18:00:00+00:00"


def test_every_problem_of_a_composed_schedule_at_once() -> None:
    result, problems = validate_job({
        "id": "x", "schedule": ["0 9 * * 1-5", "61 * * * *", None, 4],
        "at": "2026-12-24T18:00:00+01:00", "start": "yesterday", "end": 5,
        "except": ["12-25", "12-32", "@every 5m", ["nested"]], "timeout": -1})
    assert result is None
    assert [(p.key, p.column) for p in problems] == [
        ("at", None), ("schedule[1]", 1), ("schedule[2]", None), ("schedule[3]", None),
        ("start", None), ("end", None), ("except[1]", 1), ("except[2]", 1),
        ("except[3]", None), ("timeout", None)]
    msgs = {p.key: p.message for p in problems}
    assert msgs["schedule[1]"] == "minute: '61' is out of range 0-59 (column 1)"
    assert msgs["except[2]"].startswith("an interval cannot be an exclusion")
    assert msgs["end"] == "expected an ISO 8601 date-time or date, got int"


@pytest.mark.parametrize(("fields", "key", "message"), [
    ({"schedule": []}, "schedule", "empty list"),
    ({"schedule": "@daily", "start": "2026-02-01", "end": "2026-01-31"}, "end",
     "is before start"),
    ({"at": "2026-12-24T18:00:00+00:00", "end": "2026-12-01"}, "at", "outside start/end"),
    ({"at": "2026-12-25T18:00:00+00:00", "except": ["12-25"]}, "at", "is excluded"),
    ({"schedule": "@daily", "except": "calendar:x.txt"}, "except[0]", "cannot read"),
    ({"schedule": "@daily", "except": {"a": 1}}, "except", "expected a list"),
])
def test_composition_problems(fields: dict, key: str, message: str) -> None:
    result, problems = validate_job({"id": "x", **fields})
    assert result is None
    assert [p.key for p in problems] == [key] and message in problems[0].message


def test_calendar_files_can_be_refused() -> None:
    result, problems = validate_job({"id": "x", "schedule": "@daily",
                                     "except": ["calendar:/etc/hostname"]}, calendars=False)
    assert result is None and [p.key for p in problems] == ["except[0]"]
    assert problems[0].message.startswith("calendar files are not accepted here")


def test_job_create_the_decorator_and_plugin_schedules_compose() -> None:
    from cronfleet import Scheduler
    from cronfleet.cron import ComposedSchedule

    job = Job.create(["0 9 * * 1-5", "0 12 * * 6"], lambda ctx: None, id="a",
                     timezone="Europe/Paris", exclude=["12-25"], end="2026-12-31")
    assert isinstance(job.schedule, ComposedSchedule) and job.period is None
    once = Job.create(None, lambda ctx: None, id="b", at="2026-12-24T18:00:00+01:00")
    assert once.schedule.expr == "at 2026-12-24T17:00:00+00:00"
    with pytest.raises(ValueError, match=r"schedule\[1\]: minute: '61'.*except\[0\]"):
        Job.create(["0 9 * * *", "61 * * * *"], lambda ctx: None, id="c",
                   exclude=["13-01"])
    from cronfleet.store.memory import MemoryStore

    s = Scheduler(store=MemoryStore())
    s.job(["@hourly", "30 * * * *"], id="d", exclude="0 0 * * *")(lambda ctx: None)
    s.job(at="2030-01-01T00:00:00Z", id="e")(lambda ctx: None)
    assert s.jobs["d"].schedule.expr == "30 * * * * | @hourly | except 0 0 * * *"
    assert s.jobs["e"].schedule.expr == "at 2030-01-01T00:00:00+00:00"
    job2, errors = schedule_to_job(
        Schedule(id="p", cron=["@daily", "@hourly"], exclude=["01-01"], end="2030-01-01"),
        job_id="plug/p", handler=lambda ctx: None, timezone="UTC", catch_up_window=60,
        source="plugin plug")
    assert errors == [] and job2 is not None
    assert job2.schedule.expr == "@daily | @hourly | end 2030-01-01T23:59:59+00:00 | " \
                                 "except 01-01"
    _, errors = schedule_to_job(
        Schedule(id="p", cron=["@daily", "@dayly"], exclude=["01-32"]),
        job_id="plug/p", handler=lambda ctx: None, timezone="UTC", catch_up_window=60,
        source="plugin plug")
    assert [e.key for e in errors] == ["cron[1]", "exclude[0]"]


def test_sentences_inside_a_schedule_list() -> None:
    result, problems = validate_job({"id": "x", "timezone": "Europe/Paris",
                                     "schedule": ["every weekday at 9am", "0 12 * * 6"],
                                     "except": ["12-25", "every Saturday at noon"]})
    assert problems == [] and result is not None
    assert result.schedule.expr == ("0 12 * * 6 | 0 9 * * 1-5 | except 0 12 * * 6 | "
                                    "except 12-25")
    assert result.schedule_text == "every weekday at 9am | 0 12 * * 6"  # as written
    plain, _ = validate_job({"id": "x", "schedule": ["0 9 * * *", "0 12 * * 6"]})
    assert plain is not None and plain.schedule_text is None
    _, problems = validate_job({"id": "x", "schedule": ["every weekday at 9am",
                                                        "every tusday at 9am"],
                                "except": ["every tusday"]})
    assert [(p.key, p.column) for p in problems] == [("schedule[1]", 7), ("except[0]", 7)]
    assert "did you mean 'Tuesday'?" in problems[0].message


def test_parsed_expressions_bring_their_zone_and_a_job_runs_in_one() -> None:
    from cronfleet.cron import parse

    paris = parse("0 9 * * *", "Europe/Paris")
    result, _ = validate_job({"id": "x", "schedule": [paris, parse("0 12 * * 6", PARIS)],
                              "end": "2030-01-01"})
    assert result is not None and result.schedule.tz == PARIS
    assert result.schedule.expr == "0 12 * * 6 | 0 9 * * * | end 2030-01-01T23:59:59+01:00"
    _, problems = validate_job({"id": "x", "schedule": [paris, "0 12 * * 6"]})  # UTC text
    assert [p.key for p in problems] == ["schedule[1]"]
    assert "every expression of a job runs in one zone" in problems[0].message
    ok, _ = validate_job({"id": "x", "schedule": [paris, "0 12 * * 6"],
                          "timezone": "Europe/Paris"})
    assert ok is not None and ok.schedule.expr == "0 12 * * 6 | 0 9 * * *"


# -- max_instances ---------------------------------------------------------------------


def test_max_instances_defaults_to_one_and_accepts_one() -> None:
    result, problems = validate_job({"id": "x", "schedule": "1s"})
    assert problems == [] and result is not None and result.max_instances == 1
    result, problems = validate_job({"id": "x", "schedule": "1s", "max_instances": 1})
    assert problems == [] and result is not None
    assert result.job_fields()["max_instances"] == 1


@pytest.mark.parametrize(("value", "message"), [
    (0, "expected a whole number from 1 to 100, got 0"),
    (101, "expected a whole number from 1 to 100, got 101"),
    ("2", "expected a whole number from 1 to 100, got a string ('2')"),
    (True, "expected a whole number from 1 to 100, got a boolean (True)"),
])
def test_max_instances_out_of_range(value: object, message: str) -> None:
    result, problems = validate_job({"id": "x", "schedule": "1s", "max_instances": value})
    assert result is None
    assert [(p.key, p.message) for p in problems] == [("max_instances", message)]


def test_max_instances_with_allow_is_an_error_naming_the_field() -> None:
    _, problems = validate_job({"id": "x", "schedule": "1s", "max_instances": 3,
                                "overlap": "allow"})
    assert [p.key for p in problems] == ["max_instances"]
    assert "overlap = 'allow'" in problems[0].message
    assert "no limit" in problems[0].message


def test_max_instances_above_one_is_accepted_beside_a_limiting_overlap() -> None:
    for overlap in ("skip", "queue_one", "replace"):
        spec, problems = validate_job({"id": "x", "schedule": "1s", "max_instances": 2,
                                       "overlap": overlap})
        assert problems == [] and spec is not None and spec.max_instances == 2


def test_max_instances_error_names_job_id_in_code_and_plugins() -> None:
    with pytest.raises(ValueError, match=r"job 'tick': max_instances: 2 with overlap = 'allow'"):
        Job.create("1s", lambda ctx: None, id="tick", max_instances=2, overlap="allow")
    assert Job.create("1s", lambda ctx: None, id="tick", max_instances=2).max_instances == 2
    job, errors = schedule_to_job(Schedule(id="s", cron="1s", max_instances=0),
                                  job_id="p/s", handler=lambda ctx: None, timezone="UTC",
                                  catch_up_window=0, source="plugin")
    assert job is None
    assert [(e.key, e.message) for e in errors] == [
        ("max_instances", "expected a whole number from 1 to 100, got 0")]


URLS = [
    "https://hooks.example.com/tenants/42/sync", "http://a.b", "HTTPS://Example.COM/x?y=1#f",
    "https://example.com:8443/p", "https://example.com:65535", "https://example.com:65536",
    "https://example.com:99999/", "https://example.com:0/", "https://example.com:080/",
    "https://999.1.1.1/", "https://10.0.0.1/x", "https://1.2.3.4:80/", "https://[::1]/",
    "https://ex_ample.com/", "https://-bad.com/", "https://bad-.com/", "https://a..b/",
    "https://example.com./", "https://xn--bcher-kva.example/", "https://bücher.example/",
    "https://example.com/a b", "https://example.com/%zz", "https://example.com/p?q=%20&r=[1]",
    "https://user:pw@example.com/", "https://example.com/${secrets.TOKEN}/x",
    "https://${secrets.HOST}/x", "https://example.com/\u00e9", "https://example.com/a|b",
    "https://" + "a" * 64 + ".com/", "https://example.123/", "https://example.com:/x",
    "https://localhost:8080/health", "http://x/" + "p" * 3000,
    "http://127.0.0.1:8080/hook/job-1", "https://255.255.255.255/", "https://256.1.1.1/",
    "https://01.2.3.4/", "https://1.2.3/", "https://1.2.3.4.5/", "http://0.0.0.0:1/",
    "https://1.2.3.4:0/", "https://192.168.001.1/", "http://10.1.2.3.example.com/",
]


@pytest.mark.parametrize("url", URLS)
def test_the_plain_url_shortcut_judges_as_httpx_does(url: str) -> None:
    """The URL check answers a plainly valid URL without httpx (a batch checks 1,000):
    for every URL, the answer is the one httpx's parser gives."""
    from cronfleet.spec import _parsed_url_problem, _url_problem

    probe = re.sub(r"\$\{secrets\.[^}]*\}", "x", url)
    assert _url_problem(url) == (None if url.startswith("${secrets.")
                                 else _parsed_url_problem(url, probe))
