"""Building a stored API job (``catalog.build_job``, ``validate_spec``) gives what the
plain paths give: the key sets of a face (a tuple's frozenset, kept) against its
sequence as a list (scanned), an enum's members looked up once against the enum called,
the team passed in against ``dataclasses.replace``, the secret references of a request
checked only when there are some -- on many specs, good and bad."""

from __future__ import annotations

import dataclasses
import json
import random
from enum import Enum
from typing import Any

import pytest

from cronfleet import spec
from cronfleet.catalog import (
    API_HTTP_KEYS,
    API_KEYS,
    CommandJobsDisabled,
    build_job,
    validate_spec,
)
from cronfleet.jobs.http import NO_RETRY, HttpJob, HttpJobInvalid, HttpRuntime
from cronfleet.spec import FieldError, SpecInvalid

RUNTIME = HttpRuntime()

_TOP: list[tuple[str, list[Any]]] = [
    ("description", ["nightly report", "", 3, "x" * 2001]),
    ("timezone", ["Europe/Paris", "UTC", "Mars/Olympus", 5]),
    ("missed", ["skip", "RUN_ALL", "Run_Once", "never", 1]),
    ("locking", ["node_local", "PREFER_GLOBAL", "global"]),
    ("overlap", ["queue_one", "ALLOW", "replace", "skipp"]),
    ("timeout", ["2m", 30, 0, "-1s", "soon", True]),
    ("jitter", ["5s", 1.5, "x"]),
    ("catch_up_window", ["1h", 0, "never"]),
    ("enabled", [True, False, "yes"]),
    ("recover", [True, 1]),
    ("max_instances", [1, 3, 0, 101, "2"]),
    ("auto_pause_after", [5, 0, 1001]),
    ("retry", [{"attempts": 3, "backoff": "linear", "delay": "5s"}, {"attempts": 20},
               {"backof": "fixed"}, {"attempts": 2, "backoff": "sometimes"}, "often"]),
    ("notify", [{"webhook": "https://hooks.example.com/x"},
                {"slack": "https://hooks.slack.com/${secrets.SLACK}", "on": ["failure"]},
                {"on": ["failure"]}, {"webhok": "https://x.example.com"}]),
    ("config", [{"a": 1}, [1], {"b": "x" * 70000}]),
    ("team", ["ops", "bad team"]),
    ("colour", ["red"]),
    ("scheduel", ["0 * * * *"]),
    ("allow_private_targets", [True, False, "no"]),
    ("at", ["2030-01-01T00:00:00Z"]),
    ("except", [["12-25"], "calendar:/etc/x"]),
    ("command", [["echo", "hi"]]),
    ("shell", [True]),
]
_HTTP: list[tuple[str, list[Any]]] = [
    ("method", ["POST", "get", "FETCH", 3]),
    ("headers", [{"X-Job": "a", "Authorization": "Bearer ${secrets.TOKEN}"},
                 {"Bad Name": "x"}, {"X-A": "${secrets.9bad}"}, "x"]),
    ("body", ['{"a": 1}', 5, "${secrets.BODY}"]),
    ("timeout", ["10s", 0, "x"]),
    ("follow_redirects", [False, "no"]),
    ("accept_status", [[200, 204], [99], []]),
    ("body_contains", ["ok", ""]),
    ("body_regex", ["^ok$", "("]),
    ("signing_secret", ["s" * 40, "${secrets.SIGN}"]),
    ("signature", ["cronfleet", "standard-webhooks", "other"]),
    ("namespace", ["ops"]),
    ("allow_private_targets", [True, "x"]),
    ("verb", ["GET"]),
]
_URLS = ["http://127.0.0.1:9999/hook/{id}", "https://billing.example.com/h/{id}?a=b",
         "ftp://x/{id}", "https://${secrets.HOST}/{id}", "http://[::1]:80/{id}",
         "https://exa mple.com/{id}", "https://${secrets.bad name}/{id}"]


