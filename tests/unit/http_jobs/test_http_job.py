"""HttpJob against a real local server: attempts, retries, headers, signing, limits."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from typing import Any

import pytest

from cronfleet import HttpJob, RunContext, TriggeredBy
from cronfleet.jobs.http import MAX_BODY, HttpJobFailed, HttpRuntime, RetryPolicy

from .conftest import Reply, Server, Sleeps

SLOT = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def ctx(job_id: str = "ping", token: int | None = 42) -> RunContext:
    return RunContext(job_id=job_id, slot=SLOT, triggered_by=TriggeredBy.SCHEDULE,
                      instance_id="test-1", fencing_token=token, config={})


async def test_post_records_request_response_and_timings(server: Server,
                                                         runtime: HttpRuntime) -> None:
    server.default = Reply(201, '{"done": true}', {"Content-Type": "application/json"})
    job = HttpJob(server.url("/hook?x=1"), method="post", headers={"X-Team": "ops"},
                  body='{"hello": 1}', runtime=runtime)
    c = ctx()
    result = await job(c)
    assert result["ok"] is True and result["status"] == 201
    (a,) = result["attempts"]
    assert a["attempt"] == 1 and a["ok"] is True and a["error"] is None
    assert a["triggered_by"] == "schedule"
    assert a["request"]["method"] == "POST"
    assert a["request"]["url"] == server.url("/hook?x=1")
    assert a["request"]["body"] == '{"hello": 1}'
    assert a["request"]["headers"]["X-Team"] == "ops"
    assert a["response"]["body"] == '{"done": true}'
    assert a["response"]["truncated"] is False
    assert a["response"]["headers"]["content-type"] == "application/json"
    assert a["timings"]["total_ms"] > 0 and "connect_ms" in a["timings"]
    json.dumps(result)  # storable as the run's JSON result
    (seen,) = server.requests
    assert seen.method == "POST" and seen.path == "/hook?x=1" and seen.body == b'{"hello": 1}'
    assert seen.headers["X-Team"] == "ops"
    assert any("attempt 1/1: POST" in line and "-> 201" in line for line in c.logs)


async def test_idempotency_and_cronfleet_headers(server: Server, runtime: HttpRuntime) -> None:
    server.replies = [Reply(500), Reply(502), Reply(200)]
    job = HttpJob(server.url(), retry=RetryPolicy(attempts=3, delay=1), runtime=runtime)
    result = await job(ctx("reports/daily", token=7))
    assert result["ok"] and len(result["attempts"]) == 3
    keys = {r.headers["Idempotency-Key"] for r in server.requests}
    assert keys == {"reports/daily:2026-03-02T09:00:00Z"}
    assert result["idempotency_key"] == "reports/daily:2026-03-02T09:00:00Z"
    assert [r.headers["X-Cronfleet-Attempt"] for r in server.requests] == ["1", "2", "3"]
    assert {r.headers["X-Cronfleet-Slot"] for r in server.requests} == {"2026-03-02T09:00:00Z"}
    assert {r.headers["X-Cronfleet-Fencing-Token"] for r in server.requests} == {"7"}


def test_idempotency_key_is_the_same_in_another_process(server: Server) -> None:
    """Two processes running the same slot send the same key (no per-process state)."""
    script = textwrap.dedent(f"""
        import asyncio
        from datetime import datetime, timezone
        from cronfleet import HttpJob, RunContext, TriggeredBy
        from cronfleet.jobs.http import HttpRuntime
        ctx = RunContext(job_id="ping", slot=datetime(2026, 3, 2, 9, tzinfo=timezone.utc),
                         triggered_by=TriggeredBy.SCHEDULE, instance_id="{{}}",
                         fencing_token=1, config={{}})
        async def main(name):
            rt = HttpRuntime(allow_private_targets=True)
            ctx.instance_id = name
            await HttpJob("{server.url()}", runtime=rt)(ctx)
            await rt.aclose()
        import sys
        asyncio.run(main(sys.argv[1]))
    """)
    for name in ("a", "b"):
        subprocess.run([sys.executable, "-c", script, name], check=True, timeout=60)
    assert len(server.requests) == 2
    assert {r.headers["Idempotency-Key"] for r in server.requests} == {
        "ping:2026-03-02T09:00:00Z"}


@pytest.mark.parametrize(("backoff", "waits"), [
    ("exponential", [5.0, 10.0, 20.0]),
    ("linear", [5.0, 10.0, 15.0]),
    ("fixed", [5.0, 5.0, 5.0]),
])
async def test_backoff_schedules(server: Server, runtime: HttpRuntime, sleeps: Sleeps,
                                 backoff: str, waits: list[float]) -> None:
    server.default = Reply(503, "down")
    job = HttpJob(server.url(), retry=RetryPolicy(attempts=4, backoff=backoff, delay=5),
                  runtime=runtime)
    c = ctx()
    with pytest.raises(HttpJobFailed) as info:
        await job(c)
    assert sleeps.calls == waits
    result = info.value.result
    assert [a["attempt"] for a in result["attempts"]] == [1, 2, 3, 4]
    assert [a.get("retry_in") for a in result["attempts"]] == [*waits, None]
    assert result["ok"] is False and result["status"] == 503
    assert str(info.value) == f"GET {server.url()} failed after 4 attempts: HTTP 503"
    assert len(server.requests) == 4
    # the attempts are the failed run's result, written once (not again in a log line)
    assert not [line for line in c.logs if line.startswith("attempts: ")]


def test_unknown_backoff_is_an_error() -> None:
    # it used to fall back to "fixed" with a warning printed by every command; the spec
    # reports it as a problem of the job (config, API, Job.create), and so does the policy
    with pytest.raises(ValueError, match="backoff: 'fibonacci' is not one of exponential"):
        RetryPolicy(attempts=3, backoff="fibonacci", delay=2)
    assert RetryPolicy(attempts=3, backoff="fixed", delay=2).wait(2) == 2


@pytest.mark.parametrize("attempts", [0, 11, True, 2.5])
def test_attempts_are_1_to_10(attempts: Any) -> None:
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=attempts)


async def test_retry_after_is_honoured_and_capped_by_the_timeout(
        server: Server, runtime: HttpRuntime, sleeps: Sleeps) -> None:
    server.replies = [Reply(429, headers={"Retry-After": "7"}),
                      Reply(503, headers={"Retry-After": "3600"}), Reply(200)]
    job = HttpJob(server.url(), timeout=20, retry=RetryPolicy(attempts=3, delay=1),
                  runtime=runtime)
    result = await job(ctx())
    assert result["ok"] and sleeps.calls == [7.0, 20.0]


async def test_success_stops_retrying(server: Server, runtime: HttpRuntime,
                                      sleeps: Sleeps) -> None:
    server.replies = [Reply(500), Reply(200)]
    job = HttpJob(server.url(), retry=RetryPolicy(attempts=5, delay=1), runtime=runtime)
    result = await job(ctx())
    assert len(result["attempts"]) == 2 and sleeps.calls == [1.0]
    assert result["attempts"][0]["failure"] == "status 500 is not 2xx"


async def test_network_error_is_recorded(runtime: HttpRuntime, sleeps: Sleeps) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    job = HttpJob(f"http://127.0.0.1:{port}/", retry=RetryPolicy(attempts=2, delay=1),
                  runtime=runtime)
    with pytest.raises(HttpJobFailed, match="ConnectError") as info:
        await job(ctx())
    attempts = info.value.result["attempts"]
    assert all(a["response"] is None and "ConnectError" in a["error"] for a in attempts)
    assert sleeps.calls == [1.0]


async def test_timeout(server: Server, runtime: HttpRuntime) -> None:
    import socket

    with socket.socket() as listener:  # accepts, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
        job = HttpJob(url, timeout=0.3, runtime=runtime)
        with pytest.raises(HttpJobFailed) as info:
            await job(ctx())
    assert "timed out" in info.value.result["attempts"][0]["error"].lower() or \
        "Timeout" in info.value.result["attempts"][0]["error"]


async def test_body_truncated_at_one_mebibyte(server: Server, runtime: HttpRuntime) -> None:
    server.default = Reply(200, b"x" * (MAX_BODY + 500_000))
    result = await HttpJob(server.url(), runtime=runtime)(ctx())
    response = result["attempts"][0]["response"]
    assert response["truncated"] is True and len(response["body"]) == MAX_BODY
    server.default = Reply(200, b"y" * MAX_BODY)
    result = await HttpJob(server.url(), runtime=runtime)(ctx())
    response = result["attempts"][0]["response"]
    assert response["truncated"] is False and len(response["body"]) == MAX_BODY


@pytest.mark.parametrize(("options", "ok", "why"), [
    ({"accept_status": (200, 404)}, True, None),
    ({"accept_status": (200,)}, False, "status 404 is not one of [200]"),
    ({}, False, "status 404 is not 2xx"),
])
async def test_status_rules(server: Server, runtime: HttpRuntime, options: dict[str, Any],
                            ok: bool, why: str | None) -> None:
    server.default = Reply(404, "missing")
    job = HttpJob(server.url(), runtime=runtime, **options)
    if ok:
        assert (await job(ctx()))["ok"]
    else:
        with pytest.raises(HttpJobFailed) as info:
            await job(ctx())
        assert info.value.result["attempts"][0]["failure"] == why


@pytest.mark.parametrize(("options", "ok"), [
    ({"body_contains": "healthy"}, True),
    ({"body_contains": "broken"}, False),
    ({"body_not_contains": "error"}, False),
    ({"body_regex": r"\d+ items"}, True),
    ({"body_regex": r"^items"}, False),
    ({"body_not_regex": r"err(or)?"}, False),
    ({"body_not_regex": r"panic"}, True),
])
async def test_body_rules(server: Server, runtime: HttpRuntime, options: dict[str, Any],
                          ok: bool) -> None:
    server.default = Reply(200, "healthy: 12 items, 0 error")
    job = HttpJob(server.url(), runtime=runtime, **options)
    if ok:
        assert (await job(ctx()))["ok"]
    else:
        with pytest.raises(HttpJobFailed):
            await job(ctx())


async def test_signature_verifies(server: Server, runtime: HttpRuntime) -> None:
    job = HttpJob(server.url(), method="POST", body='{"a":1}', signing_secret="s3cr3t-sign",
                  runtime=runtime)
    result = await job(ctx())
    (seen,) = server.requests
    ts = seen.headers["X-Cronfleet-Timestamp"]
    # the documented verification (docs/http-jobs.md)
    expected = "v1=" + hmac.new(b"s3cr3t-sign", ts.encode() + b"." + seen.body,
                                hashlib.sha256).hexdigest()
    assert hmac.compare_digest(seen.headers["X-Cronfleet-Signature"], expected)
    assert "s3cr3t-sign" not in json.dumps(result)


async def test_redirects_followed_and_recorded(server: Server, runtime: HttpRuntime) -> None:
    server.replies = [Reply(302, "", {"Location": "/final"}), Reply(200, "here")]
    result = await HttpJob(server.url("/start"), runtime=runtime)(ctx())
    response = result["attempts"][0]["response"]
    assert response["url"] == server.url("/final")
    assert response["redirects"] == [server.url("/start")]
    server.replies = [Reply(302, "", {"Location": "/final"})]
    job = HttpJob(server.url("/start"), follow_redirects=False, accept_status=(302,),
                  runtime=runtime)
    assert (await job(ctx()))["status"] == 302


async def test_job_runs_in_the_scheduler(server: Server, runtime: HttpRuntime,
                                         tmp_path: Any) -> None:
    from cronfleet import Scheduler

    server.replies = [Reply(200, "fine"), Reply(500, "bad")]
    s = Scheduler(store=f"sqlite:///{tmp_path / 'cf.db'}", timers=False)
    s.add_job(HttpJob(server.url(), runtime=runtime).job("@daily", id="ping"))
    async with s:
        run = await s.trigger_async("ping", wait=True)
        assert run.status.value == "succeeded"
        assert run.result["attempts"][0]["response"]["body"] == "fine"
        assert run.result["idempotency_key"].startswith("ping:")
        run = await s.trigger_async("ping", wait=True)
        assert run.status.value == "failed"
        assert run.error is not None and "failed after 1 attempt: HTTP 500" in run.error
        assert run.result["attempts"][0]["response"]["status"] == 500  # stored once
        assert not any(line.startswith("attempts: ") for line in run.logs)


@pytest.mark.parametrize(("options", "key"), [
    ({"url": "ftp://x"}, "url"),
    ({"method": "FETCH"}, "method"),
    ({"timeout": 0}, "timeout"),
    ({"accept_status": (99,)}, "accept_status"),
    ({"body_regex": "("}, "body_regex"),
    ({"body": "${secrets.bad name}"}, "secrets"),
])
def test_invalid_fields(options: dict[str, Any], key: str) -> None:
    options.setdefault("url", "https://example.com/")
    with pytest.raises(ValueError, match=key):
        HttpJob(**options)


async def test_a_failed_run_logs_its_error_at_warning_and_the_traceback_at_debug(
        server: Server, runtime: HttpRuntime, tmp_path: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from cronfleet import Scheduler

    server.default = Reply(500, "bad")
    s = Scheduler(store=f"sqlite:///{tmp_path / 'cf.db'}", timers=False)
    s.add_job(HttpJob(server.url(), runtime=runtime).job("@daily", id="ping"))
    with caplog.at_level(logging.DEBUG, logger="cronfleet"):
        async with s:
            run = await s.trigger_async("ping", wait=True)
    assert run.status.value == "failed"
    assert not any("Traceback" in line for line in run.logs)  # the error says it all
    [ended] = [r for r in caplog.records if r.name == "cronfleet"
               and r.getMessage().startswith("job ping slot")]
    assert ended.levelno == logging.WARNING and "Traceback" not in ended.getMessage()
    assert ended.getMessage().endswith("failed: HttpJobFailed: GET "
                                       f"{server.url()} failed after 1 attempt: HTTP 500")
    traces = [r for r in caplog.records if "Traceback" in r.getMessage()]
    assert traces and all(r.levelno == logging.DEBUG for r in traces)
