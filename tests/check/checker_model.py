"""A correct target app, simulated in memory, that records a history and an export.

It follows the app's documented contract (docs/target-app.md): an API layer keyed by (tenant, key) that
replays stored answers (never a 5xx) and refuses a different fingerprint with 409;
the domain guard; an inbox that runs each message's handler once; orders owned
by their tenant (another tenant's read or payment is a 404); a consumer that
dead-letters only malformed messages. Each client action has a `mode`: `ok` (the
client saw the answer), `info_applied` (the app did the work but the client timed
out), `info_lost` (the request never arrived) or `5xx` (the app failed before
doing anything). Records carry what the load records: fingerprints, `answer`
summaries, problem types, `must_reject` on deliberate refusals; the export comes
with final reads of every order. Whatever the actions, the checker must find no
violation in what this model records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from checker_builders import Run, digest

AMOUNT = 1000
SKU = "sku-1"
TENANTS = ("default", "t2")
KEY_MISMATCH = "/problems/idempotency-key-mismatch"
PROBLEMS = {401: "/problems/invalid-signature", 404: "/problems/unknown-order",
            409: "/problems/payment-conflict", 422: "/problems/amount-mismatch"}


@dataclass
class Stored:
    fingerprint: str
    status: int
    body_digest: str
    order_id: str | None
    answer: dict[str, Any] | None = None
    problem_type: str | None = None


@dataclass
class CorrectApp:
    stock: int = 6
    run: Run = field(default_factory=Run)
    orders: dict[str, dict[str, Any]] = field(default_factory=dict)
    payments: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    store: dict[tuple[str, str, str], Stored] = field(default_factory=dict)
    messages: dict[str, tuple[str, str]] = field(default_factory=dict)
    inbox: set[str] = field(default_factory=set)
    effects: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    reserved: int = 0

    def _count(self, name: str) -> None:
        self.counters[name] = self.counters.get(name, 0) + 1

    def order_id(self, pick: int) -> str:
        ids = list(self.orders)
        return ids[pick % len(ids)] if ids else "ord_unknown"

    # -- the layers --------------------------------------------------------------
    def _api(self, scope: tuple[str, str, str], fingerprint: str, handler: Any) -> tuple[Stored, bool]:
        """The API layer: a stored answer comes back replayed; a new key runs the handler."""
        stored = self.store.get(scope)
        if stored is not None:
            if stored.fingerprint != fingerprint:
                self._count("api_fingerprint_conflicts")
                return Stored(fingerprint, 409, digest("fingerprint mismatch"), None,
                              problem_type=KEY_MISMATCH), False
            self._count("api_replays")
            return stored, True
        answer = handler()
        answer.fingerprint = fingerprint
        self.store[scope] = answer
        return answer, False

    def _guard(self, order_id: str, provider_ref: str, amount: int, source: str,
               source_id: str) -> str:
        """The domain guard; returns the outcome name the inbox also records."""
        order = self.orders.get(order_id)
        if order is None:
            return "unknown_order"
        if amount != order["amount_cents"]:
            self._count("domain_amount_mismatches")
            return "amount_mismatch"
        if order["status"] == "PAID":
            if order["provider_ref"] == provider_ref:
                self._count("domain_already_paid")
                return "already_paid"
            self._count("domain_conflicts")
            return "conflict"
        order["status"] = "PAID"
        order["provider_ref"] = provider_ref
        self.payments.setdefault(order_id, []).append(
            {"order_id": order_id, "provider_ref": provider_ref, "amount_cents": amount,
             "source": source, "source_id": source_id})
        return "paid"

    def _order_answer(self, order_id: str) -> dict[str, Any]:
        order = self.orders[order_id]
        return {"order_id": order_id, "tenant": order["tenant"], "sku": SKU, "quantity": order["quantity"],
                "amount_cents": order["amount_cents"], "status": order["status"],
                "idempotency_key": order["key"], "provider_ref": order["provider_ref"]}

    def _paid_answer(self, order_id: str, outcome: str) -> dict[str, Any] | None:
        if outcome not in ("paid", "already_paid"):
            return None
        order = self.orders[order_id]
        return {"order_id": order_id, "tenant": order["tenant"], "status": order["status"],
                "provider_ref": order["provider_ref"], "amount_cents": order["amount_cents"],
                "already_paid": outcome == "already_paid"}

    # -- client actions --------------------------------------------------------
    def _record(self, op: str, mode: str, answer: Stored | None, replayed: bool,
                **fields: Any) -> None:
        if mode == "info_lost" or mode == "info_applied":
            self.run.op(op, "info", error="ReadTimeout", **fields)
        elif mode == "5xx":
            self.run.op(op, "info", status=500, body_digest=digest("internal error"), **fields)
        else:
            assert answer is not None
            kind = "ok" if answer.status < 400 else "fail"
            if kind == "ok":
                if op == "create_order":
                    fields["order_id"] = answer.order_id
                fields["answer"] = answer.answer
            else:
                fields["problem_type"] = answer.problem_type or PROBLEMS.get(answer.status)
            self.run.op(op, kind, status=answer.status, body_digest=answer.body_digest,
                        replayed=replayed, **fields)

    def create(self, tenant: str, key: str, quantity: int, mode: str) -> None:
        stored = self.store.get((tenant, "create", key))
        fingerprint = f"create {quantity}"
        fields: dict[str, Any] = {"tenant": tenant, "idempotency_key": key, "sku": SKU,
                                  "quantity": quantity, "amount_cents": AMOUNT, "fingerprint": fingerprint}
        if stored is not None and stored.fingerprint != fingerprint:
            fields.update(expect="fingerprint_mismatch", must_reject=True, reject_status=409)
        elif stored is not None:
            fields["expect"] = "duplicate"
        elif any(scope[1:] == ("create", key) for scope in self.store):
            fields["expect"] = "shared_key"
        if mode in ("info_lost", "5xx"):
            self._record("create_order", mode, None, False, **fields)
            return

        def handler() -> Stored:
            if self.stock - self.reserved < quantity:
                return Stored("", 409, digest("out of stock"), None, problem_type="/problems/out-of-stock")
            order_id = f"ord_{len(self.orders) + 1}"
            self.orders[order_id] = {"tenant": tenant, "key": key, "quantity": quantity,
                                     "amount_cents": AMOUNT, "status": "INVENTORY_RESERVED",
                                     "provider_ref": None}
            self.reserved += quantity
            return Stored("", 201, digest(f"created {order_id}"), order_id, self._order_answer(order_id))

        answer, replayed = self._api((tenant, "create", key), fingerprint, handler)
        self._record("create_order", mode, answer, replayed, **fields)

    def pay(self, pick: int, ref: int, key: str, mode: str, wrong_amount: bool,
            cross_tenant: bool = False) -> None:
        """A payment through the API, by the order's tenant (or, `cross_tenant`, by another one)."""
        order_id, provider_ref = self.order_id(pick), f"pr{ref}"
        owner = self.orders[order_id]["tenant"] if order_id in self.orders else "default"
        tenant = next(t for t in TENANTS if t != owner) if cross_tenant else owner
        amount = AMOUNT - 1 if wrong_amount else AMOUNT
        fields: dict[str, Any] = {"tenant": tenant, "idempotency_key": key, "order_id": order_id,
                                  "provider_ref": provider_ref, "amount_cents": amount,
                                  "fingerprint": f"pay {order_id} {provider_ref} {amount}"}
        if cross_tenant:
            fields.update(expect="cross_tenant_pay", must_reject=True, reject_status=404)
        elif wrong_amount:
            fields.update(expect="wrong_amount", must_reject=True, reject_status=422)
        if mode in ("info_lost", "5xx"):
            self._record("pay", mode, None, False, **fields)
            return

        def handler() -> Stored:
            if order_id in self.orders and tenant != owner:
                self._count("tenant_refusals")
                outcome = "unknown_order"
            else:
                outcome = self._guard(order_id, provider_ref, amount, "api", key)
            status = {"paid": 201, "already_paid": 200, "conflict": 409,
                      "amount_mismatch": 422, "unknown_order": 404}[outcome]
            return Stored("", status, digest(f"{outcome} {order_id} {provider_ref}"), order_id,
                          self._paid_answer(order_id, outcome))

        answer, replayed = self._api((tenant, "pay", key), fields["fingerprint"], handler)
        self._record("pay", mode, answer, replayed, **fields)

    def webhook(self, pick: int, ref: int, event: str, mode: str, bad_signature: bool) -> None:
        order_id, provider_ref = self.order_id(pick), f"pr{ref}"
        fields: dict[str, Any] = {"order_id": order_id, "provider_ref": provider_ref, "event_id": event,
                                  "amount_cents": AMOUNT}
        if bad_signature:
            fields.update(expect="tampered_signature", must_reject=True, reject_status=401)
        if mode in ("info_lost", "5xx"):
            self._record("webhook", mode, None, False, **fields)
            return
        if bad_signature:
            self._count("webhook_bad_signatures")
            answer = Stored("", 401, digest("bad signature"), None)
        else:
            outcome = self._guard(order_id, provider_ref, AMOUNT, "webhook", event)
            status = {"paid": 200, "already_paid": 200, "conflict": 409,
                      "amount_mismatch": 422, "unknown_order": 404}[outcome]
            answer = Stored("", status, digest(f"webhook {outcome}"), None,
                            self._paid_answer(order_id, outcome))
        self._record("webhook", mode, answer, False, **fields)

    def read(self, pick: int, mode: str, cross_tenant: bool) -> None:
        """GET an order as its tenant, or as another tenant (which must get 404)."""
        order_id = self.order_id(pick)
        owner = self.orders[order_id]["tenant"] if order_id in self.orders else "default"
        tenant = next(t for t in TENANTS if t != owner) if cross_tenant else owner
        fields: dict[str, Any] = {"tenant": tenant, "order_id": order_id}
        if cross_tenant:
            fields.update(expect="cross_tenant_read", must_reject=True, reject_status=404)
        if mode in ("info_lost", "5xx"):
            self._record("read_order", mode, None, False, **fields)
            return
        if order_id not in self.orders or tenant != owner:
            if order_id in self.orders:
                self._count("tenant_refusals")
            answer = Stored("", 404, digest("unknown order"), None)
        else:
            answer = Stored("", 200, digest(f"order {order_id}"), order_id, self._order_answer(order_id))
        self._record("read_order", mode, answer, False, **fields)

    def publish(self, pick: int, ref: int, message: str, mode: str) -> None:
        # A producer duplicate re-sends the same message: same id, same content.
        order_id, provider_ref = self.messages.setdefault(message, (self.order_id(pick), f"pr{ref}"))
        fields = {"order_id": order_id, "provider_ref": provider_ref, "message_id": message,
                  "amount_cents": AMOUNT}
        if mode in ("info_lost", "5xx"):
            self.run.op("publish", "info", error="ConnectionError", **fields)
            return
        if message in self.inbox:
            self._count("inbox_duplicates_skipped")
        else:
            self.inbox.add(message)
            outcome = self._guard(order_id, provider_ref, AMOUNT, "message", message)
            self.effects.append({"message_id": message, "order_id": order_id,
                                 "provider_ref": provider_ref, "outcome": outcome})
        self.run.op("publish", "ok" if mode == "ok" else "info", **fields)

    def poison(self, number: int) -> None:
        """A malformed message (no message_id): the consumer parks it, rightly."""
        self.run.op("publish", "ok", order_id=None, provider_ref=None, message_id=None,
                    expect="poison_message")
        self._count("messages_dead_lettered")
        self.dead_letters.append({"message_id": None, "entry_id": f"{number}-0", "deliveries": 1,
                                  "reason": "no message_id", "order_id": None, "provider_ref": None,
                                  "amount_cents": None, "valid": False})

    # -- the export ----------------------------------------------------------------
    def export(self) -> list[dict[str, Any]]:
        run = self.run
        run.export = []
        for order_id, order in self.orders.items():
            run.order(order_id, order["key"], order["status"], sku=SKU,
                      quantity=order["quantity"], tenant=order["tenant"], amount_cents=order["amount_cents"])
            for payment in self.payments.get(order_id, ()):
                run.payment(order_id, payment["provider_ref"], payment["source"], payment["source_id"],
                            amount_cents=payment["amount_cents"])
        for effect in self.effects:
            run.effect(effect["message_id"], effect["order_id"], effect["provider_ref"], effect["outcome"])
        run.inventory(SKU, self.stock - self.reserved, self.stock)
        for line in self.dead_letters:
            run.export.append({"kind": "dead_letter", **line})
        run.counters(**self.counters)
        # Final reads after healing: every order as its tenant, and as the other one.
        run.final_reads = []
        for order_id, order in self.orders.items():
            run.final_read(order_id, tenant=order["tenant"])
            run.final_read(order_id, 404, tenant=next(t for t in TENANTS if t != order["tenant"]))
        return run.export


def play(actions: list[tuple[Any, ...]]) -> CorrectApp:
    app = CorrectApp()
    for action in actions:
        name, *arguments = action
        getattr(app, name)(*arguments)
    app.export()
    return app
