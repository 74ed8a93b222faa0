"""The probe's black-box checker and conformance table on hand-built histories:
each invariant with a passing and a failing case, Jepsen's rule for `info`, and
the inconclusive verdict."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from harness.probe.checker import EFFECT_INVARIANTS, IDENTITY_INVARIANTS, INVARIANTS, check
from harness.probe.config import parse_config
from harness.probe.conformance import REQUIREMENTS, conformance

CONFIG = parse_config({"endpoints": [{"name": "pay", "path": "/p", "body": {"a": "{int:1-9}"},
                                      "id": {"pointer": "/id"}, "read": {"path": "/p/{id}"},
                                      "search": {"path": "/p?k={key}", "items": "/items"}}]})
PROBLEM = "application/problem+json"


class History:
    def __init__(self) -> None:
        self.ops: list[dict[str, Any]] = []
        self.reads: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    def send(self, key: str | None, kind: str = "first", type: str = "ok", *, status: int | None = None,
             rid: str | None = None, payload: str = "p1", digest: str | None = None, **fields: Any) -> None:
        status = status if status is not None else {"ok": 201, "fail": 409, "info": None}[type]
        self.ops.append({"op": "create_order", "op_id": f"o{next(self._ids)}", "type": type, "endpoint": "pay",
                         "idempotency_key": key, "expect": kind, "fingerprint": payload, "status": status,
                         "resource_id": rid if type == "ok" else None,
                         "body_digest": digest or (f"body-{rid}" if type == "ok" else "err"),
                         "content_type": "application/json" if type == "ok" else PROBLEM, **fields})

    def created(self, key: str, rid: str, *, duplicates: int = 1) -> None:
        """A key created once and replayed faithfully `duplicates` times."""
        self.send(key, "first", rid=rid)
        for _ in range(duplicates):
            self.send(key, "replay", rid=rid)

    def read(self, rid: str, status: int = 200, *, key: str = "k") -> None:
        self.reads.append({"op": "read_order", "type": "ok" if status < 300 else "fail", "endpoint": "pay",
                           "read": "by_id", "resource_id": rid, "idempotency_key": key, "status": status})

    def search(self, key: str, found: list[str]) -> None:
        self.reads.append({"op": "read_order", "type": "ok", "endpoint": "pay", "read": "by_key",
                           "idempotency_key": key, "status": 200, "found": found})

    def check(self, **kwargs: Any):
        return check(self.ops, CONFIG, reads=self.reads, min_acknowledged=kwargs.pop("min_acknowledged", 1),
                     **kwargs)


def failed(result) -> set[str]:
    return {inv.name for inv in result.invariants if not inv.passed}


def good_history() -> History:
    history = History()
    for n in range(5):
        history.created(f"k{n}", f"r{n}")
        history.read(f"r{n}", key=f"k{n}")
        history.search(f"k{n}", [f"r{n}"])
    # A double click: the twin is refused while the first is in flight, retries, and
    # gets the stored answer.
    history.send("kd", "double_click", rid="rd")
    history.send("kd", "double_click", "fail", status=409)
    history.send("kd", "retry_after_inflight", rid="rd")
    history.send("k0", "payload_mismatch", "fail", status=422, payload="p2")
    history.send(None, "missing_key", "fail", status=400)
    # An impatient client: the answer is lost (info), the retry gets the result.
    history.send("ki", "first", "info")
    history.send("ki", "retry_after_timeout", rid="ri")
    return history


def test_a_correct_history_passes_every_invariant() -> None:
    result = good_history().check()
    assert result.verdict == "pass", result.violations
    # Without identities: or effects: in the config, the run judges the seven answer invariants.
    assert {inv.name for inv in result.invariants} == set(INVARIANTS) - {*IDENTITY_INVARIANTS, *EFFECT_INVARIANTS}
    assert all(inv.checked > 0 for inv in result.invariants), [(i.name, i.checked) for i in result.invariants]
    assert result.counts["duplicated_keys"] == 7


def test_two_resources_for_one_key_is_caught() -> None:
    history = good_history()
    history.send("kr", "double_click", rid="r-a")
    history.send("kr", "double_click", rid="r-b", digest="body-r-b")
    result = history.check()
    assert "one_resource_per_key" in failed(result) and result.verdict == "fail"
    violation = next(v for v in result.violations if v["invariant"] == "one_resource_per_key")
    assert violation["evidence"]["resource_ids"] == ["r-a", "r-b"]


def test_a_search_that_finds_two_resources_is_caught() -> None:
    history = good_history()
    history.search("ki", ["ri", "ri-2"])
    assert failed(history.check()) == {"one_resource_per_key"}


def test_a_search_that_lists_one_resource_twice_is_one_resource_reported_as_advice() -> None:
    # A store whose client re-sent a transaction: one charge, its id pushed twice to the key's index.
    history = good_history()
    history.search("ki", ["ri", "ri"])
    result = history.check()
    assert result.verdict == "pass", result.violations
    assert result.counts["searches_listing_a_resource_twice"] == [
        {"endpoint": "pay", "key": "ki", "resource": "ri", "listed": 2}]
    [advice] = [a for a in result.advice if a.rule == "search-lists-once"]
    assert "listed ri 2 times" in advice.message


def test_a_search_with_a_repeated_and_a_second_resource_names_each_once() -> None:
    history = good_history()
    history.search("ki", ["ri", "ri", "ri-2"])
    result = history.check()
    assert failed(result) == {"one_resource_per_key"}
    violation = next(v for v in result.violations if v["invariant"] == "one_resource_per_key")
    assert violation["message"].endswith("found 2 resources: ri, ri-2"), violation["message"]


def test_an_unfaithful_replay_is_caught() -> None:
    history = good_history()
    history.send("k1", "replay", rid="r1", digest="another body")
    assert failed(history.check()) == {"replay_fidelity"}


def test_a_refused_replay_of_a_completed_request_is_caught() -> None:
    history = good_history()
    history.send("k1", "replay", "fail", status=409)
    assert failed(history.check()) == {"replay_fidelity"}


def test_a_replayed_5xx_is_caught() -> None:
    history = good_history()
    history.send("k2", "replay", "info", status=503, replayed=True)
    assert failed(history.check()) == {"replay_fidelity"}


@pytest.mark.parametrize("rid", ["r0", "r-new"])
def test_an_accepted_payload_mismatch_is_caught(rid: str) -> None:
    history = good_history()
    history.send("k0", "payload_mismatch", rid=rid, payload="p3")
    assert "payload_mismatch_refused" in failed(history.check())


WRITTEN = parse_config({"endpoints": [{**CONFIG.to_dict()["endpoints"][0],
                                       "expect": {"missing_key": 400, "payload_mismatch": 422}}]})


def test_a_mismatch_refused_with_another_draft_error_than_the_profiles_is_advice() -> None:
    history = good_history()
    history.send("k1", "payload_mismatch", "fail", status=409, payload="p2")
    result = history.check()
    assert failed(result) == set() and result.verdict == "pass"
    (advice,) = result.advice
    assert (advice.rule, advice.level) == ("mismatch-422", "SHOULD")
    assert "409×1" in advice.message and "code is 422" in advice.message


def test_a_missing_key_refused_with_422_is_advice_unless_the_config_writes_400() -> None:
    history = good_history()
    history.send(None, "missing_key", "fail", status=422)
    result = history.check()
    assert result.verdict == "pass" and [a.rule for a in result.advice] == ["missing-400"]
    written = check(history.ops, WRITTEN, reads=history.reads, min_acknowledged=1)
    assert failed(written) == {"expected_codes"} and written.advice == []
    assert "expected 400 (written in expect.missing_key)" in written.violations[0]["message"]


def test_a_code_the_config_writes_is_the_users_contract() -> None:
    history = good_history()
    history.send("k1", "payload_mismatch", "fail", status=409, payload="p2")
    result = check(history.ops, WRITTEN, reads=history.reads, min_acknowledged=1)
    assert failed(result) == {"expected_codes"}
    assert "expected 422" in result.violations[0]["message"]


def test_a_mismatch_refused_with_no_error_of_the_draft_breaks_its_must() -> None:
    history = good_history()
    history.send("k1", "payload_mismatch", "fail", status=403, payload="p2")
    result = history.check()
    assert failed(result) == {"expected_codes"} and result.advice == []
    assert "not one of the draft's errors" in result.violations[0]["message"]


def test_a_concurrent_duplicate_refused_with_another_4xx_is_caught() -> None:
    history = good_history()
    history.send("k3", "double_click", "fail", status=400)
    assert failed(history.check()) == {"in_flight_refused_or_waited"}


def test_an_accepted_request_without_key_is_caught() -> None:
    history = good_history()
    history.send(None, "missing_key", rid="r-free")
    assert failed(history.check()) == {"missing_key_refused"}


def test_a_resource_missing_from_the_final_reads_is_caught() -> None:
    history = good_history()
    history.read("r3", 404, key="k3")
    assert failed(history.check()) == {"acknowledged_not_lost"}
    history = good_history()
    history.search("kd", [])
    assert failed(history.check()) == {"acknowledged_not_lost"}


def test_indeterminate_operations_prove_nothing_either_way() -> None:
    history = good_history()
    # A lost answer may have created a resource: no violation, even with a status.
    history.send("k4", "retry_after_timeout", "info", status=502)
    history.send("k0", "payload_mismatch", "info", payload="p9")
    history.reads.append({"op": "read_order", "type": "info", "endpoint": "pay", "read": "by_id",
                          "resource_id": "r1", "status": None})
    assert history.check().verdict == "pass"


def test_too_little_evidence_is_inconclusive() -> None:
    history = History()
    history.send("k", "first", rid="r")
    result = history.check(min_acknowledged=10)
    assert result.verdict == "inconclusive"
    assert any("acknowledged" in reason for reason in result.inconclusive_reasons)
    assert any("no duplicate" in reason for reason in result.inconclusive_reasons)
    history = good_history()
    for op in history.ops:
        op["resource_id"] = None
    assert any("resource id" in r for r in history.check().inconclusive_reasons)


def test_conformance_rows_cover_the_draft_with_evidence() -> None:
    history = good_history()
    result = history.check()
    rows = {row.id: row for row in conformance(result, history.ops, requires_key=True, read_back=True)}
    assert set(rows) == {req.id for req in REQUIREMENTS}
    assert rows["mismatch-422"].status == "pass" and "422×1" in rows["mismatch-422"].evidence
    assert rows["inflight-409"].status == "pass" and rows["missing-400"].status == "pass"
    assert rows["error-doc"].status == "pass"
    assert rows["key-unique"].status == "not checkable" and rows["no-5xx-replay"].status == "not observed"
    # A service that answers a mismatch with 409 fails the draft's row, whatever its profile.
    history.send("k1", "payload_mismatch", "fail", status=409, payload="p2", content_type="application/json")
    rows = {row.id: row for row in conformance(history.check(), history.ops, requires_key=True,
                                               read_back=False)}
    assert rows["mismatch-422"].status == "fail" and "409×1" in rows["mismatch-422"].evidence
    assert rows["error-doc"].status == "fail" and rows["read-back"].status == "not checkable"


def test_the_report_escapes_what_the_service_sent() -> None:
    from harness.probe.report import render_report

    history = good_history()
    history.send("k1", "replay", rid="r1", digest="other", evidence="<script>alert(1)</script>")
    result = history.check()
    rows = conformance(result, history.ops, requires_key=True, read_back=True)
    document = {"upstream": "127.0.0.1:1", "run_id": "r", "started": 0.0, "draft": "d",
                "endpoints": [{"method": "POST", "path": "/p"}], "faults": [],
                "conformance": [row.__dict__ for row in rows], **result.to_dict()}
    html = render_report(document)
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    assert "FAIL" in html and "replay_fidelity" in html and "Error Handling" in html
