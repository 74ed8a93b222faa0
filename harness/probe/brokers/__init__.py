"""Brokers: one small interface over each message broker the probe publishes to.

The probe plays the producer of a team's message consumer (harness.probe.messages):
it publishes through a `Broker`, which

- `setup()`: makes sure the queue (RabbitMQ), stream (Redis) or stream over the
  subject (NATS JetStream) exists, durable, before anything is published;
- `publish(message)`: sends one message with its id as the broker's own message id
  (AMQP `message_id`, `Nats-Msg-Id`, a `message_id` field of the stream entry) and its
  headers, and returns only once the broker confirmed it (`PublishAck.confirmed`: a
  RabbitMQ publisher confirm, a JetStream publish ack, the entry id of XADD); a
  publish the broker did not confirm is `confirmed=False` with the reason, never an
  exception, because under faults that is an outcome to record;
- `stats()`: the broker's own counts (`BrokerStats`): redeliveries it made, messages
  not yet acknowledged, dead letters;
- `receive(timeout)`, `ack(delivery)`, `release()`: the consumer's side, with the
  broker's redelivery metadata on each `Delivery` (RabbitMQ's `redelivered` and a
  quorum queue's `x-delivery-count`, JetStream's `num_delivered`, the pending entry's
  delivery count in Redis). The probe reads dead letters with it; the tests prove
  each adapter's metadata with it. `release()` drops the connection without acking,
  as a crashed consumer does.

`open_broker(spec)` picks the module by the config's `broker:` name (BROKERS). No
Kafka adapter: no Kafka-protocol broker can be started on the project's machines, so
none would have been run by a test (docs/probe.md).

Each adapter is used from one thread at a time (pika and the NATS client's loop are
not shared); the producer opens one per publishing thread.
"""

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


@dataclass(frozen=True)
class Message:
    message_id: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


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


def open_broker(target: BrokerTarget) -> Broker:
    """The adapter for `target.broker` (not yet connected: it connects on first use)."""
    if target.broker == "rabbitmq":
        from harness.probe.brokers.rabbitmq import RabbitBroker

        return RabbitBroker(target)
    if target.broker == "nats":
        from harness.probe.brokers.nats import NatsBroker

        return NatsBroker(target)
    if target.broker == "redis-streams":
        from harness.probe.brokers.redis_streams import RedisStreamsBroker

        return RedisStreamsBroker(target)
    raise BrokerError(f"unknown broker {target.broker!r} (known: {', '.join(BROKERS)})")
