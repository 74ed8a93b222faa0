"""Each invariant on hand-built histories: a passing and a failing case, info cases included."""

from __future__ import annotations

from checker_builders import Run, digest, failed

# -- one_payment_per_order ---------------------------------------------------------

def test_one_paid_order_is_valid() -> None:
    run = Run()
    run.paid_order("o1", "pr1")
    result = run.check()
    assert result.valid, result.to_dict()
    assert result.invariant("one_payment_per_order").checked == 1


def test_two_payments_on_one_order_fail_with_evidence() -> None:
    run = Run()
    run.paid_order("o1", "pr1")
    run.webhook("o1", "pr2", "ev1")
    run.payment("o1", "pr2", "webhook", "ev1")
    result = run.check()
    assert failed(result) == {"one_payment_per_order"}
    outcome = result.invariant("one_payment_per_order")
    assert outcome.violation_count == 1
    violation = outcome.violations[0]
    assert violation.order_id == "o1"
    assert "2 payments" in violation.message
    assert [p["provider_ref"] for p in violation.evidence["payments"]] == ["pr1", "pr2"]
    assert {op["op"] for op in violation.evidence["operations"]} == {"create_order", "pay", "webhook"}


def test_paid_order_without_payment_fails() -> None:
    run = Run()
    run.create("k1", "o1")
    run.order("o1", "k1", "PAID")
    result = run.check()
    assert "one_payment_per_order" in failed(result)
    assert "PAID but holds no payment" in result.invariant("one_payment_per_order").violations[0].message


def test_unpaid_order_holding_a_payment_fails() -> None:
    run = Run()
    run.create("k1", "o1")
    run.pay("o1", "pr1", "p1", "info")
    run.order("o1", "k1", "INVENTORY_RESERVED")
    run.payment("o1", "pr1", "api", "p1")
    assert failed(run.check()) == {"one_payment_per_order"}


def test_payment_on_an_order_missing_from_the_export_fails() -> None:
    run = Run()
    run.pay("o9", "pr1", "p1", "info")
    run.payment("o9", "pr1", "api", "p1")
    assert "one_payment_per_order" in failed(run.check())


# -- no_lost_acknowledgement -------------------------------------------------------

def test_acknowledged_pay_missing_from_the_order_is_lost() -> None:
    run = Run()
    run.create("k1", "o1")
    run.pay("o1", "pr1", "p1", "ok")
    run.order("o1", "k1")
    result = run.check()
    assert failed(result) == {"no_lost_acknowledgement"}
    assert result.jepsen["lost"] == 1
    assert result.jepsen["acknowledged"] == 1
    assert result.invariant("no_lost_acknowledgement").violations[0].details["provider_ref"] == "pr1"


def test_already_paid_answer_with_the_held_ref_is_not_lost() -> None:
    run = Run()
    run.paid_order("o1", "pr1")
    run.pay("o1", "pr1", "p-other", "ok", status=200, expect="same_fact_new_id")
    run.webhook("o1", "pr1", "ev1", "ok", expect="duplicate")
    result = run.check()
    assert result.valid, result.to_dict()
    assert result.jepsen["acknowledged"] == 1  # one (order, provider_ref) element


def test_webhook_ok_for_a_ref_the_order_does_not_hold_is_lost() -> None:
    run = Run()
    run.paid_order("o1", "pr1")
    run.webhook("o1", "pr2", "ev2", "ok")
    assert failed(run.check()) == {"no_lost_acknowledgement"}


def test_message_handled_as_paid_must_be_on_the_order() -> None:
    good = Run()
    good.create("k1", "o1")
    good.publish("o1", "pr1", "m1")
    good.order("o1", "k1", "PAID")
    good.payment("o1", "pr1", "message", "m1")
    good.effect("m1", "o1", "pr1", "paid")
    assert good.check().valid

    bad = Run()
    bad.create("k1", "o1")
    bad.publish("o1", "pr1", "m1")
    bad.order("o1", "k1")
    bad.effect("m1", "o1", "pr1", "paid")
    assert failed(bad.check()) == {"no_lost_acknowledgement"}


