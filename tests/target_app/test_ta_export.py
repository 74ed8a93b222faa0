"""The export hides nothing indexed: a broken order is reported, not skipped, and
dead letters carry what a checker needs to tell a parked payment from poison."""

from __future__ import annotations

import json

from ta_helpers import INTERNAL, create_order

from target_app.consumer import Consumer, publish_payment


def export(client) -> list[dict]:
    response = client.get("/internal/v1/export", headers=INTERNAL)
    assert response.status_code == 200
    return [json.loads(line) for line in response.data.decode().splitlines()]


def test_an_indexed_order_whose_hash_is_empty_or_unreadable_is_reported_broken(client, rclient):
    good = create_order(client)
    rclient.sadd("ta:orders", "ord_empty", "ord_garbled")
    rclient.hset("ta:order:ord_garbled", mapping={"status": "PAID", "quantity": "many", "amount_cents": "x"})
    rclient.rpush("ta:order:ord_empty:payments", "not json")
    orders = {line["id"]: line for line in export(client) if line["kind"] == "order"}
    assert set(orders) == {good["id"], "ord_empty", "ord_garbled"}
    assert orders["ord_empty"] == {"kind": "order", "id": "ord_empty", "status": None, "broken": True}
    assert orders["ord_garbled"] == {"kind": "order", "id": "ord_garbled", "status": None, "broken": True}
    assert "broken" not in orders[good["id"]]
    payments = [line for line in export(client) if line["kind"] == "payment"]
    assert payments == [{"kind": "payment", "order_id": "ord_empty", "broken": True}]


def test_dead_letters_carry_reason_fields_and_validity(settings, client, rclient):
    consumer = Consumer(rclient, settings, name="c1")
    consumer.ensure_group()
    entries = [publish_payment(rclient, "payments", "", "ord_1", "pr_1", 1000)]
    rclient.xadd("payments", {"message_id": "m-bad", "order_id": "ord_1", "amount_cents": "-3"})
    consumer.dead_letter(entries[0], {"message_id": "", "order_id": "ord_1", "provider_ref": "pr_1",
                                      "amount_cents": "1000"}, 1, "no message_id")
    consumer.dead_letter("1-1", {"message_id": "m-bad", "order_id": "ord:1", "amount_cents": "-3"}, 4,
                         "handler failed 4 times")
    # a dead letter written before the flat fields existed
    rclient.xadd("payments-dead", {"message_id": "m-old", "entry_id": "1-2", "deliveries": "6",
                                   "reason": "too many deliveries",
                                   "fields": json.dumps({"message_id": "m-old", "order_id": "ord_2",
                                                         "provider_ref": "pr_2", "amount_cents": "500"})})
    dead = [line for line in export(client) if line["kind"] == "dead_letter"]
    assert dead == [
        {"kind": "dead_letter", "message_id": None, "entry_id": entries[0], "deliveries": 1,
         "reason": "no message_id", "order_id": "ord_1", "provider_ref": "pr_1", "amount_cents": 1000,
         "valid": False},
        {"kind": "dead_letter", "message_id": "m-bad", "entry_id": "1-1", "deliveries": 4,
         "reason": "handler failed 4 times", "order_id": "ord:1", "provider_ref": None,
         "amount_cents": None, "valid": False},
        {"kind": "dead_letter", "message_id": "m-old", "entry_id": "1-2", "deliveries": 6,
         "reason": "too many deliveries", "order_id": "ord_2", "provider_ref": "pr_2", "amount_cents": 500,
         "valid": True},
    ]
    assert export(client)[-1]["messages_dead_lettered"] == 2
