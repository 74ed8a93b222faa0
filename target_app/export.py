"""The state export for the checker: streamed NDJSON (docs/internals.md).

Memory stays bounded: orders and SKUs are walked with SSCAN, lists and streams in
fixed-size chunks, each chunk fetched with one pipeline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import redis

from target_app.domain import decode_order
from target_app.keys import (COUNTER_NAMES, COUNTERS, MESSAGE_EFFECTS, ORDERS_INDEX, SKUS_INDEX,
                             inventory_key, order_key, payments_key)

CHUNK = 500


def _line(document: dict) -> str:
    return json.dumps(document, separators=(",", ":")) + "\n"


def _sscan_chunks(client: redis.Redis, key: str) -> Iterator[list[str]]:
    cursor = 0
    while True:
        cursor, members = client.sscan(key, cursor=cursor, count=CHUNK)
        if members:
            yield sorted(members)
        if int(cursor) == 0:
            return


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
            if not fields:
                continue
            order = decode_order(order_id, fields)
            order.pop("provider_ref", None)
            yield _line({"kind": "order", **order})
            for raw in payments:
                yield _line({"kind": "payment", **json.loads(raw)})

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
        for sku, (available, added) in zip(skus, pipe.execute()):
            if available is None:
                continue
            yield _line({"kind": "inventory", "sku": sku, "available": int(available),
                         "added_total": int(added or 0)})

    last = "-"
    while True:
        entries = client.xrange(dead_letter_stream, min=last, max="+", count=CHUNK)
        for _entry_id, fields in entries:
            yield _line({"kind": "dead_letter", "message_id": fields.get("message_id") or None,
                         "entry_id": fields.get("entry_id"),
                         "deliveries": int(fields.get("deliveries", 0))})
        if len(entries) < CHUNK:
            break
        last = "(" + entries[-1][0]

    raw_counters = client.hgetall(COUNTERS)
    counters = {name: int(raw_counters.get(name, 0)) for name in COUNTER_NAMES}
    yield _line({"kind": "counters", **counters})
