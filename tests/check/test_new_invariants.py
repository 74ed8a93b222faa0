"""The invariants of issue 9 on hand-built histories: a passing and a failing case each."""

from __future__ import annotations

from checker_builders import Run, failed

from harness.check.invariants import KEY_MISMATCH


def answered_run() -> Run:
    """A created and paid order whose ok answers carry their summaries."""
    run = Run()
    run.create("k1", "o1", answered=True, fingerprint="fp-create")
    run.pay("o1", "pr1", "p1", answered=True, fingerprint="fp-pay")
    run.order("o1", "k1", "PAID")
    run.payment("o1", "pr1", "api", "p1")
    return run


# -- answers_match_requests ----------------------------------------------------------

def test_answers_that_repeat_the_request_pass() -> None:
    run = answered_run()
    run.webhook("o1", "pr1", "ev1", answered=True,
                answer=Run.paid_answer("o1", "pr1", already_paid=True))
    run.webhook("o1", "pr-bad", "ev2", "fail", expect="tampered_signature", must_reject=True,
                reject_status=401, problem_type="/problems/invalid-signature")
    result = run.check()
    assert result.verdict == "pass", result.to_dict()
    assert result.invariant("answers_match_requests").passed


def test_a_refusal_the_app_accepted_fails() -> None:
    run = answered_run()
    run.webhook("o1", "pr1", "ev-stale", answered=True, expect="stale_signature", must_reject=True,
                reject_status=401, answer=Run.paid_answer("o1", "pr1", already_paid=True))
    result = run.check()
    assert failed(result) == {"answers_match_requests"}
    violation = result.invariant("answers_match_requests").violations[0]
    assert "must be refused with 401" in violation.message
    assert violation.details["expect"] == "stale_signature"
    assert violation.evidence["operations"]


def test_a_conflicting_ref_accepted_by_an_unpaid_order_is_no_violation() -> None:
    # The first payment was lost in a fault, so the order was still payable: the
    # conflicting ref rightly paid it. Had it conflicted, two payments or a lost
    # acknowledgement would show.
    run = Run()
    run.create("k1", "o1", answered=True)
    run.webhook("o1", "pr1", "ev1", "info", error="ConnectTimeout")
    run.webhook("o1", "pr2", "ev2", answered=True, expect="conflicting_ref", must_reject=True,
                reject_status=409)
    run.order("o1", "k1", "PAID")
    run.payment("o1", "pr2", "webhook", "ev2")
    assert run.check().verdict == "pass"
    run.webhook("o1", "pr3", "ev3", answered=True, expect="conflicting_ref", must_reject=True,
                reject_status=409, answer=Run.paid_answer("o1", "pr2"))
    assert "no_lost_acknowledgement" in failed(run.check())


def test_a_create_answer_naming_another_quantity_fails() -> None:
    run = Run()
    run.create("k1", "o1", answered=True)
    # the same key with another body, answered with the first body's order (a replay)
    run.create("k1", "o1", quantity=2, replayed=True, expect="fingerprint_mismatch",
               answer={"order_id": "o1", "tenant": "default", "sku": "sku-1", "quantity": 1,
                       "amount_cents": 1000, "status": "INVENTORY_RESERVED",
                       "idempotency_key": "k1", "provider_ref": None})
    run.order("o1", "k1")
    result = run.check()
    assert failed(result) == {"answers_match_requests"}
    assert "quantity 1 instead of 2" in result.invariant("answers_match_requests").violations[0].message


def test_a_payment_answer_with_another_amount_or_ref_fails() -> None:
    run = answered_run()
    run.pay("o1", "pr2", "p2", answer=Run.paid_answer("o1", "pr1"))  # not already_paid, yet pr1
    run.pay("o1", "pr1", "p3", answer=Run.paid_answer("o1", "pr1", already_paid=True, amount_cents=5))
    result = run.check()
    assert "answers_match_requests" in failed(result)
    messages = [v.message for v in result.invariant("answers_match_requests").violations]
    assert any("provider_ref 'pr1' instead of 'pr2'" in message for message in messages)
    assert any("amount 5" in message for message in messages)


