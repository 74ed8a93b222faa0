"""NATS JetStream (nats-py) behind the `Broker` interface.

nats-py is asyncio; the adapter runs its own event loop on a thread of its own and
each call waits for its coroutine, so the probe's code stays synchronous.

- setup: the stream that holds the subject (`queue`) is used when one exists;
  otherwise a stream named after the subject ('.' and '*' as '_') is created, file
  storage; likewise for the dead-letter subject.
- publish: `js.publish(subject, body, headers={"Nats-Msg-Id": id, ...})`; the publish
  ack is the confirmation. JetStream drops a second publish of an id inside its
  duplicate window (2 min by default): the ack then says `duplicate`, which the probe
  records (the broker's dedupe, not the consumer's, handled that copy).
- receive: a pull consumer (durable `probe`, or `durable=`) with `ack_wait`;
  `delivery_count` is the message's `num_delivered` metadata. JetStream redelivers
  after AckWait, not on disconnect: `release()` just drops the connection.
- stats: every consumer of the stream (`consumers_info`): its deliveries
  (`delivered.consumer_seq` counts every delivery, `delivered.stream_seq` the last
  stream sequence delivered), so redeliveries = deliveries beyond the first of each
  stored message (exact for a consumer of the whole stream from its start, the usual
  durable work queue), and at least `num_redelivered`; `unacknowledged` = pending
  acks + messages not yet delivered, `dead_letters` the dead-letter stream's count.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.js.api import ConsumerConfig, StorageType

from harness.probe.brokers.base import BrokerError, BrokerStats, BrokerTarget, Delivery, Message, PublishAck

CALL_TIMEOUT = 10.0
PUBLISH_TIMEOUT = 5.0
PROBE_DURABLE = "probe"
T = TypeVar("T")


def stream_name(subject: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", subject)


class NatsBroker:
    def __init__(self, target: BrokerTarget, *, durable: str = PROBE_DURABLE, ack_wait: float = 2.0) -> None:
        self.target = target
        self.durable = durable
        self.ack_wait = ack_wait
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._nc: Any = None
        self._js: Any = None
        self._subs: dict[str, Any] = {}
        self._streams: dict[str, str] = {}

    # --- the loop ---------------------------------------------------------------------

    def _run(self, coroutine: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT) -> T:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=loop.run_forever, name="nats-broker", daemon=True)
            self._thread.start()
            self._loop = loop
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    async def _connected(self) -> Any:
        if self._nc is None or self._nc.is_closed:
            try:
                self._nc = await nats.connect(self.target.url, connect_timeout=3, max_reconnect_attempts=2,
                                              reconnect_time_wait=0.2, allow_reconnect=True)
            except (TimeoutError, nats.errors.Error, OSError) as error:
                raise BrokerError(f"nats {self.target.url}: cannot connect: {type(error).__name__}: {error}") from None
            self._js = self._nc.jetstream()
            self._subs.clear()
        return self._js

    async def _stream(self, subject: str) -> str:
        if subject not in self._streams:
            js = await self._connected()
            try:
                name = await js.find_stream_name_by_subject(subject)
            except nats.js.errors.NotFoundError:
                name = stream_name(subject)
                await js.add_stream(name=name, subjects=[subject], storage=StorageType.FILE)
            self._streams[subject] = name
        return self._streams[subject]

    # --- the interface ------------------------------------------------------------------

    def setup(self) -> None:
        async def declare() -> None:
            for subject in (self.target.queue, self.target.dead_letter):
                if subject:
                    await self._stream(subject)

        try:
            self._run(declare())
        except (nats.errors.Error, nats.js.errors.Error) as error:
            raise BrokerError(f"nats: cannot set up the stream of {self.target.queue!r}: {error}") from None

    def publish(self, message: Message) -> PublishAck:
        async def send() -> Any:
            js = await self._connected()
            return await js.publish(self.target.queue, message.body, timeout=PUBLISH_TIMEOUT,
                                    headers={**message.headers, "Nats-Msg-Id": message.message_id})

        try:
            ack = self._run(send(), timeout=PUBLISH_TIMEOUT + 5)
        except (nats.errors.Error, nats.js.errors.Error, BrokerError, OSError, TimeoutError) as error:
            return PublishAck(message.message_id, confirmed=False, error=f"{type(error).__name__}: {error}"[:300])
        return PublishAck(message.message_id, confirmed=True, duplicate=bool(ack.duplicate),
                          position=f"{ack.stream}:{ack.seq}")

    def receive(self, timeout: float, *, queue: str | None = None) -> Delivery | None:
        subject = queue or self.target.queue

        async def fetch() -> Any:
            js = await self._connected()
            await self._stream(subject)
            sub = self._subs.get(subject)
            if sub is None:
                sub = await js.pull_subscribe(subject, durable=f"{self.durable}_{stream_name(subject)}",
                                              config=ConsumerConfig(ack_wait=self.ack_wait))
                self._subs[subject] = sub
            try:
                messages = await sub.fetch(1, timeout=timeout)
            except nats.errors.TimeoutError:
                return None
            return messages[0] if messages else None

        msg = self._run(fetch(), timeout=timeout + CALL_TIMEOUT)
        if msg is None:
            return None
        count = int(msg.metadata.num_delivered)
        return Delivery(message_id=(msg.headers or {}).get("Nats-Msg-Id"), body=bytes(msg.data),
                        redelivered=count > 1, delivery_count=count, handle=msg)

    def ack(self, delivery: Delivery) -> None:
        self._run(delivery.handle.ack())

    def release(self) -> None:
        async def drop() -> None:
            if self._nc is not None and not self._nc.is_closed:
                await self._nc.close()
            self._nc = self._js = None
            self._subs.clear()

        if self._loop is not None:
            self._run(drop())

    def stats(self) -> BrokerStats:
        async def read() -> BrokerStats:
            js = await self._connected()
            stream = await self._stream(self.target.queue)
            redeliveries = 0
            unacknowledged = 0
            for info in await js.consumers_info(stream):
                if (info.name or "").startswith(f"{PROBE_DURABLE}_"):
                    continue  # the probe's own reader of dead letters, not a consumer of the team's
                delivered = info.delivered
                beyond = (delivered.consumer_seq or 0) - (delivered.stream_seq or 0) if delivered else 0
                redeliveries += max(beyond, info.num_redelivered or 0, 0)
                unacknowledged += (info.num_ack_pending or 0) + (info.num_pending or 0)
            state = (await js.stream_info(stream)).state
            dead = None
            if self.target.dead_letter:
                dead_info = await js.stream_info(await self._stream(self.target.dead_letter))
                dead = int(dead_info.state.messages)
            return BrokerStats(redeliveries=redeliveries, unacknowledged=unacknowledged, dead_letters=dead,
                               stored=int(state.last_seq or 0))

        try:
            return self._run(read())
        except (nats.errors.Error, nats.js.errors.Error) as error:
            raise BrokerError(f"nats: cannot read the consumers of {self.target.queue!r}: {error}") from None

    def close(self) -> None:
        if self._loop is None:
            return
        try:
            self.release()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._loop.close()
            self._loop = None
