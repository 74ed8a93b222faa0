"""The history folded into compact per-subject records, and the invariants.

Memory must grow with the number of orders, not of operations (a run of 10^6
operations is checked in the memory of its orders; docs/checker.md): the export (harness.check.checker.ExportState, proportional to orders) is loaded first,
then the history is streamed once and folded into small records: attempt flags
per (order, provider_ref), the ok order ids per idempotency key, one int per key
for its original and replayed answers, one int per key for the bodies sent under it.
No operation is kept; what a single operation proves wrong on its own (an answer
that contradicts its request) is a finding at once, and evidence is gathered
afterwards, in a second pass, for the failing subjects only.

The export's rows are named tuples (harness.check.checker.ExportOrder, ExportPayment),
indexed in the hot loops by the `O_*` / `P_*` constants below: 10^5 orders as
dataclasses would cost several times the memory and the time.

`INVARIANTS`, at the end of the module, is the registry: each invariant's name,
title, phase and the rules that evaluate it, in the order results are listed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from harness.check.export import (
    DEFAULT_TENANT,
    SEPARATOR,
    ExportState,
    scope_key,
    split_scope,
)
from harness.history import Answer, Completion, Invoke, merge_records, record_fields

# An exported order row: (id, scope, status, tenant, sku, quantity, amount_cents). An
# order the export lists as broken has no row, only its id in `ExportState.broken`.
# (Final literals: mypy then knows each field's type at a constant index.)
O_ID: Final = 0
O_SCOPE: Final = 1
O_STATUS: Final = 2
O_TENANT: Final = 3
O_SKU: Final = 4
O_QUANTITY: Final = 5
O_AMOUNT: Final = 6
# An exported payment row: (provider_ref, source, source_id, amount_cents, applied_at).
P_REF: Final = 0
P_SOURCE: Final = 1
P_AMOUNT: Final = 3

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

# export payment source -> (the history op that can cause it, flags that justify
# it, flags meaning the server said it did not happen)
SOURCES: dict[str, tuple[str, int, int]] = {
    "api": ("pay", PAY_OK | PAY_INFO, PAY_FAIL),
    "webhook": ("webhook", WEBHOOK_OK | WEBHOOK_INFO, WEBHOOK_FAIL),
    "message": ("publish", PUBLISH_OK | PUBLISH_INFO, PUBLISH_FAIL),
}

KEY_MISMATCH = "/problems/idempotency-key-mismatch"
CROSS_TENANT_READ: Final = "cross_tenant_read"
CROSS_TENANT_PAY: Final = "cross_tenant_pay"
CROSS_TENANT = frozenset({CROSS_TENANT_READ, CROSS_TENANT_PAY})
# Refusals that depend on the order's state when the request lands, which the
# history cannot see: a conflicting provider_ref is rightly accepted by an order
# whose first payment never arrived (lost in a fault). An accepted one that did
# conflict shows up as two payments or a lost acknowledgement instead.
STATE_DEPENDENT_REFUSALS = frozenset({"conflicting_ref"})
# The request fields an ok create's answer must repeat.
_CREATE_FIELDS = ("sku", "quantity", "amount_cents", "idempotency_key")

_MASK64 = (1 << 64) - 1


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
        self.kept: dict[str, list[Finding]] = {invariant.name: [] for invariant in INVARIANTS}
        self.counts: dict[str, int] = {invariant.name: 0 for invariant in INVARIANTS}
        self.checked: dict[str, int] = {invariant.name: 0 for invariant in INVARIANTS}

    def add(self, finding: Finding) -> None:
        self.counts[finding.invariant] += 1
        kept = self.kept[finding.invariant]
        if len(kept) < self.cap:
            kept.append(finding)


@dataclass
class Refusal:
    """A key-mismatch refusal, kept until every body sent under its key is known."""

    op: str
    scope: str
    fingerprint: int
    order_id: str | None
    op_id: Any


# A key's record packed as one int (HistoryIndex.keys), while the key saw one body
# and one answer, whatever how many times:
#   bits 0-65   the body: bit 0 "answered ok", bit 1 "a fingerprint was sent",
#               bits 2-65 the fingerprint's 64-bit hash (0 when none was sent)
#   bits 66-    the answer: bit 0 "an original (non-replayed ok) answer had it",
#               bit 1 "a replay had it", bit 2 "of a pay" (else of a create), then
#               the answer code (status << 64 | 64-bit hash of the body digest; 0 when none)
# About 48 bytes per key instead of a record per key in four dicts; the first second
# body or different answer unpacks it into a KeyRecord.
_BODY_BITS: Final = 66
_BODY_MASK: Final = (1 << _BODY_BITS) - 1
_ANSWER_SHIFT: Final = _BODY_BITS
_ORIGINAL: Final = 1
_REPLAYED: Final = 2
_OF_PAY: Final = 4
# The bits that must be equal for an operation to leave a packed record packed (all
# but the flags "answered ok", "an original had it", "a replay had it"): of the body,
# of the answer, of both.
_SAME_BODY: Final = _BODY_MASK & ~1
_SAME_ANSWER: Final = ((1 << 256) - 1) & ~((1 << (_ANSWER_SHIFT + 2)) - 1)
_SAME_BOTH: Final = _SAME_BODY | _SAME_ANSWER


class KeyRecord:
    """What was sent and answered under one (tenant, key), once it is more than one
    body and one answer (a packed int before: see _BODY_BITS).

    `bodies`: fingerprint hash -> answered ok; `originals` / `replays`: per
    operation, the answer codes of non-replayed ok answers and of replays (several
    originals: the stored record expired and the key ran again); `order_id`: an
    order named under the key, a replay's when one was seen since.
    """

    __slots__ = ("bodies", "order_id", "order_of_replay", "originals", "replays")

    def __init__(self) -> None:
        self.bodies: dict[int, bool] = {}
        self.originals: dict[str, set[int]] = {}
        self.replays: dict[str, set[int]] = {}
        self.order_id: Any = None
        self.order_of_replay = False

    @classmethod
    def unpack(cls, packed: int) -> KeyRecord:
        record = cls()
        record.add(packed & _BODY_MASK, packed >> _ANSWER_SHIFT, None)
        return record

    def add(self, body: int, heard: int, order_id: Any) -> None:
        """A packed body and a packed answer (either 0 for none), seen under the key."""
        if body:
            fingerprint = body >> 2
            self.bodies[fingerprint] = self.bodies.get(fingerprint, False) or bool(body & 1)
        if heard:
            name = "pay" if heard & _OF_PAY else "create_order"
            code = heard >> 3
            if heard & _ORIGINAL:
                self.originals.setdefault(name, set()).add(code)
            if heard & _REPLAYED:
                self.replays.setdefault(name, set()).add(code)
        if order_id is not None and (self.order_id is None or (heard & _REPLAYED and not self.order_of_replay)):
            self.order_id = order_id
            self.order_of_replay = bool(heard & _REPLAYED)


class HistoryIndex:
    """The history folded into per-subject records, in one streaming pass."""

    def __init__(self, export: ExportState, findings: Findings) -> None:
        self.export = export
        self.findings = findings
        self.operations = 0
        # (op, completion, expect, status, replayed, problem type) -> [operations]: a list, so
        # counting one operation hashes its tuple once
        self._counts: dict[tuple[Any, ...], list[int]] = {}
        self.already_paid_seen = 0
        self.lost_messages = 0
        # Jepsen's element tallies, counted by no_lost_acknowledgement
        self.elements: dict[str, int] | None = None
        # (order id, provider_ref) -> attempt flags; order ids are the export's own
        # string objects where possible, so a pair costs one tuple and one ref string
        self.pairs: dict[tuple[str, str], int] = {}
        # scope (see scope_key) -> first ok order id; further distinct ids in created_extra
        self.created: dict[str, str] = {}
        self.created_extra: dict[str, set[str]] = {}
        # scope -> what was sent and answered under the key (one record for both keyed
        # operations: the app keeps one record per (tenant, key), whatever the
        # endpoint): a packed int while the key saw one body and one answer (the
        # common case, see KeyRecord), a KeyRecord once it saw more
        self.keys: dict[str, int | KeyRecord] = {}
        self.keyed_bodies = 0  # scopes under which a body (fingerprint) was sent
        # per keyed operation, scope -> body hashes of 5xx answers (rare)
        self.failed_5xx: dict[str, dict[str, set[int]]] = {"create_order": {}, "pay": {}}
        # scope -> the order of a 5xx answer under the key (rare), for findings
        self.key_orders: dict[str, Any] = {}
        self.refusals: list[Refusal] = []
        self.ok_messages: set[str] = set()
        self._reported: set[tuple[str, str]] = set()

    def _report_once(self, subject: tuple[str, str], finding: Finding) -> None:
        if subject not in self._reported:
            self._reported.add(subject)
            self.findings.add(finding)

    def consume_records(self, operations: Iterable[tuple[Invoke, Completion]]) -> None:
        """Fold (invoke, completion) records in, as the history files hold them
        (`harness.history.read_records`; a merged operation through `as_records`).

        Each field is read from the record that carries it (docs/internals.md):
        what was asked from the invoke, what was answered from the completion; so
        the history reader need not merge a million pairs.

        The hot loop of the checker (a million iterations): locals instead of
        attributes of the index, no call for the common cases, one tally per
        combination of (op, completion, expect, status, replayed, problem type)
        instead of a counter each, and nothing allocated for an operation that only
        repeats what is already known. A record's fields are slots (`Invoke`,
        `Completion`), read as attributes: cheaper than a dict's `get`; so are an
        answer's (an `Answer`).
        """
        counts = self._counts
        pairs = self.pairs
        orders = self.export.orders
        effects_of = self.export.effects
        paid_messages = self.export.paid_messages
        dead_letters = self.export.dead_letters
        ok_messages = self.ok_messages
        keys = self.keys
        created = self.created
        already_paid = 0
        for invoke, done in operations:
            name = invoke.op
            expect = invoke.expect
            tenant = invoke.tenant or DEFAULT_TENANT
            kind = done.kind
            status = done.status
            replayed = done.replayed
            tally: tuple[Any, ...]
            # the tally names the completion by the constant, not this record's fresh copy
            # of the string: the constant's hash is cached and dict lookups match it by identity
            if kind == "ok":
                tally = (name, "ok", expect, status, replayed, None)
                answer = done.answer
                # two comparisons, not a set: a set would hash this fresh string
                if expect is not None and (invoke.must_reject or expect == CROSS_TENANT_READ
                                           or expect == CROSS_TENANT_PAY):
                    self._accepted_refusal(merge_records(invoke, done))
            elif kind == "fail":
                tally = (name, "fail", expect, status, replayed, done.problem_type)
                answer = None
            else:
                tally = (name, kind, expect, status, replayed, None)
                answer = None
            counter = counts.get(tally)
            if counter is None:
                counts[tally] = [1]
            else:
                counter[0] += 1
            # A JSON field: a str by the history's format (docs/internals.md), or absent.
            order_id: Any = invoke.order_id
            if order_id is None:
                order_id = done.order_id  # a create learns its order from the answer

            if name == "publish":
                provider_ref = invoke.provider_ref
                message_id = invoke.message_id
                flags = PUBLISH_OK if kind == "ok" else PUBLISH_FAIL if kind == "fail" else PUBLISH_INFO
                if message_id is not None and kind != "fail":
                    effects = effects_of.get(message_id)
                    if kind == "ok":
                        # the effect's own id string, so the set adds no string of its own
                        ok_messages.add(effects[0][0] if effects is not None else message_id)
                        if effects is None and message_id not in dead_letters:
                            self._lost_message(message_id, order_id, provider_ref)
                    if message_id in paid_messages:
                        flags |= MESSAGE_ACK
                if order_id is not None and provider_ref is not None:
                    pair = (order_id, provider_ref)
                    known = pairs.get(pair)
                    if known is None:
                        pairs[self._exported_pair(order_id, provider_ref)] = flags
                    elif known | flags != known:
                        pairs[pair] = known | flags
                continue

            if name == "pay" or name == "webhook":
                provider_ref = invoke.provider_ref
                if order_id is not None and provider_ref is not None:
                    if name == "pay":
                        flags = PAY_OK if kind == "ok" else PAY_FAIL if kind == "fail" else PAY_INFO
                    else:
                        flags = WEBHOOK_OK if kind == "ok" else WEBHOOK_FAIL if kind == "fail" else WEBHOOK_INFO
                    pair = (order_id, provider_ref)
                    known = pairs.get(pair)
                    if known is None:
                        pairs[self._exported_pair(order_id, provider_ref)] = flags
                    elif known | flags != known:
                        pairs[pair] = known | flags
                if answer is not None:
                    # An ok pay or webhook answers with the order it paid, of the payer's tenant.
                    exported = orders.get(order_id)
                    if answer.already_paid is True:
                        already_paid += 1
                        fine = True
                    else:
                        fine = answer.provider_ref == provider_ref
                    if not (fine and answer.order_id == order_id and answer.status == "PAID"
                            and (exported is None or (answer.amount_cents == exported[6]
                                                      and (name != "pay" or exported[3] == tenant)))
                            and (name != "pay" or answer.tenant == tenant)):
                        self._payment_answer(merge_records(invoke, done), answer, exported, tenant)
                if name == "webhook":
                    continue
            elif name == "create_order":
                if kind == "ok" and order_id is not None:
                    # the common case inline (what _created finds nothing wrong with): the
                    # export's order, of this tenant, filed under this key, and an answer
                    # that repeats the request
                    exported = orders.get(order_id)
                    key = invoke.idempotency_key
                    if (key is not None and exported is not None and exported[3] == tenant
                            and exported[1] == (key if tenant == DEFAULT_TENANT else tenant + SEPARATOR + key)
                            and (answer is None or (
                                answer.tenant == tenant and answer.sku == invoke.sku
                                and answer.quantity == invoke.quantity
                                and answer.idempotency_key == key
                                and ((amount := invoke.amount_cents) is None
                                     or answer.amount_cents == amount)))):
                        # keyed by the export's own strings: no copy of this operation's
                        first = created.setdefault(exported[1], exported[0])
                        if first != exported[0]:
                            self.created_extra.setdefault(exported[1], {first}).add(exported[0])
                    else:
                        self._created(record_fields(invoke), order_id, tenant, answer)
            else:
                if answer is not None and name == "read_order":
                    exported = orders.get(order_id)
                    if (answer.order_id != order_id or answer.tenant != tenant
                            or (exported is not None and exported[3] != tenant)):
                        self._read_answer(merge_records(invoke, done), answer, exported, tenant)
                continue

            # pay and create_order: what the API layer did with the key, folded into
            # one record per (tenant, key) scope (KeyRecord, packed as one int)
            key = invoke.idempotency_key
            if key is None:
                continue
            scope = key if tenant == DEFAULT_TENANT else tenant + SEPARATOR + key
            fingerprint = invoke.fingerprint
            body = 0
            if fingerprint is not None:
                body = (hash(fingerprint) & _MASK64) << 2 | (3 if kind == "ok" else 2)
                if kind == "fail" and tally[5] == KEY_MISMATCH:
                    self.refusals.append(Refusal(name, scope, body >> 2, order_id, done.op_id))
            heard = 0
            if status is not None:
                if replayed is True and status >= 500:
                    self._replayed_5xx(name, scope, status, order_id, tenant, key)
                digest = done.body_digest
                # an info 2xx whose body did not parse is no evidence of what was stored
                if digest is not None and (kind != "info" or status >= 500):
                    # heard = (answer code << 1 | of a pay) << 2 | original or replayed flag,
                    # in as few operations on big ints as that takes (each allocates)
                    if replayed is True:
                        heard = ((hash(digest) & _MASK64) | status << 64) << 3 | (
                            _OF_PAY | _REPLAYED if name == "pay" else _REPLAYED)
                    elif kind == "ok":
                        heard = ((hash(digest) & _MASK64) | status << 64) << 3 | (
                            _OF_PAY | _ORIGINAL if name == "pay" else _ORIGINAL)
                    elif status >= 500:
                        # the body alone: a replay of it under any status means the 5xx was stored
                        self.failed_5xx[name].setdefault(scope, set()).add(hash(digest) & _MASK64)
                        self.key_orders.setdefault(scope, order_id)
            if not body and not heard:
                continue
            mine = heard << _ANSWER_SHIFT | body
            record = keys.get(scope)
            if record is None:
                if name == "create_order":
                    # the export's own string for the key of its order, not this operation's copy
                    exported = orders.get(order_id)
                    if exported is not None and exported[1] == scope:
                        scope = exported[1]
                keys[scope] = mine
                if body:
                    self.keyed_bodies += 1
            elif type(record) is int and not (record ^ mine) & (
                    _SAME_BOTH if body and heard else _SAME_BODY if body else _SAME_ANSWER):
                # the common case: the body and answer the record already holds, maybe
                # with a new flag (answered ok, an original, a replay)
                if record | mine != record:
                    keys[scope] = record | mine
            elif type(record) is int:
                low = record & _BODY_MASK
                high = record >> _ANSWER_SHIFT
                if body:
                    if not low:
                        low = body
                        self.keyed_bodies += 1
                    elif low | 1 == body | 1:
                        low |= body
                    else:
                        low = -1  # a second body under the key
                if heard and low != -1:
                    if not high:
                        high = heard
                    elif high >> 2 == heard >> 2:
                        high |= heard
                    else:
                        high = -1  # another answer, or one of the other operation
                if low == -1 or high == -1:
                    rich = keys[scope] = KeyRecord.unpack(record)
                    self._add_to_record(rich, scope, name, body, heard, order_id)
                elif (high << _ANSWER_SHIFT | low) != record:
                    keys[scope] = high << _ANSWER_SHIFT | low
            else:
                assert isinstance(record, KeyRecord)  # (the rare case: for mypy only)
                self._add_to_record(record, scope, name, body, heard, order_id)
        self.operations = sum(counter[0] for counter in counts.values())
        self.already_paid_seen += already_paid

    def _exported_pair(self, order_id: Any, provider_ref: Any) -> tuple[str, str]:
        """A new (order, provider_ref) pair made of the export's own strings where it has
        them, not this operation's copies: at 10^6 orders, a string each is 100 MB."""
        exported = self.export.orders.get(order_id)
        if exported is None:
            return (order_id, provider_ref)
        for payment in self.export.payments.get(exported[0], ()):
            if payment[0] == provider_ref:
                return (exported[0], payment[0])
        return (exported[0], provider_ref)

    def _add_to_record(self, record: KeyRecord, scope: str, name: str, body: int, heard: int,
                       order_id: Any) -> None:
        if body and not record.bodies:
            self.keyed_bodies += 1
        exported = self.export.orders.get(order_id)
        record.add(body, heard, exported[0] if exported is not None else order_id)

    # -- tallies -----------------------------------------------------------------------

    @property
    def tallies(self) -> dict[tuple[Any, ...], int]:
        """(op, completion, expect, status, replayed, problem type) -> operations."""
        return {tally: counter[0] for tally, counter in self._counts.items()}

    @property
    def outcomes(self) -> dict[str, dict[str, int]]:
        """Per operation, how many ok, fail and info."""
        outcomes: dict[str, dict[str, int]] = {}
        for (name, kind, *_rest), number in self.tallies.items():
            per_op = outcomes.setdefault(name, {"ok": 0, "fail": 0, "info": 0})
            per_op[kind] = per_op.get(kind, 0) + number
        return outcomes

    @property
    def duplicates(self) -> dict[str, int]:
        """Operations per `expect` value."""
        duplicates: dict[str, int] = {}
        for (_name, _kind, expect, *_rest), number in self.tallies.items():
            if expect:
                duplicates[expect] = duplicates.get(expect, 0) + number
        return duplicates

    @property
    def problem_types(self) -> dict[str, int]:
        """Refusals (fail) per problem type."""
        problems: dict[str, int] = {}
        for (*_rest, problem), number in self.tallies.items():
            if problem is not None:
                problems[problem] = problems.get(problem, 0) + number
        return problems

    def _status_count(self, wanted: Callable[[Any], bool]) -> int:
        return sum(number for (_n, _k, _e, status, _r, _p), number in self.tallies.items()
                   if isinstance(status, int) and wanted(status))

    @property
    def replays_seen(self) -> int:
        return sum(number for (_n, _k, _e, _s, replayed, _p), number in self.tallies.items()
                   if replayed is True)

    @property
    def rejections_seen(self) -> int:
        return self._status_count(lambda status: 400 <= status < 500)

    @property
    def conflicts_seen(self) -> int:
        return self._status_count(lambda status: status == 409)

    @property
    def cross_tenant_refused(self) -> int:
        """Cross-tenant requests the app refused."""
        return sum(number for (_n, kind, expect, _s, _r, _p), number in self.tallies.items()
                   if kind == "fail" and expect in CROSS_TENANT)

    @property
    def acknowledged(self) -> int:
        """Operations answered ok."""
        return sum(tally.get("ok", 0) for tally in self.outcomes.values())

    # -- the rare cases, out of the hot loop ------------------------------------------

    def _accepted_refusal(self, op: dict[str, Any]) -> None:
        """An ok answer to a request the scenario knows the app must refuse."""
        expect = op.get("expect")
        if expect in STATE_DEPENDENT_REFUSALS:
            return
        name = op.get("op")
        invariant = "tenant_isolation" if expect in CROSS_TENANT else "answers_match_requests"
        wanted = op.get("reject_status")
        self.findings.add(Finding(
            invariant,
            f"{name} ({expect}) must be refused"
            f"{f' with {wanted}' if wanted is not None else ''} but was answered {op.get('status')} (ok)",
            order_ids=_maybe(op.get("order_id")), key=_key_of(op), message_id=op.get("message_id"),
            provider_ref=op.get("provider_ref"),
            details={"op": name, "op_id": op.get("op_id"), "expect": expect, "reject_status": wanted,
                     "status": op.get("status"), "tenant": op.get("tenant") or DEFAULT_TENANT}))

    def _payment_answer(self, op: dict[str, Any], answer: Answer,
                        exported: tuple[Any, ...] | None, tenant: str) -> None:
        name = op.get("op")
        order_id = op.get("order_id")
        provider_ref = op.get("provider_ref")
        wrong = []
        if answer.order_id != order_id:
            wrong.append(f"order {answer.order_id!r} instead of {order_id!r}")
        if exported is not None and answer.amount_cents != exported[O_AMOUNT]:
            wrong.append(f"amount {answer.amount_cents!r}, the order's is {exported[O_AMOUNT]!r}")
        if answer.already_paid is not True and answer.provider_ref != provider_ref:
            wrong.append(f"provider_ref {answer.provider_ref!r} instead of {provider_ref!r}")
        if answer.status != "PAID":
            wrong.append(f"status {answer.status!r}")
        if wrong:
            self.findings.add(Finding(
                "answers_match_requests",
                f"ok {name} of {order_id} ({provider_ref}) answered {'; '.join(wrong)}",
                order_ids=_maybe(order_id), provider_ref=provider_ref, key=_key_of(op),
                details={"op": name, "op_id": op.get("op_id"), "answer": record_fields(answer)}))
        if name == "pay":
            self._tenant_answer(op, answer, exported, tenant)

    def _create_answer(self, op: dict[str, Any], answer: Answer, order_id: str) -> None:
        wrong = [f"{name} {getattr(answer, name)!r} instead of {op.get(name)!r}"
                 for name in _CREATE_FIELDS
                 if op.get(name) is not None and getattr(answer, name) != op.get(name)]
        if wrong:
            self.findings.add(Finding(
                "answers_match_requests",
                f"ok create_order with key {op.get('idempotency_key')!r} answered {'; '.join(wrong)}",
                order_ids=(order_id,), key=_key_of(op),
                details={"op": "create_order", "op_id": op.get("op_id"), "answer": record_fields(answer)}))

    def _read_answer(self, op: dict[str, Any], answer: Answer,
                     exported: tuple[Any, ...] | None, tenant: str) -> None:
        order_id = op.get("order_id")
        if answer.order_id != order_id:
            self.findings.add(Finding(
                "answers_match_requests",
                f"ok read_order of {order_id} answered order {answer.order_id!r}",
                order_ids=_maybe(order_id),
                details={"op": "read_order", "op_id": op.get("op_id"), "answer": record_fields(answer)}))
        self._tenant_answer(op, answer, exported, tenant)

    def _tenant_answer(self, op: dict[str, Any], answer: Answer | None,
                       exported: tuple[Any, ...] | None, tenant: str, order_id: Any = None) -> None:
        """An ok answer must name an order of the requesting tenant, in the answer and the export."""
        name = op.get("op")
        order_id = order_id or (answer.order_id if answer is not None else None) or op.get("order_id")
        owners = []
        if answer is not None and answer.tenant != tenant:
            owners.append(f"the answer names tenant {answer.tenant!r}")
        if exported is not None and exported[O_TENANT] != tenant:
            owners.append(f"the export files it under tenant {exported[O_TENANT]!r}")
        if owners:
            self.findings.add(Finding(
                "tenant_isolation",
                f"ok {name} by tenant {tenant!r} reached order {order_id}: {' and '.join(owners)}",
                order_ids=_maybe(order_id), key=_key_of(op), provider_ref=op.get("provider_ref"),
                details={"op": name, "op_id": op.get("op_id"), "tenant": tenant,
                         "answer_tenant": (answer.tenant if answer is not None else None),
                         "export_tenant": exported[O_TENANT] if exported is not None else None}))

    def _lost_message(self, message_id: str, order_id: Any, provider_ref: Any) -> None:
        subject = ("lost_message", message_id)
        if subject in self._reported:
            return
        self.lost_messages += 1
        self._report_once(subject, Finding(
            "no_lost_acknowledgement",
            f"message {message_id} was published (ok) but never handled nor dead-lettered",
            order_ids=_maybe(order_id), message_id=message_id, provider_ref=provider_ref,
            details={"message_id": message_id, "provider_ref": provider_ref}))

    def _replayed_5xx(self, name: str, scope: str, status: int, order_id: Any, tenant: str,
                      key: str) -> None:
        self._report_once(("replayed_5xx", name + SEPARATOR + scope), Finding(
            "replay_fidelity", f"{name} key {key!r}: a {status} response was replayed",
            order_ids=_maybe(order_id), key=(tenant, key), details={"op": name, "status": status}))

    def _created(self, op: dict[str, Any], order_id: str, tenant: str,
                 answer: Answer | None) -> None:
        """An ok create: its answer against its request and the export, its key's orders."""
        exported = self.export.orders.get(order_id)
        if answer is not None and (
                answer.sku != op.get("sku") or answer.quantity != op.get("quantity")
                or answer.idempotency_key != op.get("idempotency_key")
                or (op.get("amount_cents") is not None
                    and answer.amount_cents != op.get("amount_cents"))):
            self._create_answer(op, answer, order_id)
        if ((answer is not None and answer.tenant != tenant)
                or (exported is not None and exported[O_TENANT] != tenant)):
            self._tenant_answer(op, answer, exported, tenant, order_id)
        key = op.get("idempotency_key")
        if key is None:
            return
        if exported is not None:
            order_id = exported[O_ID]
        scope = scope_key(tenant, key)
        first = self.created.setdefault(scope, order_id)
        if first != order_id:
            self.created_extra.setdefault(scope, {first}).add(order_id)
        if exported is None:
            self._report_once(("lost_order", order_id), Finding(
                "one_order_per_key",
                f"create_order with key {key!r} returned {order_id} (ok) but the export has no such order",
                order_ids=(order_id,), key=(tenant, key),
                details={"tenant": tenant, "idempotency_key": key}))
        elif exported[O_SCOPE] != scope:
            owner_tenant, owner_key = split_scope(exported[O_SCOPE])
            self._report_once(("foreign_order", order_id), Finding(
                "one_order_per_key",
                f"create_order with key {key!r} returned {order_id}, "
                f"which the export files under key {owner_key!r} (tenant {owner_tenant})",
                order_ids=(order_id,), key=(tenant, key),
                details={"tenant": tenant, "idempotency_key": key}))


