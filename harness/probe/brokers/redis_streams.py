"""Redis Streams (redis-py) behind the `Broker` interface.

- setup: nothing to declare (XADD creates the stream); the consumer owns its group.
- publish: `XADD queue * message_id ID body BODY h:NAME VALUE...`; the entry id Redis
  answers is the confirmation (how durable it is depends on the server's
  `appendfsync`: the broker's business, not the probe's).
- receive: `XREADGROUP` in the group `probe` (created at id 0 when missing), or the
  group of `group=`; a redelivery is what a claimer gets with `XAUTOCLAIM` after the
  idle time, and `delivery_count` is the entry's count in extended `XPENDING`.
  `release()` forgets nothing: a Redis entry stays pending until XACK, whoever crashed.
- stats: Redis keeps no count of past redeliveries, only each *pending* entry's
  delivery count; the adapter reads every group's pending list on each `stats()`
  call (the probe calls it every few hundred ms) and remembers the highest count it
  saw per entry, so redeliveries = sum over entries of (highest count - 1). A
  redelivery acknowledged between two polls can be missed, never invented.
  `unacknowledged` is the groups' pending entries plus entries no group has read yet
  (XINFO GROUPS `lag`, Redis 7); `dead_letters` the length of the dead-letter stream.
"""

from __future__ import annotations

from typing import Any

import redis

from harness.probe.brokers.base import (
    MESSAGE_ID_FIELD,
    BrokerError,
    BrokerStats,
    BrokerTarget,
    Delivery,
    Message,
    PublishAck,
)

PROBE_GROUP = "probe"
PENDING_PAGE = 1000


class RedisStreamsBroker:
    def __init__(self, target: BrokerTarget, *, group: str = PROBE_GROUP, consumer: str = "probe-1") -> None:
        self.target = target
        self.group = group
        self.consumer = consumer
        self._client: Any = redis.Redis.from_url(target.url, socket_timeout=5, socket_connect_timeout=5)
        self._highest: dict[str, int] = {}  # entry id -> highest delivery count seen pending

    def setup(self) -> None:
        try:
            self._client.ping()
        except redis.RedisError as error:
            raise BrokerError(f"redis {self.target.url}: cannot connect: {error}") from None

    def publish(self, message: Message) -> PublishAck:
        fields: dict[str, Any] = {MESSAGE_ID_FIELD: message.message_id, "body": message.body}
        fields.update({f"h:{name}": value for name, value in message.headers.items()})
        try:
            entry = self._client.xadd(self.target.queue, fields)
        except redis.RedisError as error:
            return PublishAck(message.message_id, confirmed=False, error=f"{type(error).__name__}: {error}"[:300])
        return PublishAck(message.message_id, confirmed=True, position=_text(entry))

    def _ensure_group(self, stream: str) -> None:
        try:
            self._client.xgroup_create(stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise

    def receive(self, timeout: float, *, queue: str | None = None) -> Delivery | None:
        stream = queue or self.target.queue
        self._ensure_group(stream)
        # Pending entries idle past 0 ms first (a redelivery, as XAUTOCLAIM gives it), then new ones.
        claimed = self._client.xautoclaim(stream, self.group, self.consumer, min_idle_time=0, count=1)
        entries = claimed[1] if claimed and claimed[1] else None
        if not entries:
            read = self._client.xreadgroup(self.group, self.consumer, {stream: ">"}, count=1,
                                           block=max(1, int(timeout * 1000)))
            entries = read[0][1] if read else None
        if not entries:
            return None
        entry_id, fields = entries[0]
        pending = self._client.xpending_range(stream, self.group, min=entry_id, max=entry_id, count=1)
        count = int(pending[0]["times_delivered"]) if pending else 1
        body = fields.get(b"body", b"")
        message_id = fields.get(MESSAGE_ID_FIELD.encode())
        return Delivery(message_id=_text(message_id) if message_id is not None else None, body=bytes(body),
                        redelivered=count > 1, delivery_count=count, handle=(stream, entry_id))

    def ack(self, delivery: Delivery) -> None:
        stream, entry_id = delivery.handle
        self._client.xack(stream, self.group, entry_id)

    def release(self) -> None:
        self._client.connection_pool.disconnect()

    def stats(self) -> BrokerStats:
        stream = self.target.queue
        try:
            groups = self._client.xinfo_groups(stream) if self._client.exists(stream) else []
            unacknowledged = 0
            for group in groups:
                name = _text(group["name"])
                unacknowledged += int(group.get("pending", 0)) + int(group.get("lag") or 0)
                start = "-"
                while True:
                    page = self._client.xpending_range(stream, name, min=start, max="+", count=PENDING_PAGE)
                    for entry in page:
                        key = f"{name}/{_text(entry['message_id'])}"
                        self._highest[key] = max(self._highest.get(key, 0), int(entry["times_delivered"]))
                    if len(page) < PENDING_PAGE:
                        break
                    start = "(" + _text(page[-1]["message_id"])
            dead = self._client.xlen(self.target.dead_letter) if self.target.dead_letter else None
            stored = int(self._client.xlen(stream))
        except redis.RedisError as error:
            raise BrokerError(f"redis {self.target.url}: cannot read the stream's groups: {error}") from None
        redeliveries = sum(count - 1 for count in self._highest.values() if count > 1)
        return BrokerStats(redeliveries=redeliveries, unacknowledged=unacknowledged if groups else None,
                           dead_letters=int(dead) if dead is not None else None, stored=stored)

    def close(self) -> None:
        self._client.close()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
