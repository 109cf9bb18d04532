"""``/api/secrets``: the team's encrypted secrets (names and dates; values never leave)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from cronfleet.api import schemas as S
from cronfleet.api.deps import (
    Admin,
    Ctx,
    SecretName,
    Viewer,
    audit,
    in_time,
    store_errors,
    unavailable,
)
from cronfleet.api.errors import ApiError, responses
from cronfleet.errors import StoreError

__all__ = ["router"]

router = APIRouter(tags=["secrets"])


@router.get("/api/secrets", response_model=S.SecretList, responses=responses(401, 403, 503))
async def list_secrets(ctx: Ctx, token: Viewer) -> dict[str, Any]:
    with store_errors("cannot read secrets"):
        entries = await ctx.get_vault().entries(token.team)
    return {"items": [{"name": e.name, "hosts": None if e.hosts is None else list(e.hosts),
                       "created_at": e.created_at.isoformat(),
                       "updated_at": e.updated_at.isoformat()} for e in entries]}


@router.put("/api/secrets/{name}", response_model=S.SecretWritten,
            responses={201: {"model": S.SecretWritten, "description": "Created."},
                       **responses(401, 403, 503)})
async def put_secret(name: SecretName, body: S.SecretValue, ctx: Ctx, token: Admin,
                     response: Response) -> dict[str, Any]:
    from cronfleet.secrets import SecretError, VaultLocked  # loads cryptography

    hosts = body.hosts if "hosts" in body.model_fields_set else ...
    try:
        async with in_time("cannot store the secret"):
            created = await ctx.get_vault().set(name, body.value, token.team, hosts=hosts)
    except VaultLocked as exc:
        raise ApiError(503, "VAULT_LOCKED", str(exc)) from None
    except SecretError as exc:
        field = "hosts" if "hosts[" in str(exc) else "name"
        raise ApiError(422, "VALIDATION_ERROR", f"{field}: {exc}",
                       {"errors": [{"field": field, "message": str(exc)}]}) from None
    except StoreError as exc:
        raise unavailable(f"cannot store the secret: {exc}") from None
    await audit(ctx, token, "secret.set", name,
                {"created": created, **({"hosts": hosts} if hosts is not ... else {})})
    response.status_code = 201 if created else 200
    return {"name": name, "created": created}


@router.delete("/api/secrets/{name}", status_code=204, response_class=Response,
               responses=responses(401, 403, 404, 503))
async def delete_secret(name: SecretName, ctx: Ctx, token: Admin) -> Response:
    with store_errors("cannot delete the secret"):
        deleted = await ctx.get_vault().delete(name, token.team)
    if not deleted:
        raise ApiError(404, "SECRET_NOT_FOUND", f"no secret {name!r}", {"name": name})
    await audit(ctx, token, "secret.delete", name)
    return Response(status_code=204)