def _maybe(order_id: str | None) -> tuple[str, ...]:
    return (order_id,) if order_id is not None else ()


def _key_of(op: dict[str, Any]) -> tuple[str, str] | None:
    key = op.get("idempotency_key")
    return (op.get("tenant") or DEFAULT_TENANT, key) if key is not None else None


# -- evaluation ------------------------------------------------------------------------

def evaluate_export(export: ExportState, findings: Findings) -> None:
    """The invariants' rules the export alone decides: known before the history is read."""
    for invariant in INVARIANTS:
        for rule in invariant.export_rules:
            rule(export, findings)


def evaluate_history(export: ExportState, index: HistoryIndex, findings: Findings,
                     final_reads: Iterable[dict[str, Any]] = ()) -> None:
    """The invariants' rules that need the folded history (and the final reads)."""
    for invariant in INVARIANTS:
        for rule in invariant.history_rules:
            rule(export, index, findings, final_reads)


def one_payment_per_order(export: ExportState, findings: Findings) -> None:
    name = "one_payment_per_order"
    for order_id, row in export.orders.items():
        status = row[O_STATUS]
        findings.checked[name] += 1
        payments = export.payments.get(order_id, ())
        refs = [payment[P_REF] for payment in payments]
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
            refs = [payment[P_REF] for payment in payments]
            findings.add(Finding(
                name, f"{len(payments)} payment(s) for order {order_id}, which the export does not hold",
                order_ids=(order_id,), details={"provider_refs": refs}))


