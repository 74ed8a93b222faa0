"""Every Redis key the target app uses, in one place (prefix `ta:`)."""

from __future__ import annotations

PREFIX = "ta:"
COUNTERS = PREFIX + "counters"
ORDERS_INDEX = PREFIX + "orders"
SKUS_INDEX = PREFIX + "skus"
MESSAGE_EFFECTS = PREFIX + "message_effects"
INBOX_PROCESSED = PREFIX + "inbox:processed"

COUNTER_NAMES = (
    "api_replays", "api_fingerprint_conflicts", "api_inflight_conflicts",
    "domain_already_paid", "domain_conflicts", "domain_amount_mismatches",
    "inbox_duplicates_skipped", "webhook_bad_signatures", "messages_dead_lettered",
)


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
