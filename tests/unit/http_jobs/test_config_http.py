"""[[tasks]] with http = {...}, retry = {...} and allow_private_targets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cronfleet import ConfigError, HttpJob, load_config, plugins
from cronfleet.config import CONFIG_ENV, SCHEDULER_ENV, STORE_ENV

from .conftest import Reply, Server


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setattr(plugins, "discover_entry_points", lambda group="": [])
    for var in (CONFIG_ENV, STORE_ENV, SCHEDULER_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    yield


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cronfleet.toml"
    path.write_text(text, encoding="utf-8")
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [str(p).removeprefix(f"{path}:") for p in info.value.problems]


HTTP = (
    'http = { method = "POST", url = "https://example.com/hook", headers = { X-A = "1" }, '
    'body = "{}", timeout = "10s", accept_status = [200, 202], body_contains = "ok", '
    'signing_secret = "${secrets.SIGN}" }'
)


def test_http_task_is_read(tmp_path: Path) -> None:
    path = write(tmp_path, """
[scheduler]
allow_private_targets = true

[[tasks]]
id = "ping"
cron = "0 9 * * 1-5"
timeout = "5m"
HTTP
retry = { attempts = 3, backoff = "linear", delay = "5s" }
""".replace("HTTP", HTTP))
    config = load_config(path)
    assert config.allow_private_targets is True
    (task,) = config.tasks
    job = task.handler
    assert isinstance(job, HttpJob)
    assert (job.method, job.url, dict(job.headers), job.body, job.timeout) == (
        "POST", "https://example.com/hook", {"X-A": "1"}, "{}", 10.0)
    assert job.accept_status == (200, 202) and job.body_contains == "ok"
    assert (job.retry.attempts, job.retry.backoff, job.retry.delay) == (3, "linear", 5.0)
    assert job.runtime is config.http_runtime() and job.runtime.allow_private_targets
    assert job.runtime.store == config.store
    with config.load() as loaded:
        (built,) = loaded.jobs
        assert built.handler is job and built.timeout == 300
        assert built.description == "POST https://example.com/hook"


@pytest.mark.parametrize(("body", "expected"), [
    ('http = { url = "ftp://x" }',
     "6:8: task 'ping': http: url: expected an http:// or https:// URL, got 'ftp://x'"),
    ('http = { url = "https://x", methd = "GET" }',
     "6:8: task 'ping': http: unknown key 'methd' (did you mean 'method'?) (expected "
     "method, url, headers, body, timeout, follow_redirects, accept_status, body_contains, "
     "body_not_contains, body_regex, body_not_regex, signing_secret, signature, namespace)"),
    ('http = { method = "GET" }',
     "6:8: task 'ping': http: url: missing (e.g. http = { url = \"https://example.com/hook\" })"),
    ('http = { url = "https://x", timeout = "soon" }',
     "6:8: task 'ping': http: timeout: invalid duration 'soon'"),
    ('http = { url = "https://x", method = "FETCH" }',
     "6:8: task 'ping': http: method: 'FETCH' is not one of GET, HEAD, POST, PUT, PATCH, "
     "DELETE, OPTIONS"),
    ('http = { url = "https://x" }\nretry = { attempts = 11 }',
     "7:9: task 'ping': retry: attempts: expected a whole number from 1 to 10, got 11"),
    ('http = { url = "https://x" }\nretry = { attempts = 2, delay = "x" }',
     "7:9: task 'ping': retry: delay: invalid duration 'x'"),
    ('http = { url = "https://x" }\nallow_private_targets = "yes"',
     "7:25: task 'ping': allow_private_targets: expected true or false, got a string ('yes')"),
    ('http = "https://x"', "6:8: task 'ping': http: expected a table (http = { ... }), got a "
     "string ('https://x')"),
    ('handler = "m:f"\nhttp = { url = "https://x" }',
     "7:8: task 'ping': http: a task has either a handler or an http request, not both"),
])
def test_located_errors(tmp_path: Path, body: str, expected: str) -> None:
    path = write(tmp_path, f"""
[scheduler]

[[tasks]]
id = "ping"
cron = "5m"
{body}
""".replace("\n[scheduler]\n", "[scheduler]\n", 1))
    found = problems(path)
    assert any(p.startswith(expected) for p in found), found


def test_unknown_backoff_is_an_error_located_at_retry(tmp_path: Path) -> None:
    # it used to be a bare log warning (and a silent fallback to "fixed") printed by every
    # command; it is a problem like any other now, as it already was over the API
    path = write(tmp_path, """
[[tasks]]
id = "ping"
cron = "5m"
http = { url = "https://x" }
retry = { attempts = 2, backoff = "random" }
""")
    assert problems(path) == [
        "6:9: task 'ping': retry: backoff: 'random' is not one of exponential, linear, fixed"]


def test_every_problem_of_a_task_in_one_round(tmp_path: Path) -> None:
    # a bad retry table or an unknown http key no longer hides the url and the method
    path = write(tmp_path, """
