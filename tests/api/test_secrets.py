"""/api/secrets: admins write and delete, everyone in the team lists names (never values);
without a server key the vault is locked (503)."""

from __future__ import annotations

from .conftest import Api, expect


async def test_without_a_key_the_vault_is_locked(api: Api) -> None:
    body = expect(await api.put("/api/secrets/API_TOKEN", json={"value": "s3cr3t"}), 503,
                  "VAULT_LOCKED")
    assert "CRONFLEET_SECRET_KEY" in body["message"]
    assert expect(await api.get("/api/secrets"), 200) == {"items": []}
    expect(await api.delete("/api/secrets/API_TOKEN"), 404, "SECRET_NOT_FOUND")
    assert expect(await api.get("/api/audit"), 200)["items"] == []


async def test_put_list_delete(api: Api, secret_key: str) -> None:
    body = expect(await api.put("/api/secrets/API_TOKEN", json={"value": "s3cr3t-one"}), 201)
    assert body == {"name": "API_TOKEN", "created": True}
    body = expect(await api.put("/api/secrets/API_TOKEN", json={"value": "s3cr3t-two"}), 200)
    assert body == {"name": "API_TOKEN", "created": False}
    expect(await api.put("/api/secrets/other.name", json={"value": "v"}), 201)

    for who in ("alpha-viewer", "alpha-editor", "alpha-admin"):
        r = await api.get("/api/secrets", who)
        listed = expect(r, 200)
        assert [s["name"] for s in listed["items"]] == ["API_TOKEN", "other.name"]
        assert all(set(s) == {"name", "hosts", "created_at", "updated_at"}
                   for s in listed["items"])
        assert "s3cr3t" not in r.text
    vault = api.runtime.vault
    assert vault is not None
    assert await vault.get("API_TOKEN", "alpha") == "s3cr3t-two"

    expect(await api.delete("/api/secrets/API_TOKEN"), 204)
    expect(await api.delete("/api/secrets/API_TOKEN"), 404, "SECRET_NOT_FOUND")
    names = [s["name"] for s in expect(await api.get("/api/secrets"), 200)["items"]]
    assert names == ["other.name"]
    audit = expect(await api.get("/api/audit"), 200)["items"]
    assert [(e["action"], e["target"], e["details"]) for e in reversed(audit)] == [
        ("secret.set", "API_TOKEN", {"created": True}),
        ("secret.set", "API_TOKEN", {"created": False}),
        ("secret.set", "other.name", {"created": True}),
        ("secret.delete", "API_TOKEN", {}),
    ]
    assert all(e["actor"] == "alpha-admin" and e["team"] == "alpha" for e in audit)
    assert "s3cr3t" not in str(audit)


async def test_invalid_secret_requests_are_422(api: Api, secret_key: str) -> None:
    body = expect(await api.put("/api/secrets/1bad", json={"value": "v"}), 422,
                  "VALIDATION_ERROR")
    assert [e["field"] for e in body["details"]["errors"]] == ["path.name"]
    body = expect(await api.put("/api/secrets/EMPTY", json={"value": ""}), 422,
                  "VALIDATION_ERROR")
    assert [e["field"] for e in body["details"]["errors"]] == ["value"]
    body = expect(await api.put("/api/secrets/X", json={"val": "v"}), 422, "VALIDATION_ERROR")
    assert sorted(e["field"] for e in body["details"]["errors"]) == ["val", "value"]
    assert expect(await api.get("/api/secrets"), 200) == {"items": []}
