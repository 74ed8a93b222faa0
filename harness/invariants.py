"""The history folded into compact per-subject records, and the seven invariants.

Memory must grow with the number of orders, not of operations (DESIGN.md, Scale):
the export (harness.checker.ExportState, proportional to orders) is loaded first,
then the history is streamed once and folded into small records: attempt flags
per (order, provider_ref), the ok order ids per idempotency key, one int per key
for its original and replayed answers. No operation is kept; evidence is
gathered afterwards, in a second pass, for the failing subjects only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.checker import ExportState

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

# op -> completion -> flag; an unknown completion counts as info (it may have happened)
_FLAGS: dict[str, dict[str, int]] = {
    "pay": {"ok": PAY_OK, "info": PAY_INFO, "fail": PAY_FAIL},
    "webhook": {"ok": WEBHOOK_OK, "info": WEBHOOK_INFO, "fail": WEBHOOK_FAIL},
    "publish": {"ok": PUBLISH_OK, "info": PUBLISH_INFO, "fail": PUBLISH_FAIL},
}

# export payment source -> (the history op that can cause it, flags that justify
# it, flags meaning the server said it did not happen)
SOURCES: dict[str, tuple[str, int, int]] = {
    "api": ("pay", PAY_OK | PAY_INFO, PAY_FAIL),
    "webhook": ("webhook", WEBHOOK_OK | WEBHOOK_INFO, WEBHOOK_FAIL),
    "message": ("publish", PUBLISH_OK | PUBLISH_INFO, PUBLISH_FAIL),
}

PAID_OUTCOMES = frozenset({"paid", "already_paid"})

SEPARATOR = "\x1f"  # unit separator: never in a valid key (printable only) nor an id
_MASK64 = (1 << 64) - 1


def scope_key(*parts: str) -> str:
    """One string for a (tenant, key) or (op, tenant, key) scope: far smaller than a tuple."""
    return SEPARATOR.join(parts)


def answer_code(status: int, digest: str) -> int:
    """A response as one int: the status above a 64-bit hash of the body digest.

    Comparing replays needs only equality of (status, body); a full digest string
    per idempotency key would dominate the checker's memory.
    """
    return (int(status) << 64) | (hash(digest) & _MASK64)


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
        # (order id, provider_ref) -> attempt flags; order ids are the export's own
        # string objects where possible, so a pair costs one tuple and one ref string
        self.pairs: dict[tuple[str, str], int] = {}
        # scope "tenant␟key" -> first ok order id; further distinct ids in created_extra
        self.created: dict[str, str] = {}
        self.created_extra: dict[str, set[str]] = {}
        # scope "op␟tenant␟key" -> answer_code of non-replayed ok answers, or a set
        # of codes when they differ (a stored record expired and the key ran again)
        self.originals: dict[str, int | set[int]] = {}
        # scope -> (answer code or set of codes, order id) of replayed answers
        self.replays: dict[str, tuple[int | set[int], str | None]] = {}
        self.failed_5xx: dict[str, set[int]] = {}
        self.ok_messages: set[str] = set()
        # violations found while streaming, each subject reported once
        self.streamed: list[Finding] = []
        self._reported: set[tuple[str, str]] = set()

    def _report(self, subject: tuple[str, str], finding: Finding) -> None:
        if subject not in self._reported:
            self._reported.add(subject)
            self.streamed.append(finding)

    def consume(self, operations: Iterable[dict[str, Any]],
                observe: Callable[[int, dict[str, Any]], None] | None = None) -> None:
        """Fold the operations in; `observe(sequence, op)` sees each one (for evidence)."""
        # The hot loop of the checker (a million iterations): locals, few calls.
        outcomes = self.outcomes
        duplicates = self.duplicates
        pairs = self.pairs
        orders = self.export.orders
        flag_table = _FLAGS
        count = replays = rejections = conflicts = 0
        for op in operations:
            count += 1
            if observe is not None:
                observe(count, op)
            get = op.get
            name = get("op")
            kind = get("type")
            per_op = outcomes.get(name)
            if per_op is None:
                per_op = outcomes[name] = {"ok": 0, "fail": 0, "info": 0}
            per_op[kind] = per_op.get(kind, 0) + 1
            expect = get("expect")
            if expect:
                duplicates[expect] = duplicates.get(expect, 0) + 1
            status = get("status")
            if status is not None and 400 <= status < 500:
                rejections += 1
                if status == 409:
                    conflicts += 1
            replayed = get("replayed") is True
            if replayed:
                replays += 1
            order_id = get("order_id")

            flags_of = flag_table.get(name)
            if flags_of is not None:
                provider_ref = get("provider_ref")
                if order_id is not None and provider_ref is not None:
                    pair = (order_id, provider_ref)
                    flags = flags_of.get(kind, flags_of["info"])
                    if name == "publish":
                        flags |= self._message(get("message_id"), kind, order_id, provider_ref)
                    known = pairs.get(pair)
                    if known is None:
                        # a new pair keeps the export's id string, not this operation's copy
                        exported = orders.get(order_id)
                        if exported is not None:
                            pair = (exported[0], provider_ref)
                        pairs[pair] = flags
                    elif known | flags != known:
                        pairs[pair] = known | flags
            elif name == "create_order" and kind == "ok" and order_id is not None:
                self._created(op, order_id)

            if (name == "pay" or name == "create_order") and get("idempotency_key") is not None:
                self._response(op, name, kind, status, replayed, order_id)
        self.operations += count
        self.replays_seen += replays
        self.rejections_seen += rejections
        self.conflicts_seen += conflicts

    def _message(self, message_id: str | None, kind: str, order_id: str, provider_ref: str) -> int:
        if message_id is None or kind == "fail":
            return 0
        effects = self.export.effects.get(message_id)
        if kind == "ok":
            # the effect's own id string, so the set adds no string of its own
            self.ok_messages.add(effects[0][0] if effects is not None else message_id)
            if effects is None and message_id not in self.export.dead_letters:
                self._report(("lost_message", message_id), Finding(
                    "no_lost_acknowledgement",
                    f"message {message_id} was published (ok) but never handled nor dead-lettered",
                    order_ids=(order_id,), message_id=message_id, provider_ref=provider_ref,
                    details={"message_id": message_id, "provider_ref": provider_ref}))
        if effects is not None and any(outcome in PAID_OUTCOMES for _m, _o, outcome in effects):
            return MESSAGE_ACK
        return 0

    def _created(self, op: dict[str, Any], order_id: str) -> None:
        key = op.get("idempotency_key")
        if key is None:
            return
        exported = self.export.orders.get(order_id)
        if exported is not None:
            order_id = exported[0]
        tenant = op.get("tenant") or "default"
        scope = scope_key(tenant, key)
        first = self.created.setdefault(scope, order_id)
        if first != order_id:
            self.created_extra.setdefault(scope, {first}).add(order_id)
        if exported is None:
            self._report(("lost_order", order_id), Finding(
                "one_order_per_key",
                f"create_order with key {key!r} returned {order_id} (ok) but the export has no such order",
                order_ids=(order_id,), key=(tenant, key),
                details={"tenant": tenant, "idempotency_key": key}))
        elif exported[1] != scope:
            owner = exported[1].split(SEPARATOR, 1)
            self._report(("foreign_order", order_id), Finding(
                "one_order_per_key",
                f"create_order with key {key!r} returned {order_id}, "
                f"which the export files under key {owner[-1]!r} (tenant {owner[0]})",
                order_ids=(order_id,), key=(tenant, key),
                details={"tenant": tenant, "idempotency_key": key}))

    def _response(self, op: dict[str, Any], name: str, kind: str, status: Any, replayed: bool,
                  order_id: str | None) -> None:
        key = op["idempotency_key"]
        tenant = op.get("tenant") or "default"
        digest = op.get("body_digest")
        if replayed and status is not None and status >= 500:
            self._report(("replayed_5xx", scope_key(name, tenant, key)), Finding(
                "replay_fidelity", f"{name} key {key!r}: a {status} response was replayed",
                order_ids=_maybe(order_id), key=(tenant, key), details={"op": name, "status": status}))
        if status is None or digest is None:
            return  # no full answer: nothing to compare
        if kind == "info" and status < 500:
            return  # a 2xx whose body did not parse is no evidence of what was stored
        scope = scope_key(name, tenant, key)
        code = answer_code(status, digest)
        if replayed:
            known = self.replays.get(scope)
            if known is None:
                exported = self.export.orders.get(order_id)
                self.replays[scope] = (code, exported[0] if exported is not None else order_id)
            elif isinstance(known[0], set):
                known[0].add(code)
            elif known[0] != code:
                self.replays[scope] = ({known[0], code}, known[1])
        elif kind == "ok":
            known_original = self.originals.get(scope)
            if known_original is None:
                self.originals[scope] = code
            elif isinstance(known_original, set):
                known_original.add(code)
            elif known_original != code:
                self.originals[scope] = {known_original, code}
        elif status >= 500:
            # the body alone: a replay of it under any status means the 5xx was stored
            self.failed_5xx.setdefault(scope, set()).add(code & _MASK64)


def _maybe(order_id: str | None) -> tuple[str, ...]:
    return (order_id,) if order_id is not None else ()


def _codes(value: int | set[int] | None) -> set[int]:
    if value is None:
        return set()
    return value if isinstance(value, set) else {value}


def _split(scope: str) -> tuple[str, str]:
    tenant, _, key = scope.partition(SEPARATOR)
    return tenant, key


def evaluate_export(export: ExportState, findings: Findings) -> None:
    """The invariants the export alone decides: known before the history is read."""
    one_payment_per_order(export, findings)
    orders_per_key_in_export(export, findings)
    inventory_conservation(export, findings)
    message_effects_once(export, findings)


def evaluate_history(export: ExportState, index: HistoryIndex, findings: Findings) -> None:
    """The invariants that need the folded history."""
    for finding in index.streamed:
        findings.add(finding)
    no_lost_acknowledgement(export, index, findings)
    nothing_unexpected(export, index, findings)
    one_order_per_key(export, index, findings)
    replay_fidelity(index, findings)


def one_payment_per_order(export: ExportState, findings: Findings) -> None:
    name = "one_payment_per_order"
    for order_id, (_id, _scope, status) in export.orders.items():
        findings.checked[name] += 1
        payments = export.payments.get(order_id, ())
        refs = [payment[0] for payment in payments]
        if len(payments) > 1:
            message = f"order {order_id} holds {len(payments)} payments ({', '.join(refs)})"
        elif status == "PAID" and not payments:
            message = f"order {order_id} is PAID but holds no payment"
        elif status != "PAID" and payments:
            message = f"order {order_id} is {status} but holds a payment ({refs[0]})"
        else:
            continue
        findings.add(Finding(name, message, order_ids=(order_id,),
                             details={"status": status, "provider_refs": refs}))
    for order_id, payments in export.payments.items():
        if order_id not in export.orders:
            refs = [payment[0] for payment in payments]
            findings.add(Finding(
                name, f"{len(payments)} payment(s) for order {order_id}, which the export does not hold",
                order_ids=(order_id,), details={"provider_refs": refs}))


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
        held = [payment[0] for payment in export.payments.get(order_id, ())]
        findings.add(Finding(
            name,
            f"order {order_id}: {' and '.join(how)} for provider_ref {provider_ref}, "
            f"but the order holds {', '.join(held) or 'no payment'}",
            order_ids=(order_id,), provider_ref=provider_ref,
            details={"provider_ref": provider_ref, "acknowledged_by": how, "held": held}))


def nothing_unexpected(export: ExportState, index: HistoryIndex, findings: Findings) -> None:
    name = "nothing_unexpected"
    for order_id, payments in export.payments.items():
        for provider_ref, source, source_id, _amount, _applied in payments:
            findings.checked[name] += 1
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
                details={"provider_ref": provider_ref, "source": source, "source_id": source_id}))


def orders_per_key_in_export(export: ExportState, findings: Findings) -> None:
    """one_order_per_key, the export's half: at most one order per (tenant, key)."""
    name = "one_order_per_key"
    for scope, extra in export.extra_orders_by_scope.items():
        tenant, key = _split(scope)
        order_ids = [export.order_by_scope[scope], *extra]
        findings.add(Finding(
            name, f"key {key!r} (tenant {tenant}) created {len(order_ids)} orders: {', '.join(order_ids)}",
            order_ids=tuple(order_ids), key=(tenant, key),
            details={"tenant": tenant, "idempotency_key": key, "order_ids": order_ids}))


