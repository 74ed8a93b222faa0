"""Jepsen-style final reads: after healing, read every order the history knows
through the app's public API, so the verdict does not rest on the export alone.

The export is the app's own account of its state; a bug in it hides whatever it
does not write. The final reads ask the same questions a client would ask
(`GET /api/v1/orders/<id>` with the order's tenant), and the checker cross-checks
both accounts (`final_reads_agree`). One line per order in `final_reads.ndjson`:

    {"order_id": "...", "tenant": "...", "status_code": 200, "order": {...} | null}

Orders are read from a small thread pool (the app serves several workers); a read
that cannot get an answer after a few attempts is a harness failure, because a
healed stack must answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import requests

from harness.errors import HarnessError

READ_THREADS = 8
READ_ATTEMPTS = 3
READ_TIMEOUT = 5.0
ORDER_OPERATIONS = ("create_order", "pay", "webhook", "publish", "read_order")


class OrderToRead(NamedTuple):
    order_id: str
    tenant: str


def orders_to_read(operations: Iterable[Mapping[str, Any]]) -> list[OrderToRead]:
    """Every order id the history names, with the tenant that owns it.

    The tenant of an order is the one whose create was answered with it; an order
    known only from payments takes the tenant of an operation that was not a
    deliberate cross-tenant attempt.
    """
    owners: dict[str, str] = {}
    guesses: dict[str, str] = {}
    for op in operations:
        name = op.get("op")
        if name not in ORDER_OPERATIONS:
            continue
        tenant = str(op.get("tenant") or "default")
        answer = op.get("answer")
        answered_id = answer.get("order_id") if isinstance(answer, Mapping) else None
        if name == "create_order" and op.get("type") == "ok":
            order_id = answered_id or op.get("order_id")
            if isinstance(order_id, str):
                owners[order_id] = tenant
            continue
        order_id = op.get("order_id")
        if isinstance(order_id, str) and not op.get("must_reject"):
            guesses.setdefault(order_id, tenant)
    for order_id, tenant in guesses.items():
        owners.setdefault(order_id, tenant)
    return [OrderToRead(order_id, tenant) for order_id, tenant in sorted(owners.items())]


def read_orders(app_url: str, orders: Iterable[OrderToRead], destination: Path) -> int:
    """Read each order and write one line per order; returns how many were read."""
    base = app_url.rstrip("/")
    local = threading.local()

    def read(order: OrderToRead) -> bytes:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        headers = {} if order.tenant == "default" else {"X-Tenant-ID": order.tenant}
        error: Exception | None = None
        for attempt in range(READ_ATTEMPTS):
            try:
                response = session.get(f"{base}/api/v1/orders/{order.order_id}", headers=headers,
                                        timeout=READ_TIMEOUT)
            except requests.RequestException as exc:
                error = exc
            else:
                if response.status_code < 500:
                    body = response.json() if response.status_code == 200 else None
                    return orjson.dumps({"order_id": order.order_id, "tenant": order.tenant,
                                         "status_code": response.status_code, "order": body},
                                        option=orjson.OPT_APPEND_NEWLINE)
                error = HarnessError(f"answered {response.status_code}")
            time.sleep(0.2 * (attempt + 1))
        raise HarnessError(f"final read of order {order.order_id} failed: {error}")

    count = 0
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool, open(destination, "wb") as handle:
        for line in pool.map(read, orders):
            handle.write(line)
            count += 1
    return count
