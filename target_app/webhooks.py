"""Payment-provider webhooks: HMAC-SHA256 signatures with a timestamp tolerance.

Header: `Webhook-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`.
Several `v1=` entries are allowed (secret rotation); one matching is enough.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from target_app.errors import TargetAppError

TOLERANCE_SECONDS = 300
SIGNATURE_HEADER = "Webhook-Signature"


class SignatureError(TargetAppError):
    """Why a signature was refused (missing, malformed, stale, wrong)."""


def sign_webhook(secret: str, body: bytes, timestamp: int) -> str:
    """The `Webhook-Signature` header value for `body` sent at `timestamp`."""
    mac = hmac.new(secret.encode(), f"{int(timestamp)}.".encode() + body, hashlib.sha256)
    return f"t={int(timestamp)},v1={mac.hexdigest()}"


def verify_signature(secret: str, body: bytes, header: str | None, *, now: float | None = None,
                     tolerance: int = TOLERANCE_SECONDS) -> None:
    """Raise SignatureError unless `header` signs `body` within `tolerance` seconds."""
    if header is None or not header.strip():
        raise SignatureError("missing Webhook-Signature header")
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            raise SignatureError("malformed Webhook-Signature header")
        if name == "t":
            if timestamp is not None or not value.isascii() or not value.isdigit() or len(value) > 12:
                raise SignatureError("malformed timestamp in Webhook-Signature")
            timestamp = int(value)
        elif name == "v1":
            if len(value) != 64 or not all(c in "0123456789abcdefABCDEF" for c in value):
                raise SignatureError("malformed v1 signature")
            candidates.append(value.lower())
    if timestamp is None or not candidates:
        raise SignatureError("Webhook-Signature needs t= and v1=")
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise SignatureError("signature timestamp outside the tolerance")
    expected = sign_webhook(secret, body, timestamp).split("v1=", 1)[1]
    matched = False
    for candidate in candidates:
        # Compare every candidate (constant time each); no early exit on a match.
        matched |= hmac.compare_digest(expected, candidate)
    if not matched:
        raise SignatureError("signature does not match")
