"""``GET /api/audit``: the team's audit log, newest first, paged by entry id."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from cronfleet.api import schemas as S
from cronfleet.api.deps import Admin, Ctx, Limit, store_errors
from cronfleet.api.errors import responses

__all__ = ["router"]

router = APIRouter(tags=["audit"])


@router.get("/api/audit", response_model=S.AuditPage, responses=responses(401, 403, 503))
async def audit_log(
    ctx: Ctx, token: Admin,
    cursor: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
    limit: Limit = 50,
) -> dict[str, Any]:
    with store_errors("cannot read the audit log"):
        entries = await ctx.api_store.audit_entries(token.team, limit=limit + 1,
                                                    before_id=cursor)
    more = len(entries) > limit
    entries = entries[:limit]
    return {"items": [e.to_dict() for e in entries],
            "next_cursor": str(entries[-1].id) if more and entries else None}
