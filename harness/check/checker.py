"""The checker: a run's history, fault log and final state in; a verdict with evidence out.

`check` is pure (no I/O); `check_run` reads a run directory (docs/internals.md,
through the `RunFiles` it is given: a `harness.run.rundir.RunDir`) and calls it. This module holds the inputs and outputs: the export reduced to compact
tuples (`ExportState`), the result types, the verdict and the evidence; the
history index and the invariants themselves live in harness.check.invariants. The
history is read in one streaming pass; when something failed, a second pass picks
out the operations that touched the failing subjects, so evidence never needs the
whole history in memory.

Verdict: `fail` when an invariant failed; otherwise `inconclusive` when a promised
protective path was exercised zero times or fewer than `min_acknowledged`
operations were answered ok; otherwise `pass`. `CheckResult.valid` is True only
for `pass`.
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from harness.check.export import (
    CheckerError,
    DeadLetters,
    ExportOrder,
    ExportPayment,
    ExportState,
    InventoryLine,
    load_export,
)
from harness.check.invariants import (
    INVARIANTS,
    Finding,
    Findings,
    HistoryIndex,
    evaluate_export,
    evaluate_history,
    jepsen_counts,
)
from harness.check.run_files import (
    DEFAULT_MIN_ACKNOWLEDGED,
    Interruption,
    RunFileError,
    RunFiles,
    RunScope,
    RunSettings,
)
from harness.check.run_scope import scoped_export
from harness.history import LOAD_STARTED, HistoryError, HistoryFiles, as_records, merge_operation

# The export's records and HistoryFiles are re-exported: callers name them from here.
__all__ = ["DEFAULT_MIN_ACKNOWLEDGED", "PATHS", "VERDICTS", "CheckResult", "CheckerError", "DeadLetters",
           "ExportOrder", "ExportPayment", "ExportState", "HistoryFiles", "InventoryLine", "InvariantResult",
           "Violation", "check", "check_run", "load_export"]

VIOLATION_CAP = 50
EVIDENCE_OPERATIONS = 20
EVIDENCE_FAULTS = 20
EVIDENCE_PAYMENTS = 20
VERDICTS = ("pass", "fail", "inconclusive")

_LAYER_COUNTERS = {
    "api": {"replays": "api_replays", "fingerprint_conflicts": "api_fingerprint_conflicts",
            "inflight_conflicts": "api_inflight_conflicts", "recovered": "api_recovered",
            "incomplete_bodies": "api_incomplete_bodies"},
    "domain": {"already_paid": "domain_already_paid", "conflicts": "domain_conflicts",
               "amount_mismatches": "domain_amount_mismatches", "tenant_refusals": "tenant_refusals"},
    "inbox": {"duplicates_skipped": "inbox_duplicates_skipped",
              "dead_lettered": "messages_dead_lettered", "reclaimed": "messages_reclaimed"},
    "webhook": {"bad_signatures": "webhook_bad_signatures"},
}

# Protective path -> (the app counter that counts it, the problem type a client
# sees when it is taken, or None). A path counts the larger of the two: the
# counter is the app's own word, the history what clients saw of it.
PATHS: dict[str, tuple[str, str | None]] = {
    "replay": ("api_replays", None),
    "fingerprint_refusal": ("api_fingerprint_conflicts", "/problems/idempotency-key-mismatch"),
    "inflight_refusal": ("api_inflight_conflicts", "/problems/idempotency-key-in-flight"),
    "recovery_point": ("api_recovered", None),
    "incomplete_body": ("api_incomplete_bodies", "/problems/incomplete-body"),
    "already_paid": ("domain_already_paid", None),
    "conflict": ("domain_conflicts", "/problems/payment-conflict"),
    "amount_refusal": ("domain_amount_mismatches", "/problems/amount-mismatch"),
    "signature_refusal": ("webhook_bad_signatures", "/problems/invalid-signature"),
    "tenant_refusal": ("tenant_refusals", None),
    "inbox_skip": ("inbox_duplicates_skipped", None),
    "reclaim": ("messages_reclaimed", None),
    "dead_letter": ("messages_dead_lettered", None),
}

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
    """One invariant's outcome. `first_violation_s`: seconds from the load's start to
    the earliest invoke among its violations' evidence operations (how soon the
    run held proof of the bug); None when it held, when no evidence operation has
    a time, or when the load's start is unknown."""

    name: str
    title: str
    passed: bool
    checked: int
    violation_count: int
    violations: list[Violation] = field(default_factory=list)
    first_violation_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        # first_violation_s only when known: a result without it reads back unchanged
        return {"name": self.name, "title": self.title, "passed": self.passed,
                "checked": self.checked, "violation_count": self.violation_count,
                **({"first_violation_s": self.first_violation_s} if self.first_violation_s is not None else {}),
                "violations": [violation.to_dict() for violation in self.violations]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InvariantResult:
        first = data.get("first_violation_s")  # absent from result.json files of older versions
        return cls(name=data["name"], title=data["title"], passed=data["passed"],
                   checked=data["checked"], violation_count=data["violation_count"],
                   violations=[Violation.from_dict(v) for v in data.get("violations", [])],
                   first_violation_s=float(first) if isinstance(first, (int, float))
                   and not isinstance(first, bool) else None)


@dataclass
class CheckResult:
    """A run's verdict (`pass` / `fail` / `inconclusive`) with everything it rests on.

    `valid` is True only for `pass`. `inconclusive_reasons` lists what would make
    (or made) the run inconclusive: it is filled whatever the verdict, so a run
    that failed also shows which promised path it never reached.
    """

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
    verdict: str = ""
    inconclusive_reasons: list[str] = field(default_factory=list)
    paths: dict[str, int] = field(default_factory=dict)
    promised_paths: list[str] = field(default_factory=list)
    min_acknowledged: int = DEFAULT_MIN_ACKNOWLEDGED
    dead_letters: DeadLetters = field(default_factory=DeadLetters)
    # interrupted.json's marker when the run was stopped before its end (harness.run.rundir)
    interrupted: Interruption | None = None

    def __post_init__(self) -> None:
        # A result built the old way (valid only) still has a verdict.
        if not self.verdict:
            self.verdict = "pass" if self.valid else "fail"

    def invariant(self, name: str) -> InvariantResult:
        for result in self.invariants:
            if result.name == name:
                return result
        raise KeyError(name)

    @property
    def failed(self) -> list[str]:
        return [result.name for result in self.invariants if not result.passed]

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "valid": self.valid,
                "inconclusive_reasons": list(self.inconclusive_reasons),
                "run_id": self.run_id, "scenario": self.scenario,
                "unsafe_disable": list(self.unsafe_disable),
                "promised_paths": list(self.promised_paths), "min_acknowledged": self.min_acknowledged,
                "invariants": [result.to_dict() for result in self.invariants],
                "paths": self.paths, "dead_letters": self.dead_letters.to_json(),
                "outcomes": self.outcomes, "jepsen": self.jepsen, "layers": self.layers,
                "duplicates": self.duplicates, "counts": self.counts,
                **({"interrupted": self.interrupted.to_json()} if self.interrupted is not None else {})}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        """A result.json back; one written before verdicts gets `pass`/`fail` from `valid`."""
        return cls(valid=data["valid"],
                   invariants=[InvariantResult.from_dict(r) for r in data["invariants"]],
                   run_id=data.get("run_id", ""), scenario=data.get("scenario", ""),
                   unsafe_disable=list(data.get("unsafe_disable", [])),
                   outcomes=data.get("outcomes", {}), jepsen=data.get("jepsen", {}),
                   layers=data.get("layers", {}), duplicates=data.get("duplicates", {}),
                   counts=data.get("counts", {}), verdict=data.get("verdict") or "",
                   inconclusive_reasons=list(data.get("inconclusive_reasons", [])),
                   paths=data.get("paths", {}), promised_paths=list(data.get("promised_paths", [])),
                   min_acknowledged=int(data.get("min_acknowledged", DEFAULT_MIN_ACKNOWLEDGED)),
                   dead_letters=DeadLetters.from_json(data.get("dead_letters")),
                   interrupted=Interruption.from_json(interrupted) if isinstance(
                       interrupted := data.get("interrupted"), dict) else None)


