"""Webhooks from the ledger: every event, signed with Stripe's scheme, to every endpoint,
delivered the way Stripe delivers: retried, sometimes twice, sometimes out of order.

An `Endpoint` is a URL, its signing secret (`whsec_...`), the delivery kinds it gets
(`kinds`, harness.webhooks.deliveries: `first`, `concurrent_copy`, `late_duplicate`,
`out_of_order`; default `first` alone: in order, retries only), the wait before a
late duplicate or a held event (`late_after`), and the sender's timeout. The `Outbox`
gives each endpoint a bounded queue and a background thread. For each event the
thread draws one of the endpoint's kinds (seeded, weighted by `KIND_WEIGHTS`):

- `first`: the event, signed now, retried on the `RetrySchedule` while not answered
  2xx (same event id, a fresh timestamp and signature), as Stripe does;
- `concurrent_copy`: two copies released together, each signed on its own and retried
  on its own (Stripe's parallel workers delivering one event twice);
- `late_duplicate`: delivered as `first`, then the same event id once more after
  `late_after`, freshly signed (Stripe's "may deliver an event more than once");
- `out_of_order`: the event is held until the endpoint's next event has been sent
  (both recorded `out_of_order`, `order` their true places: 0 the held, 1 the one that
  overtook it), or `late_after` passes with no next event (then sent as `first`).

Every copy is a new `Delivery` from harness.webhooks' `DeliveryPlanner`, so each one
carries its own timestamp and signature that `stripe.Webhook.construct_event` checks.
What became of each chain (a copy and its retries) is a `DeliveryRecord` in the ledger,
with its kind; an event that finds its endpoint's queue full is recorded `dropped`,
never blocking the API request that made it. `pending()` counts held and late copies
too, so `drain` waits for them; `stop()` drains for a bounded time, then ends the
threads, recording whatever was never sent as dropped.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from harness.provider.errors import ProviderError
from harness.provider.records import DeliveryRecord
from harness.webhooks.deliveries import CONCURRENT_COPY, FIRST, LATE_DUPLICATE, OUT_OF_ORDER, DeliveryPlanner
from harness.webhooks.events import Event, EventMaker, EventTemplate
from harness.webhooks.schemes.base import DEFAULT_TOLERANCE
from harness.webhooks.schemes.stripe import SCHEME
from harness.webhooks.sender import Outcome, RetrySchedule, Sender, WebhookProvider

DEFAULT_QUEUE = 1000
DEFAULT_TIMEOUT = 10.0
DEFAULT_LATE_AFTER = 1.0  # seconds: a late duplicate's wait, and how long an event is held for disorder
MAX_LATE_AFTER = 60.0
OUTBOX_KINDS = (FIRST, CONCURRENT_COPY, LATE_DUPLICATE, OUT_OF_ORDER)
# How often each enabled kind is drawn: most events go out plainly, as with Stripe.
KIND_WEIGHTS = {FIRST: 0.55, CONCURRENT_COPY: 0.15, LATE_DUPLICATE: 0.15, OUT_OF_ORDER: 0.15}


@dataclass(frozen=True)
class Endpoint:
    url: str
    secret: str
    kinds: tuple[str, ...] = (FIRST,)
    late_after: float = DEFAULT_LATE_AFTER
    timeout: float = DEFAULT_TIMEOUT
    tolerance: int = DEFAULT_TOLERANCE

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ProviderError(f"a webhook endpoint must be an http(s) URL, not {self.url!r}")
        if not self.secret.strip():
            raise ProviderError(f"the webhook endpoint {self.url} needs a signing secret (whsec_...)")
        check_kinds(self.kinds)
        if not 0 <= self.late_after <= MAX_LATE_AFTER:
            raise ProviderError(f"a webhook endpoint's late_after must be 0-{MAX_LATE_AFTER:g} seconds, "
                                f"not {self.late_after!r}")
        if self.timeout <= 0:
            raise ProviderError(f"a webhook endpoint's timeout must be longer than 0s, not {self.timeout!r}")


def check_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    """`kinds` as a tuple when every one is a kind the outbox plays (and there is one); else ProviderError."""
    unknown = [kind for kind in kinds if kind not in OUTBOX_KINDS]
    if unknown or not kinds or len(set(kinds)) != len(kinds):
        raise ProviderError(f"webhook delivery kinds must be distinct and among {', '.join(OUTBOX_KINDS)}, "
                            f"not {', '.join(map(str, kinds)) or 'none'}")
    return tuple(kinds)


_STOP = object()


@dataclass
class _Deferred:
    """An endpoint's copies not sent yet: late duplicates (due time, event) and the held event."""

    late: list[tuple[float, Event]] = field(default_factory=list)
    held: tuple[float, Event] | None = None

    def count(self) -> int:
        return len(self.late) + (self.held is not None)


