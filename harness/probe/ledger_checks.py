"""The invariants judged on the payment provider's ledger: money moved once, at the source.

With `provider:` in the config, the probe reads the ledger of the provider it ran
(harness.probe.provider.play, `ledger.ndjson` in the run directory) after the load and
judges, per business key (the charge's field at `provider.key_by`, e.g.
`/metadata/order_id`):

- `money_moved_once`: at most one charge that moved money and still holds it
  (`succeeded` or partly refunded, captured beyond its refunds) per business key;
- `acknowledged_payment_charged`: every request the service acknowledged (a 2xx on a
  paying endpoint) has a charge that moved money under its business key;
- `refused_not_charged`: a request the service refused for good (no 2xx for its key,
  the last answer a 4xx) left no charge that moved money under its business key.

An operation's business key is found in its own request: the path segment or top-level
body value equal to a charge's key (`/orders/ord_<uuid>/pay` → `ord_<uuid>`), so the
service's answers need not echo it. The load groups a logical request's retries and
duplicates by the probe's key (its Idempotency-Key, or the round's key on an endpoint
with `requires_key: false`): one group, one business key. A declined card's charge is
`failed` and moved nothing, so a refused decline passes.

The run is inconclusive when no charge moved money (nothing was proven) or when no
operation could be tied to a business key. A `key_by` found in none of the charges the
provider recorded is the config's mistake, not the service's: `ProbeConfigError`
naming the field (exit 2), never a verdict. `ledger_table` is the report's view: per
business key, its charges next to the service's answers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from harness.probe.checker import InvariantResult, ProbeCheck, verdict_of
from harness.probe.config import ProbeConfig, ProbeConfigError
from harness.probe.provider.spec import ProviderSpec
from harness.provider.records import ChargeRecord, LedgerRecord, RequestRecord, charges_per_business_key, to_dict
from harness.webhooks.events import resolve_pointer

LEDGER_INVARIANTS: dict[str, str] = {
    "money_moved_once": "per business key, at most one charge moved money and still holds it (provider's ledger)",
    "acknowledged_payment_charged": "every payment the service acknowledged (2xx) has its charge (provider's ledger)",
    "refused_not_charged": "a payment the service refused for good (last answer 4xx, never 2xx) left no charge "
                           "(provider's ledger)",
}
MAX_ROWS = 200
OPERATION = "create_order"


@dataclass(frozen=True)
class ChargeView:
    id: str
    amount: int
    currency: str
    state: str
    idempotency_key: str | None
    moved_money: bool


@dataclass(frozen=True)
class LedgerRow:
    """One business key in the report: its charges and the service's answers."""

    key: str
    charges: tuple[ChargeView, ...]
    answers: tuple[str, ...]  # "kind status" per request, in order
    violated: tuple[str, ...] = ()


@dataclass
class LedgerCheck:
    invariants: list[InvariantResult]
    counts: dict[str, Any]
    reasons: list[str]
    rows: list[LedgerRow] = field(default_factory=list)


def business_key_of(charge: ChargeRecord, key_by: str) -> str | None:
    value = resolve_pointer(to_dict(charge), key_by)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    return str(value)


def _candidates(op: Mapping[str, Any], default_path: str) -> set[str]:
    """What in the request could be its business key: path segments, top-level body values."""
    path = str(op.get("path") or default_path)
    found = {unquote(part) for part in path.split("?", 1)[0].split("/") if part}
    body = op.get("body")
    if isinstance(body, dict):
        found |= {str(value) for value in body.values()
                  if isinstance(value, (str, int)) and not isinstance(value, bool)}
    return found


