"""The message layer: `python -m target_app.consumer`.

Reads the payments stream in a consumer group and applies each entry through the
inbox (effect + processed-mark in one atomic script), then XACKs. Entries idle in
another consumer's hands longer than the reclaim time are taken over with
XAUTOCLAIM; an entry delivered more than `max_deliveries` times goes to the
dead-letter stream instead (XADD + XACK in one MULTI). SIGTERM/SIGINT stop the loop
between messages: the message in hand is either applied (one script) or left
pending for another consumer, never half-applied.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time

import redis

from target_app.errors import ConfigError
from target_app.inbox import HandlerFailed, Inbox, PaymentMessage
from target_app.keys import COUNTERS
from target_app.redis_client import make_redis
from target_app.settings import Settings

log = logging.getLogger("target_app.consumer")


def publish_payment(redis_client: redis.Redis, stream: str, message_id: str, order_id: str,
                    provider_ref: str, amount_cents: int) -> str:
    """XADD one payment message; returns the entry id (for the load generator)."""
    entry_id = redis_client.xadd(stream, {"message_id": message_id, "order_id": order_id,
                                          "provider_ref": provider_ref,
                                          "amount_cents": str(amount_cents)})
    return entry_id.decode() if isinstance(entry_id, bytes) else entry_id


class Consumer:
    def __init__(self, client: redis.Redis, settings: Settings, *, name: str | None = None,
                 inbox: Inbox | None = None) -> None:
        self.client = client  # decode_responses=True
        self.settings = settings
        self.name = name or settings.effective_consumer_name
        self.inbox = inbox or Inbox.for_settings(client, settings)
        self._claim_cursor = "0-0"

    def ensure_group(self) -> None:
        try:
            self.client.xgroup_create(self.settings.stream, self.settings.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    # one iteration ------------------------------------------------------------------
    def step(self, stop: threading.Event | None = None, *, block_ms: int | None = None) -> int:
        """Reclaim stuck entries, then read new ones; returns how many were handled."""
        stop = stop or threading.Event()
        handled = 0
        for entry_id, fields, deliveries in self.reclaim():
            if stop.is_set():
                return handled
            handled += self.handle(entry_id, fields, deliveries)
        if stop.is_set():
            return handled
        block = self.settings.consumer_block_ms if block_ms is None else block_ms
        reply = self.client.xreadgroup(self.settings.group, self.name, {self.settings.stream: ">"},
                                       count=self.settings.consumer_batch, block=block or None)
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                if stop.is_set():
                    return handled  # left pending; another consumer reclaims it
                handled += self.handle(entry_id, fields, 1)
        return handled

    def reclaim(self) -> list[tuple[str, dict, int]]:
        reply = self.client.xautoclaim(self.settings.stream, self.settings.group, self.name,
                                       min_idle_time=self.settings.reclaim_idle_ms,
                                       start_id=self._claim_cursor, count=self.settings.consumer_batch)
        self._claim_cursor = reply[0] or "0-0"
        claimed = [(entry_id, fields) for entry_id, fields in reply[1] if fields is not None]
        if not claimed:
            return []
        pending = self.client.xpending_range(self.settings.stream, self.settings.group,
                                             min=claimed[0][0], max=claimed[-1][0],
                                             count=len(claimed) * 4 + 16, consumername=self.name)
        counts = {item["message_id"]: int(item["times_delivered"]) for item in pending}
        return [(entry_id, fields, counts.get(entry_id, 1)) for entry_id, fields in claimed]

    def handle(self, entry_id: str, fields: dict, deliveries: int) -> int:
        message = PaymentMessage.from_fields(fields)
        if deliveries > self.settings.max_deliveries:
            self.dead_letter(entry_id, fields, deliveries, "too many deliveries")
            return 1
        if not message.message_id:
            self.dead_letter(entry_id, fields, deliveries, "no message_id")
            return 1
        try:
            outcome = self.inbox.process(message)
        except HandlerFailed as exc:
            log.warning("entry %s not applied (will be redelivered): %s", entry_id, exc)
            return 0
        log.debug("entry %s message %s: %s", entry_id, message.message_id, outcome)
        self.client.xack(self.settings.stream, self.settings.group, entry_id)
        return 1

    def dead_letter(self, entry_id: str, fields: dict, deliveries: int, reason: str) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.xadd(self.settings.dead_letter_stream, {
            "message_id": fields.get("message_id", ""), "entry_id": entry_id,
            "deliveries": str(deliveries), "reason": reason, "fields": json.dumps(fields)})
        pipe.xack(self.settings.stream, self.settings.group, entry_id)
        pipe.hincrby(COUNTERS, "messages_dead_lettered", 1)
        pipe.execute()
        log.warning("entry %s dead-lettered after %d deliveries: %s", entry_id, deliveries, reason)

    # the loop ------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        group_ready = False
        while not stop.is_set():
            try:
                if not group_ready:
                    self.ensure_group()
                    group_ready = True
                self.step(stop)
            except redis.RedisError as exc:
                log.warning("Redis unavailable: %s", exc)
                stop.wait(0.5)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"target_app.consumer: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum, _frame):
        log.info("signal %d: stopping after the message in hand", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    client = make_redis(settings.redis_url, timeout=max(settings.redis_timeout,
                                                         settings.consumer_block_ms / 1000 + 1))
    consumer = Consumer(client, settings)
    log.info("consumer %s on stream %s group %s (unsafe_disable=%s)", consumer.name,
             settings.stream, settings.group, sorted(settings.unsafe_disable) or "none")
    started = time.monotonic()
    consumer.run(stop)
    log.info("consumer %s stopped after %.1f s", consumer.name, time.monotonic() - started)
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
