"""The conformance table: each requirement of the IETF HTTPAPI draft "The
Idempotency-Key HTTP Header Field" (draft-ietf-httpapi-idempotency-key-header-06),
checked against one probe's history, with the evidence.

A row's `status` is `pass`, `fail`, `not observed` (the run produced no request
that tests it) or `not checkable` (a client cannot see it: it concerns the client's
own duties or the server's documentation). The draft's codes are judged here as the
draft states them, whatever profile the run used: a service that answers a payload
mismatch with 409 on purpose fails that row and may still pass every invariant.
The requirements are paraphrased; the section names and the levels (BCP 14 keywords)
are those of -06's text: nearly every status-code rule is a SHOULD, the MUSTs are
the client's unique keys, the resource's published policy and that an uncorrected
request is failed again. Its Security Considerations recommend (no keyword) a cache
key composed of the key and client-specific attributes: judged by
`identities_isolated` when the config has `identities:`.

The latest revision is draft-ietf-httpapi-idempotency-key-header-09 (2026-11-21); its
text was not available to this project when the table was last revised, so the table
still cites -06, whose text it was checked against.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from harness.probe.checker import ProbeCheck

DRAFT = "draft-ietf-httpapi-idempotency-key-header-06"


@dataclass(frozen=True)
class Requirement:
    id: str
    section: str
    level: str  # MUST | SHOULD | MAY | recommended (no keyword) | practice (not in the draft)
    text: str


@dataclass(frozen=True)
class ConformanceRow:
    id: str
    section: str
    level: str
    requirement: str
    status: str  # pass | fail | not observed | not checkable
    evidence: str


REQUIREMENTS: tuple[Requirement, ...] = (
    Requirement("enforce-once", "Idempotency Enforcement", "SHOULD",
                "a retry of a completed request is not executed again: it gets the stored result "
                "(one resource per key)"),
    Requirement("replay-same", "Idempotency Enforcement", "SHOULD",
                "every retry with the same key and payload gets the same response (status and body)"),
    Requirement("fingerprint", "Idempotency Fingerprint", "MAY",
                "the key is bound to its request payload: a reuse with another payload is not executed"),
    Requirement("refuse-uncorrected", "Error Handling", "MUST",
                "a request that repeats an error without correcting it (here: a key reused with "
                "another payload) is failed with one of the draft's errors, never executed"),
    Requirement("missing-400", "Error Handling", "SHOULD",
                "a request without the key on an endpoint that requires it is answered 400"),
    Requirement("mismatch-422", "Error Handling", "SHOULD",
                "a key reused with a different payload is answered 422"),
    Requirement("inflight-409", "Error Handling", "SHOULD",
                "a retry while the original request is still being processed is answered 409"),
    Requirement("error-doc", "Error Handling", "SHOULD",
                "error answers describe the problem with a link to documentation "
                "(the draft's examples use problem details, application/problem+json)"),
    Requirement("key-unique", "Uniqueness of Idempotency Key", "MUST",
                "the client generates a unique key per distinct request (the client's duty)"),
    Requirement("expiry", "Idempotency Key Validity and Expiry", "SHOULD",
                "the server documents how long a key is kept (the server's documentation)"),
    Requirement("publish-spec", "Responsibilities", "MUST",
                "the resource publishes its idempotency specification, with its expiry policy"),
    Requirement("identity-scoped", "Security Considerations", "recommended",
                "the stored answer is looked up by a composite key: the idempotency key with the "
                "client's identity, so one client never gets another's stored result"),
    Requirement("no-5xx-replay", "practice", "practice",
                "a 5xx answer is not stored and replayed: the retry runs again"),
    Requirement("read-back", "practice", "practice",
                "every acknowledged resource can be read back afterwards"),
)


def conformance(check: ProbeCheck, operations: Iterable[Mapping[str, Any]], *,
                requires_key: bool, read_back: bool) -> list[ConformanceRow]:
    """One row per requirement, judged from the check's invariants and the history."""
    ops = [op for op in operations if op.get("op") == "create_order"]
    by_name = {inv.name: inv for inv in check.invariants}
    refusals = [op for op in ops if op.get("type") == "fail"]

    def statuses(kind: str, *, completion: str | None = None) -> Counter[Any]:
        return Counter(op.get("status") for op in ops if op.get("expect") == kind
                       and op.get("type") != "info" and (completion is None or op.get("type") == completion))

    rows = []
    for req in REQUIREMENTS:
        status, evidence = _judge(req.id, check, by_name, ops, refusals, statuses,
                                  requires_key=requires_key, read_back=read_back)
        rows.append(ConformanceRow(req.id, req.section, req.level, req.text, status, evidence))
    return rows