def one_order_per_key(export: ExportState, index: HistoryIndex, findings: Findings) -> None:
    """one_order_per_key, the history's half: every ok create for a key saw one order."""
    name = "one_order_per_key"
    findings.checked[name] = len(export.order_by_scope.keys() | index.created.keys())
    for scope, order_ids in index.created_extra.items():
        tenant, key = _split(scope)
        seen = sorted(order_ids)
        findings.add(Finding(
            name, f"ok create_order answers for key {key!r} (tenant {tenant}) named "
                  f"{len(seen)} different orders: {', '.join(seen)}",
            order_ids=tuple(seen), key=(tenant, key),
            details={"tenant": tenant, "idempotency_key": key, "order_ids": seen}))


def replay_fidelity(index: HistoryIndex, findings: Findings) -> None:
    name = "replay_fidelity"
    for scope, (replayed, order_id) in index.replays.items():
        findings.checked[name] += 1
        op, _, scoped_key = scope.partition(SEPARATOR)
        tenant, key = _split(scoped_key)
        answers = _codes(replayed)
        originals = _codes(index.originals.get(scope))
        problems = []
        # With the originals known, each replay must be one of them (two originals
        # mean the stored record expired and the key ran again); without, they must agree.
        if originals and answers - originals:
            problems.append("a replay differs from the original answer")
        elif not originals and len(answers) > 1:
            problems.append(f"replays disagree ({len(answers)} different answers)")
        if {code & _MASK64 for code in answers} & index.failed_5xx.get(scope, set()):
            problems.append("a 5xx answer was stored and replayed")
        if not problems:
            continue
        findings.add(Finding(
            name, f"{op} key {key!r} (tenant {tenant}): {'; '.join(problems)}",
            order_ids=_maybe(order_id), key=(tenant, key),
            details={"op": op, "tenant": tenant, "idempotency_key": key,
                     "replay_statuses": sorted(code >> 64 for code in answers),
                     "original_statuses": sorted(code >> 64 for code in originals)}))


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
        order_ids = tuple(dict.fromkeys(order_id for _m, order_id, _o in effects if order_id))
        outcomes = [outcome for _m, _o, outcome in effects]
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
    # published and taken by the broker, then never handled: lost as well
    counts["lost"] += sum(1 for f in index.streamed if f.invariant == "no_lost_acknowledgement")
    return counts
