"""The checker: a run's history, fault log and final state in; a verdict with evidence out.

`check` is pure (no I/O); `check_run` reads a run directory (docs/internals.md) and
calls it. This module holds the inputs and outputs: the export reduced to compact
tuples (`ExportState`), the result types and the evidence; the history index and
the invariants themselves live in harness.invariants. The history is read in one
streaming pass; when something failed, a second pass picks out the operations that
touched the failing subjects, so evidence never needs the whole history in memory.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from harness.errors import HarnessError
from harness.history import HistoryError, history_files, iter_operations
from harness.run_scope import scoped_export
from harness.invariants import (INVARIANTS, Finding, Findings, HistoryIndex, evaluate_export,
                                evaluate_history, jepsen_counts, scope_key)

__all__ = ["CheckResult", "CheckerError", "ExportState", "HistoryFiles", "InvariantResult",
           "Violation", "check", "check_run", "load_export", "read_export"]

VIOLATION_CAP = 50
EVIDENCE_OPERATIONS = 20
EVIDENCE_FAULTS = 20
EVIDENCE_PAYMENTS = 20

_LAYER_COUNTERS = {
    "api": {"replays": "api_replays", "fingerprint_conflicts": "api_fingerprint_conflicts",
            "inflight_conflicts": "api_inflight_conflicts"},
    "domain": {"already_paid": "domain_already_paid", "conflicts": "domain_conflicts",
               "amount_mismatches": "domain_amount_mismatches"},
    "inbox": {"duplicates_skipped": "inbox_duplicates_skipped",
              "dead_lettered": "messages_dead_lettered"},
    "webhook": {"bad_signatures": "webhook_bad_signatures"},
}


class CheckerError(HarnessError):
    """The checker could not judge the run: missing or malformed input (exit 2)."""


# A payment as kept in memory: (provider_ref, source, source_id, amount_cents, applied_at).
Payment = tuple[str, Any, Any, Any, Any]
# A message effect as kept: (message_id, order_id, outcome).
Effect = tuple[str, Any, Any]


class ExportState:
    """The final state reduced to what the invariants read, in compact tuples:
    at 10^5 orders, dicts per line would be most of the checker's memory."""

    def __init__(self) -> None:
        # order id -> (the id itself, "tenant␟key" scope or "", status)
        self.orders: dict[str, tuple[str, str, Any]] = {}
        self.order_by_scope: dict[str, str] = {}
        self.extra_orders_by_scope: dict[str, list[str]] = {}
        self.reserved: dict[str, int] = {}
        self.payments: dict[str, list[Payment]] = {}
        self.payment_count = 0
        self.effects: dict[str, list[Effect]] = {}
        self.inventory: dict[str, dict[str, Any]] = {}
        self.dead_letters: set[str] = set()
        self.counters: dict[str, int] = {}

    def holds(self, order_id: str, provider_ref: str) -> bool:
        return any(payment[0] == provider_ref for payment in self.payments.get(order_id, ()))

    def payments_of(self, order_ids: Iterable[str]) -> list[dict[str, Any]]:
        """The export lines of these orders' payments, for evidence."""
        return [{"kind": "payment", "order_id": order_id, "provider_ref": ref, "amount_cents": amount,
                 "source": source, "source_id": source_id, "applied_at": applied}
                for order_id in order_ids
                for ref, source, source_id, amount, applied in self.payments.get(order_id, ())]


def _require(record: dict[str, Any], *names: str) -> None:
    for name in names:
        if record.get(name) is None:
            raise CheckerError(f"export {record.get('kind')} line lacks {name!r}: {record}")