def check(
    operations: Iterable[dict[str, Any]],
    export: Iterable[dict[str, Any]],
    faults: Sequence[dict[str, Any]] = (),
    *,
    run_id: str = "",
    scenario: str = "",
    unsafe_disable: Sequence[str] = (),
    final_reads: Iterable[dict[str, Any]] = (),
    promised_paths: Sequence[str] = (),
    min_acknowledged: int = DEFAULT_MIN_ACKNOWLEDGED,
    load_started: float | None = None,
) -> CheckResult:
    """Judge a run.

    `operations` is read a second time, for evidence, when an invariant that needs
    the history failed; a one-shot iterator is therefore buffered first, while a
    re-iterable (a list, `HistoryFiles`) keeps memory proportional to orders.
    `final_reads` are the public API's answers for the run's orders after healing
    (`{"order_id", "tenant", "status_code", "order"}` each). `promised_paths`
    names paths of `PATHS` the scenario promises to exercise; an unknown name is
    a CheckerError (a typo would otherwise make every run inconclusive).
    `load_started` (epoch seconds, the clock of the history's `time` fields) is
    the load's start, from which each failed invariant's `first_violation_s` counts.
    """
    with _cyclic_gc_paused():
        return _check(operations, export, faults, run_id=run_id, scenario=scenario,
                      unsafe_disable=unsafe_disable, final_reads=final_reads,
                      promised_paths=promised_paths, min_acknowledged=min_acknowledged,
                      load_started=load_started)


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while the checker runs.

    The checker allocates millions of short-lived dicts (one per history record)
    while it holds a few million long-lived tuples; every collection would walk
    them all, for nothing: none of them forms a cycle. Reference counting still
    frees everything; the collector's previous state is restored afterwards.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _check(
    operations: Iterable[dict[str, Any]],
    export: Iterable[dict[str, Any]],
    faults: Sequence[dict[str, Any]],
    *,
    run_id: str,
    scenario: str,
    unsafe_disable: Sequence[str],
    final_reads: Iterable[dict[str, Any]],
    promised_paths: Sequence[str],
    min_acknowledged: int,
    load_started: float | None,
) -> CheckResult:
    unknown = [name for name in promised_paths if name not in PATHS]
    if unknown:
        raise CheckerError(f"unknown promised path(s) {', '.join(map(repr, unknown))}; "
                           f"known: {', '.join(PATHS)}")
    if isinstance(operations, Iterator):
        operations = list(operations)
    reads = _final_reads(final_reads)  # validated as they stream by: never all in memory
    state = load_export(export)
    findings = Findings(VIOLATION_CAP)
    evaluate_export(state, findings)
    index = HistoryIndex(state, findings)
    # The fold reads typed records (harness.history.Invoke, Completion: only the fields it uses);
    # evidence quotes operations whole, so its pass reads the same operations as
    # dicts, (invoke, completion) pairs merged only when kept.
    if isinstance(operations, HistoryFiles):
        records, pairs_of = operations.records(), operations.pairs
    else:
        merged = operations
        records = map(as_records, merged)
        pairs_of = lambda: ((op, op) for op in merged)  # noqa: E731
    index.consume_records(records)
    evaluate_history(state, index, findings, reads)
    collector = EvidenceCollector(_kept(findings))
    if collector.findings:
        offer = collector.offer_pair
        for sequence, (invoke, done) in enumerate(pairs_of(), start=1):
            offer(sequence, invoke, done)
    evidence = collector.evidence(state, faults)

    invariants = []
    for registered in INVARIANTS:
        name = registered.name
        violations = [
            Violation(invariant=name, order_id=finding.order_ids[0] if finding.order_ids else None,
                      message=finding.message, evidence=evidence[id(finding)], details=finding.details)
            for finding in findings.kept[name]
        ]
        count = findings.counts[name]
        invariants.append(InvariantResult(name=name, title=registered.title, passed=count == 0,
                                          checked=findings.checked[name], violation_count=count,
                                          violations=violations,
                                          first_violation_s=_first_violation_s(violations, load_started)))
    paths = _paths(state, index)
    acknowledged = index.acknowledged
    reasons = [f"promised path {name} was exercised 0 times" for name in promised_paths
               if paths[name] == 0]
    if acknowledged < min_acknowledged:
        reasons.append(f"{acknowledged} operation(s) were acknowledged (ok), "
                       f"fewer than the {min_acknowledged} required")
    passed = all(result.passed for result in invariants)
    verdict = "fail" if not passed else "inconclusive" if reasons else "pass"
    return CheckResult(
        valid=verdict == "pass",
        verdict=verdict,
        inconclusive_reasons=reasons,
        invariants=invariants,
        run_id=run_id,
        scenario=scenario,
        unsafe_disable=list(unsafe_disable),
        promised_paths=list(promised_paths),
        min_acknowledged=min_acknowledged,
        paths=paths,
        dead_letters=state.dead_letter_summary(),
        outcomes=index.outcomes,
        jepsen=jepsen_counts(state, index, findings),
        layers=_layers(state.counters, index),
        duplicates=dict(sorted(index.duplicates.items())),
        counts={"operations": index.operations, "acknowledged": acknowledged,
                "orders": len(state.orders), "payments": state.payment_count,
                "faults": len(faults), "final_reads": findings.checked["final_reads_agree"],
                "dead_letters": state.dead_letter_count},
    )


