"""The result around the invariants: evidence, caps, tallies, layers, the JSON round trip."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from checker_builders import Run

from harness.check.checker import VIOLATION_CAP, CheckerError, CheckResult, DeadLetters, check
from harness.check.invariants import INVARIANT_NAMES
from harness.run.rundir import RunDir
from harness.stack import registry


def lost_payment_run() -> Run:
    run = Run()
    run.create("k1", "o1")
    run.pay("o1", "pr1", "p1", "ok")
    run.order("o1", "k1")
    return run


def test_evidence_holds_the_faults_active_during_the_operations() -> None:
    run = lost_payment_run()
    pay = run.operations[1]
    during = run.fault(pay["invoke_time"] + 0.1, pay["complete_time"] + 5, name="during")
    still_open = run.fault(pay["invoke_time"] - 10, None, name="open")
    run.fault(run.clock + 100, run.clock + 200, name="later")
    run.fault(0.0, 1.0, name="earlier")
    violation = run.check().invariant("no_lost_acknowledgement").violations[0]
    assert violation.evidence["faults"] == [during, still_open]
    assert violation.evidence["operations"][-1]["op_id"] == pay["op_id"]


def test_evidence_keeps_the_most_relevant_operations_in_time_order() -> None:
    run = Run()
    run.create("k1", "o1")
    for number in range(30):
        run.webhook("o1", f"pr-other-{number}", f"ev{number}", "fail", status=409)
    lost = run.pay("o1", "pr1", "p1", "ok")
    run.order("o1", "k1")
    violation = run.check().invariant("no_lost_acknowledgement").violations[0]
    operations = violation.evidence["operations"]
    assert len(operations) == 20
    assert lost in operations
    times = [op["invoke_time"] for op in operations]
    assert times == sorted(times)


def test_violations_are_capped_but_counted() -> None:
    run = Run()
    total = VIOLATION_CAP + 7
    for number in range(total):
        run.paid_order(f"o{number}", "pr1")
        run.payment(f"o{number}", "pr1", "api", "again")
    outcome = run.check().invariant("one_payment_per_order")
    assert outcome.violation_count == total
    assert len(outcome.violations) == VIOLATION_CAP


def test_outcomes_duplicates_and_layers_are_tallied() -> None:
    run = Run()
    run.paid_order("o1", "pr1")
    run.pay("o1", "pr1", "p-o1", "ok", replayed=True, status=201,
            body_digest=run.operations[1]["body_digest"], expect="double_click")
    run.pay("o1", "pr2", "p-x", "fail", status=409, expect="conflict")
    run.webhook("o1", "pr1", "ev1", "info", expect="duplicate")
    run.counters(api_replays=1, api_fingerprint_conflicts=2, api_inflight_conflicts=3,
                 domain_already_paid=4, domain_conflicts=5, domain_amount_mismatches=6,
                 inbox_duplicates_skipped=7, webhook_bad_signatures=8, messages_dead_lettered=9)
    result = run.check()
    assert result.valid, result.to_dict()
    assert result.outcomes == {"create_order": {"ok": 1, "fail": 0, "info": 0},
                               "pay": {"ok": 2, "fail": 1, "info": 0},
                               "webhook": {"ok": 0, "fail": 0, "info": 1}}
    assert result.duplicates == {"conflict": 1, "double_click": 1, "duplicate": 1}
    assert result.layers == {
        "api": {"replays": 1, "fingerprint_conflicts": 2, "inflight_conflicts": 3, "recovered": 0,
                "incomplete_bodies": 0},
        "domain": {"already_paid": 4, "conflicts": 5, "amount_mismatches": 6, "tenant_refusals": 0},
        "inbox": {"duplicates_skipped": 7, "dead_lettered": 9, "reclaimed": 0},
        "webhook": {"bad_signatures": 8},
        "history": {"replays_seen": 1, "conflicts_409": 1, "rejections_4xx": 1},
    }
    assert result.counts == {"operations": 5, "acknowledged": 3, "orders": 1, "payments": 1,
                             "faults": 0, "final_reads": 0, "dead_letters": 0}


def test_to_dict_has_the_documented_shape_and_round_trips() -> None:
    run = lost_payment_run()
    run.fault(run.operations[1]["invoke_time"], None)
    result = run.check(run_id="r1", scenario="mixed", unsafe_disable=["domain"])
    data = orjson.loads(orjson.dumps(result.to_dict()))
    assert list(data) == ["verdict", "valid", "inconclusive_reasons", "run_id", "scenario",
                          "unsafe_disable", "promised_paths", "min_acknowledged", "invariants",
                          "paths", "dead_letters", "outcomes", "jepsen", "layers", "duplicates",
                          "counts"]
    assert data["verdict"] == "fail"
    assert [item["name"] for item in data["invariants"]] == [name for name in INVARIANT_NAMES]
    assert data["valid"] is False and data["unsafe_disable"] == ["domain"]
    violation = data["invariants"][1]["violations"][0]
    assert set(violation) >= {"invariant", "order_id", "message", "evidence"}
    assert set(violation["evidence"]) == {"payments", "operations", "faults"}
    assert set(data["jepsen"]) == {"acknowledged", "lost", "unexpected", "recovered",
                                   "indeterminate_absent"}
    again = CheckResult.from_dict(data)
    assert again == result
    assert again.to_dict() == data


def test_a_one_shot_iterator_still_gets_evidence() -> None:
    run = lost_payment_run()
    result = check(iter(run.operations), iter(run.export + run.balanced_inventory()))
    violation = result.invariant("no_lost_acknowledgement").violations[0]
    assert [op["op"] for op in violation.evidence["operations"]] == ["create_order", "pay"]
    assert result.counts["operations"] == 2


def test_empty_run_passes_every_invariant_but_is_inconclusive() -> None:
    result = check([], [])
    assert result.failed == []
    assert all(item.checked == 0 for item in result.invariants)
    assert result.verdict == "inconclusive" and not result.valid
    assert result.inconclusive_reasons == [
        "0 operation(s) were acknowledged (ok), fewer than the 1 required"]
    assert check([], [], min_acknowledged=0).verdict == "pass"


def test_unknown_export_kinds_are_ignored_but_a_line_without_kind_is_an_error() -> None:
    run = Run()
    run.paid_order("o1", "pr1")
    run.export.append({"kind": "something_newer", "x": 1})
    assert run.check().valid
    run.export.append({"id": "o2"})
    with pytest.raises(CheckerError, match="no kind"):
        run.check()


class CountingOperations:
    """A re-iterable history that counts how often the checker reads it."""

    def __init__(self, operations: list[dict]) -> None:
        self.operations = operations
        self.reads = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.reads += 1
        return iter(self.operations)


def test_a_passing_run_is_read_once() -> None:
    run = Run()
    run.paid_order("o1", "pr1")
    history = CountingOperations(run.operations)
    result = check(history, run.export + run.balanced_inventory())
    assert result.valid, result.failed
    assert history.reads == 1


def test_a_run_failing_only_in_the_export_reads_the_history_again_for_evidence() -> None:
    # The fold reads typed records of a few fields; evidence quotes operations whole,
    # so it takes a pass of its own, even when the export alone proved the violation.
    run = Run()
    run.paid_order("o1", "pr1")
    run.webhook("o1", "pr2", "ev2", "ok")  # the domain mutant accepted a second ref
    run.payment("o1", "pr2", "webhook", "ev2")
    history = CountingOperations(run.operations)
    result = check(history, run.export + run.balanced_inventory())
    assert result.failed == ["one_payment_per_order"]
    assert history.reads == 2
    assert len(result.invariant("one_payment_per_order").violations[0].evidence["operations"]) == 3


def test_a_history_dependent_violation_reads_the_history_again_for_evidence() -> None:
    run = lost_payment_run()
    history = CountingOperations(run.operations)
    result = check(history, run.export + run.balanced_inventory())
    assert result.failed == ["no_lost_acknowledgement"]
    assert history.reads == 2
    assert result.invariant("no_lost_acknowledgement").violations[0].evidence["operations"]


def test_an_interrupted_result_with_dead_letters_reads_back_as_written(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    registry.mark_interrupted(run_dir, signal_name="SIGTERM", by="harness", phase="load or drain")
    marker = json.loads((run_dir / "interrupted.json").read_text())
    result = CheckResult(valid=True, invariants=[], interrupted=RunDir(run_dir).interrupted_marker(),
                         dead_letters=DeadLetters(count=2, reasons={"no message_id": 2},
                                                  first=[{"kind": "dead_letter", "message_id": None}]))
    assert result.interrupted is not None and result.interrupted.signal == "SIGTERM"
    data = result.to_dict()
    assert data["interrupted"] == marker  # result.json carries the registry's marker unchanged
    assert data["dead_letters"] == {"count": 2, "reasons": {"no message_id": 2},
                                    "first": [{"kind": "dead_letter", "message_id": None}]}
    assert CheckResult.from_dict(json.loads(json.dumps(data))) == result


# -- first_violation_s (issue 24): how soon the run held proof of each bug ------------

def test_first_violation_s_is_the_earliest_evidence_invoke_after_the_load_start() -> None:
    run = Run()
    run.create("k1", "o1")  # invoked at 1000.0, touches o1: evidence of the lost payment
    run.pay("o1", "pr1", "p1", "ok")  # 1001.0
    run.create("k2", "o2")  # 1002.0
    run.pay("o2", "pr2", "p2", "ok")  # 1003.0
    run.order("o1", "k1")
    run.order("o2", "k2", "PAID")
    run.payment("o2", "pr2", "api", "p2")
    result = run.check(load_started=990.0)
    lost = result.invariant("no_lost_acknowledgement")
    assert not lost.passed and lost.first_violation_s == 10.0
    assert [r.first_violation_s for r in result.invariants if r.passed] == [None] * (len(INVARIANT_NAMES) - 1)
    assert result.to_dict()["invariants"][1]["first_violation_s"] == 10.0


def test_first_violation_s_takes_the_violation_whose_evidence_starts_first() -> None:
    run = Run()
    run.create("k1", "o1")  # 1000.0: o1 is paid twice, caught from the export
    run.create("k2", "o2")  # 1001.0
    run.pay("o2", "pr2", "p2", "ok")  # 1002.0: o2's payment is lost
    run.order("o1", "k1", "PAID")
    run.payment("o1", "pr1", "api", "p1")
    run.payment("o1", "pr1b", "webhook", "e1")
    run.order("o2", "k2")
    result = run.check(load_started=999.5)
    assert result.invariant("one_payment_per_order").first_violation_s == 0.5
    assert result.invariant("no_lost_acknowledgement").first_violation_s == 1.5


def test_first_violation_s_is_none_without_a_load_start_or_evidence() -> None:
    result = lost_payment_run().check()
    assert result.invariant("no_lost_acknowledgement").first_violation_s is None
    run = Run()
    run.order("o9", "k9", "PAID")  # paid without a payment: no operation touched it
    result = run.check(load_started=0.0)
    assert result.invariant("one_payment_per_order").first_violation_s is None


def test_first_violation_s_survives_result_json_and_older_results_read_none() -> None:
    result = lost_payment_run().check(load_started=995.0)
    data = json.loads(json.dumps(result.to_dict()))
    again = CheckResult.from_dict(data)
    assert again.invariant("no_lost_acknowledgement").first_violation_s == 5.0
    assert [entry.get("first_violation_s") for entry in data["invariants"]] == [
        5.0 if entry["name"] == "no_lost_acknowledgement" else None for entry in data["invariants"]]
    assert sum("first_violation_s" in entry for entry in data["invariants"]) == 1  # only where known
    data["invariants"][1].pop("first_violation_s")  # a result.json written before issue 24
    assert all(r.first_violation_s is None for r in CheckResult.from_dict(data).invariants)