def test_an_honest_retry_refused_as_a_key_mismatch_fails() -> None:
    run = Run()
    run.create("k1", "o1", "fail", status=400, fingerprint="fp-full",
               problem_type="/problems/incomplete-body")  # a cut body: must not be stored
    run.create("k1", None, "fail", status=409, fingerprint="fp-full", problem_type=KEY_MISMATCH)
    result = run.check(min_acknowledged=0)
    assert failed(result) == {"answers_match_requests"}
    assert "no other body was ever sent under the key" in (
        result.invariant("answers_match_requests").violations[0].message)


def test_a_mismatch_refusal_of_another_body_passes() -> None:
    run = Run()
    run.create("k1", "o1", fingerprint="fp-1")
    run.create("k1", None, "fail", status=409, fingerprint="fp-2", problem_type=KEY_MISMATCH,
               expect="fingerprint_mismatch", must_reject=True, reject_status=409)
    run.order("o1", "k1")
    assert run.check().verdict == "pass"


def test_a_refusal_after_a_failed_first_request_and_another_body_is_not_judged() -> None:
    # The first request failed (nothing stored), another body took the key: the
    # original body's retry is rightly refused.
    run = Run()
    run.create("k1", None, "info", status=500, fingerprint="fp-1")
    run.create("k1", "o1", fingerprint="fp-2")
    run.create("k1", None, "fail", status=409, fingerprint="fp-1", problem_type=KEY_MISMATCH)
    run.order("o1", "k1")
    assert run.check().verdict == "pass"


def test_a_refusal_of_a_body_answered_ok_under_the_key_fails() -> None:
    run = Run()
    run.create("k1", None, "info", status=503, fingerprint="fp-2")
    run.create("k1", "o1", fingerprint="fp-1")
    run.create("k1", None, "fail", status=409, fingerprint="fp-2", problem_type=KEY_MISMATCH)
    run.create("k1", None, "fail", status=409, fingerprint="fp-1", problem_type=KEY_MISMATCH)
    run.order("o1", "k1")
    result = run.check()
    assert failed(result) == {"answers_match_requests"}
    (violation,) = result.invariant("answers_match_requests").violations
    assert "the same body was answered ok under the key" in violation.message
    assert violation.details["op_id"] == run.operations[-1]["op_id"]


def test_a_key_reused_across_endpoints_is_another_body() -> None:
    # The app keeps one record per (tenant, key) for every endpoint, and the path
    # is part of the fingerprint: a pay under a create's key is rightly refused.
    run = Run()
    run.create("k1", "o1", fingerprint="fp-create")
    run.pay("o1", "pr1", "k1", "fail", status=409, fingerprint="fp-pay", problem_type=KEY_MISMATCH)
    run.order("o1", "k1")
    assert run.check().verdict == "pass"


# -- payment_amount_matches_order ----------------------------------------------------

def test_payments_of_the_order_amount_pass() -> None:
    run = answered_run()
    assert run.check().invariant("payment_amount_matches_order").checked == 1


def test_a_payment_of_another_amount_fails() -> None:
    run = Run()
    run.create("k1", "o1")
    run.pay("o1", "pr1", "p1", "info", amount_cents=1, expect="wrong_amount")
    run.order("o1", "k1", "PAID")
    run.payment("o1", "pr1", "api", "p1", amount_cents=1)
    result = run.check()
    assert failed(result) == {"payment_amount_matches_order"}
    assert result.invariant("payment_amount_matches_order").violations[0].details == {
        "provider_ref": "pr1", "payment_amount_cents": 1, "order_amount_cents": 1000, "source": "api"}


# -- tenant_isolation ----------------------------------------------------------------

