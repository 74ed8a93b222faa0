"""The broker adapters (harness.probe.brokers) on real brokers: RabbitMQ, NATS JetStream
and Redis, each started by the test session on free loopback ports.

For each: a confirmed publish is stored with its id as the broker's own message id;
a message received and not acknowledged comes back flagged as a redelivery by the
broker's own metadata (AMQP `redelivered`, a quorum queue's `x-delivery-count`,
JetStream's `num_delivered`, the pending entry's delivery count in Redis), and the
adapter's `stats()` counts that redelivery the way the probe reads it.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pika
import pytest
import requests

from harness.ports import free_ports
from harness.probe.brokers import Broker, BrokerError, BrokerStats, BrokerTarget, Message, open_broker
from harness.probe.config import parse_config
from harness.probe.messages.play import _Watcher
from harness.probe.messages.producer import Producer
from tests.support.nats import NatsServer
from tests.support.rabbitmq import RabbitServer


@pytest.fixture
def brokers() -> Iterator[Callable[[BrokerTarget], Broker]]:
    opened: list[Broker] = []

    def open_(target: BrokerTarget) -> Broker:
        broker = open_broker(target)
        opened.append(broker)
        return broker

    yield open_
    for broker in opened:
        broker.close()


def wait_stats(broker: Broker, done: Callable[[BrokerStats], bool], timeout: float = 20.0) -> BrokerStats:
    """The broker's counts once `done` holds (RabbitMQ's management statistics lag by seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        stats = broker.stats()
        if done(stats) or time.monotonic() > deadline:
            return stats
        time.sleep(0.2)


# --- RabbitMQ (slow: the session's node takes 5-15 s to start) -------------------------

def rabbit_target(server: RabbitServer, queue: str, **extra: str) -> BrokerTarget:
    return BrokerTarget(broker="rabbitmq", url=server.url, queue=queue, management=server.management_url, **extra)


@pytest.mark.slow
def test_rabbitmq_confirmed_publish_carries_the_message_id(rabbitmq_server: RabbitServer, rabbitmq_queue: str,
                                                           brokers: Callable[[BrokerTarget], Broker]) -> None:
    broker = brokers(rabbit_target(rabbitmq_server, rabbitmq_queue))
    broker.setup()
    ack = broker.publish(Message("m-1", b'{"fact": 1}', {"x-probe-kind": "first"}))
    assert ack.confirmed and ack.error is None
    # Read back with pika itself, not the adapter: durable queue, persistent message, the id.
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_server.url))
    try:
        channel = connection.channel()
        declared = channel.queue_declare(rabbitmq_queue, passive=True)
        assert declared.method.message_count == 1
        method, properties, body = channel.basic_get(rabbitmq_queue, auto_ack=True)
        assert (properties.message_id, properties.delivery_mode, body) == ("m-1", 2, b'{"fact": 1}')
        assert properties.headers == {"x-probe-kind": "first"}
        assert method.redelivered is False
    finally:
        connection.close()


@pytest.mark.slow
def test_an_entry_s_headers_and_properties_reach_the_consumer_on_every_copy(
        rabbitmq_server: RabbitServer, rabbitmq_queue: str, tmp_path: Path) -> None:
    entry = {"name": "payments", "broker": "rabbitmq", "url": rabbitmq_server.url, "queue": rabbitmq_queue,
             "body": {"message_id": "{message_id}", "payment": "pay-{uuid}"}, "fact": "/payment", "count": 12,
             "headers": {"x-tenant": "t-{int:1-9}", "x-trace": "{message_id}"},
             "properties": {"type": "payment.created", "correlation_id": "{uuid}", "priority": 3},
             "effects": {"dsn": "postgresql://u@127.0.0.1/x", "query": "SELECT count(*) FROM p WHERE r = :fact"}}
    spec = parse_config({"messages": [entry]}).messages[0].spec
    producer = Producer(spec, tmp_path / "history", seed=7, nonce="n1", spread=0.0)
    producer.setup()
    producer.start()
    assert producer.wait(30)
    producer.stop()
    assert producer.error is None
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_server.url))
    received = []
    try:
        channel = connection.channel()
        while True:
            method, properties, body = channel.basic_get(rabbitmq_queue, auto_ack=True)
            if method is None:
                break
            received.append((properties, json.loads(body)))
    finally:
        connection.close()
    assert len(received) >= 12
    by_fact: dict[str, set[tuple[Any, ...]]] = {}
    for properties, body in received:
        headers = properties.headers
        assert headers["x-trace"] == properties.message_id == body["message_id"], headers
        assert str(headers["x-tenant"]).startswith("t-") and headers["x-probe-kind"]
        assert (properties.type, properties.priority, properties.content_type) == ("payment.created", 3,
                                                                                  "application/json")
        by_fact.setdefault(body["payment"], set()).add((properties.correlation_id, headers["x-tenant"]))
    # Every copy of one fact (a duplicate, a new id for the same fact) carries the same values.
    assert all(len(values) == 1 for values in by_fact.values()), by_fact


