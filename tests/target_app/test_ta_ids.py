"""Ids that become part of Redis keys (order ids, SKUs) must be `[A-Za-z0-9_.-]{1,200}`.

An order id `<id>:payments` names another order's payments list; before validation it
made Redis answer WRONGTYPE (a 503 over HTTP, a dead letter in the consumer). Every
pattern is applied with fullmatch, so a trailing newline is refused too.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import pytest
from ta_helpers import ORDER, create_order, signed_headers, webhook_body

from target_app.consumer import Consumer, publish_payment
from target_app.inbox import Inbox, PaymentMessage
from target_app.validation import is_identifier


def pay(client, order_id: str, **body):
    return client.post(f"/api/v1/orders/{order_id}/payments",
                       json={"provider_ref": "pr_1", "amount_cents": 1000, **body},
                       headers={"Idempotency-Key": uuid.uuid4().hex})


@pytest.fixture
def paid_order(client) -> str:
    order = create_order(client)
    assert pay(client, order["id"]).status_code == 200  # its payments list exists now
    return order["id"]


def test_an_order_id_naming_another_key_is_404_not_503(client, paid_order):
    for bad in (f"{paid_order}:payments", "ord:1", "ord%0A", "a" * 201):
        response = client.get(f"/api/v1/orders/{bad}")
        assert response.status_code == 404 and response.json["type"] == "/problems/unknown-order", bad
        assert pay(client, bad).status_code == 404


def test_an_order_id_naming_another_key_in_a_webhook_is_422(client, paid_order):
    for bad in (f"{paid_order}:payments", paid_order + "\n", "ord 1"):
        body = webhook_body(bad, "pr_2")
        response = client.post("/webhooks/payments", data=body, headers=signed_headers(body))
        assert response.status_code == 422 and response.json["field"] == "order_id", bad


@pytest.mark.parametrize("change", [
    {"sku": "sku-1\n"}, {"sku": "sku:1"}, {"sku": "sku/1"}, {"currency": "EUR\n"},
])
def test_a_trailing_newline_or_a_key_separator_is_422(client, rclient, change):
    response = client.post("/api/v1/orders", json={**ORDER, **change},
                           headers={"Idempotency-Key": uuid.uuid4().hex})
    assert response.status_code == 422, change
    assert rclient.scard("ta:orders") == 0


def test_identifiers_use_fullmatch(client, paid_order):
    assert not is_identifier("pr_1\n") and is_identifier("pr_1")
    assert pay(client, paid_order, provider_ref="pr_1\n").status_code == 422
    body = json.dumps({"event_id": "evt\n", "type": "payment.succeeded", "order_id": paid_order,
                       "provider_ref": "pr_1", "amount_cents": 1000}).encode()
    assert client.post("/webhooks/payments", data=body, headers=signed_headers(body)).status_code == 422


def test_a_malformed_path_never_reaches_the_idempotency_layer_as_a_payment_path(client, rclient):
    from target_app.idempotency import requires_idempotency_key

    assert requires_idempotency_key("POST", "/api/v1/orders/ord_1/payments")
    assert not requires_idempotency_key("POST", "/api/v1/orders/ord_1/payments\n")


def test_a_message_with_a_malformed_order_id_is_recorded_as_unknown_order(settings, client, rclient,
                                                                          paid_order):
    settings = replace(settings, max_deliveries=1, consumer_block_ms=10)
    consumer = Consumer(rclient, settings, name="c1")
    consumer.ensure_group()
    entry = publish_payment(rclient, "payments", "m-colon", f"{paid_order}:payments", "pr_9", 1000)
    assert consumer.step(block_ms=10) == 1
    [effect] = [json.loads(raw) for raw in rclient.lrange("ta:message_effects", 0, -1)]
    assert effect["message_id"] == "m-colon" and effect["outcome"] == "unknown_order"
    assert rclient.xlen("payments-dead") == 0
    assert rclient.xpending("payments", "target-app")["pending"] == 0
    assert entry
    # the key it named is untouched
    assert rclient.llen(f"ta:order:{paid_order}:payments") == 1
    assert PaymentMessage("m", "ord:1", "pr", 5).disposition == "unknown_order"
    assert PaymentMessage("m", "", "pr", 5).disposition == "invalid"
    assert PaymentMessage("m", "ord_1", "pr", None).disposition == "invalid"
    assert Inbox(rclient).process(PaymentMessage("m-nl", "ord_1\n", "pr", 5)) == "unknown_order"
