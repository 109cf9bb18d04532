"""``POST /api/cron/preview``: validate an expression and show its next fire times."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter

from cronfleet.api import schemas as S
from cronfleet.api.deps import Viewer
from cronfleet.api.errors import ApiError, responses
from cronfleet.cron import CronSyntaxError, parse_schedule
from cronfleet.views import fire_times

__all__ = ["router"]

router = APIRouter(tags=["cron"])


@router.post("/api/cron/preview", response_model=S.PreviewOut, responses=responses(401, 403))
async def preview(body: S.PreviewRequest, token: Viewer) -> dict[str, Any]:
    try:
        expr, sentence = parse_schedule(body.expr, tz=body.timezone)
    except CronSyntaxError as exc:
        fld = "timezone" if exc.field == "timezone" else "expr"
        detail = {"field": fld, "message": str(exc), "cron_field": exc.field,
                  "token": exc.token, "column": exc.column}
        raise ApiError(422, "INVALID_CRON", str(exc), {"errors": [detail]}) from None
    after = body.after or datetime.now(UTC)
    if after.tzinfo is None:
        after = after.replace(tzinfo=expr.tz)
    # expr: the canonical expression (a sentence compiles to one); sentence: the words
    return {"valid": True, "expr": expr.expr, "sentence": sentence, "timezone": str(expr.tz),
            "description": expr.describe(),
            "next": [t.isoformat() for t in fire_times(expr, after, body.count)]}