@pytest.mark.slow
def test_rabbitmq_unroutable_publish_is_not_confirmed(rabbitmq_server: RabbitServer,
                                                      brokers: Callable[[BrokerTarget], Broker]) -> None:
    # No queue of that name exists (no setup): mandatory + confirms make that a failed publish.
    broker = brokers(rabbit_target(rabbitmq_server, f"missing-{time.monotonic_ns()}"))
    ack = broker.publish(Message("m-2", b"{}"))
    assert not ack.confirmed and "Unroutable" in (ack.error or "")


@pytest.mark.slow
def test_rabbitmq_unacked_message_is_redelivered_and_counted(rabbitmq_server: RabbitServer, rabbitmq_queue: str,
                                                             brokers: Callable[[BrokerTarget], Broker]) -> None:
    producer = brokers(rabbit_target(rabbitmq_server, rabbitmq_queue))
    producer.setup()
    assert producer.publish(Message("m-3", b"{}")).confirmed
    consumer = brokers(rabbit_target(rabbitmq_server, rabbitmq_queue))
    first = consumer.receive(5)
    assert first is not None and first.message_id == "m-3" and not first.redelivered
    assert first.delivery_count is None  # a classic queue does not count
    consumer.release()  # the channel closes with the message unacked: the broker requeues it
    again = consumer.receive(5)
    assert again is not None and again.message_id == "m-3" and again.redelivered
    consumer.ack(again)
    stats = wait_stats(producer, lambda s: s.redeliveries == 1 and s.unacknowledged == 0)
    assert (stats.redeliveries, stats.unacknowledged) == (1, 0)
    assert_a_new_run_counts_from_zero(brokers(rabbit_target(rabbitmq_server, rabbitmq_queue)), redeliveries=1)


def assert_a_new_run_counts_from_zero(broker: Broker, *, redeliveries: int) -> None:
    """A probe run on a queue an earlier run used counts only its own redeliveries and
    publishes: the queue's counters cover its whole life (the false PASS of a rerun)."""
    watcher = _Watcher(broker)
    watcher.begin()
    assert watcher.before is not None and watcher.before["redeliveries"] == redeliveries, watcher.before
    stats = watcher.read()
    assert (stats.redeliveries, stats.stored) == (0, 0)
    assert watcher.highest == 0


@pytest.mark.slow
def test_rabbitmq_quorum_queue_counts_deliveries(rabbitmq_server: RabbitServer, rabbitmq_queue: str,
                                                 brokers: Callable[[BrokerTarget], Broker]) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_server.url))
    connection.channel().queue_declare(rabbitmq_queue, durable=True, arguments={"x-queue-type": "quorum"})
    connection.close()
    broker = brokers(rabbit_target(rabbitmq_server, rabbitmq_queue))
    broker.setup()  # the existing quorum queue is used as it is
    assert broker.publish(Message("m-4", b"{}")).confirmed
    counts = []
    for _ in range(3):
        delivery = broker.receive(5)
        assert delivery is not None and delivery.message_id == "m-4"
        counts.append((delivery.redelivered, delivery.delivery_count))
        broker.release()
    assert counts == [(False, 0), (True, 1), (True, 2)]


