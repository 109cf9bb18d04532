"""Dashboard sign-in: an API token becomes a session cookie; CSRF on every change.

The session cookie carries the token itself (``HttpOnly``, ``SameSite=Strict``, ``Secure``
when the request came over HTTPS, ``Path=/``), so every replica sharing the store accepts
it, a revoked token signs the session out everywhere at once, and the server keeps no
session state. The CSRF token of a session is ``HMAC-SHA256(token, "cronfleet-csrf")``:
a page cannot compute it without the session's token, every replica can check it. Every
``POST`` of the dashboard must carry it (form field ``csrf`` or header ``X-CSRF-Token``)
and, when the browser sends one, an ``Origin`` equal to the dashboard's own.

The one-time sign-in link: on a first start with the API on loopback only and no token in
the store, ``cronfleet run`` prints ``/signin/once/<code>``; the first visit creates an
admin token of team ``default`` (named ``dashboard``), signs the browser in and burns the
code. The code lives in the process only; a restart prints a new one while the store
still has no token.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field

from fastapi import Request, Response

__all__ = ["COOKIE", "OneTimeCodes", "csrf_for", "csrf_ok", "is_loopback", "set_session"]

COOKIE = "cronfleet_session"
PREFS = "cronfleet_utc"
SESSION_DAYS = 7


def csrf_for(token: str) -> str:
    return hmac.new(token.encode(), b"cronfleet-csrf", hashlib.sha256).hexdigest()


def csrf_ok(request: Request, token: str, sent: str | None) -> bool:
    """The request carries the session's CSRF token and, if any, our own Origin."""
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if origin != own:
            return False
    elif origin == "null":
        return False
    return bool(sent) and hmac.compare_digest(sent or "", csrf_for(token))


def set_session(request: Request, response: Response, token: str | None) -> None:
    """Sign in (``token``) or out (``None``)."""
    secure = request.url.scheme == "https"
    if token is None:
        response.delete_cookie(COOKIE, path="/", secure=secure, httponly=True,
                               samesite="strict")
        return
    response.set_cookie(COOKIE, token, max_age=SESSION_DAYS * 86400, path="/",
                        secure=secure, httponly=True, samesite="strict")


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class OneTimeCodes:
    """One-time sign-in codes of this process (the first-start link)."""

    codes: set[str] = field(default_factory=set)

    def new(self) -> str:
        code = secrets.token_urlsafe(24)
        self.codes.add(code)
        return code

    def redeem(self, code: str) -> bool:
        for known in list(self.codes):
            if hmac.compare_digest(known, code):
                self.codes.discard(known)
                return True
        return False