def test_published_message_never_handled_nor_dead_lettered_is_lost() -> None:
    run = Run()
    run.create("k1", "o1")
    run.publish("o1", "pr1", "m1", "ok")
    run.order("o1", "k1")
    result = run.check()
    assert failed(result) == {"no_lost_acknowledgement"}
    assert "m1" in result.invariant("no_lost_acknowledgement").violations[0].message
    assert result.jepsen["lost"] == 1


def test_dead_lettered_or_indeterminate_messages_are_not_lost() -> None:
    run = Run()
    run.create("k1", "o1")
    run.publish("o1", "pr1", "m1", "ok")
    run.publish("o1", "pr2", "m2", "info")
    run.dead_letter("m1")
    run.order("o1", "k1")
    result = run.check()
    assert result.valid, result.to_dict()
    assert result.jepsen["indeterminate_absent"] == 1


def test_message_refused_by_the_domain_needs_no_payment() -> None:
    run = Run()
    run.paid_order("o1", "pr1")
    run.publish("o1", "pr2", "m1", "ok")
    run.effect("m1", "o1", "pr2", "conflict")
    assert run.check().valid


# -- nothing_unexpected ------------------------------------------------------------

def test_info_payment_that_applied_is_recovered() -> None:
    run = Run()
    run.create("k1", "o1")
    run.pay("o1", "pr1", "p1", "info", error="ReadTimeout")
    run.order("o1", "k1", "PAID")
    run.payment("o1", "pr1", "api", "p1")
    result = run.check()
    assert result.valid, result.to_dict()
    assert result.jepsen["recovered"] == 1
    assert result.jepsen["lost"] == 0


def test_info_payment_that_did_not_apply_is_fine() -> None:
    run = Run()
    run.create("k1", "o1")
    run.pay("o1", "pr1", "p1", "info")
    run.order("o1", "k1")
    result = run.check()
    assert result.valid
    assert result.jepsen["indeterminate_absent"] == 1


def test_payment_never_attempted_is_unexpected() -> None:
    run = Run()
    run.create("k1", "o1")
    run.order("o1", "k1", "PAID")
    run.payment("o1", "pr-ghost", "api", "p1")
    result = run.check()
    assert failed(result) == {"nothing_unexpected"}
    assert result.jepsen["unexpected"] == 1
    assert "never attempted" in result.invariant("nothing_unexpected").violations[0].message


def test_payment_applied_after_a_fail_answer_is_a_violation() -> None:
    run = Run()
    run.create("k1", "o1")
    run.pay("o1", "pr1", "p1", "fail", status=422, expect="wrong_amount")
    run.order("o1", "k1", "PAID")
    run.payment("o1", "pr1", "api", "p1")
    result = run.check()
    assert failed(result) == {"nothing_unexpected"}
    assert "answered fail" in result.invariant("nothing_unexpected").violations[0].message


def test_payment_from_an_entry_point_that_never_sent_it_is_unexpected() -> None:
    run = Run()
    run.create("k1", "o1")
    run.pay("o1", "pr1", "p1", "info")
    run.order("o1", "k1", "PAID")
    run.payment("o1", "pr1", "webhook", "ev1")
    assert failed(run.check()) == {"nothing_unexpected"}


def test_fail_next_to_an_ok_attempt_is_justified() -> None:
    run = Run()
    run.paid_order("o1", "pr1")
    run.webhook("o1", "pr1", "ev-bad", "fail", expect="bad_signature")
    assert run.check().valid


# -- one_order_per_key -------------------------------------------------------------

def test_retried_create_seeing_the_same_order_is_valid() -> None:
    run = Run()
    run.create("k1", "o1", "info")
    run.create("k1", "o1", "ok", replayed=True, expect="duplicate")
    run.create("k1", "o1", "ok", replayed=True)
    run.order("o1", "k1")
    result = run.check()
    assert result.valid, result.to_dict()


