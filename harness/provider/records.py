"""The ledger's export: typed records, one JSON object a line (NDJSON), and what they prove.

Every line has `record` naming its type:

- `charge`: one charge attempt (a successful one moves money): its id, PaymentIntent,
  amount, captured and refunded amounts, currency, metadata, `state` (`succeeded`,
  `authorized` (captured later or never), `failed`, `refunded`, `partially_refunded`,
  `canceled` (an authorization released)), and the request that made it (`RequestInfo`:
  method, path, unix time, request id, the Idempotency-Key, the key's scope).
- `refund`: one refund, with its charge, amount and request.
- `request`: every API request answered: method, path, operation, status, idempotency
  key, whether it was a replay, and the fault (if any) the provider played on it.
- `delivery`: what became of one delivery chain of a webhook event at one endpoint (its
  kind: `first`, `concurrent_copy`, `late_duplicate`, `out_of_order`; tries, statuses).

`write_ledger` / `read_ledger` are the file's only writer and reader; `parse_ledger` reads the
same lines from `GET /_harness/ledger`.
`charges_per_business_key` is the ground truth the `money_moved_once` invariant needs:
per business key (a JSON pointer into a charge record, e.g. `/metadata/order_id`), the
charges that moved money and still hold it (succeeded and captured, not fully refunded).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.provider.errors import ProviderError
from harness.webhooks.events import resolve_pointer

CHARGE = "charge"
REFUND = "refund"
REQUEST = "request"
DELIVERY = "delivery"

# Charge states
SUCCEEDED = "succeeded"
AUTHORIZED = "authorized"
FAILED = "failed"
REFUNDED = "refunded"
PARTIALLY_REFUNDED = "partially_refunded"
CANCELED = "canceled"


@dataclass(frozen=True)
class RequestInfo:
    """The API request that made a ledger entry."""

    method: str
    path: str
    time: float  # unix seconds
    request_id: str
    idempotency_key: str | None
    key_scope: str  # the secret key's public tail (sk_test_…abcd), never the key


@dataclass(frozen=True)
class ChargeRecord:
    id: str
    payment_intent: str
    amount: int
    amount_captured: int
    amount_refunded: int
    currency: str
    metadata: Mapping[str, str]
    payment_method: str
    state: str
    failure_code: str | None
    created: int
    request: RequestInfo
    record: str = CHARGE

    @property
    def moved_money(self) -> bool:
        """Captured money the merchant still holds (what must happen once per business key)."""
        return self.state in (SUCCEEDED, PARTIALLY_REFUNDED) and self.amount_captured > self.amount_refunded


@dataclass(frozen=True)
class RefundRecord:
    id: str
    charge: str
    payment_intent: str
    amount: int
    currency: str
    metadata: Mapping[str, str]
    created: int
    request: RequestInfo
    record: str = REFUND


@dataclass(frozen=True)
class RequestRecord:
    method: str
    path: str
    operation: str
    status: int
    time: float
    request_id: str
    idempotency_key: str | None
    key_scope: str
    replayed: bool
    fault: str | None  # e.g. "500 after", "429 before", "delay 0.5s"; None: none played
    record: str = REQUEST


@dataclass(frozen=True)
class DeliveryRecord:
    event_id: str
    event_type: str
    endpoint: str
    attempts: int
    acknowledged: bool
    statuses: tuple[int | None, ...] = field(default_factory=tuple)
    dropped: bool = False  # the endpoint's queue was full (or the outbox stopped): never sent
    kind: str = "first"  # the delivery kind this chain played (harness.webhooks.deliveries)
    record: str = DELIVERY


LedgerRecord = ChargeRecord | RefundRecord | RequestRecord | DeliveryRecord


def to_dict(record: LedgerRecord) -> dict[str, Any]:
    data = asdict(record)
    if isinstance(record, (ChargeRecord, RefundRecord)):
        data["metadata"] = dict(record.metadata)
    if isinstance(record, DeliveryRecord):
        data["statuses"] = list(record.statuses)
    return data


def write_ledger(path: Path, records: Iterable[LedgerRecord]) -> int:
    """Write the records to `path` (NDJSON, replacing it); how many were written."""
    count = 0
    temporary = path.with_name(path.name + ".tmp")
    try:
        with temporary.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(to_dict(record), sort_keys=True) + "\n")
                count += 1
        temporary.replace(path)
    except OSError as error:
        raise ProviderError(f"cannot write the ledger to {path}: {error.strerror or error}") from None
    return count


def from_dict(data: Mapping[str, Any]) -> LedgerRecord:
    """One record from its JSON form; ProviderError for an unknown or incomplete one."""
    kind = data.get("record")
    fields = {name: value for name, value in data.items() if name != "record"}
    try:
        if kind in (CHARGE, REFUND):
            fields["request"] = RequestInfo(**fields["request"])
            return (ChargeRecord if kind == CHARGE else RefundRecord)(**fields)
        if kind == REQUEST:
            return RequestRecord(**fields)
        if kind == DELIVERY:
            fields["statuses"] = tuple(fields.get("statuses", ()))
            return DeliveryRecord(**fields)
    except (TypeError, KeyError) as error:
        raise ProviderError(f"a {kind} ledger record is incomplete: {error}") from None
    raise ProviderError(f"unknown ledger record {kind!r}")


def read_ledger(path: Path) -> list[LedgerRecord]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ProviderError(f"cannot read the ledger {path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise ProviderError(f"cannot read the ledger {path}: not UTF-8 text (byte {error.start})") from None
    return parse_ledger(text, where=str(path))


def parse_ledger(text: str, *, where: str = "ledger") -> list[LedgerRecord]:
    """The records of NDJSON text (a file's, or `GET /_harness/ledger`'s answer)."""
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: a line nested too deep for the decoder
            raise ProviderError(f"{where}:{number}: not a JSON line") from None
        if not isinstance(data, dict):
            raise ProviderError(f"{where}:{number}: not a JSON object")
        records.append(from_dict(data))
    return records


def charges_per_business_key(ledger: Iterable[LedgerRecord], key_by: str = "/metadata/order_id"
                             ) -> dict[str, list[ChargeRecord]]:
    """Per business key, the charges that moved money and still hold it, in ledger order.

    `key_by` is a JSON pointer into a charge record (`/metadata/order_id`,
    `/request/idempotency_key`, ...); charges without that field are left out (they
    belong to no business key). A key with two or more charges moved money twice."""
    if not key_by.startswith("/"):
        raise ProviderError(f"key_by must be a JSON pointer like /metadata/order_id, not {key_by!r}")
    per_key: dict[str, list[ChargeRecord]] = {}
    for record in ledger:
        if not isinstance(record, ChargeRecord) or not record.moved_money:
            continue
        value = resolve_pointer(to_dict(record), key_by)
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            continue  # no such field (or null, or not a scalar): no business key
        per_key.setdefault(value if isinstance(value, str) else json.dumps(value), []).append(record)
    return per_key

