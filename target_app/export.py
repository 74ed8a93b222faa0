"""The state export for the checker: streamed NDJSON (docs/internals.md).

Memory stays bounded: orders and SKUs are walked with SSCAN, lists and streams in
fixed-size chunks, each chunk fetched with one pipeline.

Nothing indexed is left out silently: an order in the index whose hash is empty or
cannot be decoded is exported as `{"kind":"order","id":...,"status":null,"broken":true}`.
Dead letters carry the message's own fields (`order_id`, `provider_ref`,
`amount_cents` or null), the `reason` and `valid` (all fields well-formed), so a
checker can tell a parked payment from a poison message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

import redis

from target_app.domain import Document, decode_order
from target_app.inbox import PaymentMessage
from target_app.keys import (
    COUNTER_NAMES,
    COUNTERS,
    MESSAGE_EFFECTS,
    ORDERS_INDEX,
    SKUS_INDEX,
    inventory_key,
    order_key,
    payments_key,
)
from target_app.replies import stream_entries, texts

CHUNK = 500


def _line(document: Mapping[str, object]) -> str:
    return json.dumps(document, separators=(",", ":")) + "\n"


def _sscan_chunks(client: redis.Redis, key: str) -> Iterator[list[str]]:
    cursor = 0
    while True:
        cursor, members = client.sscan(key, cursor=cursor, count=CHUNK)
        if members:
            yield sorted(texts(members))
        if int(cursor) == 0:
            return


def _decode(order_id: str, fields: Mapping[str, str]) -> Document | None:
    """The exported order, or None when the hash is empty or unreadable."""
    if not fields or not fields.get("status"):
        return None
    try:
        order = decode_order(order_id, fields)
    except (TypeError, ValueError):
        return None
    order.pop("provider_ref", None)
    return order


def _payment_line(order_id: str, raw: str) -> str:
    try:
        payment = json.loads(raw)
    except ValueError:
        payment = None
    if not isinstance(payment, dict):
        # Still evidence of a write to this order: report it, do not drop it.
        return _line({"kind": "payment", "order_id": order_id, "broken": True})
    return _line({"kind": "payment", **payment})


def _dead_letter(fields: Mapping[str, str]) -> Document:
    original: dict[str, str] = {}
    try:
        loaded = json.loads(fields.get("fields") or "{}")
        if isinstance(loaded, dict):
            original = {str(k): str(v) for k, v in loaded.items()}
    except ValueError:
        pass
    # Older dead letters kept the message only in `fields`; newer ones also flat.
    for name in ("message_id", "order_id", "provider_ref", "amount_cents"):
        if name not in original and fields.get(name):
            original[name] = fields[name]
    message = PaymentMessage.from_fields(original)
    try:
        deliveries = int(fields.get("deliveries", 0))
    except ValueError:
        deliveries = 0
    return {"kind": "dead_letter", "message_id": message.message_id or None,
            "entry_id": fields.get("entry_id"), "deliveries": deliveries,
            "reason": fields.get("reason") or None, "order_id": message.order_id or None,
            "provider_ref": message.provider_ref or None, "amount_cents": message.amount_cents,
            "valid": message.valid}


def export_lines(client: redis.Redis, *, dead_letter_stream: str) -> Iterator[str]:
    """Every order, payment, message effect, inventory level, dead letter, then counters."""
    for order_ids in _sscan_chunks(client, ORDERS_INDEX):
        pipe = client.pipeline(transaction=False)
        for order_id in order_ids:
            pipe.hgetall(order_key(order_id))
            pipe.lrange(payments_key(order_id), 0, -1)
        replies = pipe.execute()
        for index, order_id in enumerate(order_ids):
            fields, payments = replies[2 * index], replies[2 * index + 1]
            order = _decode(order_id, fields)
            if order is None:
                yield _line({"kind": "order", "id": order_id, "status": None, "broken": True})
                for raw in payments:
                    yield _payment_line(order_id, raw)
                continue
            yield _line({"kind": "order", **order})
            for raw in payments:
                yield _payment_line(order_id, raw)

    start = 0
    while True:
        effects = client.lrange(MESSAGE_EFFECTS, start, start + CHUNK - 1)
        for raw in effects:
            yield _line({"kind": "message_effect", **json.loads(raw)})
        if len(effects) < CHUNK:
            break
        start += CHUNK

    for skus in _sscan_chunks(client, SKUS_INDEX):
        pipe = client.pipeline(transaction=False)
        for sku in skus:
            pipe.hmget(inventory_key(sku), "available", "added_total")
        for sku, (available, added) in zip(skus, pipe.execute(), strict=True):
            if available is None:
                continue
            yield _line({"kind": "inventory", "sku": sku, "available": int(available),
                         "added_total": int(added or 0)})

    last = "-"
    while True:
        entries = stream_entries(client.xrange(dead_letter_stream, min=last, max="+", count=CHUNK))
        for _entry_id, fields in entries:
            yield _line(_dead_letter(fields))
        if len(entries) < CHUNK:
            break
        last = "(" + entries[-1][0]

    raw_counters = client.hgetall(COUNTERS)
    counters = {name: int(raw_counters.get(name, 0)) for name in COUNTER_NAMES}
    yield _line({"kind": "counters", **counters})
