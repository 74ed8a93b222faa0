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

`open_broker(spec)` picks the module by the config's `broker:` name (BROKERS), or the
Celery adapter (harness.probe.brokers.celery) for an entry with `protocol: celery`. No
Kafka adapter: no Kafka-protocol broker can be started on the project's machines, so
none would have been run by a test (docs/probe.md).

Each adapter is used from one thread at a time (pika and the NATS client's loop are
not shared); the producer opens one per publishing thread.
"""

from __future__ import annotations

from harness.probe.brokers.base import (
    BROKERS,
    MESSAGE_ID_FIELD,
    Broker,
    BrokerError,
    BrokerStats,
    BrokerTarget,
    Delivery,
    Message,
    PublishAck,
)

__all__ = ["BROKERS", "MESSAGE_ID_FIELD", "Broker", "BrokerError", "BrokerStats", "BrokerTarget", "Delivery",
           "Message", "PublishAck", "open_broker"]


def open_broker(target: BrokerTarget) -> Broker:
    """The adapter for `target.broker` (not yet connected: it connects on first use)."""
    if target.protocol == "celery":
        from harness.probe.brokers.celery import CeleryBroker

        return CeleryBroker(target)
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
