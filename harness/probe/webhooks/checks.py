"""The receiver invariants: each event's business fact took effect once, refusals refused.

From the provider's history (`op: webhook`, harness.probe.webhooks.play) and the
effects each fact has after the run (the entry's oracle, `WebhookOutcome.effects`):

- `fact_applied_once`: no fact took effect more than once, whatever copies arrived:
  retries, concurrent copies, late duplicates (one event id), the same object under a
  new event id, the events of one object out of order;
- `acknowledged_fact_applied`: every fact one of whose deliveries of the entry's event
  type (`event.type`) got a 2xx took effect. A fact whose every delivery was refused
  or lost may be absent (the provider knows it was not delivered);
- `refused_not_applied`: every delivery that must be refused (stale or future
  timestamp, tampered body, wrong secret, missing or malformed header, unsupported
  scheme) was answered with a 4xx (not a 2xx, not a 5xx the provider would retry), and
  its fact (each such delivery has a fresh one) took no effect. A receiver is held to
  what its provider's official verifier refuses (`Scheme.official_refuses_future`):
  for Stripe, whose `construct_event` accepts a future timestamp, a future delivery
  accepted or applied is `Advice` (rule `webhook-tolerance`), never a violation;
- `delivery_acknowledged`: every valid delivery chain that had no 2xx during the load
  got one from the provider's late retry, sent after the load with every fault healed.
  A receiver that answers a duplicate with a 5xx (a unique violation surfacing as an
  error) never acknowledges it: a real provider retries it for days, then disables the
  endpoint; one that refuses valid deliveries (a signature checked over a re-encoded
  body) fails it with a 4xx. A late retry that got no answer at all is not judged;
- `answered_in_time`, reported, never a failure: how many deliveries the receiver
  answered slower than the provider's timeout (each one retried by a real provider).

Under a clock fault on the receiver (a plan's `clock:` window on `service`, its spans
given as `receiver_clock`), the receiver's clock decides what its timestamp check does:
a fresh delivery's age, to the receiver, is the offset. So a valid delivery refused with
a 4xx while the offset is one the scheme's official verifier accepts (within the
tolerance; ahead of it too for Stripe, whose verifier takes future timestamps) is a
violation of `delivery_acknowledged` (a receiver 6 minutes behind refusing every valid
webhook: the provider retries for days, then disables the endpoint); past it, the
refusal is expected and counted (`refused_past_tolerance`), not judged; and a stale or
future delivery sent then is not judged by `refused_not_applied` (with the receiver's
clock moved, it may be fresh to it). Offsets within CLOCK_SLACK of the tolerance are
judged neither way.

A run is inconclusive (never PASS) when fewer than `min_acknowledged` deliveries got a
2xx (a receiver down throughout proves nothing), or when an entry has no `effects:`
(no fact's effect could be counted).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.probe.checker import Advice, InvariantResult, ProbeCheck, verdict_of
from harness.probe.config import WebhookEndpoint
from harness.probe.webhooks.play import WebhookOutcome
from harness.webhooks.deliveries import FUTURE_TIMESTAMP, STALE_SIGNATURE

WEBHOOK_INVARIANTS: dict[str, str] = {
    "fact_applied_once": "no webhook fact took effect more than once, whatever copies arrived",
    "acknowledged_fact_applied": "every fact whose delivery got a 2xx took effect",
    "refused_not_applied": "every delivery that must be refused was answered 4xx and took no effect",
    "delivery_acknowledged": "every valid delivery not acknowledged during the load got a 2xx from the "
                             "provider's late retry, every fault healed (a duplicate is never answered 5xx), "
                             "and none was refused while the receiver's clock was off by what the scheme's "
                             "official verifier accepts",
    "answered_in_time": "reported, never a failure: deliveries answered slower than the provider's timeout",
}
MAX_SHOWN = 8
CLOCK_SLACK = 2.0  # seconds around the tolerance where a skewed receiver is judged neither way
TIMESTAMP_KINDS = (STALE_SIGNATURE, FUTURE_TIMESTAMP)


@dataclass(frozen=True)
class ClockSpan:
    """A time (unix seconds) during which the receiver's clock was moved, and the
    offsets it showed then (two for a strobe, which flips between them)."""

    start: float
    end: float
    offsets: tuple[float, ...]


def receiver_clock_spans(faults: Iterable[Mapping[str, Any]], target: str = "service") -> list[ClockSpan]:
    """The clock windows of `faults.jsonl` that moved `target`'s clock and were applied."""
    spans: dict[str, ClockSpan] = {}
    for fault in faults:
        if fault.get("kind") != "clock" or fault.get("target") != target or fault.get("error") is not None:
            continue
        after, before = fault.get("offset_after"), fault.get("offset_before")
        if not isinstance(after, (int, float)) or not isinstance(fault.get("start"), (int, float)):
            continue
        offsets = (float(after),) if fault.get("clock") != "strobe" else (float(before or 0.0), float(after))
        end = fault.get("end")
        spans[str(fault.get("name"))] = ClockSpan(float(fault["start"]),
                                                  float(end) if isinstance(end, (int, float)) else float("inf"),
                                                  offsets)
    return list(spans.values())


