"""What one run may judge on a stack that earlier runs used too: scoping by a baseline.

`harness run` against a stack left by `harness up` exports state that includes
every earlier run's orders. Before the load the runner saves the whole export as
`baseline.ndjson`; after it, `scoped_export(export, baseline)` keeps everything
the run may have caused and drops only what is provably older and untouched:

- every order absent from the baseline (created during the run, by whoever: one
  the run never asked for is then judged as unexpected);
- every baseline order whose status or payments changed, with all its payments,
  so a second payment on an old order is caught;
- every payment, message_effect and dead_letter line not in the baseline
  (whole lines compared), and any line of a kind this module does not know;
- inventory lines with `added_total` lowered by the quantity of the dropped
  orders, so conservation still balances;
- the counters line as deltas against the baseline's counters line (or, without
  one, against `counters_before`).

No clock is read: a backlog an aborted run left behind and this run touched is
judged, whatever the app's and the harness's clocks say. The export is held in
memory while it is scoped (only runs on a reused stack are scoped).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import orjson

# Lines compared whole: a baseline line that is still there unchanged is older than the run.
_COMPARED_KINDS = frozenset({"payment", "message_effect", "dead_letter"})


def _line_key(record: Mapping[str, Any]) -> bytes:
    """A line's identity, independent of key order."""
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)


def scoped_export(records: Iterable[dict[str, Any]], baseline: Iterable[dict[str, Any]] | None,
                  *, counters_before: Mapping[str, Any] | None = None,
                  dropped: set[Any] | None = None) -> Iterator[dict[str, Any]]:
    """The export narrowed to what the run may have caused; `baseline=None` keeps it whole.

    `dropped`, when given, receives the ids of the older orders left out, so a
    final read of one of them is not mistaken for an order the export hides.
    """
    if baseline is None:
        yield from records
        return
    old_status: dict[Any, Any] = {}
    old_payments: dict[Any, list[bytes]] = {}
    old_lines: set[bytes] = set()
    old_counters: Mapping[str, Any] | None = None
    for record in baseline:
        kind = record.get("kind")
        if kind == "order":
            old_status[record.get("id")] = (record.get("status"), record.get("broken"))
        elif kind in _COMPARED_KINDS:
            line = _line_key(record)
            old_lines.add(line)
            if kind == "payment":
                old_payments.setdefault(record.get("order_id"), []).append(line)
        elif kind == "counters":
            old_counters = record
    if old_counters is None:
        old_counters = counters_before or {}

    current = list(records)
    new_payments: dict[Any, list[bytes]] = {}
    for record in current:
        if record.get("kind") == "payment":
            new_payments.setdefault(record.get("order_id"), []).append(_line_key(record))
    left_out: set[Any] = set() if dropped is None else dropped
    dropped_stock: dict[str, int] = {}
    for record in current:
        if record.get("kind") != "order":
            continue
        order_id = record.get("id")
        if order_id not in old_status:
            continue
        unchanged = (old_status[order_id] == (record.get("status"), record.get("broken"))
                     and sorted(old_payments.get(order_id, ())) == sorted(new_payments.get(order_id, ())))
        if unchanged:
            left_out.add(order_id)
            sku = str(record.get("sku"))
            dropped_stock[sku] = dropped_stock.get(sku, 0) + int(record.get("quantity") or 0)

    for record in current:
        kind = record.get("kind")
        if kind == "order":
            if record.get("id") in left_out:
                continue
        elif kind == "payment":
            # a kept order keeps all its payments, old ones included
            if record.get("order_id") in left_out:
                continue
            if record.get("order_id") not in old_status and _line_key(record) in old_lines:
                continue  # an old payment of an order the baseline did not list: older than the run
        elif kind in _COMPARED_KINDS:
            if _line_key(record) in old_lines:
                continue
        elif kind == "inventory":
            record = {**record, "added_total": int(record.get("added_total") or 0)
                      - dropped_stock.get(str(record.get("sku")), 0)}
        elif kind == "counters":
            record = {key: (value - _int(old_counters.get(key))
                            if isinstance(value, int) and not isinstance(value, bool) and key != "kind"
                            else value)
                      for key, value in record.items()}
        yield record


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
