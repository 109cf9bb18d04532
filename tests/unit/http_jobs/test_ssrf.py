"""The SSRF guard: refused targets after DNS resolution and on redirects."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cronfleet import HttpJob, RunContext, TriggeredBy
from cronfleet.jobs import http as http_mod
from cronfleet.jobs.http import HttpJobFailed, HttpRuntime, check_address

from .conftest import Reply, Server


def ctx() -> RunContext:
    return RunContext(job_id="ping", slot=datetime(2026, 3, 2, tzinfo=UTC),
                      triggered_by=TriggeredBy.SCHEDULE, instance_id="t", fencing_token=1,
                      config={})


@pytest.mark.parametrize(("address", "what"), [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("10.0.0.1", "private"),
    ("192.168.1.5", "private"), ("172.16.0.1", "private"),
    ("169.254.169.254", "metadata"), ("fd00:ec2::254", "metadata"),
    ("100.100.100.200", "metadata"), ("169.254.1.1", "link-local"),
    ("::ffff:127.0.0.1", "loopback"), ("0.0.0.0", "unspecified"), ("100.64.0.1", "public"),
])
def test_refused_addresses(address: str, what: str) -> None:
    problem = check_address(address)
    assert problem is not None and what in problem


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700::1111", "8.8.8.8"])
def test_public_addresses(address: str) -> None:
    assert check_address(address) is None


def resolver(table: dict[str, list[str]]) -> http_mod.Resolver:
    async def resolve(host: str, port: int) -> list[str]:
        return table[host]

    return resolve


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:{port}/", "http://10.0.0.1:{port}/", "http://169.254.169.254/latest/",
    "http://[::1]:{port}/", "http://sneaky.test:{port}/", "http://metadata.test/",
    "http://mixed.test:{port}/",
])
async def test_default_runtime_refuses_private_targets(server: Server, url: str) -> None:
    rt = HttpRuntime(resolve=resolver({
        "sneaky.test": ["127.0.0.1"], "metadata.test": ["169.254.169.254"],
        "mixed.test": ["93.184.216.34", "10.0.0.1"],
    }))
    try:
        job = HttpJob(url.format(port=server.port), timeout=2, runtime=rt)
        with pytest.raises(HttpJobFailed, match="refusing") as info:
            await job(ctx())
    finally:
        await rt.aclose()
    attempt = info.value.result["attempts"][0]
    assert attempt["response"] is None and "allow_private_targets" in attempt["error"]
    assert server.requests == []  # nothing reached the server


async def test_refused_target_is_not_retried(server: Server) -> None:
    rt = HttpRuntime(sleep=lambda s: pytest.fail("slept"))  # type: ignore[arg-type,return-value]
    job = HttpJob(server.url(), runtime=rt,
                  retry=http_mod.RetryPolicy(attempts=3, delay=1))
    with pytest.raises(HttpJobFailed):
        await job(ctx())
    await rt.aclose()


async def test_redirect_to_a_private_target_is_refused(server: Server,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """good.test passes the guard (127.0.0.1 is deemed public here); its redirect to
    evil.test (10.0.0.1) is checked again and refused before anything is sent there."""
    real = http_mod.check_address
    monkeypatch.setattr(http_mod, "check_address",
                        lambda a: None if a == "127.0.0.1" else real(a))
    rt = HttpRuntime(resolve=resolver({"good.test": ["127.0.0.1"],
                                       "evil.test": ["10.0.0.1"]}))
    server.replies = [Reply(302, "", {"Location": f"http://evil.test:{server.port}/x"})]
    try:
        with pytest.raises(HttpJobFailed, match=r"refusing evil\.test: 10\.0\.0\.1"):
            await HttpJob(f"http://good.test:{server.port}/", runtime=rt)(ctx())
        assert len(server.requests) == 1
        # and the first hop really went through, connected to the checked address
        server.default = Reply(200, "ok")
        result = await HttpJob(f"http://good.test:{server.port}/", runtime=rt)(ctx())
        assert result["ok"]
    finally:
        await rt.aclose()


async def test_opt_out_per_job_and_global(server: Server) -> None:
    rt = HttpRuntime()
    try:
        assert (await HttpJob(server.url(), allow_private_targets=True, runtime=rt)(ctx()))["ok"]
        # a pooled connection opened by a permitted job is not reusable by a guarded one
        with pytest.raises(HttpJobFailed, match="refusing"):
            await HttpJob(server.url(), runtime=rt)(ctx())
    finally:
        await rt.aclose()
    rt = HttpRuntime(allow_private_targets=True)
    try:
        assert (await HttpJob(server.url(), runtime=rt)(ctx()))["ok"]
        with pytest.raises(HttpJobFailed, match="refusing"):
            await HttpJob(server.url(), allow_private_targets=False, runtime=rt)(ctx())
    finally:
        await rt.aclose()


async def test_real_resolution_of_localhost_is_refused(server: Server) -> None:
    """The system resolver's answer for 'localhost' (loopback) is checked too."""
    rt = HttpRuntime()
    try:
        with pytest.raises(HttpJobFailed, match=r"refusing localhost: .* is a loopback"):
            await HttpJob(f"http://localhost:{server.port}/", runtime=rt)(ctx())
    finally:
        await rt.aclose()
    assert server.requests == []
