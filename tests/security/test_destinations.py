"""Secrets bound to their hosts: a request that would carry one elsewhere -- first hop or a
redirect -- fails before sending and says why; an editor's job may use a secret only within
its hosts, a secret without hosts only admins' jobs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from api.conftest import Api, expect

from .echo import Target

VALUE = "tok-Bound-7f3a9c"


@pytest.fixture
def target() -> Iterator[Target]:
    server = Target()
    yield server
    server.close()


def job(job_id: str, url: str, **http: Any) -> dict[str, Any]:
    return {"id": job_id, "schedule": "@daily",
            "http": {"url": url, "headers": {"Authorization": "Bearer ${secrets.TOKEN}"},
                     **http}}


def carried(target: Target) -> list[str]:
    """The paths of the requests that carried the secret."""
    return [path for path, headers, body in target.seen
            if VALUE in repr(headers) or VALUE.encode() in body]


async def test_a_redirect_to_another_host_fails_before_sending(
        api: Api, target: Target, secret_key: str) -> None:
    async def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]  # localhost: the same server under another host name

    api.runtime.resolve = resolve
    await api.runtime.vault.set("TOKEN", VALUE, "alpha", hosts=["127.0.0.1"])  # type: ignore[union-attr]
    elsewhere = target.url("/landing", host="localhost")
    expect(await api.post("/api/jobs", "alpha-editor", json=job(
        "bound", target.url(f"/redirect?to={quote(elsewhere, safe='')}"))), 201)
    run = await api.trigger_done("bound")
    assert run["status"] == "failed"
    assert ("secret 'TOKEN' may only be sent to 127.0.0.1; refusing to send it to localhost"
            in run["error"])
    # the first hop (an allowed host) got it; the redirect was never followed
    assert [p for p, _, _ in target.seen] == [p for p in carried(target)]
    assert len(target.seen) == 1 and target.seen[0][0].startswith("/redirect")
    # the same redirect to an allowed host is followed
    await api.runtime.vault.set("TOKEN", VALUE, "alpha",  # type: ignore[union-attr]
                                hosts=["127.0.0.1", "localhost"])
    run = await api.trigger_done("bound")
    assert run["status"] == "succeeded", run
    assert target.seen[-1][0] == "/landing"


async def test_an_editor_uses_a_secret_only_within_its_hosts(
        api: Api, target: Target, secret_key: str) -> None:
    vault = api.runtime.vault
    assert vault is not None
    await vault.set("TOKEN", VALUE, "alpha")  # no hosts: admins' jobs only
    body = expect(await api.post("/api/jobs", "alpha-editor", json=job(
        "editor-job", target.url("/x"))), 422, "VALIDATION_ERROR")
    assert body["details"]["errors"] == [{
        "field": "http", "message": "${secrets.TOKEN} has no hosts: only admins' jobs and "
                                    "config tasks may use it (an admin sets its hosts)"}]
    # an editor's job may not name an unknown secret either (an admin might create it later
    # without hosts, for something else)
    body = expect(await api.post("/api/jobs", "alpha-editor", json={
        "id": "e2", "schedule": "@daily", "http": {"url": target.url("/x?k=${secrets.NOPE}")}}),
        422)
    assert "no such secret" in body["message"]
    # the signing secret is bound too: a signature is as good as the key to its receiver
    expect(await api.post("/api/jobs", "alpha-editor", json={
        "id": "e3", "schedule": "@daily",
        "http": {"url": target.url("/x"), "signing_secret": "${secrets.TOKEN}"}}), 422)
    await vault.set("TOKEN", VALUE, "alpha", hosts=["api.example.com"])
    body = expect(await api.post("/api/jobs", "alpha-editor", json=job(
        "editor-job", target.url("/x"))), 422)
    assert body["details"]["errors"][0] == {
        "field": "http.url",
        "message": "${secrets.TOKEN} may only be sent to api.example.com, not to 127.0.0.1"}
    # an admin's job may use a secret without hosts
    await vault.set("TOKEN", VALUE, "alpha", hosts=None)
    expect(await api.post("/api/jobs", "alpha-admin", json=job("admin-job", target.url("/a"))),
           201)
    run = await api.trigger_done("admin-job")
    assert run["status"] == "succeeded" and carried(target) == ["/a"]
    # ... until an editor saves it: from then on it is an editor's job
    expect(await api.patch("/api/jobs/admin-job", "alpha-editor",
                           json={"description": "mine now"}), 422)


async def test_an_editors_job_stops_when_the_hosts_are_removed(
        api: Api, target: Target, secret_key: str) -> None:
    vault = api.runtime.vault
    assert vault is not None
    await vault.set("TOKEN", VALUE, "alpha", hosts=["127.0.0.1"])
    expect(await api.post("/api/jobs", "alpha-editor", json=job("e", target.url("/e"))), 201)
    assert (await api.trigger_done("e"))["status"] == "succeeded"
    await vault.set("TOKEN", VALUE, "alpha", hosts=None)  # an admin takes them away
    run = await api.trigger_done("e")
    assert run["status"] == "failed" and "secret 'TOKEN' has no hosts" in run["error"]
    assert "nothing was sent" in run["error"]
    assert carried(target) == ["/e"]  # only the first run's request


async def test_hosts_over_the_api(api: Api, secret_key: str) -> None:
    expect(await api.put("/api/secrets/TOKEN", "alpha-admin",
                         json={"value": VALUE, "hosts": ["API.example.com", "*.svc.local"]}),
           201)
    listed = expect(await api.get("/api/secrets", "alpha-viewer"), 200)
    assert listed["items"][0]["hosts"] == ["api.example.com", "*.svc.local"]
    # a new value keeps the hosts unless they are given
    expect(await api.put("/api/secrets/TOKEN", "alpha-admin", json={"value": "v2"}), 200)
    listed = expect(await api.get("/api/secrets", "alpha-viewer"), 200)
    assert listed["items"][0]["hosts"] == ["api.example.com", "*.svc.local"]
    body = expect(await api.put("/api/secrets/TOKEN", "alpha-admin",
                                json={"value": "v", "hosts": ["https://x.com/path"]}), 422)
    assert body["details"]["errors"][0]["field"] == "hosts"
    expect(await api.put("/api/secrets/TOKEN", "alpha-editor",
                         json={"value": "v", "hosts": ["evil.example"]}), 403)


async def test_an_editors_notifications_are_bound_too(api: Api, secret_key: str) -> None:
    vault = api.runtime.vault
    assert vault is not None
    await vault.set("TOKEN", VALUE, "alpha", hosts=["hooks.example.com"])
    body = expect(await api.post("/api/jobs", "alpha-editor", json={
        "id": "n", "schedule": "@daily", "http": {"url": "http://127.0.0.1:9/x"},
        "notify": {"webhook": "https://evil.example/h?t=${secrets.TOKEN}",
                   "email": {"host": "smtp.evil.example", "to": "a@b.c",
                             "password": "${secrets.TOKEN}"}}}), 422)
    assert body["details"]["errors"] == [
        {"field": "notify.webhook", "message": "${secrets.TOKEN} may only be sent to "
                                               "hooks.example.com, not to evil.example"},
        {"field": "notify.email", "message": "${secrets.TOKEN} may only be sent to "
                                             "hooks.example.com, not to smtp.evil.example"}]
    expect(await api.post("/api/jobs", "alpha-editor", json={
        "id": "n", "schedule": "@daily", "http": {"url": "http://127.0.0.1:9/x"},
        "notify": {"webhook": "https://hooks.example.com/h?t=${secrets.TOKEN}"}}), 201)


def test_hosts_from_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from cronfleet.cli import main
    from cronfleet.secrets import generate_key

    monkeypatch.chdir(tmp_path)
    env = {"CRONFLEET_STORE": f"sqlite:///{tmp_path / 'cli.db'}",
           "CRONFLEET_SECRET_KEY": generate_key()}

    def cli(*args: str, value: str | None = VALUE) -> Any:
        return CliRunner().invoke(main, ["secrets", *args], input=value, env=env)

    def hosts() -> Any:
        r = cli("list", "--json", value=None)
        assert r.exit_code == 0, r.output
        return json.loads(r.output)[0]["hosts"]

    r = cli("set", "TOKEN", "--hosts", "API.example.com,*.example.net", "--hosts", "10.0.0.7")
    assert r.exit_code == 0, r.output
    assert "(hosts: api.example.com, *.example.net, 10.0.0.7)" in r.output
    assert hosts() == ["api.example.com", "*.example.net", "10.0.0.7"]
    assert cli("set", "TOKEN").exit_code == 0  # a new value keeps the hosts
    assert hosts() == ["api.example.com", "*.example.net", "10.0.0.7"]
    r = cli("set", "TOKEN", "--hosts", "https://x.example/path")
    assert r.exit_code == 2 and "is not a host name" in r.output
    assert hosts() == ["api.example.com", "*.example.net", "10.0.0.7"]
    assert cli("set", "TOKEN", "--no-hosts").exit_code == 0
    assert hosts() is None
    assert VALUE not in cli("list", value=None).output