def payment_amount_matches_order(export: ExportState, findings: Findings) -> None:
    """Every exported payment carries its order's amount (the domain's amount check)."""
    name = "payment_amount_matches_order"
    orders = export.orders
    for order_id, payments in export.payments.items():
        row = orders.get(order_id)
        if row is None:
            continue  # one_payment_per_order reports those
        for payment in payments:
            findings.checked[name] += 1
            if payment[P_AMOUNT] == row[O_AMOUNT]:
                continue
            findings.add(Finding(
                name, f"payment {payment[P_REF]} on order {order_id} is {payment[P_AMOUNT]!r} cents, "
                      f"the order is {row[O_AMOUNT]!r}",
                order_ids=(order_id,), provider_ref=payment[P_REF],
                details={"provider_ref": payment[P_REF], "payment_amount_cents": payment[P_AMOUNT],
                         "order_amount_cents": row[O_AMOUNT], "source": payment[P_SOURCE]}))


def broken_orders(export: ExportState, findings: Findings) -> None:
    """final_reads_agree, the export's half: an indexed order the export cannot describe."""
    for order_id in export.broken:
        findings.add(Finding(
            "final_reads_agree", f"the export lists order {order_id} as broken (indexed, empty or unparsable)",
            order_ids=(order_id,), details={"broken": True}))