@pytest.mark.slow
def test_rabbitmq_dead_letters_are_counted(rabbitmq_server: RabbitServer, rabbitmq_queue: str,
                                           brokers: Callable[[BrokerTarget], Broker]) -> None:
    broker = brokers(rabbit_target(rabbitmq_server, rabbitmq_queue, dead_letter=f"{rabbitmq_queue}.dead"))
    broker.setup()
    assert broker.publish(Message("m-5", b"{}")).confirmed
    delivery = broker.receive(5)
    assert delivery is not None
    channel = broker._open()  # type: ignore[attr-defined]  # the consumer rejects it without requeue
    channel.basic_reject(delivery.handle, requeue=False)
    stats = wait_stats(broker, lambda s: s.dead_letters == 1)
    assert stats.dead_letters == 1
    parked = broker.receive(5, queue=f"{rabbitmq_queue}.dead")
    assert parked is not None and parked.message_id == "m-5"


@pytest.mark.slow
def test_rabbitmq_unreachable_is_one_broker_error(brokers: Callable[[BrokerTarget], Broker]) -> None:
    from harness.ports import free_port

    broker = brokers(BrokerTarget(broker="rabbitmq", url=f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F",
                                  queue="q"))
    with pytest.raises(BrokerError, match="cannot connect"):
        broker.setup()
    assert not broker.publish(Message("m-6", b"{}")).confirmed


@pytest.mark.slow
def test_rabbitmq_management_is_on_loopback(rabbitmq_server: RabbitServer) -> None:
    answer = requests.get(f"http://127.0.0.1:{rabbitmq_server.management_port}/api/overview",
                          auth=("guest", "guest"), timeout=5)
    assert answer.status_code == 200 and answer.json()["node"] == rabbitmq_server.node


@pytest.mark.slow
@contextmanager
def first_pick_held(monkeypatch: pytest.MonkeyPatch, module: object) -> Iterator[tuple[int, list[list[int]]]]:
    """`module.free_ports` whose first pick starts with a port this test holds (bound and
    listening): (that port, every pick made)."""
    picks: list[list[int]] = []

    def first_pick_taken(count: int, host: str = "127.0.0.1") -> list[int]:
        ports = free_ports(count, host)
        if not picks:
            ports[0] = held.getsockname()[1]
        picks.append(ports)
        return ports

    with socket.socket() as held:
        held.bind(("127.0.0.1", free_ports(1)[0]))
        held.listen()
        monkeypatch.setattr(module, "free_ports", first_pick_taken)
        yield held.getsockname()[1], picks