def load_export(records: Iterable[dict[str, Any]]) -> ExportState:
    state = ExportState()
    # Few distinct tenants, statuses, sources, outcomes: share one string object each.
    shared: dict[Any, Any] = {}
    for record in records:
        if not isinstance(record, dict):
            raise CheckerError(f"export line is not an object: {record!r}")
        kind = record.get("kind")
        if kind == "order":
            _require(record, "id")
            order_id = record["id"]
            key = record.get("idempotency_key")
            scope = scope_key(record.get("tenant") or "default", key) if key is not None else ""
            status = record.get("status")
            state.orders[order_id] = (order_id, scope, shared.setdefault(status, status))
            if key is not None:
                first = state.order_by_scope.setdefault(scope, order_id)
                if first != order_id:
                    state.extra_orders_by_scope.setdefault(scope, []).append(order_id)
            sku = record.get("sku")
            if sku is not None:
                state.reserved[sku] = state.reserved.get(sku, 0) + int(record.get("quantity") or 0)
        elif kind == "payment":
            _require(record, "order_id", "provider_ref")
            order = state.orders.get(record["order_id"])
            order_id = order[0] if order is not None else record["order_id"]
            source = record.get("source")
            state.payments.setdefault(order_id, []).append(
                (record["provider_ref"], shared.setdefault(source, source), record.get("source_id"),
                 record.get("amount_cents"), record.get("applied_at")))
            state.payment_count += 1
        elif kind == "message_effect":
            _require(record, "message_id")
            message_id = record["message_id"]
            order = state.orders.get(record.get("order_id"))
            outcome = record.get("outcome")
            state.effects.setdefault(message_id, []).append(
                (message_id, order[0] if order is not None else record.get("order_id"),
                 shared.setdefault(outcome, outcome)))
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


@dataclass
class Violation:
    invariant: str
    order_id: str | None
    message: str
    evidence: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {"payments": [], "operations": [], "faults": []})
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "order_id": self.order_id, "message": self.message,
                "evidence": self.evidence, "details": self.details}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Violation:
        return cls(invariant=data["invariant"], order_id=data.get("order_id"),
                   message=data["message"],
                   evidence=data.get("evidence") or {"payments": [], "operations": [], "faults": []},
                   details=data.get("details") or {})


@dataclass
class InvariantResult:
    name: str
    title: str
    passed: bool
    checked: int
    violation_count: int
    violations: list[Violation] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "passed": self.passed,
                "checked": self.checked, "violation_count": self.violation_count,
                "violations": [violation.to_dict() for violation in self.violations]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InvariantResult:
        return cls(name=data["name"], title=data["title"], passed=data["passed"],
                   checked=data["checked"], violation_count=data["violation_count"],
                   violations=[Violation.from_dict(v) for v in data.get("violations", [])])


@dataclass
class CheckResult:
    valid: bool
    invariants: list[InvariantResult]
    run_id: str = ""
    scenario: str = ""
    unsafe_disable: list[str] = field(default_factory=list)
    outcomes: dict[str, dict[str, int]] = field(default_factory=dict)
    jepsen: dict[str, int] = field(default_factory=dict)
    layers: dict[str, dict[str, int]] = field(default_factory=dict)
    duplicates: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def invariant(self, name: str) -> InvariantResult:
        for result in self.invariants:
            if result.name == name:
                return result
        raise KeyError(name)

    @property
    def failed(self) -> list[str]:
        return [result.name for result in self.invariants if not result.passed]

    def to_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "run_id": self.run_id, "scenario": self.scenario,
                "unsafe_disable": list(self.unsafe_disable),
                "invariants": [result.to_dict() for result in self.invariants],
                "outcomes": self.outcomes, "jepsen": self.jepsen, "layers": self.layers,
                "duplicates": self.duplicates, "counts": self.counts}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        return cls(valid=data["valid"],
                   invariants=[InvariantResult.from_dict(r) for r in data["invariants"]],
                   run_id=data.get("run_id", ""), scenario=data.get("scenario", ""),
                   unsafe_disable=list(data.get("unsafe_disable", [])),
                   outcomes=data.get("outcomes", {}), jepsen=data.get("jepsen", {}),
                   layers=data.get("layers", {}), duplicates=data.get("duplicates", {}),
                   counts=data.get("counts", {}))


class HistoryFiles:
    """The merged operations of a run's history files, re-readable for the evidence pass."""

    def __init__(self, paths: Iterable[Path]) -> None:
        self.paths = list(paths)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter_operations(self.paths)


