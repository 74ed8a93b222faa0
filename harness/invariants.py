"""The facts the checker needs, indexed compactly, and the seven invariants over them.

Memory must grow with the number of orders, not of operations (DESIGN.md, Scale):
the export is loaded first (it is proportional to orders), then the history is
streamed once and folded into small per-subject records: attempt flags per
(order, provider_ref), the ok order ids per idempotency key, the response digests
per key. Nothing keeps a whole operation; evidence is gathered later, in a second
pass over only the orders that failed (see harness.checker).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.errors import HarnessError

INVARIANTS: tuple[tuple[str, str], ...] = (
    ("one_payment_per_order", "One payment per order"),
    ("no_lost_acknowledgement", "No lost acknowledgement"),
    ("nothing_unexpected", "Nothing unexpected"),
    ("one_order_per_key", "One order per idempotency key"),
    ("replay_fidelity", "Replay fidelity"),
    ("inventory_conservation", "Inventory conservation"),
    ("message_effects_once", "Message effects once"),
)

# Attempt flags per (order_id, provider_ref): which entry point tried it, and how
# the server answered. One small int per pair instead of a list of operations.
PAY_OK, PAY_INFO, PAY_FAIL = 1, 2, 4
WEBHOOK_OK, WEBHOOK_INFO, WEBHOOK_FAIL = 8, 16, 32
PUBLISH_OK, PUBLISH_INFO, PUBLISH_FAIL = 64, 128, 256
# A published message whose handler said paid/already_paid: the app itself
# acknowledged the payment, so it must be on the order.
MESSAGE_ACK = 512

ACKNOWLEDGED = PAY_OK | WEBHOOK_OK | MESSAGE_ACK
INDETERMINATE = PAY_INFO | WEBHOOK_INFO | PUBLISH_INFO

_FLAG_BASE = {"pay": PAY_OK, "webhook": WEBHOOK_OK, "publish": PUBLISH_OK}
_COMPLETION_SHIFT = {"ok": 0, "info": 1, "fail": 2}

# export payment source -> (the history op that can cause it, flags that justify
# it, flags meaning the server said it did not happen)
SOURCES: dict[str, tuple[str, int, int]] = {
    "api": ("pay", PAY_OK | PAY_INFO, PAY_FAIL),
    "webhook": ("webhook", WEBHOOK_OK | WEBHOOK_INFO, WEBHOOK_FAIL),
    "message": ("publish", PUBLISH_OK | PUBLISH_INFO, PUBLISH_FAIL),
}

PAID_OUTCOMES = frozenset({"paid", "already_paid"})


class CheckerError(HarnessError):
    """The checker could not judge the run: missing or malformed input (exit 2)."""


@dataclass
class Finding:
    """One violation before evidence is attached; the focus fields pick the evidence."""

    invariant: str
    message: str
    order_ids: tuple[str, ...] = ()
    key: tuple[str, str] | None = None
    message_id: str | None = None
    provider_ref: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


class Findings:
    """Per invariant: the total count, the first `cap` findings and how much was checked."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept: dict[str, list[Finding]] = {name: [] for name, _ in INVARIANTS}
        self.counts: dict[str, int] = {name: 0 for name, _ in INVARIANTS}
        self.checked: dict[str, int] = {name: 0 for name, _ in INVARIANTS}

    def add(self, finding: Finding) -> None:
        self.counts[finding.invariant] += 1
        kept = self.kept[finding.invariant]
        if len(kept) < self.cap:
            kept.append(finding)


def _require(record: dict[str, Any], *names: str) -> None:
    for name in names:
        if record.get(name) is None:
            raise CheckerError(f"export {record.get('kind')} line lacks {name!r}: {record}")


