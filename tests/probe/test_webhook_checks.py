"""The receiver invariants (harness.probe.webhooks.checks) and rows
(harness.probe.webhooks.conformance) on hand-made histories: each invariant violated by
the one thing it forbids and held otherwise, the verdict rules (a receiver that
acknowledged too little, an entry without effects: inconclusive), and a config of
webhooks alone judged without the endpoints' invariants."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from harness.probe.checker import ProbeCheck
from harness.probe.config import WebhookEndpoint, parse_config
from harness.probe.runner import ProbeResult
from harness.probe.webhooks.checks import ClockSpan, check_webhooks, combine, receiver_clock_spans
from harness.probe.webhooks.conformance import receiver_rows
from harness.probe.webhooks.play import WebhookOutcome

ENTRY = {"name": "stripe", "path": "/webhooks/stripe", "scheme": "stripe", "secret": "whsec_test_123",
         "event": {"type": "payment_intent.succeeded", "data": {"object": {"id": "pi_{uuid}"}}},
         "fact": "/data/object/id", "timeout": "0.5s",
         "effects": {"dsn": "sqlite:///effects.db", "query": "SELECT id FROM payments WHERE intent = :fact"}}
ENDPOINT = {"path": "/orders", "body": {"ref": "{uuid}"}, "id": {"pointer": "/id"}}
_ids = itertools.count()


def entries(**changes: Any) -> tuple[WebhookEndpoint, ...]:
    raw = {key: value for key, value in {**ENTRY, **changes}.items() if value is not None}
    return parse_config({"webhooks": [raw], "endpoints": [ENDPOINT]}).webhooks


def op(kind: str, fact: str, *, event: str = "evt_1", type: str = "ok", status: int | None = 200,
       must_refuse: bool = False, **fields: Any) -> dict[str, Any]:
    return {"op": "webhook", "op_id": f"w:{next(_ids)}", "webhook": "stripe", "kind": kind, "fact": fact,
            "event_id": event, "event_type": "payment_intent.succeeded", "type": type, "status": status,
            "must_refuse": must_refuse, "invoke_time": 100.0, **fields}


def acknowledged(count: int) -> list[dict[str, Any]]:
    return [op("first", f"pi_ok{i}", event=f"evt_ok{i}") for i in range(count)]


def judge(ops: list[dict[str, Any]], effects: dict[str, int], *, min_acknowledged: int = 3,
          hooks: tuple[WebhookEndpoint, ...] | None = None, clock: tuple[ClockSpan, ...] = ()) -> Any:
    facts = {str(o["fact"]) for o in ops}
    outcome = WebhookOutcome(name="stripe", counted=True,
                             effects=[(fact, effects.get(fact, 1)) for fact in sorted(facts)])
    return check_webhooks(ops, [outcome], hooks or entries(), min_acknowledged=min_acknowledged,
                          receiver_clock=clock)


def failed(check: Any) -> set[str]:
    return {inv.name for inv in check.invariants if not inv.passed}


def test_a_receiver_that_applies_each_fact_once_holds_every_invariant() -> None:
    ops = [*acknowledged(3), op("first", "pi_a", type="info", status=None, error="timeout"),
           op("retry", "pi_a", retry_of="first", attempt=2),
           op("stale_signature", "pi_s", event="evt_s", type="fail", status=400, must_refuse=True)]
    check = judge(ops, {"pi_s": 0})
    assert failed(check) == set() and check.reasons == []
    names = {inv.name: inv for inv in check.invariants}
    assert names["answered_in_time"].passed and "1 of 6" in names["answered_in_time"].description


@pytest.mark.parametrize(("ops", "effects", "invariant"), [
    # Two copies of one event, both applied.
    ([op("first", "pi_a"), op("concurrent_copy", "pi_a")], {"pi_a": 2}, "fact_applied_once"),
    # Acknowledged, never applied.
    ([op("first", "pi_a")], {"pi_a": 0}, "acknowledged_fact_applied"),
    # A stale signature accepted, or answered 500, or refused after it took effect.
    ([op("stale_signature", "pi_s", must_refuse=True)], {"pi_s": 1}, "refused_not_applied"),
    ([op("tampered_body", "pi_s", type="info", status=500, must_refuse=True)], {"pi_s": 0}, "refused_not_applied"),
    ([op("wrong_secret", "pi_s", type="fail", status=400, must_refuse=True)], {"pi_s": 1}, "refused_not_applied"),
    # The provider's late retry of a duplicate, after the load, answered 500.
    ([op("first", "pi_a"), op("concurrent_copy", "pi_a", type="info", status=500),
      op("retry", "pi_a", type="info", status=500, retry_of="concurrent_copy", attempt=5, late=True)],
     {"pi_a": 1}, "delivery_acknowledged"),
])
def test_each_invariant_fails_on_what_it_forbids(ops: list[dict[str, Any]], effects: dict[str, int],
                                                 invariant: str) -> None:
    check = judge([*acknowledged(3), *ops], effects)
    assert failed(check) == {invariant}, [v for inv in check.invariants for v in inv.violations]


def test_what_the_receiver_may_do() -> None:
    # A fact whose every delivery was lost may be absent; a late retry without an answer is not judged;
    # a refused delivery answered 4xx without effect is what a refusal should be.
    ops = [*acknowledged(3), op("first", "pi_lost", type="info", status=None, error="reset"),
           op("retry", "pi_lost", type="info", status=None, error="unreachable", late=True, retry_of="first"),
           op("missing_header", "pi_m", event="evt_m", type="fail", status=401, must_refuse=True)]
    check = judge(ops, {"pi_lost": 0, "pi_m": 0})
    assert failed(check) == set()


def test_too_little_acknowledged_or_no_oracle_is_inconclusive_never_pass() -> None:
    down = [op("first", f"pi_{i}", event=f"evt_{i}", type="info", status=None, error="reset") for i in range(5)]
    check = judge(down, {}, min_acknowledged=3)
    assert failed(check) == set() and any("only 0 webhook deliveries" in r for r in check.reasons)
    merged = combine(ProbeCheck(invariants=[], counts={"statuses": {}}, verdict="inconclusive",
                                inconclusive_reasons=["only 0 requests were acknowledged"]), check, keep=False)
    assert merged.verdict == "inconclusive"
    assert merged.inconclusive_reasons == check.reasons  # the endpoints' check judged nothing: dropped
    assert merged.counts["operations"] == 5 and merged.counts["acknowledged"] == 0
    no_oracle = entries(effects=None)
    outcome = WebhookOutcome(name="stripe", counted=False)
    check = check_webhooks(acknowledged(5), [outcome], no_oracle, min_acknowledged=3)
    assert any("no `effects:`" in reason for reason in check.reasons)


def test_conformance_rows_say_which_dedupe_failed() -> None:
    ops = [*acknowledged(3), op("first", "pi_o"), op("same_object_new_event", "pi_o", event="evt_2"),
           op("first", "pi_c", event="evt_c"), op("late_duplicate", "pi_c", event="evt_c"),
           op("stale_signature", "pi_s", event="evt_s", type="fail", status=400, must_refuse=True),
           op("future_timestamp", "pi_f", event="evt_f", must_refuse=True),
           op("tampered_body", "pi_t", event="evt_t", type="fail", status=400, must_refuse=True)]
    check = judge(ops, {"pi_o": 2, "pi_c": 1, "pi_s": 1, "pi_f": 1, "pi_t": 0})
    rows = {row.id: row for row in receiver_rows(check, faults=[])}
    assert rows["webhook-dedupe-object"].status == "fail"
    assert rows["webhook-dedupe-event"].status == "pass"
    assert rows["webhook-tolerance"].status == "fail" and "stale_signature" in rows["webhook-tolerance"].evidence
    assert rows["webhook-raw-body"].status == "pass"
    assert rows["webhook-out-of-order"].status == "not observed"
    assert rows["webhook-fast-2xx"].status == "pass"


def verdict(check: Any) -> ProbeCheck:
    return combine(ProbeCheck(invariants=[], counts={"statuses": {}}, verdict="inconclusive",
                              inconclusive_reasons=[]), check, keep=False)


def test_a_stripe_receiver_taking_a_future_timestamp_passes_with_advice_a_stale_one_fails() -> None:
    # stripe-python's construct_event accepts a timestamp ahead of the tolerance: a receiver
    # that does what Stripe's own verifier does breaks nothing; refusing it is advice.
    future = op("future_timestamp", "pi_f", event="evt_f", must_refuse=True)
    stale = op("stale_signature", "pi_s", event="evt_s", type="fail", status=400, must_refuse=True)
    check = judge([*acknowledged(3), stale, future], {"pi_s": 0, "pi_f": 1})
    result = verdict(check)
    assert result.verdict == "pass", result.violations
    assert [(a.rule, a.level) for a in result.advice] == [("webhook-tolerance", "provider docs")]
    assert "1 of 1 deliveries signed more than the tolerance (300s) in the future" in result.advice[0].message
    assert result.to_dict()["advice"][0]["rule"] == "webhook-tolerance"
    tolerance = {row.id: row for row in receiver_rows(check, faults=[])}["webhook-tolerance"]
    assert tolerance.status == "pass" and "advice:" in tolerance.evidence, tolerance.evidence
    # One that takes a stale timestamp fails, as Stripe's verifier refuses it.
    taken = op("stale_signature", "pi_s", event="evt_s", must_refuse=True)
    check = judge([*acknowledged(3), taken, future], {"pi_s": 1, "pi_f": 1})
    assert verdict(check).verdict == "fail" and failed(check) == {"refused_not_applied"}
    assert {row.id: row.status for row in receiver_rows(check, faults=[])}["webhook-tolerance"] == "fail"
    # One that refuses the future timestamp gets no advice.
    refused = dict(future, type="fail", status=400)
    assert verdict(judge([*acknowledged(3), stale, refused], {"pi_s": 0, "pi_f": 0})).advice == []


def test_a_standard_webhooks_receiver_taking_a_future_timestamp_fails() -> None:
    # The Standard Webhooks reference library refuses a timestamp 5 min ahead: so must the receiver.
    standard = entries(scheme="standard", secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    future = op("future_timestamp", "pi_f", event="msg_f", must_refuse=True)
    check = judge([*acknowledged(3), future], {"pi_f": 1}, hooks=standard)
    assert failed(check) == {"refused_not_applied"} and check.advice == []
    assert {row.id: row.status for row in receiver_rows(check, faults=[])}["webhook-tolerance"] == "fail"


def test_dedupe_object_with_a_fact_that_changes_per_event_says_it_was_not_exercised() -> None:
    # `fact: /id`: the second event for an object carries its own event id as its fact, so
    # the receiver that applied it again shows one effect per fact: the row cannot fail.
    by_event = entries(fact="/id")
    ops = [*acknowledged(3), op("first", "evt_1"), op("same_object_new_event", "evt_2", event="evt_2")]
    check = judge(ops, {"evt_1": 1, "evt_2": 1}, hooks=by_event)
    row = {row.id: row for row in receiver_rows(check, faults=[])}["webhook-dedupe-object"]
    assert row.status == "not observed" and row.evidence.startswith("not exercised"), row.evidence
    assert "/data/object/id" in row.evidence
    # With the object as the fact, the same deliveries are one fact under two event ids: judged.
    ops = [*acknowledged(3), op("first", "pi_o"), op("same_object_new_event", "pi_o", event="evt_2")]
    rows = {row.id: row for row in receiver_rows(judge(ops, {"pi_o": 1}), faults=[])}
    assert rows["webhook-dedupe-object"].status == "pass", rows["webhook-dedupe-object"].evidence


def test_fast_2xx_counts_slow_answers_outside_the_fault_windows_only() -> None:
    slow_in = op("first", "pi_1", event="evt_1", type="info", status=None, error="timeout", invoke_time=10.5)
    slow_out = op("first", "pi_2", event="evt_2", type="info", status=None, error="timeout", invoke_time=20.0)
    faults = [{"start": 10.0, "end": 11.0}]
    inside = receiver_rows(judge([*acknowledged(3), slow_in], {}), faults)
    assert {row.id: row.status for row in inside}["webhook-fast-2xx"] == "pass"
    outside = receiver_rows(judge([*acknowledged(3), slow_out], {}), faults)
    assert {row.id: row.status for row in outside}["webhook-fast-2xx"] == "fail"


def test_fast_2xx_judges_the_whole_delivery_not_its_send_time() -> None:
    # Sent 60 ms before a latency window opens, given up 0.5 s later inside it: slow by the fault.
    before = op("first", "pi_1", event="evt_1", type="info", status=None, error="timeout", invoke_time=9.94,
                complete_time=10.44)
    # Sent and given up wholly between two windows: slow by the receiver.
    between = op("first", "pi_2", event="evt_2", type="info", status=None, error="timeout", invoke_time=20.0,
                 complete_time=20.5)
    faults = [{"start": 10.0, "end": 11.0}, {"start": 30.0, "end": 31.0}]
    rows = {row.id: row for row in receiver_rows(judge([*acknowledged(3), before], {}), faults)}
    assert rows["webhook-fast-2xx"].status == "pass", rows["webhook-fast-2xx"].evidence
    rows = {row.id: row for row in receiver_rows(judge([*acknowledged(3), before, between], {}), faults)}
    assert rows["webhook-fast-2xx"].status == "fail"
    assert rows["webhook-fast-2xx"].evidence.startswith("1 of 4 deliveries"), rows["webhook-fast-2xx"].evidence


def summary(check: ProbeCheck) -> str:
    return ProbeResult(verdict=check.verdict, exit_code=0, run_dir=Path("/tmp/run"), check=check, conformance=(),
                       document={}).summary()


def test_a_webhooks_only_summary_counts_deliveries_and_facts_not_keys() -> None:
    ops = [*acknowledged(3), op("first", "pi_a", type="info", status=None, error="timeout"),
           op("retry", "pi_a", retry_of="first", attempt=2), op("first", "pi_c", event="evt_c"),
           op("concurrent_copy", "pi_c", event="evt_c"), op("concurrent_copy", "pi_c", event="evt_c")]
    endpoints = ProbeCheck(invariants=[], counts={"operations": 0, "acknowledged": 0, "duplicated_keys": 0,
                                                  "kinds": {}, "statuses": {}},
                           verdict="inconclusive", inconclusive_reasons=[])
    line = summary(combine(endpoints, judge(ops, {}), keep=False))
    assert "(8 webhook deliveries, 7 acknowledged, 2 facts delivered more than once)" in line, line
    assert "requests" not in line and "keys" not in line, line


def test_a_fail_summary_also_names_what_was_inconclusive() -> None:
    # Too few acknowledged (a reason) and a fact applied twice (a violation): FAIL, and both said.
    ops = [op("first", "pi_a"), op("concurrent_copy", "pi_a")]
    check = combine(ProbeCheck(invariants=[], counts={"statuses": {}}, verdict="inconclusive",
                               inconclusive_reasons=[]), judge(ops, {"pi_a": 2}, min_acknowledged=5), keep=False)
    line = summary(check)
    assert check.verdict == "fail" and check.inconclusive_reasons, line
    assert line.startswith("FAIL: fact_applied_once violated; also inconclusive: only 2 webhook deliveries"), line


def test_github_has_no_tolerance_row_to_check() -> None:
    github = entries(scheme="github", secret="It's a Secret to Everybody",
                     event={"type": "push", "data": {"object": {"id": "pi_{uuid}"}}})
    ops = [dict(o, event_type="push") for o in acknowledged(3)]
    rows = {row.id: row.status for row in receiver_rows(judge(ops, {}, hooks=github), faults=[])}
    assert rows["webhook-tolerance"] == "not checkable"


# --- a receiver whose clock is moved ------------------------------------------------------

def skewed(offset: float) -> tuple[ClockSpan, ...]:
    return (ClockSpan(start=90.0, end=110.0, offsets=(offset,)),)


@pytest.mark.parametrize(("scheme", "offset", "violated"), [
    ("stripe", -360.0, True),    # 6 min behind: Stripe's verifier takes a future timestamp; refusing is the bug
    ("stripe", -90.0, True),     # within the tolerance either way
    ("stripe", 360.0, False),    # 6 min ahead: every delivery is stale to it, Stripe's verifier refuses too
    ("standard", -360.0, False),  # Standard Webhooks refuses a timestamp that far ahead: expected
    ("standard", 90.0, True),
    ("stripe", 299.0, False),    # at the edge (CLOCK_SLACK): judged neither way
])
def test_a_valid_delivery_refused_by_a_skewed_receiver_is_judged_by_the_official_verifier(
        scheme: str, offset: float, violated: bool) -> None:
    hooks = entries(scheme=scheme, secret="whsec_dGVzdA==" if scheme == "standard" else "whsec_test_123")
    ops = [*acknowledged(3), op("first", "pi_s", type="fail", status=400, event="evt_s")]
    check = judge(ops, {"pi_s": 0}, hooks=hooks, clock=skewed(offset))
    assert ("delivery_acknowledged" in failed(check)) is violated, check.invariants
    if violated:
        [violation] = next(i for i in check.invariants if i.name == "delivery_acknowledged").violations
        assert f"{offset:+.0f}s off" in violation["message"], violation["message"]
    elif abs(offset) > 302:
        assert check.counts["receiver_clock"]["refused_past_tolerance"] == 1


def test_without_a_clock_window_the_same_refusal_is_left_to_the_late_retry() -> None:
    ops = [*acknowledged(3), op("first", "pi_s", type="fail", status=400, event="evt_s")]
    assert "delivery_acknowledged" not in failed(judge(ops, {"pi_s": 0}))
    # ... and outside the window's time as well
    late = [*acknowledged(3), op("first", "pi_s", type="fail", status=400, event="evt_s", invoke_time=200.0)]
    assert "delivery_acknowledged" not in failed(judge(late, {"pi_s": 0}, clock=skewed(-360.0)))


def test_a_stale_delivery_taken_by_a_receiver_whose_clock_is_behind_is_not_judged() -> None:
    # Signed 400 s ago; to a receiver 360 s behind it is 40 s old: taking it is right.
    ops = [*acknowledged(3), op("stale_signature", "pi_old", must_refuse=True, event="evt_old")]
    check = judge(ops, {"pi_old": 1}, clock=skewed(-360.0))
    assert "refused_not_applied" not in failed(check)
    assert check.counts["receiver_clock"]["timestamp_checks_not_judged"] == 1
    assert "refused_not_applied" in failed(judge(ops, {"pi_old": 1}))  # with the real clock it is a violation


def test_the_spans_come_from_the_clock_windows_on_the_service_that_were_applied() -> None:
    faults = [
        {"name": "w0", "kind": "clock", "target": "service", "clock": "skew", "offset_before": 0.0,
         "offset_after": -360.0, "start": 10.0, "end": 20.0, "error": None},
        {"name": "w0", "kind": "clock", "target": "service", "clock": "skew", "offset_before": 0.0,
         "offset_after": -360.0, "start": 10.0, "end": 20.0, "error": None},
        {"name": "w1", "kind": "clock", "target": "service", "clock": "strobe", "offset_before": 0.0,
         "offset_after": 30.0, "start": 30.0, "end": 40.0, "error": None},
        {"name": "w2", "kind": "clock", "target": "db", "clock": "jump", "offset_before": 0.0,
         "offset_after": 7200.0, "start": 50.0, "end": 60.0, "error": None},
        {"name": "w3", "kind": "clock", "target": "service", "clock": "jump", "offset_before": 0.0,
         "offset_after": 60.0, "start": 70.0, "end": 80.0, "error": "did not move"},
        {"name": "w4", "kind": "toxic", "target": "app", "start": 1.0, "end": 2.0, "error": None},
    ]
    assert receiver_clock_spans(faults) == [ClockSpan(10.0, 20.0, (-360.0,)), ClockSpan(30.0, 40.0, (0.0, 30.0))]
