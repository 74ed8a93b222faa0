"""The probe's black-box checker: invariants from the clients' history and final reads.

It sees only what a client sees: statuses, answers, the resource ids answers name,
and (when the config gives read-back URLs) what the service says after the load.
Jepsen's rules hold: an `info` operation (timeout, reset, 5xx) may or may not have
taken effect, so it never counts as a success nor as a refusal.

Invariants (each with its evidence when violated):
- `one_resource_per_key`: every 2xx answer for one key names the same resource, and
  a search by key (when configured) finds at most one resource (distinct ids: one
  resource the search lists twice is one resource, reported as advice
  `search-lists-once`, never as two).
- `replay_fidelity`: every 2xx answer to one key and one payload has the same status
  and the same body (canonical JSON); a retry sent after the client saw the request
  succeed is not refused; an answer marked as a replay is never a 5xx, and neither
  is an unmarked one (harness.probe.replays: the first failure's 5xx repeated byte
  for byte while the service was demonstrably well).
- `payload_mismatch_refused`: a key reused with another payload is never accepted.
- `in_flight_refused_or_waited`: a concurrent duplicate is either answered with the
  first request's result or refused with the in-flight status, never another 4xx.
- `missing_key_refused`: a request without the key, on an endpoint that requires
  one, is refused.
- `acknowledged_not_lost`: every resource a 2xx answer named is found by the final
  read (and a search by key finds it).
- `expected_codes`: each misuse is refused with the status the config's `expect:`
  writes (the user's contract), and a key reused with another payload with one of
  the draft's errors (400, 409, 422: its MUST). A status the config leaves to its
  profile (the draft's SHOULD) is judged as advice: a misuse answered otherwise is
  an `Advice` on the check (rule `missing-400` or `mismatch-422`, level SHOULD), and
  a failure only in a strict run (harness.probe.levels).

With `identities:` (harness.probe.identities), answers are grouped per key *and*
identity (a key is the client's, not the service's), and:
- `identities_isolated`: no 2xx answer, replay or read-back gives one identity what
  another identity created.

With `effects:` on an endpoint (the oracles, harness.probe.effect_checks), the
service's own count of effects is judged, not only the answers:
- `one_effect_per_key`: at most one effect per key and identity;
- `acknowledged_effect_present`: every acknowledged request's effect is there;
- `refused_no_effect`: a request that must be refused (another payload under a used
  key, no key where one is required) left no effect.
These invariants appear in a run only when the config has what they judge.

A run that acknowledged fewer than `min_acknowledged` creates, exercised no
duplicate at all, or whose 2xx answers never carried an id where the config looks,
is inconclusive: nothing failed, but it proved too little.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.probe.config import PROFILES, Endpoint, ProbeConfig
from harness.probe.effect_checks import EffectRecord, check_effects
from harness.probe.identities import check_isolation
from harness.probe.replays import check_stuck_keys, check_unmarked_replays, held_until

MAX_EVIDENCE = 25
DEFAULT_MIN_ACKNOWLEDGED = 10
INVARIANTS: dict[str, str] = {
    "one_resource_per_key": "every 2xx answer for a key names one resource; a search by key finds at most one",
    "replay_fidelity": "every 2xx answer to one key and payload has the same status and body; no 5xx is replayed",
    "payload_mismatch_refused": "a key reused with another payload is refused, never executed nor replayed",
    "in_flight_refused_or_waited": "a concurrent duplicate gets the first request's result or the in-flight refusal",
    "missing_key_refused": "a request without the key is refused where the endpoint requires one",
    "acknowledged_not_lost": "every resource a 2xx answer named is found by the final reads",
    "expected_codes": "each misuse is refused with the status the config expects",
    "identities_isolated": "no 2xx answer, replay or read-back gives one identity what another identity created",
    "one_effect_per_key": "the service holds at most one effect per key and identity (oracle)",
    "acknowledged_effect_present": "every acknowledged request's effect is in the service (oracle)",
    "refused_no_effect": "a request that must be refused (payload mismatch, missing key) left no effect (oracle)",
}
IDENTITY_INVARIANTS = ("identities_isolated",)
EFFECT_INVARIANTS = ("one_effect_per_key", "acknowledged_effect_present", "refused_no_effect")
# A key reused with another payload is "failed" by the draft's MUST with one of its errors.
DRAFT_MISMATCH_ERRORS = (400, 409, 422)
# The conformance row that states each misuse's code, and the draft's code for it.
CODE_ROWS = {"missing_key": "missing-400", "payload_mismatch": "mismatch-422"}
DRAFT_CODES = PROFILES["ietf"]
DUPLICATE_KINDS = ("double_click", "retry_after_timeout", "retry_after_inflight", "replay")


@dataclass
class InvariantResult:
    name: str
    description: str
    passed: bool = True
    checked: int = 0
    violation_count: int = 0
    violations: list[dict[str, Any]] = field(default_factory=list)

    def violate(self, message: str, **evidence: Any) -> None:
        self.passed = False
        self.violation_count += 1
        if len(self.violations) < MAX_EVIDENCE:
            self.violations.append({"message": message, "evidence": evidence})


@dataclass(frozen=True)
class Advice:
    """A practice the service does not follow that neither money nor a client's retry
    depends on (a SHOULD of the draft, a provider's recommendation): reported on the
    summary line, in result.json, report.html and junit.xml, never a failure unless the
    run is strict."""

    rule: str  # the conformance row or invariant it comes from, e.g. "missing-400"
    level: str  # the row's level: SHOULD, practice, provider docs, ...
    message: str  # what was seen, with a count or an example


@dataclass
class ProbeCheck:
    """What the checker found; `to_dict` is result.json's core."""

    invariants: list[InvariantResult]
    counts: dict[str, Any]
    verdict: str  # pass | fail | inconclusive
    inconclusive_reasons: list[str]
    advice: list[Advice] = field(default_factory=list)

    @property
    def violations(self) -> list[dict[str, Any]]:
        return [{"invariant": inv.name, **violation} for inv in self.invariants for violation in inv.violations]

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "valid": self.verdict == "pass",
                "inconclusive_reasons": list(self.inconclusive_reasons),
                "advice": [asdict(advice) for advice in self.advice], "counts": self.counts,
                "invariants": [asdict(inv) for inv in self.invariants]}