class ExportState:
    """The final state, reduced to what the invariants read."""

    def __init__(self) -> None:
        # order id -> (tenant, idempotency key, status)
        self.orders: dict[str, tuple[str, str | None, str | None]] = {}
        self.orders_by_key: dict[tuple[str, str], list[str]] = {}
        self.reserved: dict[str, int] = {}
        self.payments: dict[str, list[dict[str, Any]]] = {}
        self.payment_count = 0
        self.effects: dict[str, list[dict[str, Any]]] = {}
        self.inventory: dict[str, dict[str, Any]] = {}
        self.dead_letters: set[str] = set()
        self.counters: dict[str, int] = {}

    def holds(self, order_id: str, provider_ref: str) -> bool:
        for payment in self.payments.get(order_id, ()):
            if payment.get("provider_ref") == provider_ref:
                return True
        return False

    def payments_of(self, order_ids: Iterable[str]) -> list[dict[str, Any]]:
        return [payment for order_id in order_ids for payment in self.payments.get(order_id, ())]


def load_export(records: Iterable[dict[str, Any]]) -> ExportState:
    state = ExportState()
    for record in records:
        if not isinstance(record, dict):
            raise CheckerError(f"export line is not an object: {record!r}")
        kind = record.get("kind")
        if kind == "order":
            _require(record, "id")
            order_id = record["id"]
            tenant = record.get("tenant") or "default"
            key = record.get("idempotency_key")
            state.orders[order_id] = (tenant, key, record.get("status"))
            if key is not None:
                state.orders_by_key.setdefault((tenant, key), []).append(order_id)
            sku = record.get("sku")
            if sku is not None:
                state.reserved[sku] = state.reserved.get(sku, 0) + int(record.get("quantity") or 0)
        elif kind == "payment":
            _require(record, "order_id", "provider_ref")
            state.payments.setdefault(record["order_id"], []).append(record)
            state.payment_count += 1
        elif kind == "message_effect":
            _require(record, "message_id")
            state.effects.setdefault(record["message_id"], []).append(record)
        elif kind == "inventory":
            _require(record, "sku", "available")
            state.inventory[record["sku"]] = record
        elif kind == "dead_letter":
            if record.get("message_id") is not None:
                state.dead_letters.add(record["message_id"])
        elif kind == "counters":
            state.counters = {name: value for name, value in record.items() if name != "kind"}
        elif kind is None:
            raise CheckerError(f"export line has no kind: {record}")
        # Unknown kinds are newer export content this checker does not judge.
    return state


