"""The brokers' shared records and interface (harness.probe.brokers names them): what
is published, what a broker answers, what a consumer receives, the broker's own counts,
and the `Broker` protocol every adapter implements."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.errors import HarnessError

BROKERS = ("redis-streams", "rabbitmq", "nats")
MESSAGE_ID_FIELD = "message_id"  # Redis Streams: the entry's field that carries the id


class BrokerError(HarnessError):
    """The broker could not be reached or set up (a probe that cannot publish stops: exit 2)."""


@dataclass(frozen=True)
class BrokerTarget:
    """Where to publish: the broker kind, its URL, the queue / stream / subject, and
    optionally a dead-letter queue and (RabbitMQ) the management API's URL."""

    broker: str
    url: str
    queue: str
    dead_letter: str | None = None
    management: str | None = None
    protocol: str = "plain"  # celery: the message is a Celery task (harness.probe.brokers.celery)
    task: str | None = None  # the Celery task's registered name


@dataclass(frozen=True)
class Message:
    message_id: str
    body: bytes
    headers: Mapping[str, Any] = field(default_factory=dict)
    properties: Mapping[str, Any] = field(default_factory=dict)  # AMQP properties (RabbitMQ only)


@dataclass(frozen=True)
class PublishAck:
    """The broker's answer to one publish: `confirmed` means the broker has it;
    `duplicate` that it dropped it as a copy of an id it already had (JetStream)."""

    message_id: str
    confirmed: bool
    duplicate: bool = False
    error: str | None = None
    position: str | None = None  # the broker's own id of the stored copy (stream seq, entry id)


@dataclass(frozen=True)
class Delivery:
    """One message as a consumer receives it, with the broker's redelivery metadata."""

    message_id: str | None
    body: bytes
    redelivered: bool
    delivery_count: int | None  # None where the broker does not count (a classic queue)
    handle: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class BrokerStats:
    """The broker's own counts: redeliveries it made (None: it cannot tell, or not yet),
    messages stored and not yet acknowledged by a consumer, messages in the dead-letter
    queue, messages it counts as published (a probe waits for its confirmed publishes
    to be counted before it trusts counts that the broker updates late)."""

    redeliveries: int | None
    unacknowledged: int | None
    dead_letters: int | None = None
    stored: int | None = None  # messages the broker counts as published to the queue so far


class Broker(Protocol):
    target: BrokerTarget

    def setup(self) -> None: ...

    def publish(self, message: Message) -> PublishAck: ...

    def stats(self) -> BrokerStats: ...

    def receive(self, timeout: float, *, queue: str | None = None) -> Delivery | None: ...

    def ack(self, delivery: Delivery) -> None: ...

    def release(self) -> None: ...

    def close(self) -> None: ...