def no_lost_acknowledgement(export: ExportState, index: HistoryIndex, findings: Findings) -> None:
    """Also tallies Jepsen's set elements (index.elements) in the same pass over the pairs."""
    name = "no_lost_acknowledgement"
    findings.checked[name] += len(index.ok_messages)
    payments = export.payments
    acknowledged = lost = recovered = absent = 0
    for (order_id, provider_ref), flags in index.pairs.items():
        present = False
        for payment in payments.get(order_id, ()):
            if payment[P_REF] == provider_ref:
                present = True
                break
        if not flags & ACKNOWLEDGED:
            if flags & INDETERMINATE:
                if present:
                    recovered += 1
                else:
                    absent += 1
            continue
        acknowledged += 1
        if present:
            continue
        lost += 1
        how = [label for bit, label in ((PAY_OK, "pay ok"), (WEBHOOK_OK, "webhook ok"),
                                        (MESSAGE_ACK, "message handled as paid")) if flags & bit]
        held = [payment[P_REF] for payment in payments.get(order_id, ())]
        findings.add(Finding(
            name,
            f"order {order_id}: {' and '.join(how)} for provider_ref {provider_ref}, "
            f"but the order holds {', '.join(held) or 'no payment'}",
            order_ids=(order_id,), provider_ref=provider_ref,
            details={"provider_ref": provider_ref, "acknowledged_by": how, "held": held}))
    findings.checked[name] += acknowledged
    index.elements = {"acknowledged": acknowledged, "lost": lost, "recovered": recovered,
                      "indeterminate_absent": absent}