def _first_violation_s(violations: list[Violation], load_started: float | None) -> float | None:
    """Seconds from the load's start to the earliest invoke among the violations' evidence."""
    if load_started is None:
        return None
    invoked = [time for violation in violations for op in violation.evidence.get("operations", ())
               if isinstance(time := op.get("invoke_time"), (int, float)) and not isinstance(time, bool)]
    return round(min(invoked) - load_started, 3) if invoked else None


def _final_reads(reads: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for read in reads:
        if not isinstance(read, dict) or "order_id" not in read:
            raise CheckerError(f"a final read is not an object with an order_id: {read!r}")
        yield read


def _paths(state: ExportState, index: HistoryIndex) -> dict[str, int]:
    """How often each protective path ran: the app's counter or what clients saw, the larger."""
    seen = dict(index.problem_types)
    counters = state.counters
    history = {"replay": index.replays_seen, "already_paid": index.already_paid_seen,
               "tenant_refusal": index.cross_tenant_refused, "dead_letter": state.dead_letter_count}
    paths = {}
    for name, (counter, problem) in PATHS.items():
        observed = history.get(name, 0)
        if problem is not None:
            observed = max(observed, seen.get(problem, 0))
        paths[name] = max(_int(counters.get(counter)), observed)
    return paths


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _layers(counters: dict[str, int], index: HistoryIndex) -> dict[str, dict[str, int]]:
    layers = {layer: {label: _int(counters.get(counter)) for label, counter in names.items()}
              for layer, names in _LAYER_COUNTERS.items()}
    # What the clients saw, to set beside the app's own counters.
    layers["history"] = {"replays_seen": index.replays_seen,
                         "conflicts_409": index.conflicts_seen,
                         "rejections_4xx": index.rejections_seen}
    return layers


def _kept(findings: Findings) -> list[Finding]:
    return [finding for invariant in INVARIANTS for finding in findings.kept[invariant.name]]


class EvidenceCollector:
    """Per finding, the most relevant operations about its subjects, in bounded heaps.

    Offered every operation of a pass; keeps, per finding, at most
    EVIDENCE_OPERATIONS: those about the very subject first (same provider_ref,
    key or message), then those that only share the order, earliest first.
    """

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
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

    def offer_pair(self, sequence: int, invoke: dict[str, Any], done: dict[str, Any]) -> None:
        """Offer an operation as its (invoke, completion) records; merged only when kept."""
        # Most operations touch nothing that failed: test that before allocating.
        order_id: Any = invoke.get("order_id")
        if order_id is None:
            order_id = done.get("order_id")
        hits = self.by_order.get(order_id, ())
        key = invoke.get("idempotency_key")
        if key is not None and self.by_key:
            hits = (*hits, *self.by_key.get((invoke.get("tenant") or "default", key), ()))
        message_id = invoke.get("message_id")
        if message_id is not None and self.by_message:
            hits = (*hits, *self.by_message.get(message_id, ()))
        if not hits:
            return
        op = invoke if invoke is done else merge_operation(invoke, done)
        for number in set(hits):
            entry = (_relevance(self.findings[number], op), -float(op.get("invoke_time") or 0.0),
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
        for finding, heap in zip(self.findings, self.heaps, strict=True):
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


def _scoped(run: RunFiles, export: Iterator[dict[str, Any]], scope: RunScope | None,
            dropped: set[Any]) -> Iterable[dict[str, Any]]:
    """The export narrowed to this run on a reused stack (harness.check.run_scope); the
    older orders it leaves out go to `dropped`."""
    if scope is None:
        return export
    baseline = list(run.read_ndjson(run.scope_file(scope), "baseline export"))
    return scoped_export(export, baseline, counters_before=scope.counters_before, dropped=dropped)


def load_started(run: RunFiles, settings: RunSettings) -> float | None:
    """When the load began: the time Locust's master wrote into `histories/.load-started`
    when its users started (harness.load.recording), else settings.json's `started_at`
    (written just before the load is launched; a swarm session's own start), else None."""
    marker = run.histories / LOAD_STARTED
    try:
        return float(marker.read_text().strip())
    except (OSError, ValueError):
        return settings.started_at


def check_run(run: RunFiles) -> CheckResult:
    """Check a run directory (a `harness.run.rundir.RunDir`): its histories, export,
    fault log, settings, final reads and, on a reused stack, the baseline export its
    settings name."""
    if not run.export.is_file():
        raise CheckerError(f"{run.path} has no state export ({run.export.name}); the run did not finish")
    if not run.histories.is_dir():
        raise CheckerError(f"{run.path} has no {run.histories.name}/ directory")
    try:
        faults = run.read_faults()
        settings = run.read_settings() or RunSettings(run_id=run.name, scenario="")
        reads = (_final_reads(run.read_ndjson(run.final_reads, "final reads"))
                 if run.final_reads.exists() else iter(()))
        dropped: set[Any] = set()
        export = _scoped(run, run.read_ndjson(run.export, "state export"), settings.scope, dropped)
        # Read lazily, after the export is loaded: an older order the scope left out
        # is not the run's to judge, so neither is its final read.
        reads = (read for read in reads if read.get("order_id") not in dropped)
        return check(HistoryFiles(run.history_files()), export, faults,
                     run_id=settings.run_id or run.name, scenario=settings.scenario,
                     unsafe_disable=settings.unsafe_disable, final_reads=reads,
                     promised_paths=settings.promised_paths, min_acknowledged=settings.min_acknowledged,
                     load_started=load_started(run, settings))
    except HistoryError as error:
        raise CheckerError(f"history of {run.path} is unreadable: {error}") from error
    except RunFileError as error:
        raise CheckerError(str(error)) from error
