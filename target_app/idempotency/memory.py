"""An in-process IdempotencyStore: one process only, by design.

It is the executable model of RedisStore (tests/target_app/test_ta_store_model.py
runs both side by side): same outcomes, same tokens' ownership rules, same
counters. Time comes from an injectable clock (seconds, monotonic) so tests can
let leases and records expire without sleeping. Thread-safe.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from target_app.idempotency.store import Begin, Headers, retry_after


@dataclass
class _Record:
    fingerprint: str
    token: str
    expires: float
    done: bool = False
    status: int = 0
    headers: Headers = field(default_factory=list)
    body: bytes = b""


class MemoryStore:
    """Records in a dict guarded by a lock; expiry is checked against `clock`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._records: dict[tuple[str, str], _Record] = {}
        self._lock = threading.Lock()
        self._clock = clock
        self.counters: dict[str, int] = {"api_replays": 0, "api_fingerprint_conflicts": 0,
                                         "api_inflight_conflicts": 0, "api_incomplete_bodies": 0}

    def count(self, name: str) -> None:
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + 1

    def _live(self, tenant: str, key: str, now: float) -> _Record | None:
        record = self._records.get((tenant, key))
        if record is not None and record.expires <= now:
            del self._records[(tenant, key)]
            return None
        return record

    def begin(self, tenant: str, key: str, fingerprint: str, *, lease_seconds: int) -> Begin:
        now = self._clock()
        with self._lock:
            record = self._live(tenant, key, now)
            if record is None:
                token = secrets.token_hex(16)
                self._records[(tenant, key)] = _Record(fingerprint=fingerprint, token=token,
                                                       expires=now + lease_seconds)
                return Begin("started", token=token)
            if record.fingerprint != fingerprint:
                self.counters["api_fingerprint_conflicts"] += 1
                return Begin("mismatch")
            if not record.done:
                self.counters["api_inflight_conflicts"] += 1
                return Begin("in_flight", retry_after=retry_after(int((record.expires - now) * 1000)))
            self.counters["api_replays"] += 1
            return Begin("replay", status=record.status, headers=list(record.headers), body=record.body)

    def finish(self, tenant: str, key: str, token: str, *, status: int,
               headers: Headers, body: bytes, ttl_seconds: int) -> bool:
        now = self._clock()
        with self._lock:
            record = self._live(tenant, key, now)
            if record is None or record.done or record.token != token:
                return False
            if status >= 500:
                del self._records[(tenant, key)]
                return True
            record.done, record.status, record.headers, record.body = True, status, list(headers), body
            record.token, record.expires = "", now + ttl_seconds
            return True
