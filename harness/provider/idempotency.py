"""Stripe's idempotency rules for POST requests, as a small store.

A key lives per (secret key scope, Idempotency-Key). `claim` is asked before a request
runs and answers one of:

- `Claimed`: the key is new (or its entry expired): the caller runs the request, then
  `complete`s it with the answer to store, or `release`s it when the request failed
  validation before executing (Stripe stores no result for those: a retry with the
  same key runs again);
- `Replay`: the key finished with the same method, path and parameters: the stored
  status, headers and body are answered again, marked `Idempotent-Replayed: true`;
- `Mismatch`: the key was used with other parameters (400 `idempotency_error`);
- `InUse`: a request with the key is still running (409 `idempotency_key_in_use`).

Entries expire `ttl` seconds after they were claimed (Stripe prunes keys after 24 h),
after which the key starts a new request. The store is thread-safe; its size is
bounded by `max_keys` (oldest finished entries are pruned first).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

DEFAULT_TTL = 24 * 3600.0
MAX_KEY_LENGTH = 255
DEFAULT_MAX_KEYS = 100_000


@dataclass(frozen=True)
class StoredAnswer:
    status: int
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class Claimed:
    pass


@dataclass(frozen=True)
class Replay:
    answer: StoredAnswer


@dataclass(frozen=True)
class Mismatch:
    first_path: str


@dataclass(frozen=True)
class InUse:
    pass


Claim = Claimed | Replay | Mismatch | InUse


@dataclass
class _Entry:
    fingerprint: str
    path: str
    claimed_at: float
    answer: StoredAnswer | None = None  # None: still running


class IdempotencyStore:
    def __init__(self, *, ttl: float = DEFAULT_TTL, max_keys: int = DEFAULT_MAX_KEYS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.max_keys = max_keys
        self.clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()

    def claim(self, scope: str, key: str, *, fingerprint: str, path: str) -> Claim:
        now = self.clock()
        with self._lock:
            entry = self._entries.get((scope, key))
            if entry is not None and now - entry.claimed_at >= self.ttl:
                del self._entries[(scope, key)]
                entry = None
            if entry is None:
                self._prune()
                self._entries[(scope, key)] = _Entry(fingerprint, path, now)
                return Claimed()
            if entry.answer is None:
                return InUse()
            if entry.fingerprint != fingerprint:
                return Mismatch(entry.path)
            return Replay(entry.answer)

    def complete(self, scope: str, key: str, answer: StoredAnswer) -> None:
        with self._lock:
            entry = self._entries.get((scope, key))
            if entry is not None:
                entry.answer = answer

    def release(self, scope: str, key: str) -> None:
        with self._lock:
            entry = self._entries.get((scope, key))
            if entry is not None and entry.answer is None:
                del self._entries[(scope, key)]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _prune(self) -> None:
        while len(self._entries) >= self.max_keys:
            victim = next((k for k, e in self._entries.items() if e.answer is not None), None)
            if victim is None:
                return  # every entry is running: keep them (bounded by the server's threads)
            del self._entries[victim]