def rows_to_dicts(rows: Iterable[ConformanceRow]) -> list[dict[str, Any]]:
    return [asdict(row) for row in rows]


def _seen(counter: Counter[Any]) -> str:
    return ", ".join(f"{status}×{count}" for status, count in sorted(counter.items(), key=lambda kv: str(kv[0])))


def _invariant(by_name: Mapping[str, Any], name: str) -> tuple[str, str]:
    inv = by_name[name]
    if inv.checked == 0:
        return "not observed", f"{name}: nothing to check"
    if inv.passed:
        return "pass", f"{name}: {inv.checked} checked, none violated"
    first = inv.violations[0]["message"] if inv.violations else ""
    return "fail", f"{name}: {inv.violation_count} violation(s), e.g. {first}"


def _judge(rid: str, check: ProbeCheck, by_name: Mapping[str, Any], ops: list[Mapping[str, Any]],
           refusals: list[Mapping[str, Any]], statuses: Any, *, requires_key: bool,
           read_back: bool) -> tuple[str, str]:
    if rid == "enforce-once":
        return _invariant(by_name, "one_resource_per_key")
    if rid == "replay-same":
        return _invariant(by_name, "replay_fidelity")
    if rid == "fingerprint":
        return _invariant(by_name, "payload_mismatch_refused")
    if rid == "refuse-uncorrected":
        status, evidence = _invariant(by_name, "payload_mismatch_refused")
        seen = statuses("payload_mismatch", completion="fail")
        wrong = {code for code in seen if code not in (400, 409, 422)}
        if status == "pass" and wrong:
            return "fail", f"reuses with another payload refused with {_seen(seen)} (not 400, 409 or 422)"
        return status, evidence
    if rid == "publish-spec":
        return "not checkable", "a client cannot see the server's documentation"
    if rid == "identity-scoped":
        if "identities_isolated" not in by_name:
            return "not checkable", "the config gives one identity (add `identities:` to check it)"
        return _invariant(by_name, "identities_isolated")
    if rid == "missing-400":
        if not requires_key:
            return "not checkable", "the config says no endpoint requires the key"
        seen = statuses("missing_key")
        if not seen:
            return "not observed", "no request without a key got a determinate answer"
        return ("pass" if set(seen) == {400} else "fail"), f"requests without a key answered {_seen(seen)}"
    if rid == "mismatch-422":
        seen = statuses("payload_mismatch")
        if not seen:
            return "not observed", "no reuse with another payload got a determinate answer"
        return ("pass" if set(seen) == {422} else "fail"), f"reuses with another payload answered {_seen(seen)}"
    if rid == "inflight-409":
        concurrent = [op for op in ops if op.get("expect") in ("double_click", "retry_after_inflight")
                      and op.get("type") != "info"]
        if not concurrent:
            return "not observed", "no concurrent duplicate got a determinate answer"
        refused = Counter(op.get("status") for op in concurrent if op.get("type") == "fail")
        waited = sum(1 for op in concurrent if op.get("type") == "ok")
        evidence = f"concurrent duplicates: {waited} answered 2xx, refused {_seen(refused) or 'never'}"
        if not refused:
            return "not observed", evidence + " (none was refused: the server waited or serialized them)"
        return ("pass" if set(refused) == {409} else "fail"), evidence
    if rid == "error-doc":
        if not refusals:
            return "not observed", "no request was refused"
        documented = sum(1 for op in refusals
                         if str(op.get("content_type") or "").split(";")[0].strip().lower()
                         == "application/problem+json")
        evidence = f"{documented} of {len(refusals)} refusals were application/problem+json"
        return ("pass" if documented == len(refusals) else "fail"), evidence
    if rid == "key-unique":
        return "not checkable", "the probe itself sends a fresh key per logical request"
    if rid == "expiry":
        return "not checkable", "a client cannot see the server's documentation or its clock"
    if rid == "no-5xx-replay":
        replayed = [op for op in ops if op.get("replayed") and isinstance(op.get("status"), int)
                    and op["status"] >= 500]
        errors = [op for op in ops if isinstance(op.get("status"), int) and op["status"] >= 500]
        if replayed:
            return "fail", f"{len(replayed)} 5xx answers were marked as replays"
        unmarked = [v for v in by_name["replay_fidelity"].violations if "without a replay mark" in v["message"]]
        if unmarked:
            return "fail", f"a 5xx was replayed without a mark, e.g. {unmarked[0]['message']}"
        if not errors:
            return "not observed", "the service answered no 5xx"
        return "pass", f"{len(errors)} 5xx answers, none marked as a replay"
    if rid == "read-back":
        if not read_back:
            return "not checkable", "the config gives no read-back URL (endpoints[].read or .search)"
        return _invariant(by_name, "acknowledged_not_lost")
    raise KeyError(rid)
