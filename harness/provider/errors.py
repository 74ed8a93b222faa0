"""The provider's errors: `ProviderError` for the harness's own failures (bad options, a
port in use), `ApiError` for an answer in Stripe's error envelope.

`ApiError` is raised inside a request's handling and becomes the HTTP answer
`{"error": {"type", "code", "message", "param", ...}}` with its status; it never escapes
the server. `stored` says whether the idempotency layer keeps it for replays: Stripe
stores the result of every request that began executing (declines and state errors
included) but not a validation failure, which may be retried with the same key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.errors import HarnessError


class ProviderError(HarnessError):
    """The provider could not do its job: bad options, a ledger path that cannot be written."""


@dataclass
class ApiError(Exception):
    """One Stripe error answer."""

    status: int
    type: str
    message: str
    code: str | None = None
    param: str | None = None
    stored: bool = True  # False: a validation failure, not kept for replays
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. decline_code, payment_intent

    def __str__(self) -> str:
        return f"{self.status} {self.type}: {self.message}"

    def envelope(self) -> dict[str, Any]:
        error: dict[str, Any] = {"type": self.type, "message": self.message}
        if self.code is not None:
            error["code"] = self.code
        if self.param is not None:
            error["param"] = self.param
        error.update(self.extra)
        return {"error": error}


def invalid(message: str, *, param: str | None = None, code: str | None = None, status: int = 400,
            stored: bool = False) -> ApiError:
    """A 400 invalid_request_error; by default a validation failure (not stored)."""
    return ApiError(status, "invalid_request_error", message, code=code, param=param, stored=stored)


def missing(kind: str, ident: str, param: str = "id") -> ApiError:
    """Stripe's 404 for an unknown object."""
    return ApiError(404, "invalid_request_error", f"No such {kind}: '{ident}'", code="resource_missing",
                    param=param, stored=False)