def test_two_orders_for_one_key_fail() -> None:
    run = Run()
    run.create("k1", "o1")
    run.create("k1", "o2", "info")
    run.order("o1", "k1")
    run.order("o2", "k1")
    result = run.check()
    assert failed(result) == {"one_order_per_key"}
    violation = result.invariant("one_order_per_key").violations[0]
    assert violation.details["order_ids"] == ["o1", "o2"]
    assert len(violation.evidence["operations"]) == 2


def test_ok_creates_naming_different_orders_fail() -> None:
    run = Run()
    run.create("k1", "o1")
    run.create("k1", "o2", status=201, body_digest=digest("other"))
    run.order("o1", "k1")
    run.order("o2", "k2")  # the export hides it under another key
    result = run.check()
    assert failed(result) == {"one_order_per_key"}
    assert result.invariant("one_order_per_key").violation_count == 2  # two ids, one foreign


def test_acknowledged_create_missing_from_the_export_is_lost() -> None:
    run = Run()
    run.create("k1", "o1")
    run.create("k2", "o2", "info")
    result = run.check()
    assert failed(result) == {"one_order_per_key"}
    assert "no such order" in result.invariant("one_order_per_key").violations[0].message


def test_the_same_key_in_two_tenants_makes_two_orders() -> None:
    run = Run()
    run.create("k1", "o1", tenant="a")
    run.create("k1", "o2", tenant="b")
    run.order("o1", "k1", tenant="a")
    run.order("o2", "k1", tenant="b")
    assert run.check().valid


# -- replay_fidelity ---------------------------------------------------------------

def test_replay_equal_to_the_original_is_valid() -> None:
    run = Run()
    run.paid_order("o1", "pr1")
    original = run.operations[1]
    run.pay("o1", "pr1", original["idempotency_key"], replayed=True,
            status=original["status"], body_digest=original["body_digest"])
    result = run.check()
    assert result.valid
    assert result.invariant("replay_fidelity").checked == 1
    assert result.layers["history"]["replays_seen"] == 1


def test_replay_with_another_body_fails() -> None:
    run = Run()
    run.paid_order("o1", "pr1")
    run.pay("o1", "pr1", "p-o1", replayed=True, status=201, body_digest=digest("different"))
    result = run.check()
    assert failed(result) == {"replay_fidelity"}
    assert "differs from the original" in result.invariant("replay_fidelity").violations[0].message


def test_replays_that_disagree_with_each_other_fail() -> None:
    run = Run()
    run.create("k1", "o1", "info")
    run.create("k1", "o1", replayed=True, body_digest=digest("a"))
    run.create("k1", "o1", replayed=True, body_digest=digest("b"))
    run.order("o1", "k1")
    assert failed(run.check()) == {"replay_fidelity"}


def test_replayed_5xx_fails() -> None:
    run = Run()
    run.create("k1", "o1")
    run.order("o1", "k1")
    run.pay("o1", "pr1", "p1", "info", status=503, body_digest=digest("busy"))
    run.pay("o1", "pr1", "p1", "info", status=503, body_digest=digest("busy"), replayed=True)
    result = run.check()
    assert failed(result) == {"replay_fidelity"}
    messages = " ".join(v.message for v in result.invariant("replay_fidelity").violations)
    assert "503" in messages and "stored and replayed" in messages


def test_5xx_then_a_real_retry_then_its_replay_is_valid() -> None:
    run = Run()
    run.create("k1", "o1")
    run.pay("o1", "pr1", "p1", "info", status=500, body_digest=digest("boom"))
    run.pay("o1", "pr1", "p1", "ok", status=201, body_digest=digest("paid"))
    run.pay("o1", "pr1", "p1", "ok", status=201, body_digest=digest("paid"), replayed=True)
    run.order("o1", "k1", "PAID")
    run.payment("o1", "pr1", "api", "p1")
    assert run.check().valid


def test_replay_whose_body_did_not_parse_is_not_compared() -> None:
    run = Run()
    run.paid_order("o1", "pr1")
    run.pay("o1", "pr1", "p-o1", "info", replayed=True, status=201, body_digest=digest("cut"),
            error="unparsable 2xx body")
    assert run.check().valid