def check(
    operations: Iterable[dict[str, Any]],
    export: Iterable[dict[str, Any]],
    faults: Sequence[dict[str, Any]] = (),
    *,
    run_id: str = "",
    scenario: str = "",
    unsafe_disable: Sequence[str] = (),
) -> CheckResult:
    """Judge a run.

    `operations` is read a second time, for evidence, when an invariant that needs
    the history failed; a one-shot iterator is therefore buffered first, while a
    re-iterable (a list, `HistoryFiles`) keeps memory proportional to orders.
    """
    if isinstance(operations, Iterator):
        operations = list(operations)
    state = load_export(export)
    findings = Findings(VIOLATION_CAP)
    # What the export alone proves wrong is known now: collect its evidence while
    # the history streams by, so a run that fails only there is read once.
    evaluate_export(state, findings)
    early = EvidenceCollector(_kept(findings))
    index = HistoryIndex(state)
    index.consume(operations, observe=early.offer if early.findings else None)
    evaluate_history(state, index, findings)
    late = EvidenceCollector([f for f in _kept(findings) if id(f) not in early.evidence_ids])
    if late.findings:
        for sequence, op in enumerate(operations, start=1):
            late.offer(sequence, op)
    evidence = {**early.evidence(state, faults), **late.evidence(state, faults)}

    invariants = []
    for name, title in INVARIANTS:
        violations = [
            Violation(invariant=name, order_id=finding.order_ids[0] if finding.order_ids else None,
                      message=finding.message, evidence=evidence[id(finding)], details=finding.details)
            for finding in findings.kept[name]
        ]
        count = findings.counts[name]
        invariants.append(InvariantResult(name=name, title=title, passed=count == 0,
                                          checked=findings.checked[name], violation_count=count,
                                          violations=violations))
    return CheckResult(
        valid=all(result.passed for result in invariants),
        invariants=invariants,
        run_id=run_id,
        scenario=scenario,
        unsafe_disable=list(unsafe_disable),
        outcomes=index.outcomes,
        jepsen=jepsen_counts(state, index, findings),
        layers=_layers(state.counters, index),
        duplicates=dict(sorted(index.duplicates.items())),
        counts={"operations": index.operations, "orders": len(state.orders),
                "payments": state.payment_count, "faults": len(faults)},
    )


def _layers(counters: dict[str, int], index: HistoryIndex) -> dict[str, dict[str, int]]:
    layers = {layer: {label: int(counters.get(counter, 0)) for label, counter in names.items()}
              for layer, names in _LAYER_COUNTERS.items()}
    # What the clients saw, to set beside the app's own counters.
    layers["history"] = {"replays_seen": index.replays_seen,
                         "conflicts_409": index.conflicts_seen,
                         "rejections_4xx": index.rejections_seen}
    return layers


def _kept(findings: Findings) -> list[Finding]:
    return [finding for name, _ in INVARIANTS for finding in findings.kept[name]]


class EvidenceCollector:
    """Per finding, the most relevant operations about its subjects, in bounded heaps.

    Offered every operation of a pass; keeps, per finding, at most
    EVIDENCE_OPERATIONS: those about the very subject first (same provider_ref,
    key or message), then those that only share the order, earliest first.
    """

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        self.evidence_ids = {id(finding) for finding in findings}
        self.by_order: dict[str, list[int]] = {}
        self.by_key: dict[tuple[str, str], list[int]] = {}
        self.by_message: dict[str, list[int]] = {}
        for number, finding in enumerate(findings):
            for order_id in finding.order_ids:
                self.by_order.setdefault(order_id, []).append(number)
            if finding.key is not None:
                self.by_key.setdefault(finding.key, []).append(number)
            if finding.message_id is not None:
                self.by_message.setdefault(finding.message_id, []).append(number)
        # min-heaps: the lowest score, then the latest invoke, drops out first
        self.heaps: list[list[tuple[int, float, int, dict[str, Any]]]] = [[] for _ in findings]

    def offer(self, sequence: int, op: dict[str, Any]) -> None:
        # Most operations touch nothing that failed: test that before allocating.
        get = op.get
        hits = self.by_order.get(get("order_id"), ())
        key = get("idempotency_key")
        if key is not None and self.by_key:
            hits = (*hits, *self.by_key.get((get("tenant") or "default", key), ()))
        message_id = get("message_id")
        if message_id is not None and self.by_message:
            hits = (*hits, *self.by_message.get(message_id, ()))
        if not hits:
            return
        for number in set(hits):
            entry = (_relevance(self.findings[number], op), -float(get("invoke_time") or 0.0),
                     sequence, op)
            heap = self.heaps[number]
            if len(heap) < EVIDENCE_OPERATIONS:
                heapq.heappush(heap, entry)
            elif entry[:3] > heap[0][:3]:
                heapq.heapreplace(heap, entry)

    def evidence(self, state: ExportState,
                 faults: Sequence[dict[str, Any]]) -> dict[int, dict[str, list[dict[str, Any]]]]:
        """id(finding) -> its payments, operations (in invoke order) and faults in play."""
        evidence = {}
        for finding, heap in zip(self.findings, self.heaps):
            chosen = sorted(heap, key=lambda entry: (-entry[1], entry[2]))
            ops = [entry[3] for entry in chosen]
            evidence[id(finding)] = {
                "payments": state.payments_of(finding.order_ids)[:EVIDENCE_PAYMENTS],
                "operations": ops,
                "faults": _active_faults(ops, faults),
            }
        return evidence


