"""Celery tasks (protocol v2) on RabbitMQ or Redis behind the `Broker` interface.

An entry with `protocol: celery` (harness.probe.messages.spec) hands this adapter a
`Message` whose body is `{"args": [...], "kwargs": {...}}`; the adapter publishes the
task `target.task` with those arguments and the message id as the Celery task id, so
a `duplicate` publish is the same task id again and a `same_fact_new_id` a new id.

- The message is Celery's own: `Celery().amqp.as_task_v2(...)` builds the protocol v2
  headers (lang, task, id, root_id, parent_id, argsrepr, kwargsrepr, origin, retries,
  ...), the properties (correlation_id) and the body `[args, kwargs, {callbacks,
  errbacks, chain, chord}]`; kombu's `Producer` publishes it JSON-serialised,
  persistent, to Celery's default routing for the queue (a direct exchange of the
  queue's name, routing key the queue's name, as a worker declares it), declaring
  that queue durable first.
- Confirmation: on RabbitMQ the connection is in publisher-confirm mode
  (`confirm_publish`), so a publish returns once the broker confirmed it and a nack
  or a lost connection is `confirmed=False`; on Redis the LPUSH's answer is the
  confirmation.
- stats on RabbitMQ: the management API, as harness.probe.brokers.rabbitmq reads it
  (`message_stats.redeliver`, ready + unacknowledged). On Redis, kombu's transport
  keeps a list per queue and, for every message delivered and not acknowledged, an
  entry of the `unacked` hash (`[payload, exchange, routing_key]`, indexed by the
  `unacked_index` zset): unacknowledged = LLEN(queue) + the `unacked` entries routed
  to the queue. Redis itself counts no redeliveries; kombu's restore of an unacked
  message (a worker's shutdown, or the visibility-timeout sweep) pushes the payload
  back with `headers.redelivered = True` (kombu/transport/redis.py,
  `_do_restore_message`). The adapter scans the list and the hash on every
  `stats()` and counts the distinct task ids it has seen so flagged: a lower bound
  (a message restored twice counts once; one restored, run and acknowledged between
  two polls is missed), never an invention.
- receive (dead letters, tests): kombu's `basic_get` without ack; `redelivered` is the
  broker's flag (AMQP) or kombu's (Redis).
"""

from __future__ import annotations

import importlib
import json
from typing import Any

import redis

from harness.probe.brokers.base import BrokerError, BrokerStats, BrokerTarget, Delivery, Message, PublishAck

CONNECT_TIMEOUT = 5.0
UNACKED_KEY = "unacked"  # kombu's Redis transport: Channel.unacked_key


