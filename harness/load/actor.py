"""One Locust user's identity and tools: its Jepsen process, rng, ids, channels.

Concurrent branches (a double click, a webhook burst, one payment sent through
three channels at once) need one Jepsen process each, because a process has at
most one operation outstanding; `twins(n)` hands out that many siblings, created
once and reused so a user holds a bounded number of processes.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent

from harness.history import Client
from harness.load.http import HttpChannel, Reply
from harness.load.recording import LoadProcess
from harness.load.stream import publish

TENANTS = ("default", "tenant-a", "tenant-b")
MAX_REMEMBERED = 16


@dataclass
class Order:
    """An order this user created, with the exact request that created it."""

    id: str
    tenant: str
    idempotency_key: str
    payload: dict[str, Any]

    @property
    def amount_cents(self) -> int:
        return int(self.payload["amount_cents"])


@dataclass
class DelayedWebhook:
    due: float  # time.monotonic() when to deliver the copy
    order: Order
    payload: dict[str, Any]


class Actor:
    """Everything one user needs to play a client, a provider or a producer."""

    def __init__(self, process: LoadProcess, host: str | None, *, twin_of: Actor | None = None) -> None:
        if not host:
            raise RuntimeError("no target host: run Locust with --host http://127.0.0.1:PORT")
        self.process = process
        self.host = host
        self.settings = process.settings
        self.events = process.environment.events
        self.client: Client = process.new_client()
        self.rng = process.rng_for(self.client)
        self.tenant: str = twin_of.tenant if twin_of else self.rng.choice(TENANTS)
        self.http = HttpChannel(host, self.events, timeout=self.settings.request_timeout,
                                fresh_connections=self.settings.fresh_connections,
                                toxic_hit=process.toxic_hit)
        self.prefix = f"{process.token}-{self.client.worker}-u{self.client.user}"
        self._ids = itertools.count(1)
        self.shared_rounds = 0  # this user's shared-key rounds: `n` of the shared pool
        self._twins: list[Actor] = []
        self.is_twin = twin_of is not None
        # Bounded memory: a long run must not grow a user's state.
        self.delayed: deque[DelayedWebhook] = deque(maxlen=MAX_REMEMBERED)
        self.recent_orders: deque[Order] = deque(maxlen=MAX_REMEMBERED)

    def new_id(self, kind: str) -> str:
        return f"{kind}-{self.prefix}-{next(self._ids)}"

    def twins(self, count: int) -> list[Actor]:
        """`count` sibling actors (own Jepsen processes), reused across rounds."""
        while len(self._twins) < count:
            self._twins.append(Actor(self.process, self.host, twin_of=self))
        return self._twins[:count]

    def other_tenant(self) -> str:
        """A tenant other than this user's: the one that must not see its orders."""
        return self.rng.choice([tenant for tenant in TENANTS if tenant != self.tenant])

    def post(self, op: str, path: str, payload: dict[str, Any] | bytes, *,
             tenant: str | None = None, **kwargs: Any) -> Reply:
        """POST as this user's tenant, or as `tenant` (a cross-tenant attempt)."""
        return self.http.post(self.client, op, path, payload, tenant=tenant or self.tenant, **kwargs)

    def get(self, op: str, path: str, *, tenant: str | None = None, **kwargs: Any) -> Reply:
        return self.http.get(self.client, op, path, tenant=tenant or self.tenant, **kwargs)

    def publish(self, *, message_id: str, order: Order, provider_ref: str,
                amount_cents: int, expect: str | None = None) -> str | None:
        return publish(self.client, self.process.redis(), self.settings.stream, self.events,
                       message_id=message_id, order_id=order.id, provider_ref=provider_ref,
                       amount_cents=amount_cents, expect=expect)

    def sleep_backoff(self, attempt: int) -> None:
        # Exponential backoff with full jitter keeps retries from marching in step.
        base = min(0.5, 0.025 * (2 ** attempt))
        gevent.sleep(base * (0.5 + self.rng.random()))

    def close(self) -> None:
        for twin in self._twins:
            twin.close()
        self.http.close()


def concurrently(branches: list[tuple[Actor, Callable[[Actor], Any]]], *, timeout: float) -> list[Any]:
    """Run each call with its actor at once, in greenlets; wait at most `timeout`.

    A branch still running at the deadline is killed; its operation stays without
    completion (read back as `info`), and its actor continues as a new process.
    """
    greenlets = [gevent.spawn(call, actor) for actor, call in branches]
    gevent.joinall(greenlets, timeout=timeout, raise_error=True)
    for (actor, _), greenlet in zip(branches, greenlets, strict=True):
        if not greenlet.ready():
            greenlet.kill(block=True, timeout=1.0)
            actor.client.abandon()
    return [greenlet.value for greenlet in greenlets]
