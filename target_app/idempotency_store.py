"""Idempotency-Key records: the store interface and its two implementations.

A record is keyed by (tenant, key). `begin` either claims the key for this request
(an in-flight record with a lease and a random token) or reports what is there: a
finished response to replay, a different fingerprint, or another request in flight.
`finish` stores the response (or, for a 5xx, releases the key) only if the caller's
token still owns the record. Begin and finish are one Redis round trip each.
`count` adds one to a counter of the layer that no script counts (incomplete bodies).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

import redis

from target_app.errors import StoreUnavailable
from target_app.keys import COUNTERS, idempotency_key


@dataclass(frozen=True)
class Begin:
    """What `begin` found. `outcome` is started | replay | mismatch | in_flight."""

    outcome: str
    token: str = ""
    status: int = 0
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    retry_after: int = 0


class IdempotencyStore(Protocol):
    def begin(self, tenant: str, key: str, fingerprint: str, *, lease_seconds: int) -> Begin: ...

    def finish(self, tenant: str, key: str, token: str, *, status: int,
               headers: list[tuple[str, str]], body: bytes, ttl_seconds: int) -> bool:
        """Store the response (status < 500) or release the key (5xx). False when
        the token no longer owns the record (the lease expired meanwhile)."""
        ...

    def count(self, name: str) -> None:
        """Add one to the layer's counter `name` (StoreUnavailable when unreachable)."""
        ...


def _retry_after(remaining_ms: int) -> int:
    return max(1, -(-remaining_ms // 1000))


class MemoryStore:
    """In-process store for unit tests (one process only, by design)."""

    def __init__(self, clock=time.monotonic) -> None:
        self._records: dict[tuple[str, str], dict] = {}
        self._lock = threading.Lock()
        self._clock = clock
        self.counters = {"api_replays": 0, "api_fingerprint_conflicts": 0, "api_inflight_conflicts": 0,
                         "api_incomplete_bodies": 0}

    def count(self, name: str) -> None:
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + 1

    def begin(self, tenant: str, key: str, fingerprint: str, *, lease_seconds: int) -> Begin:
        now = self._clock()
        with self._lock:
            record = self._records.get((tenant, key))
            if record is not None and record["expires"] <= now:
                record = None
            if record is None:
                token = secrets.token_hex(16)
                self._records[(tenant, key)] = {"state": "inflight", "fp": fingerprint,
                                                "token": token, "expires": now + lease_seconds}
                return Begin("started", token=token)
            if record["fp"] != fingerprint:
                self.counters["api_fingerprint_conflicts"] += 1
                return Begin("mismatch")
            if record["state"] == "inflight":
                self.counters["api_inflight_conflicts"] += 1
                return Begin("in_flight", retry_after=_retry_after(int((record["expires"] - now) * 1000)))
            self.counters["api_replays"] += 1
            return Begin("replay", status=record["status"], headers=list(record["headers"]),
                         body=record["body"])

    def finish(self, tenant: str, key: str, token: str, *, status: int,
               headers: list[tuple[str, str]], body: bytes, ttl_seconds: int) -> bool:
        now = self._clock()
        with self._lock:
            record = self._records.get((tenant, key))
            if (record is None or record["expires"] <= now or record["state"] != "inflight"
                    or record["token"] != token):
                return False
            if status >= 500:
                del self._records[(tenant, key)]
                return True
            record.update(state="done", status=status, headers=list(headers), body=body,
                          expires=now + ttl_seconds)
            return True


# KEYS[1] the record (hash: state, fp, token[, status, headers, body])
# KEYS[2] the counters hash
# ARGV[1] request fingerprint
# ARGV[2] fresh random token for this request
# ARGV[3] in-flight lease in milliseconds
# Returns {"started"} | {"mismatch"} | {"in_flight", pttl} | {"replay", status, headers, body}
BEGIN_LUA = """
local rec = redis.call('HMGET', KEYS[1], 'state', 'fp', 'status', 'headers', 'body')
if not rec[1] then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'state', 'inflight', 'fp', ARGV[1], 'token', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'started'}
end
if rec[2] ~= ARGV[1] then
  redis.call('HINCRBY', KEYS[2], 'api_fingerprint_conflicts', 1)
  return {'mismatch'}
end
if rec[1] == 'inflight' then
  redis.call('HINCRBY', KEYS[2], 'api_inflight_conflicts', 1)
  return {'in_flight', redis.call('PTTL', KEYS[1])}
end
redis.call('HINCRBY', KEYS[2], 'api_replays', 1)
return {'replay', rec[3], rec[4], rec[5]}
"""

# KEYS[1] the record
# ARGV[1] the token `begin` handed out
# ARGV[2] response status
# ARGV[3] response headers (JSON list of [name, value])
# ARGV[4] response body
# ARGV[5] TTL of the finished record in milliseconds
# ARGV[6] "1" store the response, "0" release the key (a 5xx is never stored)
# Returns 1 when the token owned the record, 0 otherwise (lease expired, taken over)
FINISH_LUA = """
local rec = redis.call('HMGET', KEYS[1], 'state', 'token')
if rec[1] ~= 'inflight' or rec[2] ~= ARGV[1] then
  return 0
end
if ARGV[6] == '0' then
  redis.call('DEL', KEYS[1])
  return 1
end
redis.call('HSET', KEYS[1], 'state', 'done', 'status', ARGV[2], 'headers', ARGV[3], 'body', ARGV[4])
redis.call('HDEL', KEYS[1], 'token')
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""


class RedisStore:
    """Records in Redis hashes; begin and finish are one Lua script each."""

    def __init__(self, client: redis.Redis) -> None:
        # A bytes client: stored bodies are replayed byte for byte.
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
        outcome = _text(reply[0])
        if outcome == "started":
            return Begin("started", token=token)
        if outcome == "in_flight":
            return Begin("in_flight", retry_after=_retry_after(int(reply[1])))
        if outcome == "replay":
            headers = [tuple(pair) for pair in json.loads(_text(reply[2]))]
            return Begin("replay", status=int(reply[1]), headers=headers, body=_bytes(reply[3]))
        return Begin("mismatch")

    def finish(self, tenant: str, key: str, token: str, *, status: int,
               headers: list[tuple[str, str]], body: bytes, ttl_seconds: int) -> bool:
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


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value
