"""The receiver's rows of the probe's conformance table, from the webhook check.

What the providers' documentation asks of a receiver (docs/webhooks.md), each row
judged from the deliveries and the facts' effects (harness.probe.webhooks.checks):

| row | requirement | judged by |
|---|---|---|
| `webhook-raw-body` | the signature is verified over the raw body | valid deliveries never refused with a 4xx; a tampered body, a wrong secret, a missing or malformed header and an unsupported scheme refused and never applied |
| `webhook-tolerance` | the timestamp tolerance is enforced as the provider's official verifier enforces it | a stale timestamp refused and never applied, and a future one where that verifier refuses it (Standard Webhooks); a future one taken where it is taken too (Stripe) is advice (not checkable for a scheme that signs no timestamp, or tolerance 0) |
| `webhook-dedupe-event` | duplicates are deduplicated by event id | facts delivered more than once under one event id (retries, concurrent copies, late duplicates) took effect once |
| `webhook-dedupe-object` | a second event for the same object is deduplicated by the object | facts delivered as `same_object_new_event` under two event ids took effect once; *not observed* ("not exercised") when the `fact` changes with the event id (`/id`), which makes each such event a fact of its own |
| `webhook-out-of-order` | events of one object arriving out of order are handled | facts delivered `out_of_order` took effect once, and did when acknowledged |
| `webhook-duplicate-2xx` | a duplicate is acknowledged, never failed | `delivery_acknowledged` |
| `webhook-fast-2xx` | the receiver answers within the provider's timeout | no delivery whose whole interval (sent to answered) lies outside every fault window was answered slower than the timeout |

Statuses as in harness.probe.conformance: `pass`, `fail`, `not observed`, `not checkable`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.probe.conformance import ConformanceRow
from harness.probe.replays import fault_windows
from harness.probe.webhooks.checks import FactRecord, WebhookCheck
from harness.webhooks.deliveries import (
    CONCURRENT_COPY,
    FUTURE_TIMESTAMP,
    LATE_DUPLICATE,
    MALFORMED_HEADER,
    MISSING_HEADER,
    OUT_OF_ORDER,
    RETRY,
    SAME_OBJECT_NEW_EVENT,
    STALE_SIGNATURE,
    TAMPERED_BODY,
    UNSUPPORTED_SCHEME,
    WRONG_SECRET,
)

SECTION = "Webhook receiver"
LEVEL = "provider docs"
SIGNATURE_REFUSALS = (TAMPERED_BODY, WRONG_SECRET, MISSING_HEADER, MALFORMED_HEADER, UNSUPPORTED_SCHEME)
TOLERANCE_REFUSALS = (STALE_SIGNATURE, FUTURE_TIMESTAMP)


def receiver_rows(check: WebhookCheck, faults: Sequence[Mapping[str, Any]]) -> list[ConformanceRow]:
    def row(rid: str, text: str, verdict: tuple[str, str]) -> ConformanceRow:
        return ConformanceRow(rid, SECTION, LEVEL, text, verdict[0], verdict[1])

    by_name = {inv.name: inv for inv in check.invariants}
    return [
        row("webhook-raw-body", "the signature is verified over the raw body, exactly as sent",
            _refusals(check, SIGNATURE_REFUSALS, valid_refused=True)),
        row("webhook-tolerance", "the signed timestamp is checked against the tolerance as the provider's "
            "official verifier checks it (too old; too far ahead where it refuses that)",
            _refusals(check, TOLERANCE_REFUSALS, valid_refused=False)),
        row("webhook-dedupe-event", "a delivery of an event id already taken is not applied again",
            _facts(check, lambda f: bool(f.kinds & {RETRY, CONCURRENT_COPY, LATE_DUPLICATE})
                   and SAME_OBJECT_NEW_EVENT not in f.kinds, "delivered again under one event id")),
        row("webhook-dedupe-object", "a second event for the same object (a new event id) is not applied again",
            _dedupe_object(check)),
        row("webhook-out-of-order", "one object's events arriving out of order leave it applied once",
            _facts(check, lambda f: OUT_OF_ORDER in f.kinds, "delivered out of order", acknowledged=True)),
        row("webhook-duplicate-2xx", "a duplicate is acknowledged with a 2xx, never failed (else it is retried "
            "for days)", _invariant(by_name["delivery_acknowledged"])),
        row("webhook-fast-2xx", "the receiver answers within the provider's timeout", _fast(check, faults)),
    ]


def _invariant(inv: Any) -> tuple[str, str]:
    if inv.checked == 0:
        return "not observed", f"{inv.name}: nothing to check (every delivery was acknowledged during the load)"
    if inv.passed:
        return "pass", f"{inv.name}: {inv.checked} checked, none violated"
    return "fail", f"{inv.name}: {inv.violation_count} violation(s), e.g. {inv.violations[0]['message']}"


def _refusals(check: WebhookCheck, kinds: Sequence[str], *, valid_refused: bool) -> tuple[str, str]:
    advisory = {op.get("op_id") for op in check.advisory if op.get("kind") in kinds}
    ops = [op for op in check.deliveries if op.get("kind") in kinds and op.get("op_id") not in advisory]
    noted = [advice.message for advice in check.advice if advisory and advice.rule == "webhook-tolerance"]
    note = f"; advice: {noted[0]}" if noted else ""
    effects = {(f.entry, f.fact): f.effects for f in check.facts}
    if valid_refused:
        wrongly = [op for op in check.deliveries if not op.get("must_refuse") and op["type"] == "fail"]
        if wrongly:
            return "fail", (f"{len(wrongly)} valid deliveries were refused with "
                            f"{', '.join(sorted({str(op.get('status')) for op in wrongly}))}")
    if not ops:
        return "not checkable", f"no {' or '.join(kinds)} delivery could be made for this scheme and tolerance"
    bad = [op for op in ops if op["type"] == "ok" or (isinstance(op.get("status"), int) and op["type"] != "fail")
           or (effects.get((str(op["webhook"]), str(op.get("fact")))) or 0) > 0]
    if bad:
        return "fail", (f"{len(bad)} of {len(ops)} deliveries to refuse were not refused or took effect, e.g. "
                        f"{bad[0].get('kind')} answered {bad[0].get('status')}{note}")
    judged = [op for op in ops if op["type"] == "fail"]
    if not judged:
        return "not observed", f"no delivery to refuse got an answer{note}"
    return "pass", (f"{len(judged)} refused ({', '.join(sorted({str(op.get('kind')) for op in judged}))}), "
                    f"none applied{note}")


def _facts(check: WebhookCheck, chosen: Any, what: str, *, acknowledged: bool = False) -> tuple[str, str]:
    facts: list[FactRecord] = [f for f in check.facts if not f.must_refuse and f.effects is not None and chosen(f)]
    if not facts:
        return "not observed", f"no fact was {what} (or no effect was counted)"
    twice = [f for f in facts if (f.effects or 0) > 1]
    missing = [f for f in facts if acknowledged and f.acknowledged and f.effects == 0]
    if twice or missing:
        example = (twice or missing)[0]
        return "fail", (f"{len(twice)} of {len(facts)} facts {what} took effect more than once"
                        + (f", {len(missing)} acknowledged never did" if missing else "")
                        + f", e.g. {example.fact!r}: {example.effects}")
    return "pass", f"{len(facts)} facts {what}, each applied at most once"


def _dedupe_object(check: WebhookCheck) -> tuple[str, str]:
    """Exercised only by a fact that arrived under two event ids: with a `fact` that
    changes with the event (`/id`), the second event for an object is a fact of its own,
    which can never take effect twice, so a pass would claim what was never tried."""
    chosen = [f for f in check.facts if not f.must_refuse and f.effects is not None and SAME_OBJECT_NEW_EVENT in f.kinds]
    if chosen and not any(len(f.event_ids) > 1 for f in chosen):
        return "not observed", (f"not exercised: {len(chosen)} same_object_new_event deliveries each carried a fact "
                                "of their own (the entry's `fact` changes with the event id, e.g. /id), so none "
                                "could take effect twice; point `fact` at the object (/data/object/id) to judge it")
    return _facts(check, lambda f: SAME_OBJECT_NEW_EVENT in f.kinds and len(f.event_ids) > 1,
                  "delivered again under a new event id")


def _fast(check: WebhookCheck, faults: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    windows = fault_windows(faults)

    def calm(op: Mapping[str, Any]) -> bool:
        # The whole delivery, sent to answered (or given up), must miss every window: one
        # sent just before a latency fault spends its wait inside it and is slow by the fault.
        sent = op.get("invoke_time")
        if not isinstance(sent, (int, float)):
            return False
        done = op.get("complete_time")
        if not isinstance(done, (int, float)):
            elapsed = op.get("elapsed")
            done = sent + (float(elapsed) if isinstance(elapsed, (int, float)) else 0.0)
        return not any(sent <= end and done >= start for start, end in windows)

    answered = [op for op in check.deliveries if op.get("status") is not None or op.get("error") == "timeout"]
    slow = [op for op in answered if op.get("error") == "timeout"]
    outside = [op for op in answered if calm(op)]
    slow_outside = [op for op in slow if calm(op)]
    if not outside:
        return "not observed", (f"no delivery ran wholly outside every fault window ({len(slow)} answered late "
                                "while a fault was on)")
    evidence = (f"{len(slow_outside)} of {len(outside)} deliveries run wholly outside every fault window were answered "
                f"slower than the timeout ({len(slow) - len(slow_outside)} more inside the plan's windows)")
    return ("fail" if slow_outside else "pass"), evidence
