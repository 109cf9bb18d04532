"""One error shape for every answer that is not a success: an RFC 9457 problem
(``application/problem+json``: ``type``, ``title``, ``status``, ``detail``) that keeps
cronfleet's own members ``code``, ``message`` and ``details`` as extensions, so clients
written for ``{"code", "message", "details"}`` keep working -- including FastAPI's
validation errors, unknown routes and wrong methods, and (as a last resort) unexpected
exceptions, which are logged and answered as 500 ``INTERNAL`` without internals."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from cronfleet.api.schemas import ErrorBody

log = logging.getLogger("cronfleet.api")

__all__ = ["ApiError", "install", "responses"]

_CODES = {400: "BAD_REQUEST", 401: "UNAUTHORIZED", 403: "FORBIDDEN", 404: "NOT_FOUND",
          405: "METHOD_NOT_ALLOWED", 409: "CONFLICT", 413: "TOO_LARGE",
          415: "UNSUPPORTED_MEDIA_TYPE", 422: "VALIDATION_ERROR", 503: "STORE_UNAVAILABLE"}

_DESCRIPTIONS = {
    401: "Missing, unknown or revoked bearer token.",
    403: "The token's role does not allow this.",
    404: "No such object in the token's team.",
    409: "Conflict with the job's current state.",
    422: "Invalid input; details.errors names each field.",
    503: "The store could not record or read the change; nothing changed.",
}


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for these error statuses (all share :class:`ErrorBody`)."""
    return {c: {"model": ErrorBody, "description": _DESCRIPTIONS.get(c, "Error."),
                "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}
            for c in codes}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str,
                 details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers


PROBLEM_JSON = "application/problem+json"

#: the problem type URI of each code: a relative reference to docs/api.md's error list
#: (RFC 9457 section 3.1.1 allows relative URIs; ``about:blank`` would say "no more than
#: the status", while a code is more precise than its status)
TYPE_BASE = "https://cronfleet.dev/problems/"


def body(code: str, message: str, details: dict[str, Any] | None = None,
         status: int = 500) -> dict[str, Any]:
    """The problem document: RFC 9457 members first, then cronfleet's extensions."""
    from http import HTTPStatus

    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = code
    return {"type": TYPE_BASE + code.lower().replace("_", "-"), "title": title,
            "status": status, "detail": message,
            "code": code, "message": message, "details": details or {}}


def problem(status: int, code: str, message: str, details: dict[str, Any] | None = None,
            headers: dict[str, str] | None = None) -> JSONResponse:
    """An error answer as ``application/problem+json``."""
    return JSONResponse(body(code, message, details, status), status_code=status,
                        headers=headers, media_type=PROBLEM_JSON)


def _field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        where, rest = parts[0], parts[1:]
        return ".".join(rest) if where == "body" and rest else ".".join([where, *rest])
    return ".".join(parts)


def field_errors(errors: Sequence[Any]) -> list[dict[str, str]]:
    """Pydantic's errors as ``{"field", "message"}``, the field a dotted path."""
    out = []
    for e in errors:
        loc = tuple(e.get("loc", ()))
        # drop pydantic's union-branch names (e.g. "float") from the field path
        loc = tuple(p for p in loc if p not in ("str", "float", "int", "datetime",
                                                "function-after[...]"))
        out.append({"field": _field(loc), "message": str(e.get("msg", "invalid"))})
    return out


def _allowed_methods(request: Request) -> list[str]:
    """Every documented method of every route matching the path (Starlette's own 405
    names only the first route's)."""
    from starlette.routing import Match, Route

    methods: set[str] = set()
    for route in request.app.routes:
        if isinstance(route, Route) and getattr(route, "include_in_schema", True):
            match, _ = route.matches({**request.scope, "method": "__none__"})
            if match is not Match.NONE and route.methods:
                methods |= route.methods
    return sorted(methods)


def _not_json(errors: Sequence[Any]) -> str | None:
    """Why the request body is not JSON (``None`` when it is, however invalid): bad JSON
    text, or a body sent with a content type other than JSON."""
    for e in errors:
        loc = tuple(e.get("loc", ()))
        if e.get("type") == "json_invalid":
            reason = (e.get("ctx") or {}).get("error")
            return str(reason or e.get("msg", "invalid JSON"))
        if loc == ("body",) and isinstance(e.get("input"), bytes | bytearray):
            return "send it as application/json"
    return None


def install(app: FastAPI) -> None:
    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return problem(exc.status, exc.code, exc.message, exc.details, exc.headers)

    async def validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        bad_body = _not_json(exc.errors())
        if bad_body is not None:  # docs/api.md: a body that is not JSON is a 400
            return problem(400, "BAD_REQUEST", f"the body is not JSON: {bad_body}")
        errors = field_errors(exc.errors())
        first = errors[0] if errors else {"field": "?", "message": "invalid"}
        message = f"{first['field']}: {first['message']}"
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more)"
        return problem(422, "VALIDATION_ERROR", message, {"errors": errors})

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _CODES.get(exc.status_code, "ERROR")
        message = exc.detail if isinstance(exc.detail, str) else code
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}"
        if exc.status_code == 405:
            allowed = _allowed_methods(request)
            headers["Allow"] = ", ".join(allowed)
            message = f"{request.method} is not allowed here (allowed: {', '.join(allowed)})"
        return problem(exc.status_code, code, message, headers=headers or None)

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("API %s %s failed", request.method, request.url.path)
        return problem(500, "INTERNAL", "internal error; see the server log")

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


__all__ += ["PROBLEM_JSON", "ErrorBody", "body", "field_errors", "problem"]
