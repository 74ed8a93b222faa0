"""Webhooks from the ledger: every event, signed with Stripe's scheme, to every endpoint.

An `Endpoint` is a URL and its signing secret (`whsec_...`). The `Outbox` gives each
endpoint a bounded queue and a background thread that delivers the events in the
order the ledger made them, through harness.webhooks: a `WebhookProvider` whose
`deliver(event, "first")` signs with a fresh timestamp, sends, and retries a delivery
not answered 2xx on its `RetrySchedule` (the same event id, a new signature), as
Stripe does. What became of each event at each endpoint is a `DeliveryRecord` in the
ledger; an event that finds its endpoint's queue full is recorded `dropped`, never
blocking the API request that made it. `stop()` lets the queues drain for a bounded
time, then ends the threads.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from harness.provider.errors import ProviderError
from harness.provider.records import DeliveryRecord
from harness.webhooks.deliveries import FIRST, DeliveryPlanner
from harness.webhooks.events import Event, EventMaker, EventTemplate
from harness.webhooks.schemes.stripe import SCHEME
from harness.webhooks.sender import RetrySchedule, Sender, WebhookProvider

DEFAULT_QUEUE = 1000


@dataclass(frozen=True)
class Endpoint:
    url: str
    secret: str

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ProviderError(f"a webhook endpoint must be an http(s) URL, not {self.url!r}")
        if not self.secret.strip():
            raise ProviderError(f"the webhook endpoint {self.url} needs a signing secret (whsec_...)")


_STOP = object()


class Outbox:
    def __init__(self, endpoints: list[Endpoint], record: Callable[[DeliveryRecord], None], *,
                 schedule: RetrySchedule | None = None, timeout: float = 10.0, seed: int = 0,
                 queue_size: int = DEFAULT_QUEUE, clock: Callable[[], float] = time.time) -> None:
        self.endpoints = list(endpoints)
        self.record = record
        self._stopping = threading.Event()
        self._queues: list[queue.Queue[object]] = [queue.Queue(queue_size) for _ in self.endpoints]
        self._providers = []
        for index, endpoint in enumerate(self.endpoints):
            parts = urlsplit(endpoint.url)
            sender = Sender(f"{parts.scheme}://{parts.netloc}",
                            (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                            timeout=timeout, user_agent=SCHEME.user_agent)
            rng = random.Random(seed * 1000 + index)
            # The maker is only needed by WebhookProvider's own plays; the ledger's events come made.
            maker = EventMaker(SCHEME, EventTemplate(body={}, type="provider"), rng, clock=clock)
            planner = DeliveryPlanner(SCHEME, endpoint.secret, rng=rng, clock=clock)
            self._providers.append(WebhookProvider(maker, planner, sender, schedule=schedule,
                                                   sleep=self._sleep))
        self._threads = [threading.Thread(target=self._work, args=(index,), name=f"provider-webhooks-{index}",
                                          daemon=True) for index in range(len(self.endpoints))]

    def start(self) -> Outbox:
        for thread in self._threads:
            thread.start()
        return self

    def publish(self, event: Event) -> None:
        for index, endpoint in enumerate(self.endpoints):
            try:
                self._queues[index].put_nowait(event)
            except queue.Full:
                self.record(DeliveryRecord(event_id=event.id, event_type=event.type, endpoint=endpoint.url,
                                           attempts=0, acknowledged=False, dropped=True))

    def pending(self) -> int:
        return sum(q.unfinished_tasks for q in self._queues)

    def drain(self, timeout: float) -> bool:
        """Wait until every queued event was delivered (or gave up); False on timeout."""
        deadline = time.monotonic() + timeout
        while self.pending() and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.pending() == 0

    def stop(self, drain_timeout: float = 5.0) -> None:
        self.drain(drain_timeout)
        self._stopping.set()
        for index, thread in enumerate(self._threads):
            if thread.is_alive():
                try:
                    self._queues[index].put_nowait(_STOP)
                except queue.Full:
                    pass  # the thread sees _stopping after its current event
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=15)
        for index, endpoint in enumerate(self.endpoints):  # left in a queue: never sent, and said so
            while True:
                try:
                    item = self._queues[index].get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, Event):
                    self.record(DeliveryRecord(event_id=item.id, event_type=item.type, endpoint=endpoint.url,
                                               attempts=0, acknowledged=False, dropped=True))

    def _sleep(self, seconds: float) -> None:
        # A retry's wait ends early when the outbox stops: stopping never waits out a schedule.
        self._stopping.wait(seconds)

    def _work(self, index: int) -> None:
        endpoint, provider, pending = self.endpoints[index], self._providers[index], self._queues[index]
        while True:
            item = pending.get()
            try:
                if item is _STOP or self._stopping.is_set():
                    if item is not _STOP:
                        assert isinstance(item, Event)
                        self.record(DeliveryRecord(event_id=item.id, event_type=item.type, endpoint=endpoint.url,
                                                   attempts=0, acknowledged=False, dropped=True))
                    if item is _STOP:
                        return
                    continue
                assert isinstance(item, Event)
                outcomes = provider.deliver(item, FIRST)
                self.record(DeliveryRecord(event_id=item.id, event_type=item.type, endpoint=endpoint.url,
                                           attempts=len(outcomes), acknowledged=outcomes[-1].acknowledged,
                                           statuses=tuple(outcome.status for outcome in outcomes)))
            finally:
                pending.task_done()