def _offsets_at(spans: Sequence[ClockSpan], moment: Any) -> tuple[float, ...] | None:
    if not isinstance(moment, (int, float)):
        return None
    for span in spans:
        if span.start <= moment <= span.end and any(offset for offset in span.offsets):
            return span.offsets
    return None


def _official_takes(offset: float, tolerance: float, refuses_future: bool) -> bool | None:
    """Whether the scheme's official verifier takes a fresh delivery on a receiver whose
    clock is `offset` seconds off (its age is the offset); None within CLOCK_SLACK of the edge."""
    edges = [offset - tolerance, *([-offset - tolerance] if refuses_future else [])]
    if any(abs(edge) <= CLOCK_SLACK for edge in edges):
        return None
    return all(edge < 0 for edge in edges)


@dataclass
class FactRecord:
    """One fact of one entry: its deliveries' kinds and event ids and its effects."""

    entry: str
    fact: str
    effects: int | None
    kinds: set[str] = field(default_factory=set)
    event_ids: set[str] = field(default_factory=set)
    acknowledged: bool = False  # a delivery of the entry's event type got a 2xx
    must_refuse: bool = False


@dataclass
class WebhookCheck:
    invariants: list[InvariantResult]
    counts: dict[str, Any]
    reasons: list[str]
    facts: list[FactRecord]
    deliveries: list[Mapping[str, Any]]  # the `op: webhook` operations judged
    advice: list[Advice] = field(default_factory=list)
    # Deliveries to refuse that the provider's official verifier accepts (a future
    # timestamp for Stripe): judged as advice only, never by `refused_not_applied`.
    advisory: list[Mapping[str, Any]] = field(default_factory=list)


