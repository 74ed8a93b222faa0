"""RedisStore: Idempotency-Key records in Redis hashes (`ta:idem:...`, with TTL).

`begin` and `finish` are one Lua script each (scripts.py), so a record is never
seen half-written and two requests can never both claim a key. The lease and the
finished record's lifetime are Redis key expiries, so both are measured on Redis's
clock: a step of the app's clock neither ends a lease nor stretches one. Any Redis
error becomes StoreUnavailable. The client must be a bytes client
(decode_responses=False): stored bodies are replayed byte for byte.

Negative control `lease-wall-clock` (`lease_clock`, e.g. `time.time`): the claim
stores the deadline `lease_clock() + lease` instead of an expiry, and a claim whose
deadline is past `lease_clock()` counts as free: the next request with the key takes
it over, so a forward step of the app's clock ends every lease in flight.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable

import redis

from target_app.errors import StoreUnavailable
from target_app.idempotency.scripts import BEGIN_LUA, FINISH_LUA
from target_app.idempotency.store import Begin, Headers, retry_after
from target_app.keys import COUNTERS, idempotency_key
from target_app.replies import text


class RedisStore:
    """The IdempotencyStore of the running app."""

    def __init__(self, client: redis.Redis, *, lease_clock: Callable[[], float] | None = None) -> None:
        self._client = client
        self._lease_clock = lease_clock  # None: the lease is a Redis expiry (the correct app)
        self._begin = client.register_script(BEGIN_LUA)
        self._finish = client.register_script(FINISH_LUA)

    def begin(self, tenant: str, key: str, fingerprint: str, *, lease_seconds: int) -> Begin:
        token = secrets.token_hex(16)
        # The `lease-wall-clock` control hands the script the app's own clock.
        app_now = "" if self._lease_clock is None else str(int(self._lease_clock() * 1000))
        try:
            reply = self._begin(keys=[idempotency_key(tenant, key), COUNTERS],
                                args=[fingerprint, token, lease_seconds * 1000, app_now])
        except redis.RedisError as exc:
            raise StoreUnavailable(f"idempotency store: {exc}") from exc
        outcome = text(reply[0])
        if outcome == "started":
            return Begin("started", token=token)
        if outcome == "in_flight":
            return Begin("in_flight", retry_after=retry_after(int(reply[1])))
        if outcome == "replay":
            headers = [(str(name), str(value)) for name, value in json.loads(text(reply[2]))]
            return Begin("replay", status=int(reply[1]), headers=headers, body=_bytes(reply[3]))
        return Begin("mismatch")

    def finish(self, tenant: str, key: str, token: str, *, status: int,
               headers: Headers, body: bytes, ttl_seconds: int) -> bool:
        store = "1" if status < 500 else "0"
        try:
            reply = self._finish(keys=[idempotency_key(tenant, key)],
                                 args=[token, status, json.dumps(headers), body,
                                       ttl_seconds * 1000, store])
        except redis.RedisError as exc:
            raise StoreUnavailable(f"idempotency store: {exc}") from exc
        return int(reply) == 1

    def count(self, name: str) -> None:
        try:
            self._client.hincrby(COUNTERS, name, 1)
        except redis.RedisError as exc:
            raise StoreUnavailable(f"idempotency store: {exc}") from exc


def _bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value