class Outbox:
    def __init__(self, endpoints: list[Endpoint], record: Callable[[DeliveryRecord], None], *,
                 schedule: RetrySchedule | None = None, timeout: float | None = None, seed: int = 0,
                 queue_size: int = DEFAULT_QUEUE, clock: Callable[[], float] = time.time) -> None:
        self.endpoints = list(endpoints)
        self.record = record
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._queues: list[queue.Queue[object]] = [queue.Queue(queue_size) for _ in self.endpoints]
        self._deferred = [_Deferred() for _ in self.endpoints]
        self._rngs = [random.Random(seed * 1000 + 500 + index) for index in range(len(self.endpoints))]
        self._providers = []
        for index, endpoint in enumerate(self.endpoints):
            parts = urlsplit(endpoint.url)
            sender = Sender(f"{parts.scheme}://{parts.netloc}",
                            (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                            timeout=timeout or endpoint.timeout, user_agent=SCHEME.user_agent)
            rng = random.Random(seed * 1000 + index)
            # The maker is only needed by WebhookProvider's own plays; the ledger's events come made.
            maker = EventMaker(SCHEME, EventTemplate(body={}, type="provider"), rng, clock=clock)
            planner = DeliveryPlanner(SCHEME, endpoint.secret, tolerance=endpoint.tolerance, rng=rng, clock=clock)
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
                self._dropped(endpoint, event, FIRST)

    def pending(self) -> int:
        with self._lock:
            deferred = sum(item.count() for item in self._deferred)
        return sum(q.unfinished_tasks for q in self._queues) + deferred

    def drain(self, timeout: float) -> bool:
        """Wait until every queued event was delivered (or gave up), held and late copies
        included; False on timeout."""
        deadline = time.monotonic() + timeout
        while self.pending():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

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
                    self._dropped(endpoint, item, FIRST)
            self._drop_deferred(index)

    def _sleep(self, seconds: float) -> None:
        # A retry's wait ends early when the outbox stops: stopping never waits out a schedule.
        self._stopping.wait(seconds)

    def _dropped(self, endpoint: Endpoint, event: Event, kind: str) -> None:
        self.record(DeliveryRecord(event_id=event.id, event_type=event.type, endpoint=endpoint.url,
                                   attempts=0, acknowledged=False, dropped=True, kind=kind))

    def _drop_deferred(self, index: int) -> None:
        with self._lock:
            deferred = self._deferred[index]
            late, held = deferred.late, deferred.held
            deferred.late, deferred.held = [], None
        endpoint = self.endpoints[index]
        if held is not None:
            self._dropped(endpoint, held[1], OUT_OF_ORDER)
        for _, event in late:
            self._dropped(endpoint, event, LATE_DUPLICATE)

    def _chain(self, endpoint: Endpoint, event: Event, kind: str, outcomes: list[Outcome]) -> None:
        self.record(DeliveryRecord(event_id=event.id, event_type=event.type, endpoint=endpoint.url,
                                   attempts=len(outcomes), acknowledged=outcomes[-1].acknowledged,
                                   statuses=tuple(outcome.status for outcome in outcomes), kind=kind))

    def _next_due(self, index: int) -> float | None:
        """Seconds until the endpoint's next deferred copy is due (0: now); None: nothing deferred."""
        with self._lock:
            deferred = self._deferred[index]
            dues = [due for due, _ in deferred.late] + ([deferred.held[0]] if deferred.held else [])
        return None if not dues else max(0.0, min(dues) - time.monotonic())

    def _send_due(self, index: int) -> None:
        """Send the deferred copies whose time came: late duplicates, and a held event no
        other event overtook (sent as `first`: there was nothing to disorder it with)."""
        endpoint, provider, now = self.endpoints[index], self._providers[index], time.monotonic()
        # Only this endpoint's thread changes its deferred copies; they leave the list once
        # sent and recorded, so pending() (and drain) counts them until then.
        with self._lock:
            deferred = self._deferred[index]
            due = [item for item in deferred.late if item[0] <= now]
            held = deferred.held if deferred.held is not None and deferred.held[0] <= now else None
        if held is not None:
            self._chain(endpoint, held[1], FIRST, provider.deliver(held[1], FIRST))
            with self._lock:
                self._deferred[index].held = None
        for item in due:
            self._chain(endpoint, item[1], LATE_DUPLICATE, provider.deliver(item[1], LATE_DUPLICATE))
            with self._lock:
                self._deferred[index].late.remove(item)

    def _deliver(self, index: int, event: Event) -> None:
        endpoint, provider = self.endpoints[index], self._providers[index]
        with self._lock:
            held = self._deferred[index].held
        if held is not None:  # this event overtakes the held one, then the held one follows
            self._chain(endpoint, event, OUT_OF_ORDER, provider.deliver(event, OUT_OF_ORDER, order=1))
            self._chain(endpoint, held[1], OUT_OF_ORDER, provider.deliver(held[1], OUT_OF_ORDER, order=0))
            with self._lock:
                self._deferred[index].held = None
            return
        kinds = endpoint.kinds
        kind = kinds[0] if len(kinds) == 1 else \
            self._rngs[index].choices(kinds, [KIND_WEIGHTS[name] for name in kinds])[0]
        if kind == OUT_OF_ORDER:
            with self._lock:
                self._deferred[index].held = (time.monotonic() + endpoint.late_after, event)
        elif kind == CONCURRENT_COPY:
            outcomes = provider.deliver_concurrently(event)
            for copy_kind in (FIRST, CONCURRENT_COPY):  # deliver_concurrently groups its outcomes per copy
                chain = [o for o in outcomes if copy_kind in (o.delivery.kind, o.delivery.retry_of)]
                if chain:
                    self._chain(endpoint, event, copy_kind, chain)
        else:
            self._chain(endpoint, event, FIRST, provider.deliver(event, FIRST))
            if kind == LATE_DUPLICATE:
                with self._lock:
                    self._deferred[index].late.append((time.monotonic() + endpoint.late_after, event))

    def _work(self, index: int) -> None:
        endpoint, pending = self.endpoints[index], self._queues[index]
        while True:
            stopping = self._stopping.is_set()
            due = None if stopping else self._next_due(index)
            if due == 0.0:
                self._send_due(index)
                continue
            try:
                # Stopping: deferred copies are left to stop() to record; poll, so a _STOP that
                # found the queue full still ends the thread once the queue is empty.
                item = pending.get(timeout=0.1 if stopping else due)
            except queue.Empty:
                if stopping:
                    return
                continue  # a deferred copy is due
            try:
                if item is _STOP or self._stopping.is_set():
                    if item is not _STOP:
                        assert isinstance(item, Event)
                        self._dropped(endpoint, item, FIRST)
                    if item is _STOP:
                        return
                    continue
                assert isinstance(item, Event)
                self._deliver(index, item)
            finally:
                pending.task_done()