def test_a_shared_key_with_one_order_per_tenant_passes() -> None:
    run = Run()
    for tenant, order_id in (("a", "o1"), ("b", "o2")):
        run.create("shared-1", order_id, tenant=tenant, expect="shared_key", answered=True)
        run.order(order_id, "shared-1", tenant=tenant)
    run.read("o1", "fail", tenant="b", expect="cross_tenant_read", must_reject=True, reject_status=404)
    run.pay("o1", "pr1", "p-b", "fail", status=404, tenant="b", expect="cross_tenant_pay",
            must_reject=True, reject_status=404, problem_type="/problems/unknown-order")
    result = run.check(promised_paths=["tenant_refusal"])
    assert result.verdict == "pass", result.to_dict()
    assert result.paths["tenant_refusal"] == 2
    assert result.invariant("tenant_isolation").checked == 2


def test_a_shared_key_answered_with_another_tenants_order_fails() -> None:
    run = Run()
    run.create("shared-1", "o1", tenant="a", expect="shared_key", answered=True)
    # tenant b is replayed tenant a's stored answer
    run.create("shared-1", "o1", tenant="b", expect="shared_key", replayed=True,
               answer={"order_id": "o1", "tenant": "a", "sku": "sku-1", "quantity": 1,
                       "amount_cents": 1000, "status": "INVENTORY_RESERVED",
                       "idempotency_key": "shared-1", "provider_ref": None})
    run.order("o1", "shared-1", tenant="a")
    result = run.check()
    assert "tenant_isolation" in failed(result)
    messages = [v.message for v in result.invariant("tenant_isolation").violations]
    assert any("answer names tenant 'a'" in message for message in messages)
    assert any("creates of 2 tenants" in message for message in messages)


def test_a_cross_tenant_read_answered_ok_fails() -> None:
    run = Run()
    run.create("k1", "o1", tenant="a")
    run.order("o1", "k1", tenant="a")
    run.read("o1", tenant="b", answer_tenant="a", expect="cross_tenant_read", must_reject=True,
             reject_status=404)
    result = run.check()
    assert failed(result) == {"tenant_isolation"}
    assert "must be refused with 404" in result.invariant("tenant_isolation").violations[0].message


def test_a_pay_of_another_tenants_order_fails_even_without_an_expectation() -> None:
    run = Run()
    run.create("k1", "o1", tenant="a")
    run.pay("o1", "pr1", "p1", tenant="b", answer=Run.paid_answer("o1", "pr1", "b"))
    run.order("o1", "k1", "PAID", tenant="a")
    run.payment("o1", "pr1", "api", "p1")
    result = run.check()
    assert failed(result) == {"tenant_isolation"}
    assert "files it under tenant 'a'" in result.invariant("tenant_isolation").violations[0].message


# -- no_parked_payment ---------------------------------------------------------------

def test_dead_letters_that_park_nothing_pass_and_are_listed() -> None:
    run = answered_run()
    run.publish("o1", "pr1", "m1")
    run.effect("m1", "o1", "pr1", "already_paid")  # handled once, then parked on a redelivery
    run.dead_letter("m1", valid=True, order_id="o1", provider_ref="pr1")  # the order holds it
    run.dead_letter("junk", valid=False, reason="no message_id")
    run.dead_letter("m-old")  # an export without the new fields
    result = run.check()
    assert result.verdict == "pass", result.to_dict()
    assert result.invariant("no_parked_payment").checked == 1
    assert result.dead_letters.count == 3
    assert result.dead_letters.reasons == {"handler failed 5 times": 1, "no message_id": 1,
                                              "unknown": 1}
    assert [line["message_id"] for line in result.dead_letters.first] == ["m1", "junk", "m-old"]
    assert result.paths["dead_letter"] == 3