def nothing_unexpected(export: ExportState, index: HistoryIndex, findings: Findings) -> None:
    name = "nothing_unexpected"
    findings.checked[name] += export.payment_count
    pairs = index.pairs
    for order_id, payments in export.payments.items():
        for provider_ref, source, source_id, *_rest in payments:
            flags = pairs.get((order_id, provider_ref), 0)
            rule = SOURCES.get(source) if source is not None else None
            if rule is None:
                reason = f"has unknown source {source!r}"
            else:
                op, justified, refused = rule
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
        tenant, key = split_scope(scope)
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
        tenant, key = split_scope(scope)
        seen = sorted(order_ids)
        findings.add(Finding(
            name, f"ok create_order answers for key {key!r} (tenant {tenant}) named "
                  f"{len(seen)} different orders: {', '.join(seen)}",
            order_ids=tuple(seen), key=(tenant, key),
            details={"tenant": tenant, "idempotency_key": key, "order_ids": seen}))


def replay_fidelity(index: HistoryIndex, findings: Findings) -> None:
    name = "replay_fidelity"
    failed_5xx = index.failed_5xx
    for scope, record in index.keys.items():
        if type(record) is int:
            heard = record >> _ANSWER_SHIFT
            if not heard & _REPLAYED:
                continue
            findings.checked[name] += 1
            op = "pay" if heard & _OF_PAY else "create_order"
            if scope not in failed_5xx[op]:
                continue  # the common case: one answer, replayed as it was
            code = heard >> 3
            _replay_problems(findings, op, scope, {code}, {code} if heard & _ORIGINAL else set(),
                             failed_5xx[op][scope], index.key_orders.get(scope))
            continue
        assert isinstance(record, KeyRecord)
        for op, answers in record.replays.items():
            findings.checked[name] += 1
            _replay_problems(findings, op, scope, answers, record.originals.get(op, set()),
                             failed_5xx[op].get(scope, set()), record.order_id or index.key_orders.get(scope))


