"""The inbox: a message's effect and its processed-mark in one atomic step.

The handler's effect is the domain's `mark_paid` (source `message`) plus a
`message_effect` receipt (docs/internals.md), whatever the domain answered. With
the inbox working, a message id produces at most one receipt, however often the
broker redelivers it. Mutants (TARGET_APP_UNSAFE_DISABLE):
- `inbox`: no dedup at all; every delivery runs the handler.
- `inbox-nonatomic`: check processed → (handler delay) → run the handler → mark,
  as separate steps: the naive race two consumers can both win.
A message whose order id cannot name an order (not `[A-Za-z0-9_.-]{1,200}`) is
recorded as `unknown_order` without touching any order key; a message missing a
field or with a bad amount is recorded as `invalid`. Either way it is handled (and
acknowledged), never retried. `process` raises HandlerFailed only when the handler
itself failed; a Redis error propagates as redis.RedisError, so the consumer can
tell a transient store problem from a failing message.

Crash point `consumer.after_effect` (crashpoints.py) comes right after the effect:
with the atomic inbox the processed-mark is already written there, with
`inbox-nonatomic` it is written after the point.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from target_app.crashpoints import CrashPoints
from target_app.domain import MARK_PAID_FUNCTION, MAX_AMOUNT_CENTS, payment_json
from target_app.errors import TargetAppError
from target_app.keys import (
    COUNTERS,
    INBOX_PROCESSED,
    MESSAGE_EFFECTS,
    is_safe_id,
    order_key,
    payments_key,
)
from target_app.validation import is_identifier

if TYPE_CHECKING:
    from target_app.settings import Settings

# KEYS[1] order hash, KEYS[2] its payments list, KEYS[3] counters hash,
# KEYS[4] set of processed message ids, KEYS[5] message_effect list
# ARGV[1] message_id, ARGV[2] provider_ref, ARGV[3] amount_cents, ARGV[4] payment JSON,
# ARGV[5] now, ARGV[6] domain guard ("1"/"0"), ARGV[7] dedup ("1" check the inbox first),
# ARGV[8] mark ("1" add the id to the processed set), ARGV[9] "apply" (run mark_paid) or
# the outcome to record without applying ("invalid", "unknown_order": KEYS[1] and
# KEYS[2] are then never touched), ARGV[10] the receipt JSON without its closing
# `"outcome":"..."}` part, ARGV[11] amount check ("1"/"0", `domain-amount`)
# Returns the outcome, or "duplicate" when the inbox already holds the message id.
INBOX_LUA = MARK_PAID_FUNCTION + """
if ARGV[7] == '1' and redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[3], 'inbox_duplicates_skipped', 1)
  return 'duplicate'
end
local outcome = ARGV[9]
if outcome == 'apply' then
  outcome = mark_paid(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6],
                      ARGV[11], '')
end
redis.call('RPUSH', KEYS[5], ARGV[10] .. '"outcome":"' .. outcome .. '"}')
if ARGV[8] == '1' then
  redis.call('SADD', KEYS[4], ARGV[1])
