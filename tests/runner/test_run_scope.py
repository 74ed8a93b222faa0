from harness.run_scope import counters_of, scoped_export

EXPORT = [
    {"kind": "order", "id": "old", "sku": "sku-1", "quantity": 2, "created_at": 10.0},
    {"kind": "payment", "order_id": "old", "provider_ref": "a"},
    {"kind": "order", "id": "new", "sku": "sku-1", "quantity": 1, "created_at": 20.0},
    {"kind": "payment", "order_id": "new", "provider_ref": "b"},
    {"kind": "message_effect", "message_id": "m-old", "order_id": "old", "at": 12.0},
    {"kind": "message_effect", "message_id": "m-new", "order_id": "new", "at": 21.0},
    {"kind": "message_effect", "message_id": "m-gone", "order_id": "unknown", "at": 13.0},
    {"kind": "inventory", "sku": "sku-1", "available": 97, "added_total": 100},
    {"kind": "counters", "api_replays": 5, "domain_already_paid": 1},
]


def test_without_a_scope_the_export_is_unchanged() -> None:
    assert list(scoped_export(EXPORT, None)) == EXPORT


def test_older_runs_drop_out_and_stock_still_balances() -> None:
    scope = {"since": 15.0, "counters_before": {"api_replays": 3}}
    records = list(scoped_export(EXPORT, scope))
    assert [r.get("id") for r in records if r["kind"] == "order"] == ["new"]
    assert [r["provider_ref"] for r in records if r["kind"] == "payment"] == ["b"]
    assert [r["message_id"] for r in records if r["kind"] == "message_effect"] == ["m-new"]
    (inventory,) = [r for r in records if r["kind"] == "inventory"]
    assert inventory["added_total"] - 1 == inventory["available"]
    (counters,) = [r for r in records if r["kind"] == "counters"]
    assert counters == {"kind": "counters", "api_replays": 2, "domain_already_paid": 1}


def test_counters_of_reads_the_counters_line() -> None:
    assert counters_of(EXPORT) == {"api_replays": 5, "domain_already_paid": 1}