def _specs(n: int) -> list[dict[str, Any]]:
    """Stored specs: each value the first (valid) one of its list mostly, else any."""
    rng = random.Random(20261204)

    def pick(values: list[Any]) -> Any:
        return values[0] if rng.random() < 0.8 else rng.choice(values)

    out: list[dict[str, Any]] = []
    for i in range(n):
        job_id = pick([f"m{i:07d}", "bad/id", 7])
        s: dict[str, Any] = {"id": job_id,
                             "schedule": pick([f"{i % 60} {i // 60 % 60} * * * *",
                                               "every weekday at 9am", "0 6 * * MON-FRY",
                                               "15m", None, 3])}
        for key, values in rng.sample(_TOP[:14], rng.randint(0, 5)):
            s[key] = pick(values)
        if rng.random() < 0.1:
            key, values = rng.choice(_TOP[14:])
            s[key] = rng.choice(values)
        if rng.random() < (0.5 if "command" in s else 0.97):
            http: dict[str, Any] = {"url": pick(_URLS).replace("{id}", str(job_id))}
            for key, values in rng.sample(_HTTP, rng.randint(0, 5)):
                http[key] = pick(values)
            s["http"] = pick([http, "x"])
        out.append(json.loads(json.dumps(s)))
    return out


SPECS = _specs(1500)


def _plain_validate(s: dict[str, Any], team: str) -> tuple[Any, list[spec.FieldProblem]]:
    """validate_spec as it was: the keys scanned as lists, the team replaced after."""
    result, problems = spec.validate_job(s, keys=list(API_KEYS), http_keys=list(API_HTTP_KEYS),
                                         calendars=False, require_http=True)
    return (None if result is None else dataclasses.replace(result, team=team)), problems


