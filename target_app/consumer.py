"""The message layer: `python -m target_app.consumer`.

Reads the payments stream in a consumer group and applies each entry through the
inbox (effect + processed-mark in one atomic script), then XACKs. Entries idle in
another consumer's hands longer than the reclaim time are taken over with
XAUTOCLAIM (counted as `messages_reclaimed`).

Dead letters (XADD to the dead-letter stream + XACK + counter in one MULTI) are for
messages that cannot succeed, never for trouble around them:
- only real handler failures count (HandlerFailed; per entry in `ta:inbox:failures`);
  when they reach `max_deliveries` the entry is parked with reason
  `handler failed N times`. A Redis error leaves the entry pending and counts
  nothing; a consumer crash or pause only raises the raw delivery count;
- a safety cap on raw deliveries (10 x max_deliveries) parks an entry that keeps
  coming back whatever the cause (`delivered N times`);
- an entry without message_id cannot be deduplicated: `no message_id`.
The `inbox-dead-letter` negative control parks an entry on its first failure of any
kind (a Redis error included) and on any repeated delivery.
SIGTERM/SIGINT stop the loop between messages: the message in hand is either
applied (one script) or left pending for another consumer, never half-applied.

Crash points (crashpoints.py): `consumer.after_read` when an entry is in hand,
`consumer.after_reclaim` after XAUTOCLAIM took some over, `consumer.after_effect`
(in the inbox), `consumer.after_inbox_mark` before the XACK (`drop-reply` there: the
XACK is never sent) and `consumer.after_ack` after it. An injected `error` leaves
the entry pending and counts nothing, like a Redis error. The `consumer-ack-early`
negative control acknowledges before the effect: it reads with NOACK (every entry of
a batch is acknowledged on delivery) and XACKs a reclaimed entry before applying it,
so a crash after the acknowledgement loses the entries in hand.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

import redis

from target_app.crashpoints import CrashPointError, CrashPoints
from target_app.errors import ConfigError
from target_app.inbox import HandlerFailed, Inbox, PaymentMessage
from target_app.keys import COUNTERS, INBOX_FAILURES
from target_app.redis_client import make_redis
from target_app.replies import read_group_entries, stream_entries
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
                 inbox: Inbox | None = None, crash_points: CrashPoints | None = None) -> None:
        self.client = client  # decode_responses=True
        self.settings = settings
        self.name = name or settings.effective_consumer_name
        self.crash_points = crash_points or CrashPoints.for_settings(settings, "consumer")
        self.inbox = inbox or Inbox.for_settings(client, settings, crash_points=self.crash_points)
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
        try:
            reclaimed = self.reclaim()
        except CrashPointError as exc:
            log.warning("reclaimed entries left pending: %s", exc)  # taken over again later
            reclaimed = []
        for entry_id, fields, deliveries in reclaimed:
            if stop.is_set():
                return handled
            handled += self.handle(entry_id, fields, deliveries)
        if stop.is_set():
            return handled
        block = self.settings.consumer_block_ms if block_ms is None else block_ms
        # The `consumer-ack-early` control reads with NOACK (auto-acknowledge, a classic
        # consumer bug): the whole batch is acknowledged on delivery, before any effect.
        reply = self.client.xreadgroup(self.settings.group, self.name, {self.settings.stream: ">"},
                                       count=self.settings.consumer_batch, block=block or None,
                                       noack=self.settings.unsafe("consumer-ack-early"))
        for entry_id, fields in read_group_entries(reply):
            if stop.is_set():
                return handled  # left pending; another consumer reclaims it
            handled += self.handle(entry_id, fields, 1)
        return handled

    def reclaim(self) -> list[tuple[str, dict[str, str], int]]:
        reply = self.client.xautoclaim(self.settings.stream, self.settings.group, self.name,
                                       min_idle_time=self.settings.reclaim_idle_ms,
                                       start_id=self._claim_cursor, count=self.settings.consumer_batch)
        self._claim_cursor = reply[0] or "0-0"
        # A deleted entry that is still pending comes back without fields: nothing to handle.
        claimed = [(entry_id, fields) for entry_id, fields in stream_entries(reply[1]) if fields]
        if not claimed:
            return []
        # One round trip: the delivery counts of what was claimed, and the count of reclaims.
        pipe = self.client.pipeline(transaction=False)
        pipe.xpending_range(self.settings.stream, self.settings.group, min=claimed[0][0],
                            max=claimed[-1][0], count=len(claimed) * 4 + 16, consumername=self.name)
        pipe.hincrby(COUNTERS, "messages_reclaimed", len(claimed))
        pending, _ = pipe.execute()
        counts = {item["message_id"]: int(item["times_delivered"]) for item in pending}
        self.crash_points.reach("consumer.after_reclaim")
        return [(entry_id, fields, counts.get(entry_id, 1)) for entry_id, fields in claimed]

    def handle(self, entry_id: str, fields: dict[str, str], deliveries: int) -> int:
        """Apply one entry, or park it (see the module docstring); returns 1 when the
        entry is done with (acknowledged), 0 when it stays pending."""
        try:
            return self._handle(entry_id, fields, deliveries)
        except CrashPointError as exc:
            log.warning("entry %s left pending: %s", entry_id, exc)
            return 0

    def _handle(self, entry_id: str, fields: dict[str, str], deliveries: int) -> int:
        self.crash_points.reach("consumer.after_read")
        message = PaymentMessage.from_fields(fields)
        eager = self.settings.unsafe("inbox-dead-letter")
        if not message.message_id:
            self.dead_letter(entry_id, fields, deliveries, "no message_id")
            return 1
        if deliveries > (1 if eager else self.settings.dead_letter_cap):
            self.dead_letter(entry_id, fields, deliveries, f"delivered {deliveries} times")
            return 1
        ack_early = self.settings.unsafe("consumer-ack-early")
        if ack_early:
            # The control: the broker is told "done" before the effect exists.
            self._ack(entry_id)
            self.crash_points.reach("consumer.after_ack")
        try:
            outcome = self.inbox.process(message)
        except HandlerFailed as exc:
            failures = 1 if eager else int(self.client.hincrby(INBOX_FAILURES, entry_id, 1))
            if failures >= (1 if eager else self.settings.max_deliveries):
                self.dead_letter(entry_id, fields, deliveries, f"handler failed {failures} times")
                return 1
            log.warning("entry %s not applied (failure %d, will be redelivered): %s",
                        entry_id, failures, exc)
            return 0
        except redis.RedisError:
            if eager:
                # The negative control: a Redis blip parks a valid payment.
                try:
                    self.dead_letter(entry_id, fields, deliveries, "handler failed 1 times")
                    return 1
                except redis.RedisError:
                    pass  # still down: the entry stays pending and its redelivery is parked
            raise  # transient: the entry stays pending, nothing is counted against it
        log.debug("entry %s message %s: %s", entry_id, message.message_id, outcome)
        if self.crash_points.reach("consumer.after_inbox_mark") and not ack_early:
            return 0  # drop-reply: the XACK is never sent; the entry is reclaimed later
        if not ack_early:
            self._ack(entry_id)
            self.crash_points.reach("consumer.after_ack")
        return 1

    def _ack(self, entry_id: str) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.xack(self.settings.stream, self.settings.group, entry_id)
        pipe.hdel(INBOX_FAILURES, entry_id)  # same round trip; a no-op on the usual path
        pipe.execute()

    def dead_letter(self, entry_id: str, fields: dict[str, str], deliveries: int, reason: str) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.xadd(self.settings.dead_letter_stream, {
            "message_id": fields.get("message_id", ""), "entry_id": entry_id,
            "deliveries": str(deliveries), "reason": reason,
            "order_id": fields.get("order_id", ""), "provider_ref": fields.get("provider_ref", ""),
            "amount_cents": fields.get("amount_cents", ""), "fields": json.dumps(fields)})
        pipe.xack(self.settings.stream, self.settings.group, entry_id)
        pipe.hincrby(COUNTERS, "messages_dead_lettered", 1)
        pipe.hdel(INBOX_FAILURES, entry_id)
        pipe.execute()
        log.warning("entry %s dead-lettered after %d deliveries: %s", entry_id, deliveries, reason)

    # the loop ------------------------------------------------------------------------
    def run(self, stop: threading.Event, *, heartbeat: Path | None = None) -> None:
        group_ready = False
        while not stop.is_set():
            if heartbeat is not None:
                # Touched on every pass, Redis reachable or not: a stale file means this
                # loop is stuck or dead, which a Redis ping would not tell (docker-compose.yml).
                touch_heartbeat(heartbeat)
            try:
                if not group_ready:
                    self.ensure_group()
                    group_ready = True
                self.step(stop)
            except redis.RedisError as exc:
                log.warning("Redis unavailable: %s", exc)
                stop.wait(0.5)


# Longer than one loop pass can take under a fault: a blocked read (consumer_block_ms)
# plus a Redis call that runs into its socket timeout, a few times over.
HEARTBEAT_MAX_AGE = 30.0


def touch_heartbeat(path: Path) -> None:
    try:
        os.utime(path)
    except FileNotFoundError:
        path.touch()


def check_heartbeat(path: Path, max_age: float = HEARTBEAT_MAX_AGE) -> bool:
    """True when the loop touched `path` within max_age seconds (a container health check)."""
    try:
        return time.time() - path.stat().st_mtime <= max_age
    except OSError:
        return False  # not started yet, or another container's path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m target_app.consumer")
    parser.add_argument("--heartbeat", type=Path, help="touch this file on every loop pass")
    parser.add_argument("--check", type=Path, metavar="HEARTBEAT",
                        help="exit 0 if the consumer touched HEARTBEAT recently, else 1; start nothing")
    parser.add_argument("--max-age", type=float, default=HEARTBEAT_MAX_AGE,
                        help=f"seconds for --check (default {HEARTBEAT_MAX_AGE:g})")
    args = parser.parse_args(argv)
    if args.check is not None:
        return 0 if check_heartbeat(args.check, args.max_age) else 1
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"target_app.consumer: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
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
    consumer.run(stop, heartbeat=args.heartbeat)
    log.info("consumer %s stopped after %.1f s", consumer.name, time.monotonic() - started)
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