class HistoryIndex:
    """The history folded into per-subject records, in one streaming pass."""

    def __init__(self, export: ExportState) -> None:
        self.export = export
        self.operations = 0
        self.outcomes: dict[str, dict[str, int]] = {}
        self.duplicates: dict[str, int] = {}
        self.replays_seen = 0
        self.conflicts_seen = 0
        self.rejections_seen = 0
        self.pairs: dict[tuple[str, str], int] = {}
        # (tenant, key) -> first ok order id; further distinct ids go to created_extra
        self.created: dict[tuple[str, str], str] = {}
        self.created_extra: dict[tuple[str, str], set[str]] = {}
        # (tenant, op, key) -> (status, digest) of non-replayed ok answers / replays;
        # a set only when answers disagree, which is rare
        self.originals: dict[tuple[str, str, str], Any] = {}
        self.replays: dict[tuple[str, str, str], Any] = {}
        self.replay_orders: dict[tuple[str, str, str], str | None] = {}
        self.failed_5xx: dict[tuple[str, str, str], set[str]] = {}
        self.ok_messages: set[str] = set()
        # violations found while streaming, each subject reported once
        self.streamed: list[Finding] = []
        self._reported: set[tuple[str, Any]] = set()

    def _report(self, subject: tuple[str, Any], finding: Finding) -> None:
        if subject not in self._reported:
            self._reported.add(subject)
            self.streamed.append(finding)

    def consume(self, operations: Iterable[dict[str, Any]]) -> None:
        # The hot loop of the checker: a million iterations, so locals and few calls.
        outcomes = self.outcomes
        duplicates = self.duplicates
        pairs = self.pairs
        for op in operations:
            self.operations += 1
            name = op.get("op")
            kind = op.get("type")
            per_op = outcomes.get(name)
            if per_op is None:
                per_op = outcomes[name] = {"ok": 0, "fail": 0, "info": 0}
            per_op[kind] = per_op.get(kind, 0) + 1
            expect = op.get("expect")
            if expect:
                duplicates[expect] = duplicates.get(expect, 0) + 1
            status = op.get("status")
            if status is not None and 400 <= status < 500:
                self.rejections_seen += 1
                if status == 409:
                    self.conflicts_seen += 1
            replayed = op.get("replayed") is True
            if replayed:
                self.replays_seen += 1

            base = _FLAG_BASE.get(name)
            if base is not None:
                order_id = op.get("order_id")
                provider_ref = op.get("provider_ref")
                if order_id is not None and provider_ref is not None:
                    pair = (order_id, provider_ref)
                    flags = base << _COMPLETION_SHIFT.get(kind, 1)
                    if name == "publish":
                        flags |= self._message(op, kind, order_id, provider_ref)
                    pairs[pair] = pairs.get(pair, 0) | flags
            elif name == "create_order" and kind == "ok":
                self._created(op)

            if op.get("idempotency_key") is not None and (name == "pay" or name == "create_order"):
                self._response(op, name, kind, status, replayed)

    def _message(self, op: dict[str, Any], kind: str, order_id: str, provider_ref: str) -> int:
        message_id = op.get("message_id")
        if message_id is None or kind == "fail":
            return 0
        effects = self.export.effects.get(message_id)
        if kind == "ok":
            self.ok_messages.add(message_id)
            if effects is None and message_id not in self.export.dead_letters:
                self._report(("lost_message", message_id), Finding(
                    "no_lost_acknowledgement",
                    f"message {message_id} was published (ok) but never handled nor dead-lettered",
                    order_ids=(order_id,), message_id=message_id, provider_ref=provider_ref,
                    details={"message_id": message_id, "provider_ref": provider_ref}))
        if effects is not None and any(e.get("outcome") in PAID_OUTCOMES for e in effects):
            return MESSAGE_ACK
        return 0

    def _created(self, op: dict[str, Any]) -> None:
        order_id = op.get("order_id")
        key = op.get("idempotency_key")
        if order_id is None or key is None:
            return
        tenant = op.get("tenant") or "default"
        scoped = (tenant, key)
        first = self.created.setdefault(scoped, order_id)
        if first != order_id:
            self.created_extra.setdefault(scoped, {first}).add(order_id)
        exported = self.export.orders.get(order_id)
        if exported is None:
            self._report(("lost_order", order_id), Finding(
                "one_order_per_key",
                f"create_order with key {key!r} returned {order_id} (ok) but the export has no such order",
                order_ids=(order_id,), key=scoped,
                details={"tenant": tenant, "idempotency_key": key}))
        elif (exported[0], exported[1]) != scoped:
            self._report(("foreign_order", order_id), Finding(
                "one_order_per_key",
                f"create_order with key {key!r} returned {order_id}, "
                f"which the export files under key {exported[1]!r} (tenant {exported[0]})",
                order_ids=(order_id,), key=scoped,
                details={"tenant": tenant, "idempotency_key": key}))

    def _response(self, op: dict[str, Any], name: str, kind: str, status: Any, replayed: bool) -> None:
        scoped = (op.get("tenant") or "default", name, op["idempotency_key"])
        digest = op.get("body_digest")
        if replayed:
            if status is not None and status >= 500:
                self._report(("replayed_5xx", scoped), Finding(
                    "replay_fidelity",
                    f"{name} key {scoped[2]!r}: a {status} response was replayed",
                    order_ids=_maybe(op.get("order_id")), key=(scoped[0], scoped[2]),
                    details={"op": name, "status": status}))
            if status is None or digest is None:
                return  # a cut-off answer says nothing about what was stored
            answer = (status, digest)
            known = self.replays.get(scoped)
            if known is None:
                self.replays[scoped] = answer
                self.replay_orders[scoped] = op.get("order_id")
            elif known != answer:
                if not isinstance(known, set):
                    known = self.replays[scoped] = {known}
                known.add(answer)
        elif kind == "ok" and status is not None and digest is not None:
            answer = (status, digest)
            known = self.originals.get(scoped)
            if known is None:
                self.originals[scoped] = answer
            elif known != answer:
                if not isinstance(known, set):
                    known = self.originals[scoped] = {known}
                known.add(answer)
        elif status is not None and status >= 500 and digest is not None:
            self.failed_5xx.setdefault(scoped, set()).add(digest)


def _maybe(order_id: str | None) -> tuple[str, ...]:
    return (order_id,) if order_id is not None else ()


