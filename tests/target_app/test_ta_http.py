"""Bad inputs, signatures, tenants and the export, through the Flask app."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace

import pytest
from ta_helpers import (
    INTERNAL,
    ORDER,
    SECRET,
    create_order,
    signed_headers,
    webhook_body,
)

from target_app.app import create_app
from target_app.inbox import Inbox, PaymentMessage
from target_app.webhooks import SignatureError, sign_webhook, verify_signature


def assert_problem(response, status: int) -> dict:
    assert response.status_code == status, response.data
    assert response.content_type == "application/problem+json"
    doc = response.json
    assert doc["status"] == status and doc["title"] and doc["detail"] and doc["type"]
    return doc


def nothing_written(rclient) -> None:
    assert rclient.scard("ta:orders") == 0
    assert rclient.hget("ta:inventory:sku-1", "available") == "1000"


@pytest.mark.parametrize("body", [
    b"{", b"", b"[1, 2]", b"null", b'"text"', b"\xff\xfe", b'{"sku": NaN}',
])
def test_malformed_json_is_400(client, rclient, body):
    response = client.post("/api/v1/orders", data=body, headers={"Idempotency-Key": uuid.uuid4().hex})
    assert_problem(response, 400)
    nothing_written(rclient)


@pytest.mark.parametrize("change", [
    {"quantity": True}, {"quantity": 0}, {"quantity": -1}, {"quantity": 1.5}, {"quantity": "1"},
    {"quantity": 10**7}, {"amount_cents": False}, {"amount_cents": 0}, {"amount_cents": -5},
    {"amount_cents": 10**13}, {"amount_cents": None}, {"sku": 7}, {"sku": ""}, {"sku": "a b"},
    {"currency": "eur"}, {"currency": 978}, {"currency": "EURO"},
])
def test_wrong_types_and_ranges_are_422(client, rclient, change):
    response = client.post("/api/v1/orders", json={**ORDER, **change},
                           headers={"Idempotency-Key": uuid.uuid4().hex})
    assert_problem(response, 422)
    nothing_written(rclient)


@pytest.mark.parametrize("field", ["sku", "quantity", "amount_cents", "currency"])
def test_missing_fields_are_422(client, rclient, field):
    body = {k: v for k, v in ORDER.items() if k != field}
    assert_problem(client.post("/api/v1/orders", json=body, headers={"Idempotency-Key": "m" + field}), 422)
    nothing_written(rclient)


def test_unknown_sku_order_and_routes(client, rclient):
    assert_problem(client.post("/api/v1/orders", json={**ORDER, "sku": "nope"},
                               headers={"Idempotency-Key": "u"}), 422)
    nothing_written(rclient)
    assert_problem(client.get("/api/v1/orders/ord_unknown"), 404)
    assert_problem(client.post("/api/v1/orders/ord_unknown/payments",
                               json={"provider_ref": "p", "amount_cents": 1},
                               headers={"Idempotency-Key": "u2"}), 404)
    assert_problem(client.get("/no/such/route"), 404)
    assert "POST" in client.delete("/api/v1/orders").headers["Allow"]
    assert_problem(client.delete("/api/v1/orders"), 405)


def test_bad_payment_bodies(client):
    order = create_order(client)
    url = f"/api/v1/orders/{order['id']}/payments"
    for body in ({"provider_ref": "p"}, {"provider_ref": "p", "amount_cents": True},
                 {"provider_ref": "p", "amount_cents": -1000}, {"provider_ref": 5, "amount_cents": 1000}):
        assert_problem(client.post(url, json=body, headers={"Idempotency-Key": uuid.uuid4().hex}), 422)
    assert client.get(f"/api/v1/orders/{order['id']}").json["status"] == "INVENTORY_RESERVED"


def test_bad_keys_and_tenants(client, rclient):
    for headers in ({}, {"Idempotency-Key": ""}, {"Idempotency-Key": "k" * 256},
                    {"Idempotency-Key": "a\x7fb"}, {"Idempotency-Key": "ok", "X-Tenant-ID": ""}):
        assert_problem(client.post("/api/v1/orders", json=ORDER, headers=headers), 400)
    nothing_written(rclient)


def test_body_over_the_limit_is_413(settings, rclient):
    client = create_app(replace(settings, max_body_bytes=256)).test_client()
    big = json.dumps({**ORDER, "pad": "x" * 400}).encode()
    assert_problem(client.post("/api/v1/orders", data=big, headers={"Idempotency-Key": "big"}), 413)
    assert_problem(client.post("/webhooks/payments", data=big, headers=signed_headers(big)), 413)
    assert_problem(client.put("/internal/v1/inventory/sku-1", data=big, headers=INTERNAL), 413)
    nothing_written(rclient)


def test_inventory_bad_inputs(client):
    for body in ({"available": -1}, {"available": True}, {"available": "3"}, {}):
        assert_problem(client.put("/internal/v1/inventory/sku-1", json=body, headers=INTERNAL), 422)
    assert client.get("/api/v1/inventory/sku-1").json["available"] == 1000


def test_tenant_b_never_gets_tenant_a_response(client, rclient):
    a = client.post("/api/v1/orders", json=ORDER, headers={"Idempotency-Key": "k", "X-Tenant-ID": "A"})
    b = client.post("/api/v1/orders", json=ORDER, headers={"Idempotency-Key": "k", "X-Tenant-ID": "B"})
    assert a.status_code == b.status_code == 201
    assert a.json["id"] != b.json["id"] and "Idempotent-Replayed" not in b.headers
    assert (a.json["tenant"], b.json["tenant"]) == ("A", "B")
    again_b = client.post("/api/v1/orders", json=ORDER, headers={"Idempotency-Key": "k", "X-Tenant-ID": "B"})
    assert again_b.json["id"] == b.json["id"] and again_b.headers["Idempotent-Replayed"] == "true"
    default = client.post("/api/v1/orders", json=ORDER, headers={"Idempotency-Key": "k"})
    assert default.json["tenant"] == "default" and default.json["id"] not in (a.json["id"], b.json["id"])
    assert rclient.scard("ta:orders") == 3


def test_webhook_signatures(client, rclient):
    order = create_order(client)
    body = webhook_body(order["id"], "pr_1")
    now = int(time.time())
    bad = [
        {},
        {"Webhook-Signature": ""},
        {"Webhook-Signature": "garbage"},
        {"Webhook-Signature": f"t={now}"},
        {"Webhook-Signature": f"t=abc,v1={'0' * 64}"},
        {"Webhook-Signature": f"t={now},v1=xyz"},
        {"Webhook-Signature": sign_webhook("wrong-secret", body, now)},
        {"Webhook-Signature": sign_webhook(SECRET, body + b" ", now)},  # tampered body
        {"Webhook-Signature": sign_webhook(SECRET, body, now - 301)},  # stale
        {"Webhook-Signature": sign_webhook(SECRET, body, now + 301)},  # from the future
    ]
    for headers in bad:
        assert_problem(client.post("/webhooks/payments", data=body, headers=headers), 401)
    assert rclient.hget("ta:counters", "webhook_bad_signatures") == str(len(bad))
    assert client.get(f"/api/v1/orders/{order['id']}").json["payments"] == []
    ok = client.post("/webhooks/payments", data=body, headers=signed_headers(body, at=now - 299))
    assert ok.status_code == 200 and ok.json["order"]["status"] == "PAID"


def test_webhook_bad_bodies_after_a_good_signature(client):
    order = create_order(client)
    for document, status in (
        (b"{", 400),
        (json.dumps({"event_id": "e", "type": "payment.failed", "order_id": order["id"],
                     "provider_ref": "p", "amount_cents": 1000}).encode(), 422),
        (webhook_body(order["id"], "p", amount_cents=0), 422),
        (webhook_body("ord_missing", "p"), 404),
        (webhook_body(order["id"], "p", amount_cents=5), 422),
    ):
        assert_problem(client.post("/webhooks/payments", data=document, headers=signed_headers(document)), status)


def test_verify_signature_accepts_rotation_and_rejects_reuse_of_t():
    body = b"{}"
    good = sign_webhook("s", body, 100)
    verify_signature("s", body, f"t=100,v1={'a' * 64},{good.split(',')[1]}", now=100)
    with pytest.raises(SignatureError):
        verify_signature("s", body, f"{good},t=100", now=100)


def test_export_is_ndjson_in_the_documented_format(settings, client, rclient):
    order = create_order(client)
    client.post(f"/api/v1/orders/{order['id']}/payments", json={"provider_ref": "pr_1", "amount_cents": 1000},
                headers={"Idempotency-Key": "pay-1"})
    Inbox(rclient).process(PaymentMessage("m1", order["id"], "pr_1", 1000))
    response = client.get("/internal/v1/export", headers=INTERNAL)
    assert response.status_code == 200 and response.mimetype == "application/x-ndjson"
    lines = [json.loads(line) for line in response.data.decode().splitlines()]
    kinds = [line["kind"] for line in lines]
    assert kinds == ["order", "payment", "message_effect", "inventory", "inventory", "counters"]
    exported_order = lines[0]
    assert set(exported_order) == {"kind", "id", "tenant", "idempotency_key", "sku", "quantity",
                                   "amount_cents", "currency", "status", "created_at"}
    assert exported_order["status"] == "PAID" and exported_order["idempotency_key"] == order["idempotency_key"]
    assert set(lines[1]) == {"kind", "order_id", "provider_ref", "amount_cents", "source", "source_id",
                             "applied_at"}
    assert lines[1]["source"] == "api" and lines[1]["source_id"] == "pay-1"
    assert set(lines[2]) == {"kind", "message_id", "order_id", "provider_ref", "outcome", "at"}
    assert lines[2]["outcome"] == "already_paid"
    assert {"kind": "inventory", "sku": "sku-1", "available": 999, "added_total": 1000} in lines
    counters = lines[-1]
    assert counters["domain_already_paid"] == 1 and counters["messages_dead_lettered"] == 0
    assert set(counters) == {"kind", "api_replays", "api_fingerprint_conflicts", "api_inflight_conflicts",
                             "api_recovered", "api_incomplete_bodies", "tenant_refusals",
                             "domain_already_paid", "domain_conflicts", "domain_amount_mismatches",
                             "inbox_duplicates_skipped", "messages_dead_lettered", "messages_reclaimed",
                             "webhook_bad_signatures"}


def test_export_streams_many_orders(client, rclient):
    for n in range(1200):
        rclient.sadd("ta:orders", f"ord_{n}")
        rclient.hset(f"ta:order:ord_{n}", mapping={"tenant": "default", "sku": "sku-1", "quantity": 1,
                                                    "amount_cents": 1, "currency": "EUR",
                                                    "status": "INVENTORY_RESERVED", "created_at": 1.0})
    lines = client.get("/internal/v1/export", headers=INTERNAL).data.decode().splitlines()
    assert sum(1 for line in lines if '"kind":"order"' in line) == 1200


def test_healthz(client):
    assert client.get("/healthz").json["status"] == "ok"