[[tasks]]
id = "ping"
cron = "0 9 * * MON-FRY"
http = { url = "ftp://x", method = "FETCH", verb = "GET" }
retry = { attempts = 20 }
""")
    found = problems(path)
    assert any("4:21: task 'ping': cron: day-of-week: 'FRY'" in p for p in found), found
    assert any("task 'ping': http: url: expected an http:// or https:// URL" in p
               for p in found), found
    assert any("task 'ping': http: method: 'FETCH' is not one of" in p for p in found), found
    assert any("task 'ping': http: unknown key 'verb'" in p for p in found), found
    assert any("task 'ping': retry: attempts: expected a whole number from 1 to 10, got 20"
               in p for p in found), found
    assert len(found) == 5, found


def test_retry_notify_and_auto_pause_on_a_handler_task(tmp_path: Path) -> None:
    path = write(tmp_path, """
[[tasks]]
id = "gc"
cron = "5m"
handler = "os:fspath"
retry = { attempts = 2, backoff = "linear", delay = "3s" }
notify = { webhook = "https://h/w" }
auto_pause_after = 4
""")
    config = load_config(path)
    (task,) = config.tasks
    assert task.schedule.retry.attempts == 2 and task.schedule.auto_pause_after == 4
    with config.load() as loaded:
        (job,) = loaded.jobs
    assert (job.retry.attempts, job.retry.backoff, job.retry.delay) == (2, "linear", 3.0)
    assert job.notify.webhook == "https://h/w" and job.auto_pause_after == 4


def test_http_task_policies_are_on_the_job_too(tmp_path: Path) -> None:
    path = write(tmp_path, """
[[tasks]]
id = "ping"
cron = "5m"
http = { url = "https://x" }
retry = { attempts = 3 }
notify = { webhook = "https://h/w" }
auto_pause_after = 2
""")
    with load_config(path).load() as loaded:
        (job,) = loaded.jobs
    assert job.retry == job.handler.retry and job.retry.attempts == 3
    assert job.notify == job.handler.notify and job.auto_pause_after == 2
    assert job.handler.applies_job_policies  # the runtime must not retry it once more


def test_allow_private_targets_without_http_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, """
[[tasks]]
id = "gc"
cron = "5m"
handler = "os:getcwd"
allow_private_targets = true
""")
    assert any("allow_private_targets: only applies to http tasks" in p
               for p in problems(path))


async def test_configured_http_task_runs(tmp_path: Path, server: Server) -> None:
    server.replies = [Reply(500), Reply(200, "done")]
    path = write(tmp_path, f"""
[scheduler]
store = "sqlite:///cf.db"

[[tasks]]
id = "ping"
cron = "@daily"
allow_private_targets = true
http = {{ url = "{server.url('/run')}" }}
retry = {{ attempts = 2, delay = 0 }}
""")
    with load_config(path).load() as loaded:
        s = loaded.scheduler(timers=False)
        async with s:
            run = await s.trigger_async("ping", wait=True)
        await loaded.config.http_runtime().aclose()
    assert run.status.value == "succeeded"
    assert [a["response"]["status"] for a in run.result["attempts"]] == [500, 200]


def test_notify_and_auto_pause_are_read(tmp_path: Path) -> None:
    path = write(tmp_path, """
[[tasks]]
id = "ping"
cron = "5m"
http = { url = "https://x" }
auto_pause_after = 5
notify = { on = ["failure", "recovery", "success"], after_failures = 2, webhook = "https://h/w", slack = "https://hooks.slack.com/x", email = { host = "smtp.example.com", port = 587, from = "cron@example.com", to = ["ops@example.com"], starttls = true, username = "u", password = "${secrets.SMTP}" } }
""")  # noqa: E501
    (task,) = load_config(path).tasks
    job = task.handler
    assert job.auto_pause_after == 5
    n = job.notify
    assert n.on == ("failure", "recovery", "success") and n.after_failures == 2
    assert n.webhook == "https://h/w" and n.slack == "https://hooks.slack.com/x"
    assert n.email.host == "smtp.example.com" and n.email.port == 587
    assert n.email.sender == "cron@example.com" and n.email.to == ("ops@example.com",)
    assert n.email.starttls is True and n.email.password == "${secrets.SMTP}"


@pytest.mark.parametrize(("body", "expected"), [
    ('notify = { webhook = "ftp" }', "task 'ping': notify: webhook: expected an http(s) URL"),
    ('http = { url = "https://x" }\nnotify = { on = ["never"], webhook = "https://h" }',
     "task 'ping': notify: on: 'never' is not one of failure, recovery, success"),
    ('http = { url = "https://x" }\nnotify = { on = ["failure"] }',
     "task 'ping': notify: no channel: set webhook, slack and/or email"),
    ('http = { url = "https://x" }\nnotify = { webhok = "https://h" }',
     "task 'ping': notify: unknown key 'webhok' (did you mean 'webhook'?)"),
    ('http = { url = "https://x" }\nnotify = { email = { to = ["a@b"] } }',
     "task 'ping': notify: email: host: missing"),
    ('http = { url = "https://x" }\nauto_pause_after = 0',
     "task 'ping': auto_pause_after: expected a whole number from 1 to 1000"),
])
def test_notify_errors(tmp_path: Path, body: str, expected: str) -> None:
    path = write(tmp_path, f'[[tasks]]\nid = "ping"\ncron = "5m"\nhandler = "os:getcwd"\n{body}\n'
                 if body.startswith("notify") else f'[[tasks]]\nid = "ping"\ncron = "5m"\n{body}\n')
    found = problems(path)
    assert any(expected in p for p in found), found