class CeleryBroker:
    def __init__(self, target: BrokerTarget) -> None:
        if not target.task:
            raise BrokerError("protocol celery needs the task's registered name (task:)")
        try:
            from celery import Celery  # type: ignore[import-untyped]
        except ImportError:
            raise BrokerError("protocol celery needs Celery: pip install 'idempotency-chaos-harness[celery]'") from None
        self.target = target
        self._redis_transport = target.url.startswith("redis")
        self._app = Celery("harness-probe", broker=target.url, set_as_current=False)
        self._connection: Any = None
        self._producer: Any = None
        self._rabbit: Any = None
        self._redis: Any = (redis.Redis.from_url(target.url, socket_timeout=5, socket_connect_timeout=5)
                            if self._redis_transport else None)
        self._redelivered: set[str] = set()  # Redis: task ids seen with kombu's redelivered flag

    # --- connection ---------------------------------------------------------------------

    def _queue(self) -> Any:
        kombu = _kombu()
        return kombu.Queue(self.target.queue, kombu.Exchange(self.target.queue, "direct"), routing_key=self.target.queue,
                     durable=True)

    def _open(self) -> Any:
        if self._producer is not None:
            return self._producer
        kombu = _kombu()
        options = {} if self._redis_transport else {"confirm_publish": True}
        connection = kombu.Connection(self.target.url, connect_timeout=CONNECT_TIMEOUT, transport_options=options)
        try:
            connection.ensure_connection(max_retries=1)
            self._producer = kombu.Producer(connection.channel(), serializer="json")
        except Exception as error:  # noqa: BLE001 - kombu raises its transports' own errors
            connection.release()
            raise BrokerError(f"celery broker {self.target.url}: cannot connect: {type(error).__name__}: {error}") \
                from None
        self._connection = connection
        return self._producer

    def setup(self) -> None:
        producer = self._open()
        try:
            self._queue().bind(producer.channel).declare()
        except Exception as error:  # noqa: BLE001 - see _open
            raise BrokerError(f"celery broker: cannot declare queue {self.target.queue!r}: {error}") from None

    def publish(self, message: Message) -> PublishAck:
        try:
            call = json.loads(message.body)
            task = self._app.amqp.as_task_v2(message.message_id, self.target.task, args=call["args"],
                                             kwargs=call["kwargs"])
            producer = self._open()
            producer.publish(task.body, exchange=self.target.queue, routing_key=self.target.queue,
                             headers={**task.headers, **message.headers}, delivery_mode=2, retry=False,
                             **task.properties)
        except BrokerError as error:
            return PublishAck(message.message_id, confirmed=False, error=str(error)[:300])
        except Exception as error:  # noqa: BLE001 - a nack, a lost link: an outcome to record
            self.release()
            return PublishAck(message.message_id, confirmed=False, error=f"{type(error).__name__}: {error}"[:300])
        return PublishAck(message.message_id, confirmed=True)

    # --- the consumer's side --------------------------------------------------------------

    def receive(self, timeout: float, *, queue: str | None = None) -> Delivery | None:
        import time

        channel = self._open().channel
        deadline = time.monotonic() + timeout
        while True:
            got = channel.basic_get(queue or self.target.queue, no_ack=False)
            if got is not None:
                message = channel.message_to_python(got) if hasattr(channel, "message_to_python") else got
                headers = message.headers or {}
                redelivered = bool(message.delivery_info.get("redelivered") or headers.get("redelivered"))
                return Delivery(message_id=headers.get("id"), body=message.body, redelivered=redelivered,
                                delivery_count=None, handle=message)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def ack(self, delivery: Delivery) -> None:
        delivery.handle.ack()

    def release(self) -> None:
        connection, self._connection, self._producer = self._connection, None, None
        if connection is not None:
            try:
                connection.release()
            except Exception:  # noqa: BLE001 - already gone
                pass

    # --- the broker's counts ----------------------------------------------------------------

    def stats(self) -> BrokerStats:
        if not self._redis_transport:
            if self._rabbit is None:
                from harness.probe.brokers.rabbitmq import RabbitBroker

                self._rabbit = RabbitBroker(self.target)
            stats: BrokerStats = self._rabbit.stats()
            return stats
        try:
            waiting = self._redis.lrange(self.target.queue, 0, -1)
            unacked = self._redis.hvals(UNACKED_KEY)
        except redis.RedisError as error:
            raise BrokerError(f"redis {self.target.url}: cannot read kombu's queue: {error}") from None
        held = 0
        for raw in unacked:
            try:
                payload, _exchange, routing_key = json.loads(raw)
            except (ValueError, TypeError):
                continue
            if routing_key == self.target.queue:
                held += 1
                self._note_redelivered(payload)
        for raw in waiting:
            try:
                self._note_redelivered(json.loads(raw))
            except (ValueError, TypeError):
                continue
        return BrokerStats(redeliveries=len(self._redelivered), unacknowledged=len(waiting) + held)

    def _note_redelivered(self, payload: Any) -> None:
        headers = payload.get("headers") or {} if isinstance(payload, dict) else {}
        if headers.get("redelivered") and headers.get("id"):
            self._redelivered.add(str(headers["id"]))

    def close(self) -> None:
        self.release()
        if self._rabbit is not None:
            self._rabbit.close()
        if self._redis is not None:
            self._redis.close()


def _kombu() -> Any:
    """kombu, untyped to mypy (it ships no type information for its public names)."""
    return importlib.import_module("kombu")
