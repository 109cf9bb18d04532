"""Signing an HTTP job's request: the one place for both schemes.

``cronfleet`` (the default): ``X-Cronfleet-Timestamp: <unix seconds>`` and
``X-Cronfleet-Signature: v1=<hex HMAC-SHA256 of "<timestamp>." + body>``.

``standard-webhooks`` (https://www.standardwebhooks.com): ``webhook-id``,
``webhook-timestamp`` and ``webhook-signature: v1,<base64 HMAC-SHA256 of
"<id>.<timestamp>." + body>``, keyed by the secret ``whsec_<base64 key>`` (the prefix is
optional), so any Standard Webhooks verifier checks cronfleet's requests. The id is the
request's ``Idempotency-Key`` (the job and its slot): the same for every attempt of a slot,
so a receiver's replay protection drops a duplicate delivery.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

__all__ = ["DEFAULT_SCHEME", "SCHEMES", "headers", "key_problem", "sign",
           "standard_webhooks_key"]

SCHEMES = ("cronfleet", "standard-webhooks")
DEFAULT_SCHEME = "cronfleet"
_PREFIX = "whsec_"


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Cronfleet-Signature`` value: ``v1=`` + hex HMAC-SHA256 of ``"<ts>." + body``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def standard_webhooks_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret (``whsec_`` + base64); ``ValueError``
    naming what is wrong otherwise."""
    text = secret.strip().removeprefix(_PREFIX)
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a standard-webhooks signing_secret is 'whsec_' followed by "
                         "base64 (e.g. whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw)") from None
    if len(key) < 16:
        raise ValueError(f"a standard-webhooks signing_secret needs at least 16 bytes of key "
                         f"(24 base64 characters); this one has {len(key)}")
    return key


def key_problem(scheme: str, secret: str) -> str | None:
    """Why ``secret`` cannot sign with ``scheme`` (``None``: it can). A secret that is a
    ``${secrets.NAME}`` reference is checked when it is expanded, before sending."""
    if scheme == "standard-webhooks" and "${secrets." not in secret:
        try:
            standard_webhooks_key(secret)
        except ValueError as exc:
            return str(exc)
    return None


def headers(scheme: str, secret: str, msg_id: str, timestamp: int,
            body: bytes) -> dict[str, str]:
    """The signature headers of one request."""
    if scheme == "standard-webhooks":
        key = standard_webhooks_key(secret)
        mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256)
        return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp),
                "webhook-signature": "v1," + base64.b64encode(mac.digest()).decode()}
    if scheme != "cronfleet":
        raise ValueError(f"signature {scheme!r}: expected one of {', '.join(SCHEMES)}")
    return {"X-Cronfleet-Timestamp": str(timestamp),
            "X-Cronfleet-Signature": sign(secret, timestamp, body)}
