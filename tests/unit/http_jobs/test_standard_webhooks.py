"""signature = "standard-webhooks": verified by the standardwebhooks package itself."""

from __future__ import annotations

import base64
import os
from typing import Any

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from cronfleet import HttpJob
from cronfleet.jobs.http import HttpJobInvalid, HttpRuntime, RetryPolicy
from cronfleet.spec import check_http

from .conftest import Reply, Server
from .test_http_job import ctx

SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()


def _headers(seen: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in seen.headers.items()}


async def test_each_attempt_verifies_with_the_standardwebhooks_package(
        server: Server, runtime: HttpRuntime) -> None:
    server.replies = [Reply(503, "busy"), Reply(200, "ok")]
    job = HttpJob(server.url(), method="POST", body='{"report": "daily"}',
                  signing_secret=SECRET, signature="standard-webhooks",
                  retry=RetryPolicy(attempts=2, delay=0.01), runtime=runtime)
    await job(ctx())
    assert len(server.requests) == 2
    ids = set()
    for seen in server.requests:
        headers = _headers(seen)
        assert Webhook(SECRET).verify(seen.body, headers) == {"report": "daily"}
        ids.add(headers["webhook-id"])
        assert "x-cronfleet-signature" not in headers
        with pytest.raises(WebhookVerificationError):  # a changed body does not verify
            Webhook(SECRET).verify(seen.body + b" ", headers)
        other = "whsec_" + base64.b64encode(os.urandom(32)).decode()
        with pytest.raises(WebhookVerificationError):
            Webhook(other).verify(seen.body, headers)
    # the same id on every attempt of a slot: the receiver's dedupe key
    assert ids == {_headers(server.requests[0])["idempotency-key"]}


async def test_the_secret_may_come_from_the_vault_and_is_checked_before_sending(
        server: Server, runtime: HttpRuntime) -> None:
    server.default = Reply(200, "ok")
    job = HttpJob(server.url(), signing_secret="not base64 at all!", runtime=runtime)
    await job(ctx())  # the cronfleet scheme takes any text
    with pytest.raises(HttpJobInvalid, match="whsec_"):
        HttpJob(server.url(), signing_secret="not base64 at all!",
                signature="standard-webhooks", runtime=runtime)


@pytest.mark.parametrize(("table", "key", "text"), [
    ({"signature": "stripe"}, "signature", "expected one of 'cronfleet', 'standard-webhooks'"),
    ({"signature": "standard-webhooks"}, "signature", "needs a signing_secret"),
    ({"signature": "standard-webhooks", "signing_secret": "whsec_c2hvcnQ="},
     "signing_secret", "at least 16 bytes"),
])
def test_spec_problems(table: dict[str, Any], key: str, text: str) -> None:
    _, problems = check_http({"url": "https://example.com/", **table})
    assert [(p.key, text in p.message) for p in problems] == [(key, True)], problems


def test_a_vault_reference_is_accepted_at_validation() -> None:
    request, problems = check_http({"url": "https://example.com/",
                                    "signing_secret": "${secrets.HOOK}",
                                    "signature": "standard-webhooks"})
    assert not problems and request is not None and request.signature == "standard-webhooks"


async def test_standard_webhooks_from_a_config_task_verifies(server: Server,
                                                             runtime: HttpRuntime) -> None:
    from cronfleet.spec import validate_job

    job_spec, problems = validate_job({"id": "hook", "schedule": "0 * * * *", "http": {
        "url": server.url(), "method": "POST", "body": "[1, 2]", "signing_secret": SECRET,
        "signature": "standard-webhooks"}})
    assert not problems and job_spec is not None
    job = HttpJob.from_spec(job_spec, runtime=runtime)
    server.default = Reply(200, "ok")
    await job(ctx())
    (seen,) = server.requests
    assert Webhook(SECRET).verify(seen.body, _headers(seen)) == [1, 2]