def test_an_acknowledged_payment_in_the_dead_letter_stream_is_lost() -> None:
    run = Run()
    run.create("k1", "o1")
    run.publish("o1", "pr1", "m1", "ok")
    run.order("o1", "k1")
    run.dead_letter("m1", valid=True, order_id="o1", provider_ref="pr1", reason="delivered 1 times")
    result = run.check()
    assert failed(result) == {"no_parked_payment"}
    violation = result.invariant("no_parked_payment").violations[0]
    assert violation.details["acknowledged"] is True
    assert "lost payment" in violation.message and "delivered 1 times" in violation.message
    assert [op["op"] for op in violation.evidence["operations"]][-1] == "publish"


def test_a_valid_message_parked_unhandled_fails_even_when_another_copy_paid_the_order() -> None:
    run = answered_run()  # pr1 is held (paid through the API)
    run.publish("o1", "pr1", "m1", "ok")
    run.dead_letter("m1", valid=True, order_id="o1", provider_ref="pr1", reason="delivered 2 times")
    result = run.check()
    assert failed(result) == {"no_parked_payment"}
    violation = result.invariant("no_parked_payment").violations[0]
    assert violation.details["handled"] is False and violation.details["held"] == ["pr1"]
    assert "without ever being handled" in violation.message


def test_a_parked_payment_whose_publish_was_indeterminate_is_reported_too() -> None:
    run = Run()
    run.create("k1", "o1")
    run.publish("o1", "pr1", "m1", "info")
    run.order("o1", "k1")
    run.dead_letter("m1", valid=True, order_id="o1", provider_ref="pr1")
    result = run.check()
    assert failed(result) == {"no_parked_payment"}
    assert result.invariant("no_parked_payment").violations[0].details["acknowledged"] is False


# -- final_reads_agree ---------------------------------------------------------------

def test_final_reads_that_agree_with_the_export_pass() -> None:
    run = answered_run()
    run.create("k2", "o2", tenant="t2")
    run.order("o2", "k2", tenant="t2")
    run.final_read("o1")
    run.final_read("o2", tenant="t2")
    run.final_read("o2", 404)  # read as the wrong tenant: rightly unknown
    run.final_read("o-never", 404)
    run.final_read("o1", 503)  # no answer: nothing to compare
    result = run.check()
    assert result.verdict == "pass", result.to_dict()
    assert result.invariant("final_reads_agree").checked == 5
    assert result.counts["final_reads"] == 5


def test_a_final_read_disagreeing_with_the_export_fails() -> None:
    run = answered_run()
    run.final_read("o1", status="INVENTORY_RESERVED", payments=[])
    result = run.check()
    assert failed(result) == {"final_reads_agree"}
    message = result.invariant("final_reads_agree").violations[0].message
    assert "status 'INVENTORY_RESERVED' vs 'PAID'" in message and "payments [] vs ['pr1']" in message


def test_an_order_readable_but_missing_from_the_export_fails() -> None:
    run = answered_run()
    run.final_read("o1")
    run.final_reads[0]["order_id"] = run.final_reads[0]["order"]["id"] = "o-hidden"
    result = run.check()
    assert failed(result) == {"final_reads_agree"}
    assert "does not hold it" in result.invariant("final_reads_agree").violations[0].message


def test_an_acknowledged_order_that_reads_404_and_is_not_exported_is_lost() -> None:
    run = Run()
    run.create("k1", "o1")
    run.final_read("o1", 404)
    result = run.check()
    assert failed(result) == {"one_order_per_key", "final_reads_agree"}
    assert "lost" in result.invariant("final_reads_agree").violations[0].message


def test_an_exported_order_that_reads_404_for_its_own_tenant_fails() -> None:
    run = answered_run()
    run.final_read("o1", 404)
    assert failed(run.check()) == {"final_reads_agree"}


def test_a_broken_order_in_the_export_fails() -> None:
    run = answered_run()
    run.broken_order("o-broken")
    result = run.check()
    assert failed(result) == {"final_reads_agree"}
    assert "broken" in result.invariant("final_reads_agree").violations[0].message
