"""RabbitMQ (AMQP 0-9-1, pika's blocking client) behind the `Broker` interface.

- setup: the queue is used as it is when it exists (a passive declare: the consumer's
  own arguments, e.g. a quorum queue, are never contradicted); otherwise it is
  declared durable, with its dead-letter queue (`dead_letter`: the default exchange
  routes dead letters there) when the config names one.
- publish: on the default exchange to the queue, persistent (delivery mode 2), with
  `message_id` set and `mandatory`, on a channel in publisher-confirm mode: pika
  returns only once the broker confirmed it, and raises on a nack or an unroutable
  message, which is `confirmed=False`. A lost connection is `confirmed=False` too and
  the next publish reconnects.
- receive: `basic.get` without auto-ack; `redelivered` is AMQP's flag (set on any
  delivery after the first), `delivery_count` a quorum queue's `x-delivery-count`
  header (absent on the first delivery: 0 then; None on a classic queue).
  `release()` closes the connection, so the broker requeues every unacked message.
- stats: the management plugin's HTTP API (`management:`, e.g.
  `http://guest:guest@127.0.0.1:15672`): the queue's `message_stats.redeliver` (every
  redelivery the broker made), `messages_unacknowledged` + `messages_ready`, and the
  dead-letter queue's `messages`. Without `management:` the counts are None: AMQP
  itself tells no third party how often the broker redelivered.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit

import pika  # type: ignore[import-untyped]
import pika.exceptions  # type: ignore[import-untyped]
import requests

from harness.probe.brokers.base import BrokerError, BrokerStats, BrokerTarget, Delivery, Message, PublishAck

CONNECT_TIMEOUT = 5.0
STATS_TIMEOUT = 3.0


class RabbitBroker:
    def __init__(self, target: BrokerTarget) -> None:
        self.target = target
        self._connection: pika.BlockingConnection | None = None
        self._channel: Any = None
        self._session = requests.Session()
        self._types: dict[str, str] = {}  # queue -> classic | quorum | stream (management API)

    # --- connection ---------------------------------------------------------------------

    def _open(self) -> Any:
        if self._channel is not None and self._channel.is_open:
            return self._channel
        self.release()
        parameters = pika.URLParameters(self.target.url)
        parameters.socket_timeout = CONNECT_TIMEOUT
        parameters.blocked_connection_timeout = CONNECT_TIMEOUT
        parameters.connection_attempts = 1
        try:
            self._connection = pika.BlockingConnection(parameters)
            channel = self._connection.channel()
            channel.confirm_delivery()
        except (pika.exceptions.AMQPError, OSError) as error:
            self.release()
            raise BrokerError(f"rabbitmq {self.target.url}: cannot connect: {type(error).__name__}: {error}") from None
        self._channel = channel
        return channel

    def setup(self) -> None:
        channel = self._open()
        arguments: dict[str, Any] = {}
        if self.target.dead_letter:
            arguments = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": self.target.dead_letter}
        for queue, args in ((self.target.dead_letter, {}), (self.target.queue, arguments)):
            if not queue:
                continue
            try:
                channel.queue_declare(queue, passive=True)
            except pika.exceptions.ChannelClosedByBroker:  # 404: it does not exist yet
                channel = self._open()
                try:
                    channel.queue_declare(queue, durable=True, arguments=args)
                except pika.exceptions.AMQPError as error:
                    raise BrokerError(f"rabbitmq: cannot declare queue {queue!r}: {error}") from None

    def publish(self, message: Message) -> PublishAck:
        try:
            channel = self._open()
            channel.basic_publish(
                exchange="", routing_key=self.target.queue, body=message.body, mandatory=True,
                properties=pika.BasicProperties(**{"content_type": "application/json", **message.properties},
                                                message_id=message.message_id, headers=dict(message.headers),
                                                delivery_mode=pika.DeliveryMode.Persistent))
        except (pika.exceptions.UnroutableError, pika.exceptions.NackError) as error:
            return PublishAck(message.message_id, confirmed=False, error=f"{type(error).__name__}: {error}")
        except (pika.exceptions.AMQPError, BrokerError, OSError) as error:
            self.release()
            return PublishAck(message.message_id, confirmed=False, error=f"{type(error).__name__}: {error}"[:300])
        return PublishAck(message.message_id, confirmed=True)

    # --- the consumer's side --------------------------------------------------------------

    def receive(self, timeout: float, *, queue: str | None = None) -> Delivery | None:
        import time

        channel = self._open()
        deadline = time.monotonic() + timeout
        while True:
            method, properties, body = channel.basic_get(queue or self.target.queue, auto_ack=False)
            if method is not None:
                headers = properties.headers or {}
                # A quorum queue sets x-delivery-count from the second delivery on.
                quorum = self._quorum(queue or self.target.queue)
                count = int(headers.get("x-delivery-count") or 0) if quorum else None
                return Delivery(message_id=properties.message_id, body=body, redelivered=bool(method.redelivered),
                                delivery_count=count, handle=method.delivery_tag)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def _quorum(self, queue: str) -> bool:
        if queue not in self._types:
            info = self._queue_info(queue) if self.target.management else None
            self._types[queue] = (info or {}).get("type", "classic")
        return self._types[queue] == "quorum"

    def ack(self, delivery: Delivery) -> None:
        self._open().basic_ack(delivery.handle)

    def release(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            try:
                connection.close()
            except (pika.exceptions.AMQPError, OSError):
                pass

    # --- the broker's counts ----------------------------------------------------------------

    def _queue_info(self, queue: str) -> dict[str, Any] | None:
        assert self.target.management is not None
        parts = urlsplit(self.target.management)
        base = f"{parts.scheme}://{parts.hostname}:{parts.port}"
        vhost = urlsplit(self.target.url).path.lstrip("/") or "%2F"
        url = f"{base}/api/queues/{vhost}/{quote(queue, safe='')}"
        try:
            response = self._session.get(url, auth=(parts.username or "guest", parts.password or "guest"),
                                         timeout=STATS_TIMEOUT)
        except requests.RequestException as error:
            raise BrokerError(f"rabbitmq management {base}: {type(error).__name__}: {error}") from None
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise BrokerError(f"rabbitmq management GET {url} answered {response.status_code}")
        info: dict[str, Any] = response.json()
        return info

    def stats(self) -> BrokerStats:
        if self.target.management is None:
            return BrokerStats(redeliveries=None, unacknowledged=None)
        info = self._queue_info(self.target.queue) or {}
        dead = self._queue_info(self.target.dead_letter) if self.target.dead_letter else None
        # The management database is filled every collect_statistics_interval (5 s by
        # default): a queue not yet reported has no message_stats, which is "not known".
        stats = info.get("message_stats")
        counted = "messages" in info
        return BrokerStats(
            redeliveries=int(stats.get("redeliver", 0)) if stats is not None else None,
            unacknowledged=(int(info.get("messages_ready", 0)) + int(info.get("messages_unacknowledged", 0))
                            if counted else None),
            dead_letters=int(dead.get("messages", 0)) if dead and "messages" in dead else None,
            stored=int(stats.get("publish", 0)) if stats is not None else None)

    def close(self) -> None:
        self.release()
        self._session.close()


def consumer_count(url: str, queue: str) -> int | None:
    """How many consumers `queue` has now, by a passive declare (nothing is created);
    None while the broker does not answer or the queue does not exist yet. For a
    worker's readiness (`service.ready.consumers`, harness.probe.service)."""
    parameters = pika.URLParameters(url)
    parameters.socket_timeout = CONNECT_TIMEOUT
    parameters.connection_attempts = 1
    try:
        connection = pika.BlockingConnection(parameters)
    except (pika.exceptions.AMQPError, OSError):
        return None
    try:
        declared = connection.channel().queue_declare(queue, passive=True)
        return int(declared.method.consumer_count)
    except (pika.exceptions.AMQPError, OSError):
        return None  # 404: the worker has not declared its queue yet
    finally:
        try:
            connection.close()
        except (pika.exceptions.AMQPError, OSError):
            pass