def _replay_problems(findings: Findings, op: str, scope: str, answers: set[int], originals: set[int],
                     failed: set[int], order_id: Any) -> None:
    """replay_fidelity for one (operation, key): its replays against its originals."""
    problems = []
    # With the originals known, each replay must be one of them (two originals
    # mean the stored record expired and the key ran again); without, they must agree.
    if originals and answers - originals:
        problems.append("a replay differs from the original answer")
    elif not originals and len(answers) > 1:
        problems.append(f"replays disagree ({len(answers)} different answers)")
    if {code & _MASK64 for code in answers} & failed:
        problems.append("a 5xx answer was stored and replayed")
    if not problems:
        return
    tenant, key = split_scope(scope)
    findings.add(Finding(
        "replay_fidelity", f"{op} key {key!r} (tenant {tenant}): {'; '.join(problems)}",
        order_ids=_maybe(order_id), key=(tenant, key),
        details={"op": op, "tenant": tenant, "idempotency_key": key,
                 "replay_statuses": sorted(code >> 64 for code in answers),
                 "original_statuses": sorted(code >> 64 for code in originals)}))


def honest_retries_accepted(index: HistoryIndex, findings: Findings) -> None:
    """answers_match_requests, the keys' half: a key-mismatch refusal of the key's own body.

    The app refuses a key as a mismatch only when it holds a completed record of
    another body under it, and such a record stays for the key's lifetime. So a
    body refused as a mismatch is an honest retry wrongly refused when no other
    body was ever sent under the key, or when that same body was answered ok
    under it (it was stored then; no other body can own the key). A body whose
    every request failed or timed out, under a key another body also used, may
    rightly have lost the key: nothing is concluded.
    """
    name = "answers_match_requests"
    findings.checked[name] += index.keyed_bodies
    for refusal in index.refusals:
        record = index.keys.get(refusal.scope)
        if type(record) is int:
            # one body only: the refused one, unless the record holds none
            if (record & _BODY_MASK) >> 2 != refusal.fingerprint:
                continue
            why = "no other body was ever sent under the key"
        elif isinstance(record, KeyRecord) and len(record.bodies) == 1 and refusal.fingerprint in record.bodies:
            why = "no other body was ever sent under the key"
        elif isinstance(record, KeyRecord) and record.bodies.get(refusal.fingerprint):
            why = "the same body was answered ok under the key"
        else:
            continue
        tenant, key = split_scope(refusal.scope)
        findings.add(Finding(
            name, f"{refusal.op} with key {key!r} (tenant {tenant}) was refused as a key mismatch, "
                  f"but {why}: an honest retry refused",
            order_ids=_maybe(refusal.order_id), key=(tenant, key),
            details={"op": refusal.op, "op_id": refusal.op_id, "tenant": tenant,
                     "idempotency_key": key, "problem_type": KEY_MISMATCH}))


