"""The Idempotency-Key record store: its interface and what `begin` reports.

A record is keyed by (tenant, key). `begin` either claims the key for this request
(an in-flight record with a lease and a random token) or reports what is there: a
finished response to replay, a different fingerprint, or another request in flight.
`finish` stores the response (or, for a 5xx, releases the key) only if the caller's
token still owns the record. `count` adds one to a counter of the layer that no
script counts (incomplete bodies). Every method raises StoreUnavailable when the
store cannot be reached. Two implementations: memory.py (one process, tests and
the model of the real one) and redis_store.py (one Lua script per call).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

Outcome = Literal["started", "replay", "mismatch", "in_flight"]
Headers = list[tuple[str, str]]


@dataclass(frozen=True)
class Begin:
    """What `begin` found: `started` (with the token that owns the new record),
    `replay` (the stored status, headers and body), `mismatch`, or `in_flight`
    (with whole seconds until the lease ends, at least 1)."""

    outcome: Outcome
    token: str = ""
    status: int = 0
    headers: Headers = field(default_factory=list)
    body: bytes = b""
    retry_after: int = 0


class IdempotencyStore(Protocol):
    def begin(self, tenant: str, key: str, fingerprint: str, *, lease_seconds: int) -> Begin:
        """Claim (tenant, key) for `lease_seconds`, or report the record there."""
        ...

    def finish(self, tenant: str, key: str, token: str, *, status: int,
               headers: Headers, body: bytes, ttl_seconds: int) -> bool:
        """Store the response (status < 500) or release the key (5xx). False when
        the token no longer owns the record (the lease expired meanwhile)."""
        ...

    def count(self, name: str) -> None:
        """Add one to the layer's counter `name`."""
        ...


def retry_after(remaining_ms: int) -> int:
    """Whole seconds a client should wait for a lease with `remaining_ms` left."""
    return max(1, -(-remaining_ms // 1000))
