"""What check_run reads besides the history: judging settings, final reads, the
baseline of a reused stack; and the history reader itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from test_check_run import make_run, write_lines

from harness.check.checker import CheckerError, check_run
from harness.check.run_scope import scoped_export
from harness.history import HistoryError, iter_operations, read_pairs
from harness.run.rundir import RunDir


def settings_of(run_dir: Path) -> dict[str, Any]:
    return orjson.loads((run_dir / "settings.json").read_bytes())


def write_settings(run_dir: Path, **values: Any) -> None:
    (run_dir / "settings.json").write_bytes(orjson.dumps({**settings_of(run_dir), **values}))


def test_settings_carry_the_promises_and_the_minimum(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    write_settings(run_dir, promised_paths=["replay", "reclaim"], min_acknowledged=3)
    result = check_run(RunDir(run_dir))
    assert (result.promised_paths, result.min_acknowledged) == (["replay", "reclaim"], 3)
    assert result.verdict == "inconclusive"
    assert result.inconclusive_reasons == ["promised path reclaim was exercised 0 times"]
    write_settings(run_dir, promised_paths=["replay"], min_acknowledged=5)
    assert check_run(RunDir(run_dir)).inconclusive_reasons == [
        "4 operation(s) were acknowledged (ok), fewer than the 5 required"]


def test_without_settings_a_run_needs_one_acknowledged_operation(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    result = check_run(RunDir(run_dir))
    assert (result.promised_paths, result.min_acknowledged, result.verdict) == ([], 1, "pass")


@pytest.mark.parametrize("values", [{"promised_paths": "replay"}, {"min_acknowledged": "3"},
                                    {"min_acknowledged": -1}, {"promised_paths": ["no_such_path"]}])
def test_malformed_judging_settings_are_harness_failures(tmp_path: Path, values: dict[str, Any]) -> None:
    run_dir = make_run(tmp_path)
    write_settings(run_dir, **values)
    with pytest.raises(CheckerError):
        check_run(RunDir(run_dir))


def test_final_reads_are_read_when_present(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    order = {"id": "o-w1", "tenant": "default", "idempotency_key": "k-w1", "sku": "sku-1", "quantity": 1,
             "amount_cents": 1000, "status": "PAID", "payments": [{"provider_ref": "pr-w1"}]}
    write_lines(run_dir / "final_reads.ndjson", [
        {"order_id": "o-w1", "tenant": "default", "status_code": 200, "order": order},
        {"order_id": "o-w2", "tenant": "default", "status_code": 200, "order": {**order, "id": "o-w2"}},
    ])
    result = check_run(RunDir(run_dir))
    assert result.counts["final_reads"] == 2
    assert result.failed == ["final_reads_agree"]
    violation = result.invariant("final_reads_agree").violations[0]
    assert violation.order_id == "o-w2" and "pr-w1" in violation.message


def test_a_bad_final_read_line_is_a_harness_failure(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    (run_dir / "final_reads.ndjson").write_bytes(b'{"order_id": "o-w1"}\n[1, 2]\n')
    with pytest.raises(CheckerError, match="final reads"):
        check_run(RunDir(run_dir))


# -- scoping on a reused stack ---------------------------------------------------------

OLD_ORDER = {"kind": "order", "id": "old", "tenant": "default", "idempotency_key": "k-old", "sku": "sku-1",
             "quantity": 2, "amount_cents": 1000, "status": "PAID", "created_at": 10.0}
OLD_PAYMENT = {"kind": "payment", "order_id": "old", "provider_ref": "pr-old", "amount_cents": 1000,
               "source": "api", "source_id": "p-old", "applied_at": 11.0}
OLD_EFFECT = {"kind": "message_effect", "message_id": "m-old", "order_id": "old", "provider_ref": "pr-old",
              "outcome": "already_paid", "at": 12.0}
OLD_DEAD = {"kind": "dead_letter", "message_id": "m-poison", "entry_id": "1-0", "deliveries": 6}
BASELINE = [OLD_ORDER, OLD_PAYMENT, OLD_EFFECT, OLD_DEAD,
            {"kind": "inventory", "sku": "sku-1", "available": 98, "added_total": 100},
            {"kind": "counters", "api_replays": 3, "domain_already_paid": 1}]


def test_without_a_baseline_the_export_is_unchanged() -> None:
    assert list(scoped_export(BASELINE, None)) == BASELINE


def test_untouched_baseline_lines_drop_out_and_stock_still_balances() -> None:
    new_order = {**OLD_ORDER, "id": "new", "idempotency_key": "k-new", "quantity": 1, "created_at": 1.0}
    export = [OLD_ORDER, OLD_PAYMENT, new_order, OLD_EFFECT, OLD_DEAD,
              {**OLD_EFFECT, "message_id": "m-new", "order_id": "new"},
              {"kind": "inventory", "sku": "sku-1", "available": 97, "added_total": 100},
              {"kind": "counters", "api_replays": 5, "domain_already_paid": 1, "messages_reclaimed": 2}]
    records = list(scoped_export(export, BASELINE))
    # the new order is kept though its clock says it is older than everything
    assert [r["id"] for r in records if r["kind"] == "order"] == ["new"]
    assert [r for r in records if r["kind"] == "payment"] == []
    assert [r["message_id"] for r in records if r["kind"] == "message_effect"] == ["m-new"]
    assert [r for r in records if r["kind"] == "dead_letter"] == []
    (inventory,) = [r for r in records if r["kind"] == "inventory"]
    assert (inventory["added_total"], inventory["available"]) == (98, 97)
    (counters,) = [r for r in records if r["kind"] == "counters"]
    assert counters == {"kind": "counters", "api_replays": 2, "domain_already_paid": 0,
                        "messages_reclaimed": 2}


def test_an_old_order_touched_during_the_run_is_judged_with_all_its_payments() -> None:
    second = {**OLD_PAYMENT, "provider_ref": "pr-again", "source": "webhook", "applied_at": 99.0}
    export = [OLD_ORDER, OLD_PAYMENT, second,
              {"kind": "inventory", "sku": "sku-1", "available": 98, "added_total": 100}]
    records = list(scoped_export(export, BASELINE))
    assert [r["id"] for r in records if r["kind"] == "order"] == ["old"]
    assert [r["provider_ref"] for r in records if r["kind"] == "payment"] == ["pr-old", "pr-again"]
    (inventory,) = [r for r in records if r["kind"] == "inventory"]
    assert inventory["added_total"] == 100  # the kept order's stock stays counted


def test_an_old_order_whose_status_changed_is_kept() -> None:
    unpaid = {**OLD_ORDER, "status": "INVENTORY_RESERVED"}
    records = list(scoped_export([{**unpaid, "status": "PAID"}], [unpaid]))
    assert [r["id"] for r in records] == ["old"]


def test_baseline_counters_fall_back_to_counters_before() -> None:
    records = list(scoped_export([{"kind": "counters", "api_replays": 5}], [OLD_ORDER],
                                 counters_before={"api_replays": 4}))
    assert records == [{"kind": "counters", "api_replays": 1}]


def test_check_run_scopes_by_the_baseline(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    export = [orjson.loads(line) for line in (run_dir / "export.ndjson").read_bytes().splitlines()]
    # an earlier run left an order with its payment: unjudged, and stock balances without it
    old = [{**OLD_ORDER, "quantity": 1}, OLD_PAYMENT]
    inventory = {"kind": "inventory", "sku": "sku-1", "available": 97, "added_total": 100}
    write_lines(run_dir / "export.ndjson", old + [line for line in export if line["kind"] != "inventory"]
                + [inventory])
    write_lines(run_dir / "baseline.ndjson", old + [{**inventory, "available": 99},
                                                    {"kind": "counters", "api_replays": 1}])
    write_settings(run_dir, scope={"baseline": "baseline.ndjson", "counters_before": {"api_replays": 1}})
    # a final read of the older order (the history never touched it) is not judged either
    old_body = {key: value for key, value in old[0].items() if key != "kind"}
    write_lines(run_dir / "final_reads.ndjson", [
        {"order_id": "old", "tenant": "default", "status_code": 200,
         "order": {**old_body, "payments": [{"provider_ref": "pr-old"}]}}])
    result = check_run(RunDir(run_dir))
    assert result.verdict == "pass", result.to_dict()
    assert result.counts["orders"] == 2 and result.counts["final_reads"] == 0
    assert result.layers["api"]["replays"] == 1
    (run_dir / "baseline.ndjson").unlink()
    with pytest.raises(CheckerError, match="baseline"):
        check_run(RunDir(run_dir))


def test_a_clock_scope_is_refused(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    write_settings(run_dir, scope={"since": 15.0, "counters_before": {}})
    with pytest.raises(CheckerError, match="not by clocks"):
        check_run(RunDir(run_dir))


# -- the history reader --------------------------------------------------------------

@pytest.mark.parametrize("content, match", [
    (b'{"type": "ok", "op_id": "x:1"}\n', "without invoke"),
    (b'{"type": "maybe", "op_id": "x:1"}\n', "unknown record type"),
    (b'not json\n{"type": "invoke", "op_id": "x:1"}\n', "not a JSON record"),
])
def test_the_reader_refuses_a_broken_history(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "w.jsonl"
    path.write_bytes(content)
    with pytest.raises(HistoryError, match=match):
        list(iter_operations([path]))
    with pytest.raises(HistoryError, match=match):
        list(read_pairs([path]))