def tenant_isolation(export: ExportState, index: HistoryIndex, findings: Findings) -> None:
    """tenant_isolation, the keys' half: one key used by several tenants names one order per tenant.

    (Answers naming another tenant's order and accepted cross-tenant requests are
    found while the history streams.)
    """
    name = "tenant_isolation"
    # order id -> the first scope that named it; only orders named by several scopes matter
    first_scope: dict[str, str] = {}
    shared: dict[str, list[str]] = {}
    named = [(scope, order_id) for scope, order_id in index.created.items()]
    named += [(scope, order_id) for scope, extra in index.created_extra.items() for order_id in extra
              if index.created[scope] != order_id]
    for scope, order_id in named:
        first = first_scope.setdefault(order_id, scope)
        if first != scope:
            shared.setdefault(order_id, [first]).append(scope)
    findings.checked[name] += len(first_scope)
    for order_id, scopes in shared.items():
        tenants = sorted({split_scope(scope)[0] for scope in scopes})
        if len(tenants) < 2:
            continue
        keys = sorted({split_scope(scope)[1] for scope in scopes})
        findings.add(Finding(
            name, f"order {order_id} was answered to creates of {len(tenants)} tenants "
                  f"({', '.join(tenants)}) with key(s) {', '.join(map(repr, keys))}",
            order_ids=(order_id,), key=(tenants[0], keys[0]),
            details={"tenants": tenants, "idempotency_keys": keys}))


def no_parked_payment(export: ExportState, index: HistoryIndex, findings: Findings) -> None:
    """A valid payment message in the dead-letter stream that was never handled, or
    whose payment the order does not hold.

    A valid message is parked only by a consumer that gave up on it; with the
    scenario's own duplicates another copy may still pay the order, which hides the
    loss from the payment check, so a valid message that never took effect under its
    own id is a violation on its own.
    """
    name = "no_parked_payment"
    for message_id, order_id, provider_ref, reason, _valid in export.valid_dead_letters:
        findings.checked[name] += 1
        handled = message_id in export.effects
        held_payment = order_id is not None and provider_ref is not None and export.holds(
            order_id, provider_ref)
        if held_payment and handled:
            continue
        if order_id is None or provider_ref is None:
            continue
        acknowledged = message_id in index.ok_messages
        row = export.orders.get(order_id)
        held = [payment[P_REF] for payment in export.payments.get(order_id, ())]
        if not held_payment:
            what = ("a lost payment: the publish was acknowledged (ok)" if acknowledged
                    else "a parked payment")
            message = (f"valid message {message_id} ({provider_ref} for order {order_id}) was "
                       f"dead-lettered ({reason}) and the order holds {', '.join(held) or 'no payment'}: {what}")
        else:
            message = (f"valid message {message_id} ({provider_ref} for order {order_id}) was "
                       f"dead-lettered ({reason}) without ever being handled; only another copy "
                       f"of the payment paid the order")
        findings.add(Finding(
            name, message,
            order_ids=(order_id,), message_id=message_id, provider_ref=provider_ref,
            details={"message_id": message_id, "provider_ref": provider_ref, "reason": reason,
                     "acknowledged": acknowledged, "held": held, "handled": handled,
                     "order_exported": row is not None}))


def final_reads_agree(export: ExportState, index: HistoryIndex, findings: Findings,
                      final_reads: Iterable[dict[str, Any]]) -> None:
    """Each final read through the public API against the export (the app's two mouths)."""
    name = "final_reads_agree"
    created: set[str] | None = None
    for read in final_reads:
        findings.checked[name] += 1
        order_id: Any = read.get("order_id")
        tenant = read.get("tenant") or DEFAULT_TENANT
        code = read.get("status_code")
        row = export.orders.get(order_id)
        body = read.get("order")
        problem = None
        if code == 200 and isinstance(body, dict):
            if row is None:
                problem = ("reads 200 but the export lists it as broken" if order_id in export.broken
                           else "reads 200 but the export does not hold it")
            elif not _agrees(body, row, export):
                differences = _differences(body, row, export)
                if differences:
                    problem = "the read disagrees with the export: " + "; ".join(differences)
        elif code == 404:
            if row is not None and row[O_TENANT] == tenant:
                problem = f"reads 404 for its own tenant {tenant!r} but the export holds it"
            elif row is None and order_id not in export.broken:
                if created is None:
                    created = set(index.created.values())
                    for extra in index.created_extra.values():
                        created |= extra
                if order_id in created:
                    problem = "lost: an ok create named it, it reads 404 and the export does not hold it"
        if problem is None:
            continue
        findings.add(Finding(
            name, f"order {order_id}: {problem}", order_ids=_maybe(order_id),
            details={"tenant": tenant, "status_code": code, "read": body}))