def test_replay_carrying_a_5xx_body_under_another_status_fails() -> None:
    run = Run()
    run.create("k1", "o1")
    run.order("o1", "k1")
    run.pay("o1", "pr1", "p1", "info", status=500, body_digest=digest("boom"))
    run.pay("o1", "pr1", "p1", "fail", status=409, body_digest=digest("boom"), replayed=True)
    result = run.check()
    assert failed(result) == {"replay_fidelity"}
    assert "stored and replayed" in result.invariant("replay_fidelity").violations[0].message


def test_replays_of_two_originals_after_a_record_expired_are_valid() -> None:
    run = Run()
    run.create("k1", "o1")
    first = run.pay("o1", "pr1", "p1", "ok", status=201, body_digest=digest("paid"))
    run.pay("o1", "pr1", "p1", "ok", replayed=True, status=201, body_digest=first["body_digest"])
    second = run.pay("o1", "pr1", "p1", "ok", status=200, body_digest=digest("already paid"))
    run.pay("o1", "pr1", "p1", "ok", replayed=True, status=200, body_digest=second["body_digest"])
    run.order("o1", "k1", "PAID")
    run.payment("o1", "pr1", "api", "p1")
    assert run.check().valid


def test_a_replay_read_before_its_different_original_fails() -> None:
    """The key's record is packed while it holds one answer; a different original
    arriving after the replay (another history file) unpacks it and is still compared."""
    run = Run()
    run.create("k1", "o1")
    run.pay("o1", "pr1", "p1", "ok", replayed=True, status=201, body_digest=digest("stale"))
    run.pay("o1", "pr1", "p1", "ok", status=201, body_digest=digest("paid"))
    run.order("o1", "k1", "PAID")
    run.payment("o1", "pr1", "api", "p1")
    result = run.check()
    assert failed(result) == {"replay_fidelity"}
    (violation,) = result.invariant("replay_fidelity").violations
    assert "differs from the original" in violation.message and violation.order_id == "o1"


def test_answers_of_a_create_and_a_pay_under_one_key_are_kept_apart() -> None:
    """One record per (tenant, key), but each operation's replays are compared with
    its own originals: a pay replayed under a create's key is not a create's replay."""
    run = Run()
    run.create("k1", "o1", status=201, body_digest=digest("created"))
    run.create("k1", "o1", replayed=True, status=201, body_digest=digest("created"))
    run.pay("o1", "pr1", "k1", "ok", replayed=True, status=201, body_digest=digest("paid"))
    run.order("o1", "k1", "PAID")
    run.payment("o1", "pr1", "api", "k1")
    result = run.check()
    assert result.invariant("replay_fidelity").passed, result.invariant("replay_fidelity").violations
    assert result.invariant("replay_fidelity").checked == 2  # (create, k1) and (pay, k1)


# -- inventory_conservation --------------------------------------------------------

def test_conserved_inventory_is_valid() -> None:
    run = Run()
    run.create("k1", "o1", quantity=3)
    run.order("o1", "k1", quantity=3)
    run.inventory("sku-1", 7, 10)
    assert run.check().valid


def test_inventory_that_does_not_add_up_fails() -> None:
    run = Run()
    run.create("k1", "o1", quantity=3)
    run.order("o1", "k1", quantity=3)
    run.inventory("sku-1", 8, 10)
    result = run.check()
    assert failed(result) == {"inventory_conservation"}
    assert result.invariant("inventory_conservation").violations[0].details == {
        "sku": "sku-1", "added_total": 10, "reserved": 3, "available": 8}


def test_oversold_inventory_fails_even_when_it_adds_up() -> None:
    run = Run()
    run.create("k1", "o1", quantity=3)
    run.order("o1", "k1", quantity=3)
    run.inventory("sku-1", -1, 2)
    assert "below zero" in run.check().invariant("inventory_conservation").violations[0].message


