"""Hypothesis: a correct app's history never fails; one injected fault always fails its invariant.

Each invariant has at least one injection (the new ones of issue 9 too), each run
as its own property over the correct app's random histories.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from checker_builders import digest
from checker_model import CorrectApp, play
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.check.checker import HistoryFiles, check

MODES = st.sampled_from(["ok", "ok", "ok", "info_applied", "info_lost", "5xx"])
ORDER = st.integers(0, 9)
REF = st.integers(0, 2)

ACTION = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(["default", "t2"]),
              st.sampled_from(["k0", "k1", "k2", "k3"]), st.integers(1, 3), MODES),
    st.tuples(st.just("pay"), ORDER, REF, st.sampled_from(["pk0", "pk1", "pk2", "pk3", "pk4"]),
              MODES, st.sampled_from([False, False, False, True])),
    st.tuples(st.just("webhook"), ORDER, REF, st.sampled_from(["ev0", "ev1", "ev2"]), MODES,
              st.sampled_from([False, False, True])),
    st.tuples(st.just("publish"), ORDER, REF, st.sampled_from(["m0", "m1", "m2", "m3"]),
              st.sampled_from(["ok", "ok", "info_applied", "info_lost"])),
    st.tuples(st.just("pay"), ORDER, REF, st.sampled_from(["pk0", "pk5"]), MODES, st.just(False),
              st.just(True)),
    st.tuples(st.just("read"), ORDER, MODES, st.booleans()),
    st.tuples(st.just("poison"), st.integers(0, 9)),
)
# Every history starts with one order that surely exists, so injections have a target.
HISTORIES = st.lists(ACTION, max_size=40).map(lambda actions: [("create", "default", "k-first", 1, "ok")] + actions)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INJECTION_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def judge(app: CorrectApp) -> Any:
    return check(app.run.operations, app.run.export, final_reads=app.run.final_reads)


@SETTINGS
@given(HISTORIES)
def test_a_correct_app_never_fails(actions: list[tuple[Any, ...]]) -> None:
    app = play(actions)
    result = judge(app)
    assert result.verdict == "pass", [v.message for i in result.invariants for v in i.violations]
    assert result.valid
    assert result.jepsen["lost"] == 0 and result.jepsen["unexpected"] == 0
    assert result.counts["operations"] == len(actions)


# -- injections: each breaks one invariant the way a broken layer would ----------

def duplicate_payment(app: CorrectApp) -> str:
    order_id = next(iter(app.orders))
    app.run.webhook(order_id, "pr-dup", "ev-dup", "info")
    app.run.payment(order_id, "pr-dup", "webhook", "ev-dup")
    return "one_payment_per_order"


def second_order_for_a_key(app: CorrectApp) -> str:
    first = next(line for line in app.run.export if line["kind"] == "order")
    app.run.order("ord_twin", first["idempotency_key"], tenant=first["tenant"], quantity=1)
    for line in app.run.export:
        if line["kind"] == "inventory":
            line["available"] -= 1  # keep stock conserved: only the key invariant may fail
    return "one_order_per_key"


def lost_acknowledgement(app: CorrectApp) -> str:
    order_id = next(iter(app.orders))
    app.run.pay(order_id, "pr-lost", "pk-lost", "ok")
    return "no_lost_acknowledgement"


def unexpected_payment(app: CorrectApp) -> str:
    order_id = next(iter(app.orders))
    app.run.payment(order_id, "pr-ghost", "api", "pk-ghost")
    return "nothing_unexpected"


def stale_replay(app: CorrectApp) -> str:
    app.run.pay(next(iter(app.orders)), "pr0", "pk-replay", "info")
    app.run.pay(next(iter(app.orders)), "pr0", "pk-replay", "ok", replayed=True, status=201,
                body_digest=digest("one"))
    app.run.pay(next(iter(app.orders)), "pr0", "pk-replay", "ok", replayed=True, status=201,
                body_digest=digest("two"))
    return "replay_fidelity"


def stock_drift(app: CorrectApp) -> str:
    for line in app.run.export:
        if line["kind"] == "inventory":
            line["available"] += 1
    return "inventory_conservation"


def second_effect(app: CorrectApp) -> str:
    effects = [line for line in app.run.export if line["kind"] == "message_effect"]
    if effects:
        app.run.export.append(dict(effects[0]))
    else:
        app.run.effect("m-twice", "ord_unknown", "pr0", "unknown_order")
        app.run.effect("m-twice", "ord_unknown", "pr0", "unknown_order")
    return "message_effects_once"


def first_order(app: CorrectApp) -> tuple[str, dict[str, Any]]:
    order_id = next(iter(app.orders))
    return order_id, app.orders[order_id]


def accepted_bad_signature(app: CorrectApp) -> str:
    order_id, order = first_order(app)
    app.run.webhook(order_id, "pr0", "ev-forged", "ok", expect="tampered_signature", must_reject=True,
                    reject_status=401, answer={"order_id": order_id, "tenant": order["tenant"],
                                               "status": "PAID", "provider_ref": "pr0",
                                               "amount_cents": 1000, "already_paid": True})
    return "answers_match_requests"


def create_answer_names_another_quantity(app: CorrectApp) -> str:
    create = next(op for op in app.run.operations if op["op"] == "create_order" and op["type"] == "ok"
                  and op.get("answer"))
    create["answer"] = {**create["answer"], "quantity": create["quantity"] + 1}
    return "answers_match_requests"


def honest_retry_refused(app: CorrectApp) -> str:
    app.run.create("k-honest", None, "fail", status=400, fingerprint="fp-honest",
                   problem_type="/problems/incomplete-body")
    app.run.create("k-honest", None, "fail", status=409, fingerprint="fp-honest",
                   problem_type="/problems/idempotency-key-mismatch")
    return "answers_match_requests"


def payment_of_another_amount(app: CorrectApp) -> str:
    payments = [line for line in app.run.export if line["kind"] == "payment"]
    if payments:
        payments[0]["amount_cents"] += 1
    else:
        order_id, _order = first_order(app)
        app.run.payment(order_id, "pr-odd", "api", "pk-odd", amount_cents=1)
    return "payment_amount_matches_order"


def read_across_tenants(app: CorrectApp) -> str:
    order_id, order = first_order(app)
    app.run.read(order_id, tenant="intruder", answer_tenant=order["tenant"])
    return "tenant_isolation"


def parked_payment(app: CorrectApp) -> str:
    order_id, _order = first_order(app)
    app.run.publish(order_id, "pr-parked", "m-parked", "ok")
    app.run.dead_letter("m-parked", valid=True, order_id=order_id, provider_ref="pr-parked",
                        reason="delivered 1 times")
    return "no_parked_payment"


def final_read_disagrees(app: CorrectApp) -> str:
    read = next(read for read in app.run.final_reads if read["status_code"] == 200)
    read["order"] = {**read["order"], "quantity": read["order"]["quantity"] + 1}
    return "final_reads_agree"


INJECTIONS: list[Callable[[CorrectApp], str]] = [
    duplicate_payment, second_order_for_a_key, lost_acknowledgement, unexpected_payment,
    stale_replay, stock_drift, second_effect, accepted_bad_signature,
    create_answer_names_another_quantity, honest_retry_refused, payment_of_another_amount,
    read_across_tenants, parked_payment, final_read_disagrees,
]


@pytest.mark.parametrize("inject", INJECTIONS, ids=lambda inject: inject.__name__)
@INJECTION_SETTINGS
@given(actions=HISTORIES)
def test_one_injected_fault_always_fails_its_invariant(
    inject: Callable[[CorrectApp], str], actions: list[tuple[Any, ...]]
) -> None:
    """One property per injection, so each invariant has its own: whatever the
    correct app did before, this one fault fails this invariant."""
    app = play(actions)
    expected = inject(app)
    result = judge(app)
    assert not result.valid and result.verdict == "fail"
    assert expected in result.failed, (expected, result.failed)
    outcome = result.invariant(expected)
    assert outcome.violations and outcome.violations[0].message


def test_the_model_exercises_what_the_new_invariants_judge() -> None:
    """The correct app's histories do reach the cases the new invariants judge."""
    app = play([("create", "default", "k0", 1, "ok"), ("create", "t2", "k0", 1, "ok"),
                ("create", "default", "k0", 2, "ok"), ("pay", 0, 0, "pk0", "ok", True),
                ("pay", 1, 0, "pk1", "ok", False, True), ("read", 0, "ok", True), ("read", 1, "ok", False),
                ("webhook", 0, 0, "ev0", "ok", True), ("poison", 1)])
    result = judge(app)
    assert result.verdict == "pass", [v.message for i in result.invariants for v in i.violations]
    assert result.duplicates == {"cross_tenant_pay": 1, "cross_tenant_read": 1, "fingerprint_mismatch": 1,
                                 "poison_message": 1, "shared_key": 1, "tampered_signature": 1,
                                 "wrong_amount": 1}
    assert {name for name, count in result.paths.items() if count} == {
        "fingerprint_refusal", "amount_refusal", "signature_refusal", "tenant_refusal", "dead_letter"}
    assert result.invariant("final_reads_agree").checked == 4
    assert result.dead_letters.reasons == {"no message_id": 1}


