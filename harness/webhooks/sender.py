"""Sending deliveries the way a provider does: over HTTP, with a timeout, retrying.

`Sender` POSTs one `Delivery` to `<base_url><path>` (the base URL is the probe's
Toxiproxy proxy in front of the receiver, so a plan can slow, cut or reset its answers)
and returns an `Outcome`: the status, or why there is none (`timeout`: no answer within
the provider's timeout; `reset`: the connection broke; `unreachable`: nothing accepted
it), and how long it took. Nothing here raises for a receiver's failure: a failed
delivery is a result, recorded like any other.

`WebhookProvider` plays one kind of delivery end to end (`play(kind)`): it makes the
events, sends them, and, as Stripe and Standard Webhooks do, retries a delivery that
was not answered with a 2xx (a timeout, a reset or any other status) with the same
event id and a fresh timestamp and signature, on a `RetrySchedule` compressed from
hours to fractions of a second. The deliveries a receiver must refuse are sent once
and never retried: a provider never sends them, the harness does, to see them refused.
Every loop is bounded: by the schedule's length, the number of copies and the timeout.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import requests

from harness.webhooks.deliveries import (
    CONCURRENT_COPY,
    FIRST,
    LATE_DUPLICATE,
    OUT_OF_ORDER,
    REFUSED_KINDS,
    SAME_OBJECT_NEW_EVENT,
    Delivery,
    DeliveryError,
    DeliveryPlanner,
)
from harness.webhooks.events import Event, EventMaker

DEFAULT_TIMEOUT = 10.0  # seconds a provider waits for an answer before it counts a failure
ANSWER_EXCERPT = 200  # characters of an answer's body kept in an Outcome
PLAYABLE = (FIRST, CONCURRENT_COPY, SAME_OBJECT_NEW_EVENT, OUT_OF_ORDER, LATE_DUPLICATE, *REFUSED_KINDS)


@dataclass(frozen=True)
class Outcome:
    """What became of one delivery."""

    delivery: Delivery
    status: int | None  # None: no answer (see error)
    error: str | None  # "timeout" | "reset" | "unreachable" | "error: <type>"; None when answered
    started: float  # unix seconds when it was sent
    elapsed: float  # seconds until the answer or the failure
    answer: str = ""  # the start of the answer's body

    @property
    def acknowledged(self) -> bool:
        """Answered with a 2xx: the provider counts it delivered and stops retrying."""
        return self.status is not None and 200 <= self.status < 300

    @property
    def refused(self) -> bool:
        """Answered with a 4xx: the receiver said no."""
        return self.status is not None and 400 <= self.status < 500

    def summary(self) -> dict[str, object]:
        """The delivery's summary and its result, for a history record."""
        return {**self.delivery.summary(), "status": self.status, "error": self.error,
                "started": self.started, "elapsed": round(self.elapsed, 6)}


@dataclass(frozen=True)
class RetrySchedule:
    """The waits before the 2nd, 3rd, ... try of an unacknowledged delivery (its length caps the tries)."""

    delays: tuple[float, ...] = (0.25, 0.5, 1.0)

    @classmethod
    def exponential(cls, first: float, *, retries: int, factor: float = 2.0) -> RetrySchedule:
        """`retries` waits: first, first*factor, first*factor², ... (real providers: minutes to hours)."""
        if first < 0 or retries < 0 or factor < 1:
            raise DeliveryError("a retry schedule needs first >= 0, retries >= 0 and factor >= 1")
        return cls(tuple(first * factor ** index for index in range(retries)))

    @property
    def attempts(self) -> int:
        return 1 + len(self.delays)


class Sender:
    """POSTs deliveries to one receiver URL and reports what became of each."""

    def __init__(self, base_url: str, path: str, *, timeout: float = DEFAULT_TIMEOUT,
                 user_agent: str = "idempotency-chaos-harness-webhooks") -> None:
        if timeout <= 0:
            raise DeliveryError(f"a sender's timeout must be longer than 0s, not {timeout}")
        self.url = base_url.rstrip("/") + "/" + path.lstrip("/")
        self.timeout = timeout
        self.user_agent = user_agent

    def send(self, delivery: Delivery) -> Outcome:
        headers = {"Content-Type": "application/json", "User-Agent": self.user_agent, **delivery.headers}
        started, clock = time.time(), time.monotonic()
        try:
            # A fresh connection per delivery (no pool shared between threads), as providers
            # deliver from many machines; redirects are failures, not followed (Stripe).
            response = requests.post(self.url, data=delivery.body, headers=headers, timeout=self.timeout,
                                     allow_redirects=False)
        except requests.RequestException as error:
            return Outcome(delivery, None, failure_kind(error), started, time.monotonic() - clock)
        return Outcome(delivery, response.status_code, None, started, time.monotonic() - clock,
                       response.text[:ANSWER_EXCERPT])