def _answers(value: Any) -> set[tuple[Any, Any]]:
    return value if isinstance(value, set) else {value}


def evaluate(export: ExportState, index: HistoryIndex, *, cap: int) -> Findings:
    """Every invariant over the export and the folded history."""
    findings = Findings(cap)
    for finding in index.streamed:
        findings.add(finding)
    one_payment_per_order(export, findings)
    no_lost_acknowledgement(export, index, findings)
    nothing_unexpected(export, index, findings)
    one_order_per_key(export, index, findings)
    replay_fidelity(index, findings)
    inventory_conservation(export, findings)
    message_effects_once(export, findings)
    return findings


def one_payment_per_order(export: ExportState, findings: Findings) -> None:
    name = "one_payment_per_order"
    for order_id, (_tenant, _key, status) in export.orders.items():
        findings.checked[name] += 1
        payments = export.payments.get(order_id, ())
        refs = [payment.get("provider_ref") for payment in payments]
        details = {"status": status, "provider_refs": refs}
        if len(payments) > 1:
            message = f"order {order_id} holds {len(payments)} payments ({', '.join(map(str, refs))})"
        elif status == "PAID" and not payments:
            message = f"order {order_id} is PAID but holds no payment"
        elif status != "PAID" and payments:
            message = f"order {order_id} is {status} but holds a payment ({refs[0]})"
        else:
            continue
        findings.add(Finding(name, message, order_ids=(order_id,), details=details))
    for order_id, payments in export.payments.items():
        if order_id not in export.orders:
            findings.add(Finding(
                name, f"{len(payments)} payment(s) for order {order_id}, which the export does not hold",
                order_ids=(order_id,), details={"provider_refs": [p.get("provider_ref") for p in payments]}))


def no_lost_acknowledgement(export: ExportState, index: HistoryIndex, findings: Findings) -> None:
    name = "no_lost_acknowledgement"
    findings.checked[name] += len(index.ok_messages)
    for (order_id, provider_ref), flags in index.pairs.items():
        if not flags & ACKNOWLEDGED:
            continue
        findings.checked[name] += 1
        if export.holds(order_id, provider_ref):
            continue
        how = [label for bit, label in ((PAY_OK, "pay ok"), (WEBHOOK_OK, "webhook ok"),
                                        (MESSAGE_ACK, "message handled as paid")) if flags & bit]
        held = [p.get("provider_ref") for p in export.payments.get(order_id, ())]
        findings.add(Finding(
            name,
            f"order {order_id}: {' and '.join(how)} for provider_ref {provider_ref}, "
            f"but the order holds {held or 'no payment'}",
            order_ids=(order_id,), provider_ref=provider_ref,
            details={"provider_ref": provider_ref, "acknowledged_by": how, "held": held}))


def nothing_unexpected(export: ExportState, index: HistoryIndex, findings: Findings) -> None:
    name = "nothing_unexpected"
    for order_id, payments in export.payments.items():
        for payment in payments:
            findings.checked[name] += 1
            provider_ref = payment.get("provider_ref")
            source = payment.get("source")
            flags = index.pairs.get((order_id, provider_ref), 0)
            if source not in SOURCES:
                reason = f"has unknown source {source!r}"
            else:
                op, justified, refused = SOURCES[source]
                if flags & justified:
                    continue
                if flags & refused:
                    reason = f"was applied although every {op} of it was answered fail"
                elif flags:
                    reason = f"came from {source} but was only attempted through other entry points"
                else:
                    reason = "was never attempted"
            findings.add(Finding(
                name, f"payment {provider_ref} on order {order_id} (source {source}) {reason}",
                order_ids=(order_id,), provider_ref=provider_ref,
                details={"provider_ref": provider_ref, "source": source,
                         "source_id": payment.get("source_id")}))


