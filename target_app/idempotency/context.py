"""The one value the Idempotency-Key layer hands to the handler it guards.

Contract: for every request it guards, the layer (middleware.py) puts one
`IdempotencyContext` into the WSGI environ under `CONTEXT_ENVIRON`; a request it
does not guard carries none. The context names the record's identity (the tenant
scope it is filed under, the key, the request fingerprint) and the TTL of the
finished record, so a handler can write a recovery point under exactly that
identity. It is also the only way back: a handler that refuses the request on the
layer's behalf calls `release_key()`, and the layer answers without storing the
answer. Handlers read it with `context_of(environ)`, never by re-reading headers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

CONTEXT_ENVIRON = "target_app.idempotency.context"


class _ReleaseRequest:
    """Mutable on purpose: the context itself is frozen, but the handler's
    "do not store my answer" must reach the layer after the handler returns."""

    __slots__ = ("requested",)

    def __init__(self) -> None:
        self.requested = False


@dataclass(frozen=True)
class IdempotencyContext:
    """What the API layer guards a request under: the tenant scope the record is
    filed under (the request's tenant; one shared scope under `api-tenant`), the
    Idempotency-Key, the request fingerprint and how long the finished record is kept."""

    tenant: str
    key: str
    fingerprint: str
    ttl_seconds: int
    _release: _ReleaseRequest = field(default_factory=_ReleaseRequest, init=False, repr=False,
                                      compare=False)

    def release_key(self) -> None:
        """Answer this request but leave the key free: the answer is not stored, so
        the key's next request runs the handler again instead of replaying it."""
        self._release.requested = True

    @property
    def release_requested(self) -> bool:
        return self._release.requested


def context_of(environ: WSGIEnvironment) -> IdempotencyContext | None:
    """The context of a guarded request; None when the layer did not guard it."""
    value = environ.get(CONTEXT_ENVIRON)
    return value if isinstance(value, IdempotencyContext) else None
