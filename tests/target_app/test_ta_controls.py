"""The negative controls of TARGET_APP_UNSAFE_DISABLE that break one domain or webhook
rule each (the others are tested beside the rule they break), and the list itself."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace

import pytest
from ta_helpers import SECRET, create_order, webhook_body

from target_app.app import create_app
from target_app.errors import ConfigError
from target_app.inbox import Inbox, PaymentMessage
from target_app.settings import UNSAFE_LAYERS, Settings, parse_unsafe_disable
from target_app.webhooks import sign_webhook

CONTROLS = ("api", "api-fingerprint", "api-tenant", "incomplete-body", "order-tenant", "domain",
            "domain-amount", "webhook-signature", "inbox", "inbox-nonatomic", "inbox-dead-letter",
            "consumer-ack-early", "domain-nonatomic", "recovery-nonatomic", "lease-wall-clock")


def test_every_control_is_listed_with_a_description():
    assert set(UNSAFE_LAYERS) == set(CONTROLS)
    assert all(isinstance(text, str) and text and "\n" not in text for text in UNSAFE_LAYERS.values())
    with pytest.raises(TypeError):
        UNSAFE_LAYERS["new"] = "x"  # type: ignore[index]
    assert parse_unsafe_disable(",".join(CONTROLS)) == frozenset(CONTROLS)
    with pytest.raises(ConfigError):
        parse_unsafe_disable("domain-amounts")
    assert Settings.from_env({"TARGET_APP_UNSAFE_DISABLE": "webhook-signature"}).unsafe("webhook-signature")


def pay(client, order_id: str, amount: int):
    return client.post(f"/api/v1/orders/{order_id}/payments", json={"provider_ref": "pr_1", "amount_cents": amount},
                       headers={"Idempotency-Key": uuid.uuid4().hex})


def test_domain_amount_mutant_accepts_a_wrong_amount(settings, rclient):
    mutant = replace(settings, unsafe_disable=frozenset({"domain-amount"}))
    client = create_app(mutant).test_client()
    order = create_order(client)
    response = pay(client, order["id"], 5)
    assert response.status_code == 200 and response.json["order"]["status"] == "PAID"
    assert [p["amount_cents"] for p in response.json["order"]["payments"]] == [5]
    # the stream path too
    other = create_order(client)
    assert Inbox.for_settings(rclient, mutant).process(PaymentMessage("m1", other["id"], "pr_2", 7)) == "paid"
    # and only the amount rule is gone: the state guard still holds
    assert pay(client, order["id"], 5).json["already_paid"] is True


def test_the_correct_app_refuses_a_wrong_amount(client, rclient):
    order = create_order(client)
    assert pay(client, order["id"], 5).status_code == 422
    assert Inbox.for_settings(rclient, Settings()).process(PaymentMessage("m1", order["id"], "pr_2", 7)) == \
        "amount_mismatch"
    assert rclient.llen(f"ta:order:{order['id']}:payments") == 0


def test_webhook_signature_mutant_accepts_tampered_and_missing_signatures(settings, rclient):
    client = create_app(replace(settings, unsafe_disable=frozenset({"webhook-signature"}))).test_client()
    order = create_order(client)
    body = webhook_body(order["id"], "pr_1")
    tampered = sign_webhook(SECRET, body + b" ", int(time.time()))
    response = client.post("/webhooks/payments", data=body,
                           headers={"Webhook-Signature": tampered, "Content-Type": "application/json"})
    assert response.status_code == 200 and response.json["order"]["status"] == "PAID"
    second = create_order(client)
    body = webhook_body(second["id"], "pr_2", event_id="evt_2")
    assert client.post("/webhooks/payments", data=body).status_code == 200  # no signature at all
    assert rclient.hget("ta:counters", "webhook_bad_signatures") is None
