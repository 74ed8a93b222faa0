"""Hand-built histories and exports for checker tests.

`Run` records merged operations (the shape `harness.history.iter_operations`
yields) and export lines side by side, with a fake clock so every operation has
invoke and complete times that fault windows can overlap. `answered=True` gives
an ok operation the `answer` summary a correct app's body yields (docs/internals.md),
built from the request; tests then spoil one field of it.
"""

from __future__ import annotations

import hashlib
from typing import Any

from harness.check.checker import CheckResult, check


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Run:
    def __init__(self) -> None:
        self.operations: list[dict[str, Any]] = []
        self.export: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        self.final_reads: list[dict[str, Any]] = []
        self.clock = 1000.0
        self._ops = 0

    # -- history -----------------------------------------------------------
    def op(self, op: str, type: str = "ok", **fields: Any) -> dict[str, Any]:
        self._ops += 1
        invoked = self.clock
        self.clock += 1.0
        record: dict[str, Any] = {
            "op_id": f"t-u1-p0:{self._ops}", "process": "t-u1-p0", "op": op, "type": type,
            "tenant": "default", "idempotency_key": None, "order_id": None,
            "provider_ref": None, "amount_cents": 1000, "sku": None, "quantity": None,
            "message_id": None, "event_id": None, "fingerprint": None, "status": None,
            "body_digest": None, "replayed": False, "expect": None, "toxic_hit": None,
            "error": None, "time": invoked, "invoke_time": invoked, "complete_time": invoked + 0.5,
        }
        record.update(fields)
        self.operations.append(record)
        return record

    def create(self, key: str, order_id: str | None, type: str = "ok", *, sku: str = "sku-1",
               quantity: int = 1, answered: bool = False, **fields: Any) -> dict[str, Any]:
        if type == "ok":
            fields.setdefault("status", 201)
            fields.setdefault("body_digest", digest(f"create {order_id}"))
            if answered:
                fields.setdefault("answer", {
                    "order_id": order_id, "tenant": fields.get("tenant", "default"), "sku": sku,
                    "quantity": quantity, "amount_cents": fields.get("amount_cents", 1000),
                    "status": "INVENTORY_RESERVED", "idempotency_key": key, "provider_ref": None})
        return self.op("create_order", type, idempotency_key=key, order_id=order_id,
                       sku=sku, quantity=quantity, **fields)

    @staticmethod
    def paid_answer(order_id: str, provider_ref: str, tenant: str = "default", *,
                    already_paid: bool = False, amount_cents: int = 1000) -> dict[str, Any]:
        return {"order_id": order_id, "tenant": tenant, "status": "PAID", "provider_ref": provider_ref,
                "amount_cents": amount_cents, "already_paid": already_paid}

    def pay(self, order_id: str, provider_ref: str, key: str, type: str = "ok", *,
            answered: bool = False, **fields: Any) -> dict[str, Any]:
        if type == "ok":
            fields.setdefault("status", 201)
            fields.setdefault("body_digest", digest(f"paid {order_id} {provider_ref}"))
            if answered:
                fields.setdefault("answer", self.paid_answer(order_id, provider_ref,
                                                             fields.get("tenant", "default")))
        elif type == "fail":
            fields.setdefault("status", 409)
        return self.op("pay", type, idempotency_key=key, order_id=order_id,
                       provider_ref=provider_ref, **fields)

    def webhook(self, order_id: str, provider_ref: str, event_id: str, type: str = "ok", *,
                answered: bool = False, **fields: Any) -> dict[str, Any]:
        fields.setdefault("status", {"ok": 200, "fail": 401, "info": None}[type])
        if type == "ok" and answered:
            fields.setdefault("answer", self.paid_answer(order_id, provider_ref))
        return self.op("webhook", type, order_id=order_id, provider_ref=provider_ref,
                       event_id=event_id, **fields)

    def read(self, order_id: str, type: str = "ok", *, tenant: str = "default",
             answer_tenant: str | None = None, **fields: Any) -> dict[str, Any]:
        """read_order; an ok read answers the order summary (of `answer_tenant`, default the reader's)."""
        fields.setdefault("status", {"ok": 200, "fail": 404, "info": None}[type])
        if type == "ok":
            fields.setdefault("answer", {
                "order_id": order_id, "tenant": answer_tenant or tenant, "sku": "sku-1", "quantity": 1,
                "amount_cents": 1000, "status": "INVENTORY_RESERVED", "idempotency_key": None,
                "provider_ref": None})
        elif type == "fail":
            fields.setdefault("problem_type", "/problems/unknown-order")
        return self.op("read_order", type, order_id=order_id, tenant=tenant, **fields)

    def publish(self, order_id: str, provider_ref: str, message_id: str, type: str = "ok",
                **fields: Any) -> dict[str, Any]:
        return self.op("publish", type, order_id=order_id, provider_ref=provider_ref,
                       message_id=message_id, **fields)

    # -- export ------------------------------------------------------------
    def order(self, order_id: str, key: str, status: str = "INVENTORY_RESERVED", *,
              sku: str = "sku-1", quantity: int = 1, tenant: str = "default",
              amount_cents: int = 1000) -> None:
        self.export.append({"kind": "order", "id": order_id, "tenant": tenant,
                            "idempotency_key": key, "sku": sku, "quantity": quantity,
                            "amount_cents": amount_cents, "currency": "EUR", "status": status,
                            "created_at": 1000.0})

    def broken_order(self, order_id: str) -> None:
        self.export.append({"kind": "order", "id": order_id, "status": None, "broken": True})

    def payment(self, order_id: str, provider_ref: str, source: str = "api",
                source_id: str = "src", *, amount_cents: int = 1000) -> None:
        self.export.append({"kind": "payment", "order_id": order_id, "provider_ref": provider_ref,
                            "amount_cents": amount_cents, "source": source, "source_id": source_id,
                            "applied_at": 1000.0})

    def effect(self, message_id: str, order_id: str, provider_ref: str, outcome: str = "paid") -> None:
        self.export.append({"kind": "message_effect", "message_id": message_id, "order_id": order_id,
                            "provider_ref": provider_ref, "outcome": outcome, "at": 1000.0})

    def inventory(self, sku: str, available: int, added_total: int) -> None:
        self.export.append({"kind": "inventory", "sku": sku, "available": available,
                            "added_total": added_total})

    def dead_letter(self, message_id: str | None, *, valid: bool | None = None, order_id: str | None = None,
                    provider_ref: str | None = None, reason: str | None = None) -> None:
        line: dict[str, Any] = {"kind": "dead_letter", "message_id": message_id, "entry_id": "1-0",
                                "deliveries": 6}
        if valid is not None:
            line.update(reason=reason or "handler failed 5 times", order_id=order_id,
                        provider_ref=provider_ref, amount_cents=1000 if valid else None, valid=valid)
        self.export.append(line)

    def final_read(self, order_id: str, status_code: int = 200, *, tenant: str = "default",
                   **order: Any) -> dict[str, Any]:
        """A final read; a 200 reads the exported order (with its payments) unless `order` overrides."""
        body = None
        if status_code == 200:
            body = self.exported_order(order_id) or {}
            body.update(order)
        read = {"order_id": order_id, "tenant": tenant, "status_code": status_code, "order": body}
        self.final_reads.append(read)
        return read

    def exported_order(self, order_id: str) -> dict[str, Any] | None:
        """The GET body a correct app gives for an exported order."""
        for line in self.export:
            if line.get("kind") == "order" and line.get("id") == order_id:
                body = {name: value for name, value in line.items() if name != "kind"}
                body["payments"] = [{name: value for name, value in payment.items() if name != "kind"}
                                    for payment in self.export
                                    if payment.get("kind") == "payment" and payment["order_id"] == order_id]
                return body
        return None

    def counters(self, **values: int) -> None:
        self.export.append({"kind": "counters", **values})

    def fault(self, start: float, end: float | None, name: str = "latency") -> dict[str, Any]:
        fault = {"name": name, "kind": "toxic", "target": "app", "type": "latency",
                 "stream": "downstream", "attributes": {"latency": 800}, "toxicity": 1.0,
                 "action": None, "start": start, "end": end, "error": None}
        self.faults.append(fault)
        return fault

    # -- shortcuts -----------------------------------------------------------
    def paid_order(self, order_id: str, provider_ref: str, *, key: str | None = None) -> None:
        """A created order paid once through the API: the baseline every test starts from."""
        create_key = key or f"c-{order_id}"
        self.create(create_key, order_id)
        self.pay(order_id, provider_ref, f"p-{order_id}")
        self.order(order_id, create_key, "PAID")
        self.payment(order_id, provider_ref, "api", f"p-{order_id}")

    def balanced_inventory(self, added_total: int = 100) -> list[dict[str, Any]]:
        """Inventory lines that conserve stock for the orders exported so far."""
        reserved: dict[str, int] = {}
        for line in self.export:
            if line.get("kind") == "order" and not line.get("broken"):
                reserved[line["sku"]] = reserved.get(line["sku"], 0) + line["quantity"]
        return [{"kind": "inventory", "sku": sku, "available": added_total - quantity,
                 "added_total": added_total} for sku, quantity in sorted(reserved.items())]

    def check(self, **kwargs: Any) -> CheckResult:
        """Check with inventory balanced unless the test wrote inventory lines itself."""
        export = list(self.export)
        if not any(line.get("kind") == "inventory" for line in export):
            export += self.balanced_inventory()
        kwargs.setdefault("final_reads", list(self.final_reads))
        return check(list(self.operations), export, list(self.faults), **kwargs)


def failed(result: CheckResult) -> set[str]:
    return set(result.failed)