def test_a_rabbitmq_node_whose_port_was_taken_meanwhile_starts_on_fresh_ports(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CI: a port picked free was bound by another test's server before the node booted
    (`eaddrinuse`), and the session's node failed nine tests. Its first pick here is a
    port this test holds: the node must come up on fresh ones."""
    from tests.support import rabbitmq

    with first_pick_held(monkeypatch, rabbitmq) as (held, picks):
        server = RabbitServer()
        try:
            server.start()
            assert len(picks) == 2 and server.port == picks[1][0] != held
            connection = pika.BlockingConnection(pika.URLParameters(server.url))
            connection.close()
        finally:
            server.stop()


# --- NATS JetStream ---------------------------------------------------------------------

def test_a_nats_server_whose_port_was_taken_meanwhile_starts_on_a_fresh_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # As for the RabbitMQ node above: the first pick is a port this test holds.
    from tests.support import nats

    with first_pick_held(monkeypatch, nats) as (held, picks):
        server = NatsServer()
        try:
            server.start()
            assert len(picks) == 2 and server.port == picks[1][0] != held, picks
            assert nats.PORT_TAKEN in server.log_path.read_text().lower()  # the first start failed on it
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as client:
                assert client.recv(4).startswith(b"INFO")
        finally:
            server.stop()


def test_nats_publish_ack_and_duplicate_window(nats_server: NatsServer, nats_subject: str,
                                               brokers: Callable[[BrokerTarget], Broker]) -> None:
    broker = brokers(BrokerTarget(broker="nats", url=nats_server.url, queue=nats_subject))
    broker.setup()
    first = broker.publish(Message("n-1", b'{"a": 1}'))
    again = broker.publish(Message("n-1", b'{"a": 1}'))
    other = broker.publish(Message("n-2", b'{"a": 1}'))
    assert first.confirmed and not first.duplicate
    assert again.confirmed and again.duplicate  # JetStream's Nats-Msg-Id window dropped the copy
    assert other.confirmed and not other.duplicate
    delivery = broker.receive(3)
    assert delivery is not None and delivery.message_id == "n-1" and delivery.delivery_count == 1


def test_nats_unacked_message_is_redelivered_after_ack_wait(nats_server: NatsServer, nats_subject: str,
                                                            brokers: Callable[[BrokerTarget], Broker]) -> None:
    producer = brokers(BrokerTarget(broker="nats", url=nats_server.url, queue=nats_subject))
    producer.setup()
    assert producer.publish(Message("n-3", b"{}")).confirmed
    consumer = open_broker(BrokerTarget(broker="nats", url=nats_server.url, queue=nats_subject))
    from harness.probe.brokers.nats import NatsBroker

    assert isinstance(consumer, NatsBroker)
    consumer.durable, consumer.ack_wait = "worker", 1.0
    try:
        first = consumer.receive(3)
        assert first is not None and (first.redelivered, first.delivery_count) == (False, 1)
        again = consumer.receive(5)  # not acked: back after AckWait
        assert again is not None and again.message_id == "n-3"
        assert (again.redelivered, again.delivery_count) == (True, 2)
        consumer.ack(again)
    finally:
        consumer.close()
    stats = wait_stats(producer, lambda s: s.redeliveries == 1 and s.unacknowledged == 0)
    assert (stats.redeliveries, stats.unacknowledged) == (1, 0)
    assert_a_new_run_counts_from_zero(brokers(BrokerTarget(broker="nats", url=nats_server.url, queue=nats_subject)),
                                      redeliveries=1)


# --- Redis Streams ----------------------------------------------------------------------

def test_redis_entry_carries_the_id_and_a_claim_counts(redis_url: str,
                                                       brokers: Callable[[BrokerTarget], Broker]) -> None:
    import redis

    stream = f"probe-test-{time.monotonic_ns()}"
    broker = brokers(BrokerTarget(broker="redis-streams", url=redis_url, queue=stream))
    broker.setup()
    ack = broker.publish(Message("r-1", b'{"b": 2}', {"kind": "first"}))
    assert ack.confirmed and ack.position
    client = redis.Redis.from_url(redis_url)
    [(entry_id, fields)] = client.xrange(stream)
    assert fields == {b"message_id": b"r-1", b"body": b'{"b": 2}', b"h:kind": b"first"}
    first = broker.receive(1)
    assert first is not None and (first.message_id, first.redelivered, first.delivery_count) == ("r-1", False, 1)
    assert broker.stats().unacknowledged == 1
    broker.release()  # nothing is requeued: the entry stays pending until XACK
    again = broker.receive(1)  # claimed after its idle time (0 ms here)
    assert again is not None and again.message_id == "r-1"
    assert (again.redelivered, again.delivery_count) == (True, 2)
    stats = broker.stats()
    broker.ack(again)
    assert stats.redeliveries == 1
    assert broker.stats().unacknowledged == 0 and broker.stats().redeliveries == 1
    client.close()


def test_redis_a_new_run_counts_only_its_own_redeliveries(redis_url: str,
                                                          brokers: Callable[[BrokerTarget], Broker]) -> None:
    stream = f"probe-test-{time.monotonic_ns()}"
    target = BrokerTarget(broker="redis-streams", url=redis_url, queue=stream)
    earlier = brokers(target)
    earlier.setup()
    assert earlier.publish(Message("r-old", b"{}")).confirmed
    assert earlier.receive(1) is not None
    earlier.release()
    assert earlier.receive(1) is not None  # claimed again: an earlier run's redelivery, still pending
    assert earlier.stats().redeliveries == 1
    assert_a_new_run_counts_from_zero(brokers(target), redeliveries=1)
