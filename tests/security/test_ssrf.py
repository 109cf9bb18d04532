"""The SSRF guard: every spelling of an inside address refused, each resolved address
checked and tried in order, no opt-out for API jobs, the operator's list applied to API jobs
only, and the [scheduler] switch applied to config tasks only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from api.conftest import Api, expect
from cronfleet.jobs.http import HttpJob, HttpJobFailed, HttpRuntime, TargetPolicy, check_address
from cronfleet.model import RunContext

from .echo import Target

REFUSED = {
    "127.0.0.1": "loopback", "0.0.0.0": "unspecified", "10.1.2.3": "private",
    "169.254.169.254": "metadata", "168.63.129.16": "metadata", "100.100.100.200": "metadata",
    "192.0.0.192": "metadata", "fd00:ec2::254": "metadata", "::1": "loopback",
    "::ffff:127.0.0.1": "loopback", "::ffff:169.254.169.254": "metadata",
    "::127.0.0.1": "loopback",  # IPv4-compatible
    "2002:7f00:1::1": "loopback",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::1": "metadata",  # 6to4 of 169.254.169.254
    "2002:0a00:0001::": "private",  # 6to4 of 10.0.0.1
    "2001:0:4136:e378:8000:63bf:80ff:fffe": "loopback",  # Teredo, client 127.0.0.1
    "64:ff9b::a9fe:a9fe": "metadata",  # NAT64 of the metadata address
    "64:ff9b::7f00:1": "loopback",
    "fec0::1": "site-local", "fe80::1": "link-local", "fc00::1": "private",
    "100.64.0.1": "public",  # carrier-grade NAT: not global
    "224.0.0.1": "multicast", "240.0.0.1": "private", "198.18.0.1": "private",
}


@pytest.mark.parametrize("address", sorted(REFUSED))
def test_every_inside_spelling_is_refused(address: str) -> None:
    problem = check_address(address)
    assert problem is not None and REFUSED[address] in problem, problem


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946",
                                     "2002:5db8:d822::1", "1.1.1.1"])
def test_public_addresses_pass(address: str) -> None:
    assert check_address(address) is None


@pytest.fixture
def target() -> Iterator[Target]:
    server = Target()
    yield server
    server.close()


def ctx() -> RunContext:
    from datetime import UTC, datetime

    from cronfleet.model import TriggeredBy

    return RunContext(job_id="j", slot=datetime(2026, 1, 1, tzinfo=UTC),
                      triggered_by=TriggeredBy.SCHEDULE, instance_id="t", fencing_token=1,
                      config={})


async def test_each_resolved_address_is_checked_and_tried_in_order(target: Target) -> None:
    def resolver(answers: dict[str, list[str]]) -> Any:
        async def resolve(host: str, port: int) -> list[str]:
            return answers[host]
        return resolve

    # the operator allows 127.0.0.1 only; 127.0.0.9 answers nothing (a closed port there)
    rt = HttpRuntime(resolve=resolver({"two.test": ["127.0.0.9", "127.0.0.1"],
                                        "mixed.test": ["127.0.0.1", "10.0.0.1"]}))
    policy = TargetPolicy.parse(["127.0.0.0/8"])
    try:
        ok = HttpJob(target.url("/two", host="two.test"), timeout=5, runtime=rt,
                     private_targets=policy)
        result = await ok(ctx())
        assert result["ok"] and target.seen[-1][0] == "/two"  # the second address answered
        # any refused address refuses the name: it points inside
        bad = HttpJob(target.url("/mixed", host="mixed.test"), timeout=5, runtime=rt,
                      private_targets=policy)
        with pytest.raises(HttpJobFailed, match=r"refusing mixed.test: 10.0.0.1 is a private "
                                                r"address \(the operator may list it in "
                                                r"\[api\] private_targets\)"):
            await bad(ctx())
        assert [p for p, _, _ in target.seen] == ["/two"]
    finally:
        await rt.aclose()


def test_the_operators_list() -> None:
    policy = TargetPolicy.parse(["10.1.2.0/24", "billing.internal", "fd12::/16"])
    assert policy.allows("x", "10.1.2.7") and not policy.allows("x", "10.1.3.7")
    assert policy.allows("Billing.Internal.", "10.9.9.9")
    assert policy.allows("y", "fd12::5") and not policy.allows("y", "127.0.0.1")
    for bad in (["*.internal"], ["http://x"], [""], [7]):
        with pytest.raises(ValueError, match=r"private_targets\[0\]"):
            TargetPolicy.parse(bad)


async def test_api_jobs_cannot_opt_out(api: Api) -> None:
    for body in ({"allow_private_targets": True},
                 {"http": {"url": "http://127.0.0.1:9/x", "allow_private_targets": True}}):
        spec = {"id": "optout", "schedule": "@daily", "http": {"url": "http://127.0.0.1:9/x"},
                **body}
        reply = expect(await api.post("/api/jobs", "alpha-admin", json=spec), 422)
        assert "cannot turn the SSRF guard off" in reply["message"]
    expect(await api.post("/api/jobs", "alpha-editor", json={
        "id": "ok", "schedule": "@daily", "http": {"url": "http://127.0.0.1:9/x"}}), 201)
    expect(await api.patch("/api/jobs/ok", "alpha-editor",
                           json={"allow_private_targets": True}), 422)


async def test_the_scheduler_switch_is_not_for_api_jobs(make_api: Any, target: Target) -> None:
    api: Api = await make_api()
    # the operator's [scheduler] allow_private_targets = true, meant for config tasks
    api.runtime.allow_private_targets = True
    api.runtime.api_private_targets = TargetPolicy.parse([])
    api.app.state.cronfleet.catalog.runtime = api.runtime
    # an API job aimed at a private address is refused when it is saved (422 naming the
    # field), whatever the scheduler's switch says; only [api] private_targets admits it
    r = await api.post("/api/jobs", "alpha-editor", json={
        "id": "inside", "schedule": "@daily", "http": {"url": target.url("/internal")}})
    expect(r, 422)
    assert "http.url" in r.text and "loopback" in r.text, r.text
    assert target.seen == []  # nothing reached the inside server
