"""Paths, the pass / fail / inconclusive verdict and its round trip through result.json."""

from __future__ import annotations

import orjson
import pytest
from checker_builders import Run

from harness.check.checker import PATHS, CheckerError, CheckResult, check


def test_paths_count_the_app_counters_or_what_clients_saw_whichever_is_larger() -> None:
    run = Run()
    run.paid_order("o1", "pr1")
    run.pay("o1", "pr1", "p-o1", replayed=True, status=201,
            body_digest=run.operations[1]["body_digest"])
    run.pay("o1", "pr1", "p-x", answer=Run.paid_answer("o1", "pr1", already_paid=True))
    run.webhook("o1", "pr9", "ev1", "fail", problem_type="/problems/invalid-signature")
    run.pay("o1", "pr9", "p-9", "fail", status=409, problem_type="/problems/payment-conflict")
    run.counters(api_replays=0, domain_conflicts=4, api_recovered=2, inbox_duplicates_skipped=1,
                 messages_reclaimed=3, api_incomplete_bodies=1, tenant_refusals=5)
    paths = run.check().paths
    assert list(paths) == list(PATHS)
    assert paths == {"replay": 1, "fingerprint_refusal": 0, "inflight_refusal": 0, "recovery_point": 2,
                     "incomplete_body": 1, "already_paid": 1, "conflict": 4, "amount_refusal": 0,
                     "signature_refusal": 1, "tenant_refusal": 5, "inbox_skip": 1, "reclaim": 3,
                     "dead_letter": 0}


def test_the_catalog_names_the_paths_the_checker_counts() -> None:
    from harness.catalog import PATHS as CATALOG_PATHS
    from harness.catalog import SCENARIO_PROMISES
    assert tuple(PATHS) == CATALOG_PATHS
    assert {path for promised in SCENARIO_PROMISES.values() for path in promised} <= set(PATHS)


def test_a_promised_path_never_taken_makes_the_run_inconclusive() -> None:
    run = Run()
    run.paid_order("o1", "pr1")
    run.counters(api_replays=2)
    result = run.check(promised_paths=["replay", "recovery_point", "inbox_skip"])
    assert result.failed == []
    assert result.verdict == "inconclusive" and result.valid is False
    assert result.inconclusive_reasons == ["promised path recovery_point was exercised 0 times",
                                           "promised path inbox_skip was exercised 0 times"]
    assert run.check(promised_paths=["replay"]).verdict == "pass"


def test_too_few_acknowledged_operations_make_the_run_inconclusive() -> None:
    run = Run()
    run.create("k1", "o1", "info")
    run.pay("o1", "pr1", "p1", "info")
    result = run.check()
    assert result.failed == [] and result.counts["acknowledged"] == 0
    assert result.verdict == "inconclusive"
    run.create("k2", "o2")
    run.order("o2", "k2")
    assert run.check().verdict == "pass"
    result = run.check(min_acknowledged=2)
    assert result.verdict == "inconclusive"
    assert result.inconclusive_reasons == ["1 operation(s) were acknowledged (ok), fewer than the 2 required"]


def test_a_failed_invariant_is_fail_whatever_was_promised() -> None:
    run = Run()
    run.create("k1", "o1")
    run.pay("o1", "pr1", "p1")
    run.order("o1", "k1")  # the acknowledged payment is lost
    result = run.check(promised_paths=["reclaim"])
    assert result.verdict == "fail" and not result.valid
    # still listed: the report shows that the promise was not kept either
    assert result.inconclusive_reasons == ["promised path reclaim was exercised 0 times"]


def test_an_unknown_promised_path_is_a_harness_error() -> None:
    with pytest.raises(CheckerError, match="unknown promised path"):
        check([], [], promised_paths=["replays"])


def test_the_new_fields_round_trip_and_old_results_still_load() -> None:
    run = Run()
    run.paid_order("o1", "pr1")
    run.dead_letter("m1", valid=False, reason="no message_id")
    result = run.check(promised_paths=["inbox_skip"], min_acknowledged=1)
    data = orjson.loads(orjson.dumps(result.to_dict()))
    assert data["verdict"] == "inconclusive" and data["promised_paths"] == ["inbox_skip"]
    assert data["dead_letters"]["reasons"] == {"no message_id": 1}
    again = CheckResult.from_dict(data)
    assert again == result and again.to_dict() == data
    old = {key: value for key, value in data.items()
           if key not in {"verdict", "inconclusive_reasons", "paths", "promised_paths",
                          "min_acknowledged", "dead_letters"}}
    assert CheckResult.from_dict({**old, "valid": True}).verdict == "pass"
    assert CheckResult.from_dict({**old, "valid": False}).verdict == "fail"
