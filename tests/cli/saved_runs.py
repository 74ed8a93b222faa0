"""A small saved run directory, written the way the load processes and the runner write
one, for the tests of `harness check`: two orders each paid once (a pass), or one paid
twice (a violation of one payment per order)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.history import Client, HistoryWriter, body_digest


def _ndjson(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def saved_run(root: Path, *, paid_twice: bool = False) -> Path:
    run_dir = root / "runs" / ("twice" if paid_twice else "once")
    export: list[dict[str, Any]] = []
    for user in (1, 2):
        order, key = f"order-{user}", f"key-{user}"
        with HistoryWriter(run_dir / "histories" / f"user{user}.jsonl") as writer:
            client = Client(writer, worker="cli", user=user)
            client.invoke("create_order", idempotency_key=key, sku="sku-1", quantity=1, amount_cents=500).ok(
                status=201, order_id=order, body_digest=body_digest(order.encode()), replayed=False)
            client.invoke("pay", idempotency_key=f"pay-{user}", order_id=order, provider_ref=f"ref-{user}",
                          amount_cents=500).ok(status=201, body_digest=body_digest(b"paid"), replayed=False)
        export.append({"kind": "order", "id": order, "tenant": "default", "idempotency_key": key, "sku": "sku-1",
                       "quantity": 1, "amount_cents": 500, "currency": "EUR", "status": "PAID", "created_at": 1.0})
        export.append({"kind": "payment", "order_id": order, "provider_ref": f"ref-{user}", "amount_cents": 500,
                       "source": "api", "source_id": f"pay-{user}", "applied_at": 2.0})
    if paid_twice:
        export.append({"kind": "payment", "order_id": "order-1", "provider_ref": "ref-again", "amount_cents": 500,
                       "source": "webhook", "source_id": "event-9", "applied_at": 3.0})
    export.append({"kind": "inventory", "sku": "sku-1", "available": 98, "added_total": 100})
    _ndjson(run_dir / "export.ndjson", export)
    _ndjson(run_dir / "faults.jsonl", [])
    (run_dir / "settings.json").write_text(json.dumps({"scenario": "timeout_replay", "users": 2}))
    return run_dir
