"""The conformance table: the draft it cites, each row's section and BCP 14 level kept
visible, and the rows this issue added (refuse-uncorrected, publish-spec,
identity-scoped) judged from hand-built histories."""

from __future__ import annotations

from typing import Any

from harness.probe.checker import check
from harness.probe.config import parse_config
from harness.probe.conformance import DRAFT, REQUIREMENTS, conformance

ENDPOINT = {"name": "pay", "path": "/p", "body": {"a": "{int:1-9}"}, "id": {"pointer": "/id"}}
PLAIN = parse_config({"endpoints": [ENDPOINT]})
TWO = parse_config({"identities": [{"Authorization": "Bearer a"}, {"Authorization": "Bearer b"}],
                    "endpoints": [ENDPOINT]})


def op(key: str, kind: str = "first", type: str = "ok", *, status: int | None = None, rid: str | None = "r1",
       payload: str = "f1", identity: int | None = None) -> dict[str, Any]:
    return {"op": "create_order", "type": type, "endpoint": "pay", "idempotency_key": key, "expect": kind,
            "fingerprint": payload, "status": status or {"ok": 201, "fail": 422}[type], "identity": identity,
            "resource_id": rid if type == "ok" else None, "body_digest": f"d-{rid}"}


def rows(config: Any, ops: list[dict[str, Any]]) -> dict[str, Any]:
    result = check(ops, config, min_acknowledged=1)
    return {row.id: row for row in conformance(result, ops, requires_key=True, read_back=False)}


def test_the_table_names_its_draft_and_keeps_every_level_visible() -> None:
    assert DRAFT == "draft-ietf-httpapi-idempotency-key-header-06"
    levels = {req.id: req.level for req in REQUIREMENTS}
    assert {req.level for req in REQUIREMENTS} <= {"MUST", "SHOULD", "MAY", "recommended", "practice"}
    # -06: the status codes are SHOULDs; the MUSTs are the client's keys, the published
    # policy and that an uncorrected request is failed again.
    assert levels["missing-400"] == levels["mismatch-422"] == levels["inflight-409"] == "SHOULD"
    assert levels["key-unique"] == levels["publish-spec"] == levels["refuse-uncorrected"] == "MUST"
    assert (levels["fingerprint"], levels["identity-scoped"]) == ("MAY", "recommended")
    sections = {req.id: req.section for req in REQUIREMENTS}
    assert sections["enforce-once"] == "Idempotency Enforcement" and sections["missing-400"] == "Error Handling"
    assert sections["identity-scoped"] == "Security Considerations"


def test_an_uncorrected_request_must_be_failed_with_one_of_the_drafts_errors() -> None:
    base = [op("k", rid="r1"), op("k", "replay", rid="r1")]
    assert rows(PLAIN, [*base, op("k", "payload_mismatch", "fail", status=409, payload="f2")])[
        "refuse-uncorrected"].status == "pass"
    wrong = rows(PLAIN, [*base, op("k", "payload_mismatch", "fail", status=404, payload="f2")])["refuse-uncorrected"]
    assert wrong.status == "fail" and "404" in wrong.evidence
    executed = rows(PLAIN, [*base, op("k", "payload_mismatch", rid="r2", payload="f2")])["refuse-uncorrected"]
    assert executed.status == "fail"
    assert rows(PLAIN, base)["refuse-uncorrected"].status == "not observed"


def test_the_identity_row_needs_identities_and_follows_identities_isolated() -> None:
    plain = rows(PLAIN, [op("k"), op("k", "replay")])
    assert plain["identity-scoped"].status == "not checkable" and "identities:" in plain["identity-scoped"].evidence
    scoped = rows(TWO, [op("k", identity=0, rid="a"), op("k", "other_identity", identity=1, rid="b")])
    assert scoped["identity-scoped"].status == "pass"
    leaked = rows(TWO, [op("k", identity=0, rid="a"), op("k", "other_identity", identity=1, rid="a")])
    assert leaked["identity-scoped"].status == "fail" and "given to identities 0, 1" in leaked["identity-scoped"].evidence
    assert plain["publish-spec"].status == "not checkable"