def _shown(op: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("op_id", "kind", "event_id", "event_type", "attempt", "retry_of", "late", "type", "status", "error",
            "elapsed", "invoke_time")
    return {key: op.get(key) for key in keys if op.get(key) is not None}


def check_webhooks(operations: Iterable[Mapping[str, Any]], outcomes: Sequence[WebhookOutcome],
                   entries: Sequence[WebhookEndpoint], *, min_acknowledged: int,
                   receiver_clock: Sequence[ClockSpan] = ()) -> WebhookCheck:
    results = {name: InvariantResult(name, description) for name, description in WEBHOOK_INVARIANTS.items()}
    once, applied, refused, acknowledged_late, in_time = (
        results["fact_applied_once"], results["acknowledged_fact_applied"], results["refused_not_applied"],
        results["delivery_acknowledged"], results["answered_in_time"])
    specs = {entry.spec.name: entry.spec for entry in entries}
    lenient = {name for name, spec in specs.items() if not spec.signer().official_refuses_future}
    advisory: list[Mapping[str, Any]] = []
    deliveries = [op for op in operations if op.get("op") == "webhook" and op.get("webhook") in specs]
    effects = {outcome.name: dict(outcome.effects) for outcome in outcomes if outcome.counted}
    by_fact: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    statuses: dict[str, Counter[str]] = defaultdict(Counter)
    for op in deliveries:
        by_fact[(str(op["webhook"]), str(op.get("fact")))].append(op)
        kind = f"webhook {op.get('kind')}" + (" (late)" if op.get("late") else "")
        statuses[kind][str(op.get("status"))] += 1
    facts: list[FactRecord] = []
    clock_skipped = 0
    for (name, fact), ops in by_fact.items():
        spec = specs[name]
        record = FactRecord(entry=name, fact=fact, effects=effects[name].get(fact) if name in effects else None,
                            kinds={str(op.get("kind")) for op in ops} | {str(op["retry_of"]) for op in ops
                                                                         if op.get("retry_of")},
                            event_ids={str(op.get("event_id")) for op in ops},
                            acknowledged=any(op["type"] == "ok" and op.get("event_type") == spec.event.type
                                             for op in ops),
                            must_refuse=any(op.get("must_refuse") for op in ops))
        facts.append(record)
        if record.effects is None:
            continue
        shown = {"entry": name, "fact": fact, "effects": record.effects,
                 "deliveries": [_shown(op) for op in ops][:MAX_SHOWN]}
        if record.must_refuse:
            for op in ops:
                if op.get("kind") in TIMESTAMP_KINDS and _offsets_at(receiver_clock, op.get("invoke_time")):
                    clock_skipped += 1
                    continue  # the receiver's moved clock decides whether it is stale or fresh to it
                if op.get("kind") == FUTURE_TIMESTAMP and name in lenient:
                    advisory.append({**op, "effects": record.effects})
                    continue
                refused.checked += 1
                if op["type"] == "ok":
                    refused.violate(f"{name}: a {op.get('kind')} delivery was accepted with {op.get('status')} "
                                    f"(fact {fact!r} took effect {record.effects} times)", **shown)
                elif isinstance(op.get("status"), int) and not 400 <= op["status"] < 500:
                    refused.violate(f"{name}: a {op.get('kind')} delivery was answered {op['status']}, not a 4xx "
                                    "refusal (a provider retries it)", **shown)
                elif record.effects:
                    refused.violate(f"{name}: a {op.get('kind')} delivery was answered {op.get('status')} but its "
                                    f"fact {fact!r} took effect {record.effects} times", **shown)
            continue
        once.checked += 1
        if record.effects > 1:
            once.violate(f"{name}: fact {fact!r} took effect {record.effects} times (its deliveries: "
                         f"{', '.join(sorted(record.kinds))}; {len(record.event_ids)} event id(s))", **shown)
        if record.acknowledged:
            applied.checked += 1
            if record.effects == 0:
                applied.violate(f"{name}: fact {fact!r} was acknowledged (2xx) and never took effect", **shown)
    for op in deliveries:
        if op.get("late") and not op.get("must_refuse") and op.get("status") is not None:
            acknowledged_late.checked += 1
            if op["type"] != "ok":
                acknowledged_late.violate(
                    f"{op['webhook']}: the provider's late retry of a {op.get('retry_of')} delivery of "
                    f"{op.get('event_id')} (fact {op.get('fact')!r}), sent after the load with every fault healed, "
                    f"was answered {op['status']}: never acknowledged", entry=op["webhook"],
                    fact=op.get("fact"), delivery=_shown(op),
                    earlier=[_shown(o) for o in by_fact[(str(op["webhook"]), str(op.get("fact")))]
                             if o.get("event_id") == op.get("event_id") and not o.get("late")][:MAX_SHOWN])
    past_tolerance = _judge_skewed_refusals(deliveries, specs, receiver_clock, acknowledged_late)
    answered = [op for op in deliveries if op.get("status") is not None or op.get("error") == "timeout"]
    late = [op for op in deliveries if op.get("error") == "timeout"]
    in_time.checked = len(answered)
    timeouts = sorted({specs[str(op["webhook"])].timeout for op in deliveries})
    in_time.description = (f"reported, never a failure: {len(late)} of {len(answered)} deliveries were answered "
                           f"slower than the provider's timeout ({', '.join(f'{t:g}s' for t in timeouts) or '-'}), "
                           "each one retried")
    ok = sum(1 for op in deliveries if op["type"] == "ok")
    reasons = []
    for entry in entries:
        if entry.effects is None:
            reasons.append(f"webhooks {entry.spec.name}: no `effects:`, so no fact's effect was counted")
    if ok < min_acknowledged:
        reasons.append(f"only {ok} webhook deliveries were acknowledged (minimum {min_acknowledged}): "
                       "the receiver took too little to judge")
    per_entry: dict[str, Any] = {}
    for entry in entries:
        name = entry.spec.name
        mine = [op for op in deliveries if op["webhook"] == name]
        outcome = next((o for o in outcomes if o.name == name), None)
        per_entry[name] = {
            "scheme": entry.spec.scheme, "deliveries": len(mine),
            "acknowledged": sum(1 for op in mine if op["type"] == "ok"),
            "refused": sum(1 for op in mine if op["type"] == "fail"),
            "facts": sum(1 for f in facts if f.entry == name),
            "late_retries": outcome.late_retries if outcome else 0, "rounds": outcome.rounds if outcome else 0,
            "answered_late": sum(1 for op in late if op["webhook"] == name),
            "kinds": dict(Counter(f"{op.get('kind')}:{op['type']}" for op in mine)),
        }
    again = sum(1 for ops in by_fact.values() if len(ops) > 1 and not any(op.get("must_refuse") for op in ops))
    counts = {"webhooks": per_entry, "deliveries": len(deliveries), "deliveries_acknowledged": ok,
              "facts_delivered_again": again,
              **({"receiver_clock": {"spans": len(receiver_clock), "refused_past_tolerance": past_tolerance,
                                     "timestamp_checks_not_judged": clock_skipped}} if receiver_clock else {}),
              "statuses": {kind: dict(counter) for kind, counter in statuses.items()}}
    return WebhookCheck(invariants=list(results.values()), counts=counts, reasons=reasons, facts=facts,
                        deliveries=deliveries, advice=_future_advice(advisory, specs), advisory=advisory)


def _judge_skewed_refusals(deliveries: Sequence[Mapping[str, Any]], specs: Mapping[str, Any],
                           spans: Sequence[ClockSpan], result: InvariantResult) -> int:
    """`delivery_acknowledged` for valid deliveries sent while the receiver's clock was
    moved (the module docstring); how many were refused past the tolerance (expected)."""
    past = 0
    for op in deliveries:
        if op.get("must_refuse") or op.get("late") or op["type"] != "fail":
            continue
        status = op.get("status")
        if not isinstance(status, int) or not 400 <= status < 500:
            continue
        offsets = _offsets_at(spans, op.get("invoke_time"))
        if offsets is None:
            continue
        spec = specs[str(op["webhook"])]
        refuses_future = spec.signer().official_refuses_future
        verdicts = [_official_takes(offset, spec.tolerance, refuses_future) for offset in offsets]
        if all(verdict is True for verdict in verdicts):
            result.checked += 1
            shown = ", ".join(f"{offset:+.0f}s" for offset in offsets)
            result.violate(f"{op['webhook']}: a valid {op.get('kind')} delivery of {op.get('event_id')} was refused "
                           f"with {status} while the receiver's clock was {shown} off, which {spec.scheme}'s "
                           f"official verifier accepts (tolerance {spec.tolerance}s): a receiver whose clock is "
                           "off by that much refuses every webhook", entry=op["webhook"], fact=op.get("fact"),
                           delivery=_shown(op), receiver_offsets=list(offsets))
        elif all(verdict is False for verdict in verdicts):
            past += 1
    return past


def _future_advice(advisory: Sequence[Mapping[str, Any]], specs: Mapping[str, Any]) -> list[Advice]:
    """One `Advice` per entry whose receiver took a future-timestamped delivery its
    provider's official verifier also takes: a check ahead (as stripe-php makes) would
    close the replay window on that side too, but no provider's SDK requires it."""
    advice = []
    for name in sorted({str(op["webhook"]) for op in advisory}):
        mine = [op for op in advisory if op["webhook"] == name]
        taken = [op for op in mine if op["type"] == "ok" or (op.get("effects") or 0) > 0
                 or (isinstance(op.get("status"), int) and not 400 <= op["status"] < 500)]
        if taken:
            spec = specs[name]
            advice.append(Advice(
                rule="webhook-tolerance", level="provider docs",
                message=(f"{name}: {len(taken)} of {len(mine)} deliveries signed more than the tolerance "
                         f"({spec.tolerance}s) in the future were not refused (answered "
                         f"{', '.join(sorted({str(op.get('status')) for op in taken}))}); {spec.scheme}'s "
                         "official verifier accepts them too, so this is no failure, but refusing them "
                         "closes the replay window ahead as well")))
    return advice


def combine(check: ProbeCheck, webhooks: WebhookCheck, *, keep: bool) -> ProbeCheck:
    """`check` (the endpoints' and messages' invariants) with the webhooks' invariants, counts
    and reasons, and the verdict again; `keep=False` (a config of webhooks alone) drops the
    endpoints' check, which judged no request. The report's table of kinds shows the
    deliveries beside the requests (`statuses`)."""
    invariants = [*(check.invariants if keep else []), *webhooks.invariants]
    reasons = [*(check.inconclusive_reasons if keep else []), *webhooks.reasons]
    verdict = verdict_of(invariants, reasons)
    counts = {**check.counts, **{k: v for k, v in webhooks.counts.items() if k != "statuses"},
              "statuses": {**(check.counts.get("statuses") or {}), **webhooks.counts["statuses"]}}
    if not keep:
        counts.update(operations=webhooks.counts["deliveries"], acknowledged=webhooks.counts["deliveries_acknowledged"],
                      duplicated_keys=sum(1 for fact in webhooks.facts if len(fact.kinds) > 1 and not fact.must_refuse))
    return ProbeCheck(invariants=invariants, counts=counts, verdict=verdict, inconclusive_reasons=reasons,
                      advice=[*(check.advice if keep else []), *webhooks.advice])
