"""Every Redis key the target app uses, in one place (prefix `ta:`).

Ids that become part of a key (order ids, SKUs) must pass `is_safe_id`: with `:`
allowed, an order id `x:payments` would name another order's payments list.
Tenants and Idempotency-Keys are length-prefixed instead, so any text is safe there.
"""

from __future__ import annotations

import re

PREFIX = "ta:"
COUNTERS = PREFIX + "counters"
ORDERS_INDEX = PREFIX + "orders"
SKUS_INDEX = PREFIX + "skus"
MESSAGE_EFFECTS = PREFIX + "message_effects"
INBOX_PROCESSED = PREFIX + "inbox:processed"
# entry id -> how many times the handler really failed on it (not Redis errors, not crashes)
INBOX_FAILURES = PREFIX + "inbox:failures"

SAFE_ID = re.compile(r"[A-Za-z0-9_.-]{1,200}")

COUNTER_NAMES = (
    "api_replays", "api_fingerprint_conflicts", "api_inflight_conflicts",
    "domain_already_paid", "domain_conflicts", "domain_amount_mismatches",
    "inbox_duplicates_skipped", "webhook_bad_signatures", "messages_dead_lettered",
    "api_recovered", "api_incomplete_bodies", "tenant_refusals", "messages_reclaimed",
)


def is_safe_id(value: object) -> bool:
    """True for a string that may be part of a Redis key (fullmatch: no trailing newline)."""
    return isinstance(value, str) and SAFE_ID.fullmatch(value) is not None


def idempotency_key(tenant: str, key: str) -> str:
    # The tenant's length makes the split unambiguous whatever either contains.
    return f"{PREFIX}idem:{len(tenant)}:{tenant}:{key}"


def order_by_idempotency_key(tenant: str, key: str) -> str:
    """The API layer's recovery point: which order a (tenant, key) created."""
    return f"{PREFIX}order-by-key:{len(tenant)}:{tenant}:{key}"


def order_key(order_id: str) -> str:
    return f"{PREFIX}order:{order_id}"


def payments_key(order_id: str) -> str:
    return f"{PREFIX}order:{order_id}:payments"


def inventory_key(sku: str) -> str:
    return f"{PREFIX}inventory:{sku}"