# Fields a completion record carries (docs/internals.md); the rest is the invoke's.
COMPLETION_FIELDS = ("status", "body_digest", "replayed", "error", "toxic_hit", "answer", "problem_type")


def write_history(app: CorrectApp, path: Path) -> None:
    """The model's operations as invoke and completion records, the way the load writes them."""
    lines = []
    for op in app.run.operations:
        invoke = {name: value for name, value in op.items()
                  if name not in COMPLETION_FIELDS and name not in ("type", "invoke_time", "complete_time")}
        completion = {name: op.get(name) for name in COMPLETION_FIELDS}
        if op["op"] == "create_order":
            invoke.pop("order_id")
            completion["order_id"] = op.get("order_id")
        invoke.update(time=op["invoke_time"])
        completion.update(op=op["op"], time=op["complete_time"])
        # `type` and `op_id` first, as HistoryWriter writes them: the evidence pass
        # reads those raw lines before it parses any
        invoke = {"type": "invoke", "op_id": op["op_id"], **invoke}
        completion = {"type": op["type"], "op_id": op["op_id"], **completion}
        lines += [orjson.dumps(invoke), orjson.dumps(completion)]
    path.write_bytes(b"\n".join(lines) + b"\n")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(HISTORIES, st.sampled_from([None, *INJECTIONS]))
def test_history_files_and_merged_operations_give_the_same_result(
    tmp_path: Path, actions: list[tuple[Any, ...]], inject: Callable[[CorrectApp], str] | None
) -> None:
    """The checker's file pass (unmerged pairs) judges exactly like the in-memory one."""
    app = play(actions)
    if inject is not None:
        inject(app)
    path = tmp_path / "history.jsonl"
    write_history(app, path)
    from_files = check(HistoryFiles([path]), app.run.export, final_reads=app.run.final_reads)
    assert comparable(from_files) == comparable(judge(app))


def comparable(result: Any) -> dict[str, Any]:
    """The result with evidence operations as their ids (the file pass quotes merged records)."""
    data = result.to_dict()
    for outcome in data["invariants"]:
        for violation in outcome["violations"]:
            violation["evidence"]["operations"] = [op["op_id"] for op in violation["evidence"]["operations"]]
    return data
