"""Who a request acts for: `X-Tenant-ID`, default `default`.

Used by the Idempotency-Key layer (it scopes records by tenant) and by the routes
(orders belong to their tenant). A malformed header is a 400 Problem wherever it
is read, so both see the same tenant or the same refusal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from target_app.errors import Problem

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

DEFAULT_TENANT = "default"
MAX_TENANT_LENGTH = 128


def valid_token(value: str | None, *, max_length: int) -> bool:
    """Non-empty, at most `max_length`, printable ASCII, not only blanks."""
    if not value or len(value) > max_length or not value.strip():
        return False
    return all(0x20 <= ord(ch) < 0x7F for ch in value)


def tenant_of(environ: WSGIEnvironment) -> str:
    """`X-Tenant-ID` or `default`; raises a 400 Problem when malformed."""
    raw = environ.get("HTTP_X_TENANT_ID")
    if raw is None:
        return DEFAULT_TENANT
    if not isinstance(raw, str) or not valid_token(raw, max_length=MAX_TENANT_LENGTH):
        raise Problem(400, "Invalid tenant", "X-Tenant-ID must be 1-128 printable ASCII characters",
                      type_="/problems/invalid-tenant")
    return raw