def verdict_of(invariants: Sequence[InvariantResult], reasons: Sequence[str]) -> str:
    """The probe's one rule: `fail` when an invariant was violated, else `inconclusive`
    when the run proved too little (a reason, or nothing judged at all), else `pass`.
    Advice never enters it: it is what a service may improve, not what it broke."""
    if any(not inv.passed for inv in invariants):
        return "fail"
    if reasons or not invariants:
        return "inconclusive"
    return "pass"


def _evidence(op: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of one operation a reader needs to see what happened."""
    keys = ("op_id", "process", "expect", "endpoint", "idempotency_key", "identity", "fingerprint", "type",
            "status",
            "resource_id", "replayed", "error", "evidence", "invoke_time", "complete_time")
    return {key: op.get(key) for key in keys if op.get(key) is not None}


def check(operations: Iterable[Mapping[str, Any]], config: ProbeConfig, *,
          reads: Sequence[Mapping[str, Any]] = (),
          min_acknowledged: int = DEFAULT_MIN_ACKNOWLEDGED,
          effects: Sequence[EffectRecord] = (), faults: Sequence[Mapping[str, Any]] = ()) -> ProbeCheck:
    """Judge a probe's history (`create_order` operations), its final reads and the
    oracles' effects."""
    endpoints = {endpoint.name: endpoint for endpoint in config.endpoints}
    skipped = (() if config.identities else IDENTITY_INVARIANTS) + (
        () if any(e.effects for e in config.endpoints) else EFFECT_INVARIANTS)
    results = {name: InvariantResult(name, description) for name, description in INVARIANTS.items()
               if name not in skipped}
    # Per key and identity: one key of two clients is two keys to a correct service.
    by_key: dict[tuple[str, str, Any], list[Mapping[str, Any]]] = defaultdict(list)
    # (endpoint, misuse) -> the statuses a profile's code did not get: advice, not failures.
    unexpected: dict[tuple[str, str], Counter[Any]] = defaultdict(Counter)
    judged: list[Mapping[str, Any]] = []
    kinds: Counter[str] = Counter()
    completions: Counter[str] = Counter()
    statuses: dict[str, Counter[str]] = defaultdict(Counter)
    acknowledged = 0
    ok_without_id = 0
    for op in operations:
        if op.get("op") != "create_order":
            continue
        endpoint = endpoints.get(str(op.get("endpoint")))
        if endpoint is None:
            continue
        judged.append(op)
        kind = str(op.get("expect") or "first")
        kinds[kind] += 1
        completions[op["type"]] += 1
        statuses[kind][str(op.get("status"))] += 1
        if op["type"] == "ok":
            acknowledged += 1
            if op.get("resource_id") is None:
                ok_without_id += 1
        key = op.get("idempotency_key")
        if key is None:
            _check_missing_key(op, endpoint, results, unexpected)
            continue
        by_key[(endpoint.name, str(key), op.get("identity"))].append(op)
    duplicated_keys = 0
    clock_held_until = held_until(faults)
    for (name, key, _), ops in by_key.items():
        endpoint = endpoints[name]
        if len([op for op in ops if op.get("expect") != "payload_mismatch"]) > 1:
            duplicated_keys += 1
        _check_key(key, ops, endpoint, results, unexpected, clock_held_until=clock_held_until)
    listed_twice = _check_reads(reads, by_key, endpoints, results)
    # A stored 5xx replayed without a mark (the fault log says when the service was well).
    check_unmarked_replays(judged, faults, results["replay_fidelity"], _evidence)
    check_stuck_keys(judged, faults, results["in_flight_refused_or_waited"], _evidence)
    if "identities_isolated" in results:
        check_isolation(judged, reads, results["identities_isolated"], _evidence)
    if "one_effect_per_key" in results:
        check_effects(effects, judged, endpoints, results, _evidence)
    counts = {
        "operations": sum(completions.values()),
        "acknowledged": acknowledged,
        "completions": dict(completions),
        "kinds": dict(kinds),
        "statuses": {kind: dict(counter) for kind, counter in statuses.items()},
        "keys": len(by_key),
        "duplicated_keys": duplicated_keys,
        "final_reads": len(reads),
        "ok_without_id": ok_without_id,
        **({"searches_listing_a_resource_twice": listed_twice[:10]} if listed_twice else {}),
        **({"effect_queries": len(effects)} if "one_effect_per_key" in results else {}),
    }
    reasons = []
    if acknowledged < min_acknowledged:
        reasons.append(f"only {acknowledged} requests were acknowledged (minimum {min_acknowledged})")
    if duplicated_keys == 0:
        reasons.append("no key was sent more than once: no duplicate was exercised")
    if acknowledged and ok_without_id == acknowledged:
        reasons.append("no 2xx answer carried a resource id where the config looks (endpoints[].id)")
    invariants = list(results.values())
    return ProbeCheck(invariants=invariants, counts=counts, verdict=verdict_of(invariants, reasons),
                      inconclusive_reasons=reasons,
                      advice=[*_code_advice(unexpected, endpoints, config.profile), *_listing_advice(listed_twice)])


def _listing_advice(listed_twice: Sequence[Mapping[str, Any]]) -> list[Advice]:
    """One advice when searches listed a resource more than once (one resource each)."""
    if not listed_twice:
        return []
    first = listed_twice[0]
    return [Advice(rule="search-lists-once", level="practice",
                   message=f"{len(listed_twice)} final searches listed one resource more than once (first: key "
                           f"{first['key']!r} listed {first['resource']} {first['listed']} times): one resource, "
                           "but the search's index holds it twice")]


def _code_advice(unexpected: Mapping[tuple[str, str], Counter[Any]], endpoints: Mapping[str, Endpoint],
                 profile: str) -> list[Advice]:
    """One advice per endpoint and misuse whose profile's code some refusals did not use."""
    advice = []
    for (name, misuse), seen in unexpected.items():
        expected = getattr(endpoints[name].expect, misuse)
        source = "the draft's" if expected == DRAFT_CODES[misuse] else f"the {profile} profile's"
        what = {"missing_key": "requests without the key", "payload_mismatch": "keys reused with another payload"}
        answered = ", ".join(f"{status}×{count}" for status, count in sorted(seen.items(), key=lambda kv: str(kv[0])))
        advice.append(Advice(CODE_ROWS[misuse], "SHOULD",
                             f"{name}: {what[misuse]} refused with {answered}; {source} code is {expected} "
                             f"(write `expect: {{{misuse}: ...}}` to make a code your contract)"))
    return advice


def _code_unexpected(op: Mapping[str, Any], endpoint: Endpoint, misuse: str, results: dict[str, InvariantResult],
                     unexpected: dict[tuple[str, str], Counter[Any]], message: str, **evidence: Any) -> None:
    """A refusal with another code than the endpoint's for `misuse`: the user's contract
    broken when the config wrote that code, else advice (the profile's, a SHOULD)."""
    if endpoint.expect.is_written(misuse):
        results["expected_codes"].violate(f"{message}, expected {getattr(endpoint.expect, misuse)} "
                                          f"(written in expect.{misuse})", operation=_evidence(op), **evidence)
    else:
        unexpected[(endpoint.name, misuse)][op.get("status")] += 1


def _check_missing_key(op: Mapping[str, Any], endpoint: Endpoint, results: dict[str, InvariantResult],
                       unexpected: dict[tuple[str, str], Counter[Any]]) -> None:
    if not endpoint.requires_key or op["type"] == "info":
        return
    results["missing_key_refused"].checked += 1
    results["expected_codes"].checked += 1
    if op["type"] == "ok":
        results["missing_key_refused"].violate(
            f"{endpoint.name}: a request without {endpoint.name!r}'s required key was accepted "
            f"with {op.get('status')}", operation=_evidence(op))
    elif op.get("status") != endpoint.expect.missing_key:
        _code_unexpected(op, endpoint, "missing_key", results, unexpected,
                         f"{endpoint.name}: a request without the key was refused with {op.get('status')}")


def _check_key(key: str, ops: list[Mapping[str, Any]], endpoint: Endpoint,
               results: dict[str, InvariantResult], unexpected: dict[tuple[str, str], Counter[Any]], *,
               clock_held_until: float = 0.0) -> None:
    one, fidelity = results["one_resource_per_key"], results["replay_fidelity"]
    mismatch, in_flight, codes = (results["payload_mismatch_refused"], results["in_flight_refused_or_waited"],
                                  results["expected_codes"])
    oks = [op for op in ops if op["type"] == "ok"]
    one.checked += 1
    ids = sorted({str(op.get("resource_id")) for op in oks if op.get("resource_id") is not None})
    if len(ids) > 1:
        one.violate(f"{endpoint.name}: key {key!r} named {len(ids)} resources: {', '.join(ids[:5])}",
                    key=key, resource_ids=ids, answers=[_evidence(op) for op in oks])
    fidelity.checked += 1
    by_payload: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for op in oks:
        by_payload[str(op.get("fingerprint"))].append(op)
    for answers in by_payload.values():
        shapes = {(op.get("status"), op.get("body_digest")) for op in answers}
        if len(shapes) > 1:
            fidelity.violate(f"{endpoint.name}: key {key!r} with one payload got {len(shapes)} different answers",
                             key=key, answers=[_evidence(op) for op in answers])
    if oks:
        for op in ops:
            # Sent after this client saw the request succeed: nothing is in flight, so a
            # refusal (e.g. the stored answer re-labelled 409) withholds the result.
            if op.get("expect") == "replay" and op["type"] == "fail":
                fidelity.violate(f"{endpoint.name}: key {key!r}: the retry of a completed request was refused "
                                 f"with {op.get('status')} instead of getting the stored answer",
                                 key=key, operation=_evidence(op), first=_evidence(oks[0]))
    for op in ops:
        if op.get("replayed") and isinstance(op.get("status"), int) and op["status"] >= 500:
            fidelity.violate(f"{endpoint.name}: key {key!r}: a {op['status']} was replayed",
                             key=key, operation=_evidence(op))
    first_payloads = {str(op.get("fingerprint")) for op in ops if op.get("expect") != "payload_mismatch"}
    for op in ops:
        if op.get("expect") != "payload_mismatch" or str(op.get("fingerprint")) in first_payloads:
            continue
        if op["type"] == "info":
            continue
        mismatch.checked += 1
        codes.checked += 1
        if op["type"] == "ok":
            mismatch.violate(
                f"{endpoint.name}: key {key!r} reused with another payload was accepted with {op.get('status')}"
                + (" (a new resource)" if op.get("resource_id") not in ids[:1] else " (the first answer replayed)"),
                key=key, mismatch=_evidence(op), original=[_evidence(o) for o in oks if o is not op][:3])
        elif op.get("status") == endpoint.expect.in_flight and _maybe_running(ops, op):
            continue  # the first payload's request may still be running: "in flight" is a fair answer
        elif op.get("status") not in DRAFT_MISMATCH_ERRORS:
            # The draft's MUST (refuse-uncorrected, harness.probe.conformance): failed with one
            # of its errors, whatever the config writes.
            codes.violate(f"{endpoint.name}: key {key!r} reused with another payload was refused with "
                          f"{op.get('status')}, not one of the draft's errors "
                          f"({', '.join(map(str, DRAFT_MISMATCH_ERRORS))}: a MUST)", key=key, operation=_evidence(op))
        elif op.get("status") != endpoint.expect.payload_mismatch:
            _code_unexpected(op, endpoint, "payload_mismatch", results, unexpected,
                             f"{endpoint.name}: key {key!r} reused with another payload was refused with "
                             f"{op.get('status')}", key=key)
    same_payload = [op for op in ops if op.get("expect") != "payload_mismatch"]
    succeeded = any(op["type"] == "ok" for op in same_payload)
    # Only the key's last late retry is judged stuck: an earlier one refused as in flight
    # with a Retry-After was asked again once that wait had passed.
    late = [op for op in same_payload if op.get("expect") == "late_retry"]
    last_late = max(late, key=lambda op: float(op.get("invoke_time") or 0.0)) if late else None
    for op in same_payload:
        if op["type"] != "fail" or op.get("expect") == "payload_mismatch":
            continue
        status = op.get("status")
        if status == endpoint.expect.in_flight and op is last_late \
                and float(op.get("invoke_time") or 0.0) < clock_held_until:
            # Sent while a clock moved back may still hold the first request's timers
            # (harness.probe.replays.clock_hold): in flight is a fair answer then.
            continue
        in_flight.checked += 1
        if status == endpoint.expect.in_flight and op.get("expect") == "late_retry" and op is last_late:
            # Sent after the load, every fault healed (and after the Retry-After the service
            # gave, harness.probe.late_retries): nothing can still be in flight.
            in_flight.violate(f"{endpoint.name}: key {key!r} is stuck in flight: the late retry, sent after "
                              f"the load when nothing can be in flight, was refused with {status} (the key "
                              f"never released, or its result withheld)", key=key, operation=_evidence(op))
            continue
        if status == endpoint.expect.in_flight:
            continue
        if succeeded and status != endpoint.expect.payload_mismatch:
            in_flight.violate(f"{endpoint.name}: a duplicate of key {key!r} (same payload) was refused with "
                              f"{status} although the request succeeded",
                              key=key, operation=_evidence(op), answers=[_evidence(o) for o in same_payload][:4])
        elif succeeded:
            # The same payload refused as a mismatch: the key forgot its own payload.
            in_flight.violate(f"{endpoint.name}: a duplicate of key {key!r} with the same payload was refused "
                              f"as a payload mismatch ({status})", key=key, operation=_evidence(op))


def _maybe_running(ops: list[Mapping[str, Any]], op: Mapping[str, Any]) -> bool:
    """Whether a request of the key's first payload may still run on the server when
    `op` was sent: one invoked before it whose answer never came (`info`)."""
    at = op.get("invoke_time")
    return isinstance(at, (int, float)) and any(
        other.get("type") == "info" and other.get("expect") != "payload_mismatch"
        and isinstance(other.get("invoke_time"), (int, float)) and other["invoke_time"] < at for other in ops)


def _check_reads(reads: Sequence[Mapping[str, Any]],
                 by_key: Mapping[tuple[str, str, Any], list[Mapping[str, Any]]],
                 endpoints: Mapping[str, Endpoint], results: dict[str, InvariantResult]) -> list[dict[str, Any]]:
    """Judge the final reads; return the searches that listed one resource more than
    once (one charge whose id a store pushed twice is one resource, not two: reported
    under its own name, not as a second resource)."""
    lost, one = results["acknowledged_not_lost"], results["one_resource_per_key"]
    listed_twice: list[dict[str, Any]] = []
    for read in reads:
        if read.get("type") == "info":
            continue  # the read itself failed: no evidence either way
        endpoint = endpoints.get(str(read.get("endpoint")))
        if endpoint is None:
            continue
        if read.get("read") == "by_id":
            lost.checked += 1
            if read.get("status") not in (endpoint.read.expect if endpoint.read else (200,)):
                lost.violate(f"{endpoint.name}: resource {read.get('resource_id')!r} was acknowledged but the "
                             f"final read answered {read.get('status')}", read=dict(read),
                             acknowledged=[_evidence(op) for op in by_key.get(
                                 (endpoint.name, str(read.get("idempotency_key")), read.get("identity")), [])
                                 if op["type"] == "ok"][:3])
        elif read.get("read") == "by_key":
            key = str(read.get("idempotency_key"))
            found = read.get("found")
            if not isinstance(found, list):
                continue
            one.checked += 1
            distinct = list({json.dumps(item, sort_keys=True, default=str): item for item in found}.values())
            if len(distinct) > 1:
                one.violate(f"{endpoint.name}: the final search for key {key!r} found {len(distinct)} resources: "
                            f"{', '.join(str(item) for item in distinct[:5])}",
                            key=key, found=found[:10], read=dict(read))
            elif len(found) > len(distinct):
                listed_twice.append({"endpoint": endpoint.name, "key": key, "resource": distinct[0],
                                     "listed": len(found)})
            acknowledged = [op for op in by_key.get((endpoint.name, key, read.get("identity")), [])
                            if op["type"] == "ok"]
            if acknowledged:
                lost.checked += 1
                if not found:
                    lost.violate(f"{endpoint.name}: key {key!r} was acknowledged but the final search found nothing",
                                 key=key, read=dict(read), acknowledged=[_evidence(op) for op in acknowledged][:3])
    return listed_twice