def failure_kind(error: BaseException) -> str:
    """`timeout`, `reset`, `unreachable` or `error: <type>` for an exception of requests."""
    if isinstance(error, requests.Timeout):
        return "timeout"
    causes = list(_chain(error))
    if any(isinstance(cause, ConnectionRefusedError) for cause in causes):
        return "unreachable"
    if isinstance(error, (requests.ConnectionError, requests.exceptions.ChunkedEncodingError)) or \
            any(isinstance(cause, _BROKEN) for cause in causes):
        return "reset"
    return f"error: {type(error).__name__}"


_BROKEN = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, http.client.RemoteDisconnected,
           http.client.IncompleteRead)


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The exception, its causes and contexts, and the exceptions urllib3 wraps in `reason` or args."""
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending and len(seen) < 50:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        pending.extend(item for item in linked if isinstance(item, BaseException))


class WebhookProvider:
    """Plays deliveries of one event template to one receiver, retrying like a real provider."""

    def __init__(self, maker: EventMaker, planner: DeliveryPlanner, sender: Sender, *,
                 schedule: RetrySchedule | None = None, copies: int = 2, late_after: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if copies < 2:
            raise DeliveryError(f"concurrent copies need at least 2 deliveries, not {copies}")
        self.maker = maker
        self.planner = planner
        self.sender = sender
        self.schedule = schedule or RetrySchedule()
        self.copies = copies
        self.late_after = late_after
        self.sleep = sleep

    def kinds(self) -> tuple[str, ...]:
        """The kinds `play` can make with this template and scheme."""
        ordered = len(self.maker.template.sequence) >= 2
        return tuple(kind for kind in PLAYABLE
                     if (kind != OUT_OF_ORDER or ordered)
                     and (kind not in REFUSED_KINDS or kind in self.planner.refusals()))

    def play(self, kind: str) -> list[Outcome]:
        """Make fresh events and deliver them as `kind`; every try's outcome, in the order sent
        (concurrent copies: grouped per copy)."""
        if kind not in PLAYABLE:
            raise DeliveryError(f"cannot play {kind!r} (one of {', '.join(PLAYABLE)})")
        if kind in REFUSED_KINDS:
            return [self.sender.send(self.planner.refused(self.maker.event(), kind))]
        if kind == FIRST:
            return self.deliver(self.maker.event(), FIRST)
        if kind == CONCURRENT_COPY:
            return self.deliver_concurrently(self.maker.event())
        if kind == SAME_OBJECT_NEW_EVENT:
            event = self.maker.event()
            return [*self.deliver(event, FIRST), *self.deliver(self.maker.same_object(event), SAME_OBJECT_NEW_EVENT)]
        if kind == OUT_OF_ORDER:
            events = self.maker.sequence()
            outcomes: list[Outcome] = []
            for delivery in self.planner.out_of_order(events):
                event = next(event for event in events if event.id == delivery.event_id)
                outcomes += self.deliver(event, OUT_OF_ORDER, order=delivery.order)
            return outcomes
        event = self.maker.event()  # LATE_DUPLICATE
        first = self.deliver(event, FIRST)
        self.sleep(self.late_after)
        return [*first, *self.deliver(event, LATE_DUPLICATE)]

    def deliver(self, event: Event, kind: str, *, order: int | None = None,
                barrier: threading.Barrier | None = None) -> list[Outcome]:
        """Send `event` as `kind`, then retry on the schedule until a 2xx or the tries run out."""
        delivery = self.planner.signed(event, kind, order=order)
        if barrier is not None:
            try:
                barrier.wait(timeout=self.sender.timeout)
            except threading.BrokenBarrierError:
                pass  # a copy slow to start: send anyway, the copies are just less simultaneous
        outcomes = [self.sender.send(delivery)]
        for attempt, delay in enumerate(self.schedule.delays, start=2):
            if outcomes[-1].acknowledged:
                break
            self.sleep(delay)
            outcomes.append(self.sender.send(self.planner.retry(delivery, event, attempt)))
        return outcomes

    def deliver_concurrently(self, event: Event) -> list[Outcome]:
        """`copies` deliveries of `event` released together (each retried on its own), as a
        provider's parallel workers do; the first copy plays `first`, the others `concurrent_copy`."""
        barrier = threading.Barrier(self.copies)
        results: list[list[Outcome]] = [[] for _ in range(self.copies)]

        def run(index: int) -> None:
            results[index] = self.deliver(event, FIRST if index == 0 else CONCURRENT_COPY, barrier=barrier)

        threads = [threading.Thread(target=run, args=(index,), name=f"webhook-copy-{index}", daemon=True)
                   for index in range(self.copies)]
        for thread in threads:
            thread.start()
        bound = self.schedule.attempts * (self.sender.timeout + 1) + sum(self.schedule.delays) + self.sender.timeout
        for thread in threads:
            thread.join(timeout=bound)
        return [outcome for copy in results for outcome in copy]
