"""The invariant registry: each invariant declared once (name, title, phase, rules),
and the typed export records the rules read."""

from __future__ import annotations

import pytest
from checker_builders import Run

from harness.check.checker import CheckerError, ExportOrder, ExportPayment, InventoryLine, load_export
from harness.check.invariants import INVARIANT_NAMES, INVARIANTS, Findings, evaluate_export, invariant_title
from harness.report.junit import junit_xml


def test_names_are_unique_and_every_invariant_has_a_rule_of_its_phase() -> None:
    assert len(set(INVARIANT_NAMES)) == len(INVARIANTS) == 12
    for invariant in INVARIANTS:
        assert invariant.title and (invariant.export_rules or invariant.history_rules), invariant.name
        # an export-phase invariant is decided before the history is read
        assert (invariant.phase == "export") == (not invariant.history_rules), invariant.name


def test_the_result_lists_the_registry_in_order_with_its_titles() -> None:
    run = Run()
    run.create("k1", "o1")
    run.order("o1", "k1")
    result = run.check()
    assert [(i.name, i.title) for i in result.invariants] == [(i.name, i.title) for i in INVARIANTS]
    assert f'name="{INVARIANTS[0].name}"' in junit_xml(result)
    assert invariant_title("one_payment_per_order") == "One payment per order"
    assert invariant_title("from_a_newer_version") == "from_a_newer_version"


def test_an_export_phase_invariant_is_found_from_the_export_alone() -> None:
    state = load_export([
        {"kind": "order", "id": "o1", "tenant": "default", "idempotency_key": "k", "sku": "s", "quantity": 1,
         "amount_cents": 10, "status": "PAID"},
        {"kind": "payment", "order_id": "o1", "provider_ref": "p1", "amount_cents": 10, "source": "api"},
        {"kind": "payment", "order_id": "o1", "provider_ref": "p2", "amount_cents": 10, "source": "webhook"},
        {"kind": "inventory", "sku": "s", "available": 9, "added_total": 10},
    ])
    findings = Findings(10)
    evaluate_export(state, findings)
    assert findings.counts["one_payment_per_order"] == 1
    assert all(findings.counts[i.name] == 0 for i in INVARIANTS if i.phase == "history")


def test_each_export_line_is_parsed_once_into_its_record() -> None:
    state = load_export([
        {"kind": "order", "id": "o1", "tenant": "t1", "idempotency_key": "k", "sku": "s", "quantity": 2,
         "amount_cents": 10, "status": "PAID"},
        {"kind": "payment", "order_id": "o1", "provider_ref": "p1", "amount_cents": 10, "source": "api",
         "source_id": "k", "applied_at": 1.0},
        {"kind": "inventory", "sku": "s", "available": 8, "added_total": 10},
    ])
    order = state.orders["o1"]
    assert isinstance(order, ExportOrder) and order.tenant == "t1" and order.quantity == 2
    [payment] = state.payments["o1"]
    assert isinstance(payment, ExportPayment) and payment.order_id == "o1" and payment.source_id == "k"
    assert state.inventory["s"] == InventoryLine("s", 8, 10)


def test_an_inventory_count_that_is_not_a_number_is_a_checker_error() -> None:
    with pytest.raises(CheckerError, match="available is not an integer"):
        load_export([{"kind": "inventory", "sku": "s", "available": "lots", "added_total": 10}])
