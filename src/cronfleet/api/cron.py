"""``POST /api/cron/preview``: validate a schedule and show its next fire times.

The schedule is an expression, a list of them, or a composition text, with an optional
one-off ``at``, ``start``/``end`` bounds and ``except`` exclusions (the job spec's keys);
excluded instants inside the window shown are listed apart (``excluded``).
"""

from __future__ import annotations

from datetime import UTC
from typing import Annotated, Any
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Depends

from cronfleet.api import schemas as S
from cronfleet.api.deps import Context, Viewer, context
from cronfleet.api.deps import now as clock_now
from cronfleet.api.errors import ApiError, responses
from cronfleet.cron import (
    ComposedSchedule,
    CronExpr,
    CronSyntaxError,
    compose,
    parse_schedule,
    read_schedule,
)
from cronfleet.views import dst_marks, fire_times

__all__ = ["router"]

router = APIRouter(tags=["cron"])


# at most this long searching the fire times of one preview (a composed schedule with
# dense exclusions can cost up to 100,000 candidates per fire time); fewer times then
PREVIEW_BUDGET = 2.0


def _invalid(fld: str, exc: CronSyntaxError) -> ApiError:
    if exc.field in ("timezone", "at", "start", "end", "except"):
        fld = exc.field
    detail = {"field": fld, "message": str(exc), "cron_field": exc.field,
              "token": exc.token, "column": exc.column}
    return ApiError(422, "INVALID_CRON", str(exc), {"errors": [detail]})


@router.post("/api/cron/preview", response_model=S.PreviewOut, responses=responses(401, 403))
async def preview(body: S.PreviewRequest, token: Viewer,
                  ctx: Annotated[Context, Depends(context)]) -> dict[str, Any]:
    exprs = body.expr
    texts = ([exprs] if isinstance(exprs, str) else exprs or []) + (body.except_ or [])
    if any("calendar:" in t for t in texts):  # never read the server's files
        raise ApiError(422, "INVALID_CRON", "calendar files are not accepted here: list "
                       "the days (MM-DD, YYYY-MM-DD)",
                       {"errors": [{"field": "except", "message": "calendar files are not "
                                    "accepted here"}]})
    # a one-off in words ('tomorrow at 5pm') is read at the preview's start
    now = body.after or clock_now(ctx)
    if now.tzinfo is None:
        try:
            now = now.replace(tzinfo=ZoneInfo(body.timezone))
        except Exception:  # the zone's own error comes from the parse below
            now = now.replace(tzinfo=UTC)
    try:
        sentence: str | None = None
        if isinstance(exprs, str) and body.at is None and body.start is None \
                and body.end is None and not body.except_:
            expr, sentence = read_schedule(exprs, tz=body.timezone, now=now)
        else:
            items = [] if exprs is None else [exprs] if isinstance(exprs, str) else exprs
            parts: list[CronExpr] = []
            words = False
            for i, item in enumerate(items):  # each expression on its own: its index
                key = "expr" if isinstance(exprs, str) else f"expr[{i}]"
                try:
                    part, said = parse_schedule(item, tz=body.timezone, now=now)
                    if isinstance(part, ComposedSchedule):
                        raise CronSyntaxError("expression", item, 1, item, f"{item!r} is a "
                                              "one-off: give it alone, or its instant as at")
                except CronSyntaxError as exc:
                    raise _invalid(key, exc) from None
                parts.append(part)
                words = words or said is not None
            if words:
                sentence = " | ".join(items)
            expr = compose(parts, body.timezone, at=body.at, start=body.start,
                           end=body.end, exclude=body.except_ or ())
    except CronSyntaxError as exc:
        raise _invalid("expr", exc) from None
    except ValueError as exc:  # an impossible combination (end before start, ...)
        raise ApiError(422, "INVALID_CRON", str(exc),
                       {"errors": [{"field": "expr", "message": str(exc)}]}) from None
    after = body.after or now
    if after.tzinfo is None:
        after = after.replace(tzinfo=expr.tz)
    if isinstance(expr, ComposedSchedule):
        times = expr.next_n(after, body.count, budget=PREVIEW_BUDGET)
    else:
        times = fire_times(expr, after, body.count)
    excluded = []
    done = False
    if isinstance(expr, ComposedSchedule):
        done = not times and expr.done(after)
        if times:
            excluded = [t.isoformat() for t in expr.excluded_between(after, times[-1])]
    # expr: the canonical expression (a sentence compiles to one, a composition to its
    # canonical text); sentence: the words as written
    return {"valid": True, "expr": expr.expr, "sentence": sentence,
            "timezone": str(expr.tz), "description": expr.describe(),
            "next": [t.isoformat() for t in times], "excluded": excluded, "done": done,
            "dst": dst_marks(times)}