def _agrees(body: dict[str, Any], row: tuple[Any, ...], export: ExportState) -> bool:
    """The common case, quickly: same fields and the same single payment (or none)."""
    if (body.get("status"), body.get("tenant"), body.get("sku"), body.get("quantity"),
            body.get("amount_cents")) != row[2:]:
        return False
    payments = body.get("payments")
    held = export.payments.get(row[O_ID], ())
    if not isinstance(payments, list) or len(payments) != len(held):
        return False
    if not held:
        return True
    if len(held) == 1:
        payment = payments[0]
        return isinstance(payment, dict) and payment.get("provider_ref") == held[0][P_REF]
    return False  # several payments: let _differences compare them sorted


def _differences(body: dict[str, Any], row: tuple[Any, ...], export: ExportState) -> list[str]:
    differences = []
    for label, index in (("status", O_STATUS), ("tenant", O_TENANT), ("sku", O_SKU),
                         ("quantity", O_QUANTITY), ("amount_cents", O_AMOUNT)):
        if body.get(label) != row[index]:
            differences.append(f"{label} {body.get(label)!r} vs {row[index]!r}")
    payments = body.get("payments")
    read_refs = sorted(str(payment.get("provider_ref")) for payment in payments
                       if isinstance(payment, dict)) if isinstance(payments, list) else None
    held = sorted(payment[P_REF] for payment in export.payments.get(row[O_ID], ()))
    if read_refs != held:
        differences.append(f"payments {read_refs} vs {held}")
    return differences


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
        added, available = line.added_total, line.available
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
    """Jepsen's set-checker tallies over (order, provider_ref) elements (after evaluate_history)."""
    if index.elements is None:
        no_lost_acknowledgement(export, index, Findings(0))
    elements = index.elements or {}
    return {"acknowledged": elements["acknowledged"],
            # published and taken by the broker, then never handled: lost as well
            "lost": elements["lost"] + index.lost_messages,
            "unexpected": findings.counts["nothing_unexpected"],
            "recovered": elements["recovered"],
            "indeterminate_absent": elements["indeterminate_absent"]}


# -- the registry ------------------------------------------------------------------------

ExportRule = Callable[[ExportState, Findings], None]
HistoryRule = Callable[[ExportState, HistoryIndex, Findings, Iterable[dict[str, Any]]], None]
Phase = Literal["export", "history"]


@dataclass(frozen=True)
class Invariant:
    """One invariant: its name (result.json, junit), its title (the report), its phase
    and the rules that evaluate it.

    `phase` is `export` when the export alone decides it (its findings are known
    before the history streams by, so their evidence is gathered in that one pass),
    `history` when it needs the folded history. `export_rules` run before the
    history is read, `history_rules` after; `HistoryIndex` also records findings of
    `answers_match_requests`, `tenant_isolation` and `one_order_per_key` while it
    streams (what one operation proves wrong on its own).
    """

    name: str
    title: str
    phase: Phase
    export_rules: tuple[ExportRule, ...] = ()
    history_rules: tuple[HistoryRule, ...] = ()


def _index_only(rule: Callable[[HistoryIndex, Findings], None]) -> HistoryRule:
    def evaluate(_export: ExportState, index: HistoryIndex, findings: Findings,
                 _reads: Iterable[dict[str, Any]]) -> None:
        rule(index, findings)
    return evaluate


def _without_reads(rule: Callable[[ExportState, HistoryIndex, Findings], None]) -> HistoryRule:
    def evaluate(export: ExportState, index: HistoryIndex, findings: Findings,
                 _reads: Iterable[dict[str, Any]]) -> None:
        rule(export, index, findings)
    return evaluate


INVARIANTS: tuple[Invariant, ...] = (
    Invariant("one_payment_per_order", "One payment per order", "export",
              export_rules=(one_payment_per_order,)),
    Invariant("no_lost_acknowledgement", "No lost acknowledgement", "history",
              history_rules=(_without_reads(no_lost_acknowledgement),)),
    Invariant("nothing_unexpected", "Nothing unexpected", "history",
              history_rules=(_without_reads(nothing_unexpected),)),
    Invariant("one_order_per_key", "One order per idempotency key", "history",
              export_rules=(orders_per_key_in_export,), history_rules=(_without_reads(one_order_per_key),)),
    Invariant("replay_fidelity", "Replay fidelity", "history",
              history_rules=(_index_only(replay_fidelity),)),
    Invariant("inventory_conservation", "Inventory conservation", "export",
              export_rules=(inventory_conservation,)),
    Invariant("message_effects_once", "Message effects once", "export",
              export_rules=(message_effects_once,)),
    Invariant("answers_match_requests", "Answers match requests", "history",
              history_rules=(_index_only(honest_retries_accepted),)),
    Invariant("payment_amount_matches_order", "Payment amount matches the order", "export",
              export_rules=(payment_amount_matches_order,)),
    Invariant("tenant_isolation", "Tenant isolation", "history",
              history_rules=(_without_reads(tenant_isolation),)),
    Invariant("no_parked_payment", "No parked payment", "history",
              history_rules=(_without_reads(no_parked_payment),)),
    Invariant("final_reads_agree", "Final reads agree with the export", "history",
              export_rules=(broken_orders,), history_rules=(final_reads_agree,)),
)
INVARIANT_NAMES: tuple[str, ...] = tuple(invariant.name for invariant in INVARIANTS)


def invariant_title(name: str) -> str:
    """The registered title of an invariant; the name itself for one this version lacks."""
    for invariant in INVARIANTS:
        if invariant.name == name:
            return invariant.title
    return name