def _evidence(op: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("op_id", "process", "expect", "endpoint", "path", "idempotency_key", "identity", "type", "status",
            "error", "invoke_time", "complete_time")
    return {key: op.get(key) for key in keys if op.get(key) is not None}


def _charge(charge: ChargeRecord) -> dict[str, Any]:
    return {"id": charge.id, "payment_intent": charge.payment_intent, "amount": charge.amount,
            "state": charge.state, "idempotency_key": charge.request.idempotency_key,
            "request_id": charge.request.request_id, "time": charge.request.time}


def _check_key_by(config: ProbeConfig, spec: ProviderSpec, ledger: Sequence[LedgerRecord],
                  every: Mapping[str, list[ChargeRecord]]) -> None:
    """Charges were made, yet none has a value at `key_by`: every invariant would judge
    nothing and the run would read as inconclusive for a reason the service did not give."""
    charges = [record for record in ledger if isinstance(record, ChargeRecord)]
    if not charges or every:
        return
    sample = to_dict(charges[0])
    metadata = sample.get("metadata")
    fields = ", ".join([*(f"/{name}" for name in sorted(sample) if name != "metadata"),
                        *(f"/metadata/{name}" for name in sorted(metadata or {}))][:12])
    raise ProbeConfigError(f"{config.source}: provider.key_by: {spec.key_by} is in none of the {len(charges)} "
                           f"charges the provider recorded (a charge has: {fields or 'no fields'}); point it at "
                           "the field that carries the business key, e.g. /metadata/order_id")


def check_ledger(operations: Iterable[Mapping[str, Any]], config: ProbeConfig,
                 ledger: Sequence[LedgerRecord]) -> LedgerCheck:
    spec = config.provider or ProviderSpec()
    results = {name: InvariantResult(name, description) for name, description in LEDGER_INVARIANTS.items()}
    once, acknowledged, refused = (results["money_moved_once"], results["acknowledged_payment_charged"],
                                   results["refused_not_charged"])
    moving = charges_per_business_key(ledger, spec.key_by)
    every: dict[str, list[ChargeRecord]] = defaultdict(list)
    for record in ledger:
        if isinstance(record, ChargeRecord):
            key = business_key_of(record, spec.key_by)
            if key is not None:
                every[key].append(record)
    _check_key_by(config, spec, ledger, every)
    for key, charges in moving.items():
        once.checked += 1
        if len(charges) > 1:
            keys = sorted({str(c.request.idempotency_key) for c in charges})
            once.violate(f"business key {key!r}: money moved {len(charges)} times "
                         f"({sum(c.amount_captured - c.amount_refunded for c in charges)} {charges[0].currency} "
                         f"held), under {len(keys)} idempotency key(s): {', '.join(keys[:4])}",
                         key=key, charges=[_charge(c) for c in charges])
    paying = set(spec.endpoints) if spec.endpoints else {endpoint.name for endpoint in config.endpoints}
    paths = {endpoint.name: endpoint.path for endpoint in config.endpoints}
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = defaultdict(list)
    for op in operations:
        if op.get("op") != OPERATION or op.get("endpoint") not in paying or op.get("type") not in ("ok", "fail", "info"):
            continue
        key = op.get("idempotency_key")
        group = (op["endpoint"], key, op.get("identity")) if key is not None else ("op", op.get("op_id"))
        groups[group].append(op)
    answers: dict[str, list[str]] = defaultdict(list)
    violated: dict[str, set[str]] = defaultdict(set)
    tied = 0
    for ops in groups.values():
        ops.sort(key=lambda op: float(op.get("complete_time") or op.get("invoke_time") or 0.0))
        candidates = set().union(*(_candidates(op, paths.get(str(op.get("endpoint")), "")) for op in ops))
        keys = sorted(candidates & set(every))
        for key in keys:
            answers[key].extend(f"{op.get('expect') or 'first'} {op.get('status')}" for op in ops)
        tied += bool(keys)
        charged = sorted(candidates & set(moving))
        oks = [op for op in ops if op.get("type") == "ok"]
        if oks:
            acknowledged.checked += 1
            if not charged:
                acknowledged.violate(
                    f"{oks[0].get('endpoint')}: acknowledged with {oks[0].get('status')} but the provider holds "
                    f"no charge that moved money for it" + (f" (its charges: {', '.join(keys)})" if keys else ""),
                    operation=_evidence(oks[0]),
                    charges=[_charge(c) for key in keys for c in every[key]][:5])
                for key in keys:
                    violated[key].add("acknowledged_payment_charged")
        elif ops[-1].get("type") == "fail":
            refused.checked += 1
            if charged:
                refused.violate(
                    f"{ops[-1].get('endpoint')}: refused for good with {ops[-1].get('status')} but the provider "
                    f"charged {charged[0]!r}: the customer paid for a payment the service says failed",
                    operation=_evidence(ops[-1]), answers=[_evidence(op) for op in ops][:6],
                    charges=[_charge(c) for key in charged for c in moving[key]][:5])
                for key in charged:
                    violated[key].add("refused_not_charged")
    for inv in results.values():
        for violation in inv.violations:
            key = violation["evidence"].get("key")
            if inv is once and key is not None:
                violated[str(key)].add("money_moved_once")
    reasons = []
    if not moving:
        reasons.append("the provider's ledger holds no charge that moved money: no payment was proven")
    elif groups and not tied:
        reasons.append(f"no request could be tied to a business key ({spec.key_by} of a charge found in no "
                       "request's path or body)")
    requests = [record for record in ledger if isinstance(record, RequestRecord)]
    counts = {"ledger": {"charges": sum(len(c) for c in every.values()),
                         "charges_moved_money": sum(len(c) for c in moving.values()),
                         "business_keys": len(every), "provider_requests": len(requests),
                         "provider_faults": sum(1 for r in requests if r.fault),
                         "provider_replays": sum(1 for r in requests if r.replayed)}}
    rows = [LedgerRow(key=key, answers=tuple(answers.get(key, ())), violated=tuple(sorted(violated.get(key, ()))),
                      charges=tuple(ChargeView(id=c.id, amount=c.amount, currency=c.currency, state=c.state,
                                               idempotency_key=c.request.idempotency_key,
                                               moved_money=c.moved_money) for c in charges))
            for key, charges in every.items()]
    rows.sort(key=lambda row: (not row.violated, row.key))
    return LedgerCheck(invariants=list(results.values()), counts=counts, reasons=reasons, rows=rows[:MAX_ROWS])


def combine_ledger(check: ProbeCheck, ledger: LedgerCheck) -> ProbeCheck:
    """The run's check with the ledger's invariants, counts and reasons, and the verdict again."""
    invariants = [*check.invariants, *ledger.invariants]
    reasons = [*check.inconclusive_reasons, *ledger.reasons]
    return ProbeCheck(invariants=invariants, counts={**check.counts, **ledger.counts},
                      verdict=verdict_of(invariants, reasons), inconclusive_reasons=reasons,
                      advice=list(check.advice))


def rows_to_dicts(rows: Sequence[LedgerRow]) -> list[dict[str, Any]]:
    """result.json's `ledger`: the rows as plain data (the report renders them)."""
    return [{"key": row.key, "answers": list(row.answers), "violated": list(row.violated),
             "charges": [{"id": c.id, "amount": c.amount, "currency": c.currency, "state": c.state,
                          "idempotency_key": c.idempotency_key, "moved_money": c.moved_money}
                         for c in row.charges]} for row in rows]
