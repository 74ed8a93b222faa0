"""What one run may judge on a stack that earlier runs used too.

`harness run` against a stack left by `harness up` exports state that includes
every earlier run's orders. The checker must judge only this run, so the export
is narrowed to what happened since the run started: older orders with their
payments and message effects drop out, each SKU's `added_total` drops by the
stock those older orders took (so conservation still balances), and the layer
counters become deltas. The export lists each order's payments right after it and
inventory after all orders, so one pass suffices.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any


def scoped_export(records: Iterable[dict[str, Any]], scope: Mapping[str, Any] | None) -> Iterator[dict[str, Any]]:
    if not scope:
        yield from records
        return
    since = float(scope["since"])
    counters_before: Mapping[str, Any] = scope.get("counters_before") or {}
    older_orders: set[str] = set()
    older_stock: dict[str, int] = {}
    for record in records:
        kind = record.get("kind")
        if kind == "order" and float(record.get("created_at") or 0) < since:
            older_orders.add(str(record.get("id")))
            sku = str(record.get("sku"))
            older_stock[sku] = older_stock.get(sku, 0) + int(record.get("quantity") or 0)
            continue
        if kind == "payment" and str(record.get("order_id")) in older_orders:
            continue
        if kind == "message_effect" and (
            str(record.get("order_id")) in older_orders or float(record.get("at") or 0) < since
        ):
            continue
        if kind == "inventory":
            record = {**record, "added_total": int(record.get("added_total") or 0)
                      - older_stock.get(str(record.get("sku")), 0)}
        elif kind == "counters":
            record = {key: (value - int(counters_before.get(key, 0))
                            if isinstance(value, int) and key != "kind" else value)
                      for key, value in record.items()}
        yield record


def counters_of(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The counters line of an export (the last one, which is where the app puts it)."""
    counters: dict[str, Any] = {}
    for record in records:
        if record.get("kind") == "counters":
            counters = {key: value for key, value in record.items() if key != "kind"}
    return counters