def one_order_per_key(export: ExportState, index: HistoryIndex, findings: Findings) -> None:
    name = "one_order_per_key"
    findings.checked[name] = len(export.orders_by_key.keys() | index.created.keys())
    for (tenant, key), order_ids in export.orders_by_key.items():
        if len(order_ids) > 1:
            findings.add(Finding(
                name, f"key {key!r} (tenant {tenant}) created {len(order_ids)} orders: {', '.join(order_ids)}",
                order_ids=tuple(order_ids), key=(tenant, key),
                details={"tenant": tenant, "idempotency_key": key, "order_ids": order_ids}))
    for (tenant, key), order_ids in index.created_extra.items():
        seen = sorted(order_ids)
        findings.add(Finding(
            name, f"ok create_order answers for key {key!r} (tenant {tenant}) named "
                  f"{len(seen)} different orders: {', '.join(seen)}",
            order_ids=tuple(seen), key=(tenant, key),
            details={"tenant": tenant, "idempotency_key": key, "order_ids": seen}))


def replay_fidelity(index: HistoryIndex, findings: Findings) -> None:
    name = "replay_fidelity"
    for scoped, replayed in index.replays.items():
        findings.checked[name] += 1
        tenant, op, key = scoped
        answers = _answers(replayed)
        originals = index.originals.get(scoped)
        problems = []
        if len(answers) > 1:
            problems.append(f"replays disagree ({len(answers)} different answers)")
        if originals is not None:
            strays = answers - _answers(originals)
            if strays:
                problems.append("a replay differs from the original answer")
        stored_5xx = index.failed_5xx.get(scoped, set()) & {digest for _status, digest in answers}
        if stored_5xx:
            problems.append("a 5xx answer was stored and replayed")
        if not problems:
            continue
        findings.add(Finding(
            name, f"{op} key {key!r} (tenant {tenant}): {'; '.join(problems)}",
            order_ids=_maybe(index.replay_orders.get(scoped)), key=(tenant, key),
            details={"op": op, "tenant": tenant, "idempotency_key": key,
                     "replays": sorted(map(list, answers), key=str),
                     "originals": sorted(map(list, _answers(originals)), key=str) if originals else []}))


def inventory_conservation(export: ExportState, findings: Findings) -> None:
    name = "inventory_conservation"
    for sku in sorted(export.inventory.keys() | export.reserved.keys()):
        findings.checked[name] += 1
        line = export.inventory.get(sku)
        reserved = export.reserved.get(sku, 0)
        if line is None:
            findings.add(Finding(name, f"orders reserve {reserved} of {sku}, which has no inventory line",
                                 details={"sku": sku, "reserved": reserved}))
            continue
        added = int(line.get("added_total") or 0)
        available = int(line["available"])
        expected = added - reserved
        if available == expected and available >= 0:
            continue
        message = (f"{sku}: added {added} − reserved {reserved} = {expected}, but available is {available}"
                   if available != expected else f"{sku}: available is {available}, below zero")
        findings.add(Finding(name, message, details={
            "sku": sku, "added_total": added, "reserved": reserved, "available": available}))


def message_effects_once(export: ExportState, findings: Findings) -> None:
    name = "message_effects_once"
    for message_id, effects in export.effects.items():
        findings.checked[name] += 1
        if len(effects) < 2:
            continue
        order_ids = tuple(dict.fromkeys(e["order_id"] for e in effects if e.get("order_id")))
        outcomes = [e.get("outcome") for e in effects]
        findings.add(Finding(
            name, f"message {message_id} produced {len(effects)} effects ({', '.join(map(str, outcomes))})",
            order_ids=order_ids, message_id=message_id,
            details={"message_id": message_id, "outcomes": outcomes}))


def jepsen_counts(export: ExportState, index: HistoryIndex, findings: Findings) -> dict[str, int]:
    """Jepsen's set-checker tallies over (order, provider_ref) elements."""
    counts = {"acknowledged": 0, "lost": 0, "unexpected": findings.counts["nothing_unexpected"],
              "recovered": 0, "indeterminate_absent": 0}
    for (order_id, provider_ref), flags in index.pairs.items():
        present = export.holds(order_id, provider_ref)
        if flags & ACKNOWLEDGED:
            counts["acknowledged"] += 1
            if not present:
                counts["lost"] += 1
        elif flags & INDETERMINATE:
            counts["recovered" if present else "indeterminate_absent"] += 1
    # published and acknowledged by the broker, then never handled: lost as well
    counts["lost"] += sum(1 for f in index.streamed
                          if f.invariant == "no_lost_acknowledgement")
    return counts