def test_orders_of_a_sku_without_inventory_fail() -> None:
    run = Run()
    run.create("k1", "o1", sku="sku-x")
    run.order("o1", "k1", sku="sku-x")
    run.inventory("sku-1", 10, 10)
    assert failed(run.check()) == {"inventory_conservation"}


# -- message_effects_once ----------------------------------------------------------

def test_redelivered_message_with_one_effect_is_valid() -> None:
    run = Run()
    run.create("k1", "o1")
    run.publish("o1", "pr1", "m1", expect="producer_duplicate")
    run.publish("o1", "pr1", "m1", expect="producer_duplicate")
    run.order("o1", "k1", "PAID")
    run.payment("o1", "pr1", "message", "m1")
    run.effect("m1", "o1", "pr1", "paid")
    result = run.check()
    assert result.valid, result.to_dict()
    assert result.invariant("message_effects_once").checked == 1
    assert result.duplicates == {"producer_duplicate": 2}


def test_message_with_two_effects_fails() -> None:
    run = Run()
    run.create("k1", "o1")
    run.publish("o1", "pr1", "m1")
    run.order("o1", "k1", "PAID")
    run.payment("o1", "pr1", "message", "m1")
    run.effect("m1", "o1", "pr1", "paid")
    run.effect("m1", "o1", "pr1", "already_paid")
    result = run.check()
    assert failed(result) == {"message_effects_once"}
    violation = result.invariant("message_effects_once").violations[0]
    assert violation.order_id == "o1"
    assert violation.details["outcomes"] == ["paid", "already_paid"]
    assert [op["op"] for op in violation.evidence["operations"]] == ["create_order", "publish"]


def test_message_handled_as_paid_counts_even_when_the_publish_was_indeterminate() -> None:
    run = Run()
    run.create("k1", "o1")
    run.publish("o1", "pr1", "m1", "info")
    run.order("o1", "k1")
    run.effect("m1", "o1", "pr1", "paid")
    result = run.check()
    assert failed(result) == {"no_lost_acknowledgement"}
    assert result.invariant("no_lost_acknowledgement").violations[0].details["acknowledged_by"] == [
        "message handled as paid"]


# -- the packed record per idempotency key ------------------------------------------

def test_a_keys_packed_record_holds_its_body_and_its_answer_code() -> None:
    """The fold packs a key's body (fingerprint hash << 2 | sent | answered ok) and, above
    it, (answer code << 1 | of a pay) << 2 | original or replayed; replay_fidelity and
    KeyRecord.unpack read those bits back, so the fold's arithmetic must build exactly them."""
    from harness.check.export import load_export
    from harness.check.invariants import (
        _ANSWER_SHIFT,
        _BODY_MASK,
        _MASK64,
        _ORIGINAL,
        _REPLAYED,
        Findings,
        HistoryIndex,
        answer_code,
    )
    from harness.history import as_records
    run = Run()
    created = run.create("k1", "o1", fingerprint="f1")
    paid = run.pay("o1", "pr1", "pk1", replayed=True, fingerprint="f2")
    refused = run.pay("o1", "pr1", "pk2", "fail", fingerprint="f3", body_digest=digest("refused"))
    index = HistoryIndex(load_export(run.export), Findings(50))
    index.consume_records(map(as_records, run.operations))
    assert index.keys["k1"] & _BODY_MASK == (hash("f1") & _MASK64) << 2 | 3
    assert index.keys["k1"] >> _ANSWER_SHIFT == answer_code(201, created["body_digest"]) << 3 | _ORIGINAL
    assert index.keys["pk1"] & _BODY_MASK == (hash("f2") & _MASK64) << 2 | 3
    assert index.keys["pk1"] >> _ANSWER_SHIFT == (answer_code(201, paid["body_digest"]) << 1 | 1) << 2 | _REPLAYED
    # a refused (4xx) answer is neither an original nor a replay: the body alone, not answered ok
    assert refused["status"] == 409
    assert index.keys["pk2"] == (hash("f3") & _MASK64) << 2 | 2