def _relevance(finding: Finding, op: dict[str, Any]) -> int:
    """2 when the operation is about the violation's very subject, 1 when it only shares the order."""
    if finding.provider_ref is not None and op.get("provider_ref") == finding.provider_ref:
        return 2
    if finding.message_id is not None and op.get("message_id") == finding.message_id:
        return 2
    if finding.key is not None and op.get("idempotency_key") == finding.key[1]:
        return 2
    return 1


def _active_faults(ops: list[dict[str, Any]], faults: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    active = []
    for fault in faults:
        start = fault.get("start")
        end = fault.get("end")
        for op in ops:
            invoked = op.get("invoke_time")
            completed = op.get("complete_time", invoked)
            if invoked is None or start is None:
                continue
            # a fault still open (no end) overlaps everything after its start
            if start <= (completed if completed is not None else invoked) and (end is None or end >= invoked):
                active.append(fault)
                break
        if len(active) >= EVIDENCE_FAULTS:
            break
    return active


def read_export(path: Path) -> Iterator[dict[str, Any]]:
    """The export's lines, streamed; a missing file or a bad line is a CheckerError."""
    try:
        handle = open(path, "rb")
    except OSError as error:
        raise CheckerError(f"state export {path} is missing or unreadable: {error}") from error
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as error:
                raise CheckerError(f"{path}:{number}: state export line is not JSON: {error}") from error
            if not isinstance(record, dict):
                raise CheckerError(f"{path}:{number}: state export line is not an object")
            yield record


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_bytes().splitlines()
        return [orjson.loads(line) for line in lines if line.strip()]
    except (OSError, orjson.JSONDecodeError) as error:
        raise CheckerError(f"{path} is unreadable: {error}") from error


def _settings(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        settings = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as error:
        raise CheckerError(f"{path} is unreadable: {error}") from error
    return settings if isinstance(settings, dict) else {}


def check_run(run_dir: Path) -> CheckResult:
    """Check a run directory: histories/*.jsonl, export.ndjson, faults.jsonl, settings.json."""
    run_dir = Path(run_dir)
    export_path = run_dir / "export.ndjson"
    if not export_path.is_file():
        raise CheckerError(f"{run_dir} has no state export (export.ndjson); the run did not finish")
    histories = run_dir / "histories"
    if not histories.is_dir():
        raise CheckerError(f"{run_dir} has no histories/ directory")
    faults_path = run_dir / "faults.jsonl"
    faults = _read_jsonl(faults_path) if faults_path.exists() else []
    settings = _settings(run_dir / "settings.json")
    unsafe = settings.get("unsafe_disable") or []
    if isinstance(unsafe, str):
        unsafe = [part.strip() for part in unsafe.split(",") if part.strip()]
    try:
        export = scoped_export(read_export(export_path), settings.get("scope"))
        return check(HistoryFiles(history_files(histories)), export, faults,
                     run_id=str(settings.get("run_id") or run_dir.name),
                     scenario=str(settings.get("scenario") or ""),
                     unsafe_disable=list(unsafe))
    except HistoryError as error:
        raise CheckerError(f"history of {run_dir} is unreadable: {error}") from error