end
return outcome
"""


class HandlerFailed(TargetAppError):
    """The handler failed; nothing was marked, so the redelivery retries."""


@dataclass(frozen=True)
class PaymentMessage:
    message_id: str
    order_id: str
    provider_ref: str
    amount_cents: int | None  # None: not a positive integer (invalid message)

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> PaymentMessage:
        raw = fields.get("amount_cents", "")
        amount = int(raw) if raw.isascii() and raw.isdigit() and 0 < int(raw) <= MAX_AMOUNT_CENTS else None
        return cls(message_id=fields.get("message_id", ""), order_id=fields.get("order_id", ""),
                   provider_ref=fields.get("provider_ref", ""), amount_cents=amount)

    @property
    def valid(self) -> bool:
        """Well-formed: a message id, an order id that can name an order, a provider
        ref and a positive amount (what a dead letter's `valid` reports)."""
        return (is_identifier(self.message_id) and is_safe_id(self.order_id)
                and is_identifier(self.provider_ref) and self.amount_cents is not None)

    @property
    def disposition(self) -> str:
        """`apply`, or the outcome recorded without applying: `unknown_order` for an
        order id that names no order, `invalid` for a missing or malformed field."""
        if not (is_identifier(self.provider_ref) and self.amount_cents is not None and self.order_id):
            return "invalid"
        return "apply" if is_safe_id(self.order_id) else "unknown_order"


class Inbox:
    def __init__(self, client: redis.Redis, *, mode: str = "atomic", domain_guard: bool = True,
                 amount_check: bool = True, handler_delay_ms: int = 0,
                 before_apply: Callable[[PaymentMessage], None] | None = None,
                 crash_points: CrashPoints | None = None) -> None:
        if mode not in ("atomic", "none", "nonatomic"):
            raise ValueError(f"unknown inbox mode {mode!r}")
        self.client = client
        self.mode = mode
        self.domain_guard = domain_guard
        self.amount_check = amount_check
        self.handler_delay = handler_delay_ms / 1000.0
        self.before_apply = before_apply
        self.crash_points = crash_points or CrashPoints(None, "consumer")
        self._script = client.register_script(INBOX_LUA)

    @classmethod
    def for_settings(cls, client: redis.Redis, settings: Settings, **kwargs: Any) -> Inbox:
        mode = "none" if settings.unsafe("inbox") else "nonatomic" if settings.unsafe("inbox-nonatomic") else "atomic"
        return cls(client, mode=mode, domain_guard=not settings.unsafe("domain"),
                   amount_check=not settings.unsafe("domain-amount"), handler_delay_ms=settings.handler_delay_ms, **kwargs)

    def process(self, message: PaymentMessage) -> str:
        """Run the handler once per message id; returns the outcome or `duplicate`.

        Raises HandlerFailed when the handler failed, redis.RedisError when Redis did."""
        if not message.message_id:
            raise ValueError("a message without message_id cannot be deduplicated")
        if self.mode == "nonatomic":
            return self._process_nonatomic(message)
        self._prepare(message)
        outcome = self._run(message, dedup=self.mode == "atomic", mark=True)
        if outcome != "duplicate":
            self.crash_points.reach("consumer.after_effect")
        return outcome

    def _prepare(self, message: PaymentMessage) -> None:
        if self.handler_delay:
            time.sleep(self.handler_delay)
        if self.before_apply is not None:
            try:
                self.before_apply(message)
            except Exception as exc:
                raise HandlerFailed(f"message {message.message_id}: handler failed: {exc}") from exc

    def _process_nonatomic(self, message: PaymentMessage) -> str:
        # The naive inbox: three separate steps with a window between check and mark.
        if self.client.sismember(INBOX_PROCESSED, message.message_id):
            self.client.hincrby(COUNTERS, "inbox_duplicates_skipped", 1)
            return "duplicate"
        self._prepare(message)
        outcome = self._run(message, dedup=False, mark=False)
        self.crash_points.reach("consumer.after_effect")
        self.client.sadd(INBOX_PROCESSED, message.message_id)
        return outcome

    def _run(self, message: PaymentMessage, *, dedup: bool, mark: bool) -> str:
        now = time.time()
        receipt = json.dumps({"message_id": message.message_id, "order_id": message.order_id or None,
                              "provider_ref": message.provider_ref or None, "at": now},
                             separators=(",", ":"))
        receipt_head = receipt[:-1] + ","
        amount = message.amount_cents or 0
        disposition = message.disposition
        # An order id that is not a safe id never becomes a key: the script gets the
        # key of an empty id instead and, with this disposition, does not touch it.
        target = message.order_id if disposition == "apply" else ""
        return str(self._script(
            keys=[order_key(target), payments_key(target), COUNTERS, INBOX_PROCESSED, MESSAGE_EFFECTS],
            args=[message.message_id, message.provider_ref, amount,
                  payment_json(message.order_id, message.provider_ref, amount, "message",
                               message.message_id, now),
                  repr(now), "1" if self.domain_guard else "0", "1" if dedup else "0",
                  "1" if mark else "0", disposition, receipt_head,
                  "1" if self.amount_check else "0"],
        ))
