"""The REST API through the real app: a running scheduler on a real store (a SQLite file or
a fresh PostgreSQL schema, dropped afterwards), the app in front of it, an httpx client on
the app's ASGI interface, and tokens of two teams in every role.

Team ``alpha`` declares ``alpha.report`` (returns at once), ``alpha.slow`` (waits for
``api.gate``) and ``alpha.off`` (declared disabled); team ``beta`` declares
``beta.report``. Every declared job runs daily, so nothing fires unless a test says so.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from cronfleet import FakeClock, Scheduler
from cronfleet.api.app import ApiSettings, create_app
from cronfleet.catalog import Catalog
from cronfleet.jobs.http import HttpRuntime, TargetPolicy
from cronfleet.store.factory import open_api_store
from cronfleet.store.side import ApiStore
from store.pg import drop_schema, new_schema, pg_url, require_pg

T0 = 1_780_000_000.0  # 2026-05-28T20:26:40Z
T0_ISO = "2026-05-28T20:26:40+00:00"
A, B = "alpha", "beta"
ROLES = ("viewer", "editor", "admin")
ERROR_KEYS = {"type", "title", "status", "detail", "code", "message", "details"}
SECRET_ENVS = ("CRONFLEET_SECRET_KEY", "CRONFLEET_SECRET_KEY_FILE",
               "CRONFLEET_SECRET_KEY_PREVIOUS")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (*SECRET_ENVS, "CRONFLEET_CONFIG", "CRONFLEET_STORE", "CRONFLEET_SCHEDULER"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def secret_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """An unlocked vault: CRONFLEET_SECRET_KEY set (read when the vault first opens)."""
    key = base64.b64encode(os.urandom(32)).decode()
    monkeypatch.setenv("CRONFLEET_SECRET_KEY", key)
    return key


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def pg_schema(store_kind: str) -> Iterator[str | None]:
    if store_kind != "postgres":
        yield None
        return
    require_pg()
    schema = new_schema("api")
    yield schema
    drop_schema(schema)


@pytest.fixture
def store_url(
    store_kind: str, tmp_path: Path, pg_schema: str | None, request: pytest.FixtureRequest
) -> str:
    if store_kind == "sqlite":
        return f"sqlite:///{tmp_path / 'api.db'}"
    if store_kind == "redis":  # a private server, a fresh prefix per test
        from store.redis_server import new_prefix

        return f"{request.getfixturevalue('redis_session').url}?prefix={new_prefix()}"
    return f"{pg_url()}?schema={pg_schema}"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def expect(r: httpx.Response, status: int, code: str | None = None) -> Any:
    """The JSON body of ``r`` after checking its status (and, for errors, the one error
    shape: an RFC 9457 problem, application/problem+json, whose ``code``, ``message`` and
    ``details`` extensions are kept)."""
    assert r.status_code == status, f"{r.request.method} {r.request.url}: {r.status_code} " \
                                    f"{r.text}"
    if status == 204:
        assert r.content == b""
        return None
    body = r.json()
    if code is not None:
        assert set(body) == ERROR_KEYS, body
        assert r.headers["content-type"] == "application/problem+json", r.headers
        assert body["code"] == code, body
        assert body["status"] == status and body["detail"] == body["message"], body
        assert body["type"].endswith("/" + code.lower().replace("_", "-")), body
        assert isinstance(body["message"], str) and body["message"]
        assert isinstance(body["details"], dict)
    return body


READ_RETRY = 15.0


def store_too_slow(r: httpx.Response) -> bool:
    """The API's answer when the store missed a request's deadline: 503 STORE_UNAVAILABLE,
    with Retry-After."""
    return (r.status_code == 503 and "retry-after" in r.headers
            and r.headers.get("content-type") == "application/problem+json"
            and r.json().get("code") == "STORE_UNAVAILABLE")


def http_spec(url: str, **extra: Any) -> dict[str, Any]:
    return {"url": url, **extra}


@dataclass
class Api:
    """One "process": a running scheduler, its app and a client of the app."""

    url: str
    scheduler: Scheduler
    app: Any
    client: httpx.AsyncClient
    api_store: ApiStore
    runtime: HttpRuntime
    tokens: dict[str, str]
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def catalog(self) -> Catalog:
        catalog: Catalog = self.app.state.cronfleet.catalog
        return catalog

    def auth(self, who: str | None) -> dict[str, str]:
        return {} if who is None else {"Authorization": f"Bearer {self.tokens.get(who, who)}"}

    async def call(self, method: str, path: str, who: str | None = "alpha-admin",
                   **kw: Any) -> httpx.Response:
        """One request. A read the API turned away because the store did not answer within
        its interactive deadline (503 ``STORE_UNAVAILABLE`` with ``Retry-After``: a loaded
        machine) is asked again for up to :data:`READ_RETRY` seconds, as a client that
        honours ``Retry-After`` would. So is any request turned away at its token check
        (nothing was done yet); a write turned away later never is (its 503 is what some
        tests check)."""
        headers = {**self.auth(who), **kw.pop("headers", {})}
        deadline = time.monotonic() + READ_RETRY
        while True:
            r = await self.client.request(method, path, headers=headers, **kw)
            again = store_too_slow(r) and (
                method == "GET" or r.json()["message"].startswith("cannot check the token"))
            if not again or time.monotonic() > deadline:
                return r
            await asyncio.sleep(min(float(r.headers["retry-after"]), 0.5))

    async def get(self, path: str, who: str | None = "alpha-admin", **kw: Any
                  ) -> httpx.Response:
        return await self.call("GET", path, who, **kw)

    async def post(self, path: str, who: str | None = "alpha-admin", **kw: Any
                   ) -> httpx.Response:
        return await self.call("POST", path, who, **kw)

    async def put(self, path: str, who: str | None = "alpha-admin", **kw: Any
                  ) -> httpx.Response:
        return await self.call("PUT", path, who, **kw)

    async def patch(self, path: str, who: str | None = "alpha-admin", **kw: Any
                    ) -> httpx.Response:
        return await self.call("PATCH", path, who, **kw)

    async def delete(self, path: str, who: str | None = "alpha-admin", **kw: Any
                     ) -> httpx.Response:
        return await self.call("DELETE", path, who, **kw)

    async def create_job(self, job_id: str, url: str, who: str = "alpha-editor",
                         **fields: Any) -> dict[str, Any]:
        spec = {"id": job_id, "schedule": "@daily", "http": http_spec(url), **fields}
        body: dict[str, Any] = expect(await self.post("/api/jobs", who, json=spec), 201)
        return body

    async def run_done(self, run_id: int, who: str = "alpha-viewer",
                       timeout: float = 15.0) -> dict[str, Any]:
        """The run once it has finished (polled through the API)."""
        deadline = time.monotonic() + timeout
        while True:
            run: dict[str, Any] = expect(await self.get(f"/api/runs/{run_id}", who), 200)
            if run["finished_at"] is not None:
                return run
            assert time.monotonic() < deadline, run
            await asyncio.sleep(0.02)

    async def trigger_done(self, job_id: str, who: str = "alpha-editor") -> dict[str, Any]:
        accepted = expect(await self.post(f"/api/jobs/{job_id}/trigger", who), 202)
        return await self.run_done(accepted["run_id"])


async def eventually(check: Callable[[], Any], timeout: float = 15.0,
                     what: str = "condition") -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


MakeApi = Callable[..., Awaitable[Api]]


def declare(s: Scheduler, gate: asyncio.Event) -> None:
    @s.job("@daily", id="alpha.report", team=A, description="Nightly sales report")
    def report(ctx: Any) -> dict[str, Any]:
        return {"ok": True}

    @s.job("@daily", id="alpha.slow", team=A, description="waits for the gate")
    async def slow(ctx: Any) -> str:
        await gate.wait()
        return "released"

    @s.job("@daily", id="alpha.off", team=A, enabled=False)
    def off(ctx: Any) -> None:
        return None

    @s.job("@daily", id="beta.report", team=B, description="beta's own report")
    def beta(ctx: Any) -> None:
        return None


@pytest.fixture
async def make_api(store_url: str, clock: FakeClock) -> AsyncIterator[MakeApi]:
    """make_api(instance_id=..., settings=..., real_clock=True, store_url=...,
    api_store_url=...): start one more "process" on the test's store."""
    tokens: dict[str, str] = {}
    setup = open_api_store(store_url)
    for team in (A, B):
        for role in ROLES:
            tokens[f"{team}-{role}"], _ = await setup.create_token(
                name=f"{team}-{role}", team=team, role=role, created_by="tests")
    await setup.close()
    made: list[Api] = []

    async def make(*, instance_id: str = "api-1", settings: ApiSettings | None = None,
                   real_clock: bool = False, url: str | None = None,
                   api_store_url: str | None = None, jobs: bool = True) -> Api:
        run_url = url or store_url
        s = Scheduler(store=run_url, clock=None if real_clock else clock,
                      instance_id=instance_id, shutdown_grace="2s")
        gate = asyncio.Event()
        if jobs:
            declare(s, gate)
        # the operator lets API jobs reach the tests' local servers
        runtime = HttpRuntime(store=run_url,
                              api_private_targets=TargetPolicy.parse(["127.0.0.0/8"]))
        api_store = open_api_store(api_store_url or store_url)
        await s.start()
        app = create_app(s, api_store=api_store, settings=settings, http_runtime=runtime)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        api = Api(run_url, s, app, client, api_store, runtime, tokens, gate)
        made.append(api)
        return api

    yield make
    for api in reversed(made):
        api.gate.set()
        await api.client.aclose()
        await api.catalog.stop()
        with contextlib.suppress(Exception):
            await api.scheduler.stop()
        await api.runtime.aclose()
        await api.api_store.close()


@pytest.fixture
async def api(make_api: MakeApi) -> Api:
    return await make_api()
