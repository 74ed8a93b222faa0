"""The app's final state export, parsed once into compact typed records (`ExportState`).

Shared by the checker (harness.check.checker, which loads it) and the invariants
(harness.check.invariants, which read it): both import it, it imports neither, so
the check package has no import circle (docs/architecture.md). The format is
docs/internals.md, "State export". Each line is parsed once into its record; the
records are named tuples because at 10^6 orders dicts or dataclasses per line
would be most of the checker's memory. `scope_key` (one string per (tenant,
idempotency key)) lives here because the export's orders are filed under it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from harness.errors import HarnessError

__all__ = ["DEAD_LETTERS_LISTED", "DEFAULT_TENANT", "PAID_OUTCOMES", "SEPARATOR", "CheckerError",
           "DeadLetter", "DeadLetters", "ExportOrder", "ExportPayment", "ExportState", "InventoryLine",
           "MessageEffect", "load_export", "scope_key", "split_scope"]

DEAD_LETTERS_LISTED = 20
PAID_OUTCOMES = frozenset({"paid", "already_paid"})
DEFAULT_TENANT = "default"
SEPARATOR = "\x1f"  # unit separator: never in a valid key (printable only) nor an id


class CheckerError(HarnessError):
    """The checker could not judge the run: missing or malformed input (exit 2)."""


@dataclass(frozen=True)
class DeadLetters:
    """A result's `dead_letters`: how many messages the app parked, per reason, and
    the first ones as the export has them."""

    count: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    first: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Any) -> DeadLetters:
        if not isinstance(data, dict):
            return cls()
        return cls(count=int(data.get("count") or 0), reasons=dict(data.get("reasons") or {}),
                   first=[entry for entry in data.get("first") or [] if isinstance(entry, dict)])

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "reasons": dict(self.reasons), "first": list(self.first)}

def scope_key(tenant: str, key: str) -> str:
    """One string for a (tenant, key) scope, far smaller than a tuple.

    The default tenant's keys are the key itself, so the common case allocates
    nothing; a key never holds the separator, so the two forms cannot collide.
    """
    return key if tenant == DEFAULT_TENANT else tenant + SEPARATOR + key


def split_scope(scope: str) -> tuple[str, str]:
    tenant, separator, key = scope.partition(SEPARATOR)
    return (tenant, key) if separator else (DEFAULT_TENANT, scope)


class ExportOrder(NamedTuple):
    """An `order` line, as kept (indexed by harness.check.invariants.O_*): its id, its
    (tenant, key) scope (see scope_key; "" without a key) and what the order holds."""

    id: str
    scope: str
    status: str | None
    tenant: str
    sku: str | None
    quantity: int | None
    amount_cents: int | None


class ExportPayment(NamedTuple):
    """A `payment` line, as kept under its order (indexed by harness.check.invariants.P_*)."""

    provider_ref: str
    source: str | None
    source_id: str | None
    amount_cents: int | None
    applied_at: float | None
    order_id: str


class MessageEffect(NamedTuple):
    """A `message_effect` line: one run of the message handler."""

    message_id: str
    order_id: str | None
    outcome: str | None


class InventoryLine(NamedTuple):
    """An `inventory` line: stock left and all stock ever added, per SKU."""

    sku: str
    available: int
    added_total: int


class DeadLetter(NamedTuple):
    """A `dead_letter` line: a stream entry the consumer parked, and why."""

    message_id: str | None
    order_id: str | None
    provider_ref: str | None
    reason: str
    valid: bool


class ExportState:
    """The final state reduced to what the invariants read, one typed record per
    line kind (named tuples: at 10^5 orders, dicts or dataclasses per line would be
    most of the checker's memory)."""

    def __init__(self) -> None:
        self.orders: dict[str, ExportOrder] = {}
        self.broken: list[str] = []
        self.order_by_scope: dict[str, str] = {}
        self.extra_orders_by_scope: dict[str, list[str]] = {}
        self.reserved: dict[str, int] = {}
        self.payments: dict[str, tuple[ExportPayment, ...]] = {}
        self.payment_count = 0
        self.effects: dict[str, tuple[MessageEffect, ...]] = {}
        # message ids whose handler said paid / already_paid: the app acknowledged them
        self.paid_messages: set[str] = set()
        self.inventory: dict[str, InventoryLine] = {}
        self.dead_letters: set[str] = set()
        self.dead_letter_count = 0
        self.dead_letter_reasons: dict[str, int] = {}
        self.dead_letters_listed: list[dict[str, Any]] = []
        self.valid_dead_letters: list[DeadLetter] = []
        self.counters: dict[str, int] = {}

    def holds(self, order_id: str, provider_ref: str) -> bool:
        for payment in self.payments.get(order_id, ()):
            if payment[0] == provider_ref:
                return True
        return False

    def payments_of(self, order_ids: Iterable[str]) -> list[dict[str, Any]]:
        """The export lines of these orders' payments, for evidence."""
        return [{"kind": "payment", "order_id": order_id, "provider_ref": payment.provider_ref,
                 "amount_cents": payment.amount_cents, "source": payment.source,
                 "source_id": payment.source_id, "applied_at": payment.applied_at}
                for order_id in order_ids
                for payment in self.payments.get(order_id, ())]

    def dead_letter_summary(self) -> DeadLetters:
        return DeadLetters(count=self.dead_letter_count, reasons=dict(sorted(self.dead_letter_reasons.items())),
                           first=list(self.dead_letters_listed))


def _require(record: dict[str, Any], *names: str) -> None:
    for name in names:
        if record.get(name) is None:
            raise CheckerError(f"export {record.get('kind')} line lacks {name!r}: {record}")


# Building a named tuple through tuple.__new__ skips the generated __new__'s Python
# frame: a third of the cost of loading 10^5 orders.
_new = tuple.__new__


def load_export(records: Iterable[dict[str, Any]]) -> ExportState:
    """Parse each export line once into its record (docs/internals.md, "State export")."""
    state = ExportState()
    # Few distinct tenants, statuses, skus, sources, outcomes: share one string object each.
    shared: dict[Any, Any] = {}
    share: Callable[[Any, Any], Any] = shared.setdefault
    orders = state.orders
    payments = state.payments
    order_by_scope = state.order_by_scope
    reserved = state.reserved
    effects = state.effects
    paid_messages = state.paid_messages
    new = _new
    for record in records:
        if not isinstance(record, dict):
            raise CheckerError(f"export line is not an object: {record!r}")
        kind = record.get("kind")
        # JSON fields are Any: str by the export's format, their presence checked here
        order_id: Any
        if kind == "order":
            order_id = record.get("id")
            if order_id is None:
                raise CheckerError(f"export order line lacks 'id': {record}")
            if record.get("broken") is True:
                state.broken.append(order_id)
                continue
            key = record.get("idempotency_key")
            tenant = record.get("tenant") or DEFAULT_TENANT
            tenant = share(tenant, tenant)
            scope = (key if tenant == DEFAULT_TENANT else tenant + SEPARATOR + key) if key else ""
            status, sku, quantity = record.get("status"), record.get("sku"), record.get("quantity")
            orders[order_id] = new(ExportOrder, (order_id, scope, share(status, status), tenant,
                                                 share(sku, sku), quantity, record.get("amount_cents")))
            if key:
                first = order_by_scope.setdefault(scope, order_id)
                if first != order_id:
                    state.extra_orders_by_scope.setdefault(scope, []).append(order_id)
            if sku is not None:
                reserved[sku] = reserved.get(sku, 0) + int(quantity or 0)
        elif kind == "payment":
            order_id = record.get("order_id")
            provider_ref = record.get("provider_ref")
            if order_id is None or provider_ref is None:
                _require(record, "order_id", "provider_ref")
            order = orders.get(order_id)
            if order is not None:
                order_id = order[0]
            source = record.get("source")
            held = payments.get(order_id)
            payment = new(ExportPayment, (provider_ref, share(source, source), record.get("source_id"),
                                          record.get("amount_cents"), record.get("applied_at"), order_id))
            # a tuple (48 bytes for one payment; a list is 88): orders rarely hold two
            payments[order_id] = (payment,) if held is None else (*held, payment)
            state.payment_count += 1
        elif kind == "message_effect":
            message_id: Any = record.get("message_id")
            if message_id is None:
                _require(record, "message_id")
            effect_order: Any = record.get("order_id")
            order = orders.get(effect_order)
            outcome = record.get("outcome")
            effect = new(MessageEffect, (
                message_id, order[0] if order is not None else effect_order, share(outcome, outcome)))
            known = effects.get(message_id)
            effects[message_id] = (effect,) if known is None else (*known, effect)
            if outcome in PAID_OUTCOMES:
                paid_messages.add(message_id)
        elif kind == "inventory":
            _require(record, "sku", "available")
            state.inventory[record["sku"]] = InventoryLine(
                record["sku"], _int_field(record, "available"), _int_field(record, "added_total"))
        elif kind == "dead_letter":
            _dead_letter(state, record)
        elif kind == "counters":
            state.counters = {name: value for name, value in record.items() if name != "kind"}
        elif kind is None:
            raise CheckerError(f"export line has no kind: {record}")
        # Unknown kinds are newer export content this checker does not judge.
    return state


def _int_field(record: dict[str, Any], name: str) -> int:
    value = record.get(name)
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        raise CheckerError(f"export {record.get('kind')} line: {name} is not an integer: {record}") from None


def _dead_letter(state: ExportState, record: dict[str, Any]) -> None:
    letter = DeadLetter(record.get("message_id"), record.get("order_id"), record.get("provider_ref"),
                        str(record.get("reason") or "unknown"), record.get("valid") is True)
    if letter.message_id is not None:
        state.dead_letters.add(letter.message_id)
    state.dead_letter_count += 1
    state.dead_letter_reasons[letter.reason] = state.dead_letter_reasons.get(letter.reason, 0) + 1
    if len(state.dead_letters_listed) < DEAD_LETTERS_LISTED:
        state.dead_letters_listed.append(dict(record))  # shown as exported, in result.json
    if letter.valid:
        state.valid_dead_letters.append(letter)
