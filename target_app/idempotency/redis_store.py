"""RedisStore: Idempotency-Key records in Redis hashes (`ta:idem:...`, with TTL).

`begin` and `finish` are one Lua script each (scripts.py), so a record is never
seen half-written and two requests can never both claim a key. The lease and the
finished record's lifetime are Redis key expiries. Any Redis error becomes
StoreUnavailable. The client must be a bytes client (decode_responses=False):
stored bodies are replayed byte for byte.
"""

from __future__ import annotations

import json
import secrets

import redis

from target_app.errors import StoreUnavailable
from target_app.idempotency.scripts import BEGIN_LUA, FINISH_LUA
from target_app.idempotency.store import Begin, Headers, retry_after
from target_app.keys import COUNTERS, idempotency_key
from target_app.replies import text


class RedisStore:
    """The IdempotencyStore of the running app."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._begin = client.register_script(BEGIN_LUA)
        self._finish = client.register_script(FINISH_LUA)

    def begin(self, tenant: str, key: str, fingerprint: str, *, lease_seconds: int) -> Begin:
        token = secrets.token_hex(16)
        try:
            reply = self._begin(keys=[idempotency_key(tenant, key), COUNTERS],
                                args=[fingerprint, token, lease_seconds * 1000])
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