def _fields(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _fields(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.name != "runtime"}
    return value


def test_validate_spec_is_the_plain_validation_on_many_specs() -> None:
    valid = 0
    for s in SPECS:
        got, problems = validate_spec(s, team="ops")
        want, want_problems = _plain_validate(s, "ops")
        assert problems == want_problems, s
        assert _fields(got) == _fields(want), s
        if got is not None:
            assert got.team == "ops"
            valid += 1
    assert 100 < valid < len(SPECS) - 100  # both kinds are exercised


def test_build_job_is_the_plain_build_on_many_specs() -> None:
    built = 0
    for s in SPECS:
        try:
            job = build_job(s, team="ops", runtime=RUNTIME)
        except SpecInvalid as exc:
            got: Any = exc.problems
        except CommandJobsDisabled:
            got = "command jobs disabled"
        else:
            got = _fields(job)
            built += 1
        want_spec, problems = _plain_validate(s, "ops")
        want: Any = problems
        if want_spec is not None and want_spec.command is None:
            try:
                handler = HttpJob(**{**want_spec.http.kwargs(), "namespace": "ops"},
                                  retry=want_spec.retry or NO_RETRY,
                                  allow_private_targets=None, notify=want_spec.notify,
                                  auto_pause_after=want_spec.auto_pause_after,
                                  runtime=RUNTIME, private_targets=RUNTIME.api_private_targets,
                                  secrets_need_hosts=False)
            except HttpJobInvalid as exc:
                want = [spec.FieldProblem(k if k == "auto_pause_after" else f"http.{k}", m)
                        for k, m in exc.problems]
            else:
                want = {**_fields(want_spec), "handler": _fields(handler), "source": "api"}
                for key in ("allow_private_targets", "http", "command"):
                    del want[key]
        elif want_spec is not None:
            want = "command jobs disabled"
        assert got == want, s
    assert built > 100


def test_a_stored_jobs_handler_holds_no_dict() -> None:
    """An HTTP handler is slotted: a process holds one per API job of its share (#27)."""
    job = build_job({"id": "a", "schedule": "5 0 * * * *",
                     "http": {"url": "http://127.0.0.1:9999/hook/a"}}, runtime=RUNTIME)
    assert isinstance(job.handler, HttpJob)
    assert not hasattr(job.handler, "__dict__")
    assert job.handler.url == "http://127.0.0.1:9999/hook/a" and job.handler.method == "GET"


def test_stored_jobs_share_their_team_and_empty_config() -> None:
    """What every API job held would repeat is one object (#27): the team's name (each
    definition read brings its own copy) and the empty config of an HTTP job; a job
    stored with a config keeps its own."""
    def build(job_id: str, **more: Any) -> Any:
        return build_job({"id": job_id, "schedule": "5 0 * * * *",
                          "http": {"url": f"http://127.0.0.1:9999/hook/{job_id}"}, **more},
                         team="".join(["bil", "ling"]), runtime=RUNTIME)

    a, b = build("a"), build("b")
    assert a.team == "billing" and a.team is b.team and a.handler.namespace is a.team
    assert a.config is b.config and dict(a.config) == {}
    with pytest.raises(TypeError):
        a.config["k"] = 1  # type: ignore[index]
    c = build("c", config={"k": 1})
    assert dict(c.config) == {"k": 1} and c.config is not a.config
    # without a runtime (the CLI's catalog), one policy of the API's wording for all
    bare = [build_job({"id": i, "schedule": "5 0 * * * *",
                       "http": {"url": f"http://127.0.0.1:9999/hook/{i}"}}) for i in "de"]
    policy = bare[0].handler.private_targets
    assert policy is bare[1].handler.private_targets and policy == RUNTIME.api_private_targets
    assert "[api] private_targets" in policy.hint


@pytest.mark.parametrize("keys", [spec.SPEC_KEYS, API_KEYS, spec.HTTP_KEYS, spec.RETRY_KEYS])
def test_a_key_set_is_the_tuple(keys: tuple[str, ...]) -> None:
    assert spec._key_set(keys) == frozenset(keys)
    assert spec._key_set(keys) is spec._key_set(keys)  # kept
    as_list = list(keys)
    assert spec._key_set(as_list) is as_list  # a list may change: scanned each time
    table = {k: 1 for k in (*keys[:3], "colour", "Schedule", "urll")}
    assert spec._unknown(table, keys) == spec._unknown(table, as_list)
    assert [p.key for p in spec._unknown(table, keys)] == [
        k for k in table if k not in as_list]


class _Colour(Enum):
    RED = "red"
    ONE = 1


@pytest.mark.parametrize("enum", [spec.Missed, spec.Locking, spec.Overlap, _Colour])
def test_enum_value_is_the_enum_called(enum: type[Enum]) -> None:
    for value in [*(m.value for m in enum), *(str(m.value).upper() for m in enum),
                  *(str(m.value).title() for m in enum), "nope", "", 3, None, True,
                  *enum]:
        try:
            got: Any = spec.enum_value(enum, value)
        except (FieldError, ValueError) as exc:
            got = (type(exc), str(exc))
        if isinstance(value, enum):
            want: Any = value
        else:
            allowed = [str(m.value) for m in enum]
            try:
                if isinstance(value, str) and value.lower() in allowed:
                    want = enum(value.lower())
                else:
                    hint = (spec.did_you_mean(value.lower(), allowed)
                            if isinstance(value, str) else "")
                    raise FieldError(f"{value!r} is not one of {', '.join(allowed)}{hint}")
            except (FieldError, ValueError) as exc:
                want = (type(exc), str(exc))
        assert got == want, value


_RETRY_TABLES: list[Any] = [
    {"attempts": 3, "backoff": "exponential", "delay": "5s"},
    {"delay": "5s", "backoff": "exponential", "attempts": 3},
    {"attempts": 3, "delay": 5}, {"attempts": 3, "delay": 5.0}, {"attempts": 3, "delay": True},
    {"attempts": True}, {"attempts": 1.0}, {"attempts": 20}, {"attempts": 2, "backof": "x"},
    {"backoff": "sometimes"}, {"delay": "-1s"}, {"delay": "soon"}, {"delay": [1]}, {},
    {"attempts": 2, "delay": "1m30s", "backoff": "linear"}, "often", None, 3,
]


def test_a_retry_table_gives_its_policy_cached_or_not() -> None:
    for _ in range(2):  # the second round finds the valid tables kept
        for table in _RETRY_TABLES:
            got = spec.retry_policy(table)
            kept = dict(spec._retry_policies)
            spec._retry_policies.clear()
            want = spec.retry_policy(table)
            spec._retry_policies.update(kept)
            assert got == want, table
            if got[0] is not None:
                assert type(got[0].delay) is type(want[0].delay)
    assert spec._retry_policies  # valid tables were kept, and only those:
    assert all(p is not None for p in spec._retry_policies.values())


@pytest.mark.parametrize("text", ["5s", "2m", "1h30m", "0s", "-1s", "soon", "", " 10s ",
                                  "100y", "1e3s"])
def test_a_duration_text_is_read_alike_cached_or_not(text: str) -> None:
    def plain(positive: bool) -> Any:  # duration() without the cache
        try:
            seconds = spec.to_timedelta(text).total_seconds()
        except spec.DurationError as exc:
            return str(exc).removeprefix("duration: ")
        if positive and seconds <= 0:
            return f"must be positive (got {text!r})"
        return seconds

    for _ in range(2):  # the second round finds the valid texts kept
        for positive in (False, True):
            try:
                got: Any = spec.duration(text, positive=positive)
            except FieldError as exc:
                got = exc.message
            assert got == plain(positive)
