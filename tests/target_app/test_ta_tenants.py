"""Orders belong to their tenant: another tenant's reads and payments get 404.

Webhooks and stream messages are tenant-less and pay any order. The `order-tenant`
negative control lets every tenant read and pay every order.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from ta_helpers import ORDER, signed_headers, webhook_body

from target_app.app import create_app


def create(client, tenant: str | None) -> dict:
    headers = {"Idempotency-Key": uuid.uuid4().hex}
    if tenant:
        headers["X-Tenant-ID"] = tenant
    response = client.post("/api/v1/orders", json=ORDER, headers=headers)
    assert response.status_code == 201, response.data
    return response.json


def pay(client, order_id: str, tenant: str | None, ref: str = "pr_1"):
    headers = {"Idempotency-Key": uuid.uuid4().hex}
    if tenant:
        headers["X-Tenant-ID"] = tenant
    return client.post(f"/api/v1/orders/{order_id}/payments", json={"provider_ref": ref, "amount_cents": 1000},
                       headers=headers)


def test_another_tenant_cannot_read_or_pay_an_order(client, rclient):
    order = create(client, "A")
    read = client.get(f"/api/v1/orders/{order['id']}", headers={"X-Tenant-ID": "B"})
    assert read.status_code == 404 and read.json["type"] == "/problems/unknown-order"
    assert read.content_type == "application/problem+json"
    paid = pay(client, order["id"], "B")
    assert paid.status_code == 404 and paid.json["type"] == "/problems/unknown-order"
    assert client.get(f"/api/v1/orders/{order['id']}").status_code == 404  # `default` is a tenant too
    assert rclient.hget("ta:counters", "tenant_refusals") == "3"
    assert rclient.hget(f"ta:order:{order['id']}", "status") == "INVENTORY_RESERVED"
    assert rclient.llen(f"ta:order:{order['id']}:payments") == 0
    own = client.get(f"/api/v1/orders/{order['id']}", headers={"X-Tenant-ID": "A"})
    assert own.status_code == 200 and own.json["tenant"] == "A"
    assert pay(client, order["id"], "A").status_code == 200


def test_the_default_tenant_owns_orders_made_without_the_header(client):
    order = create(client, None)
    assert client.get(f"/api/v1/orders/{order['id']}").status_code == 200
    assert client.get(f"/api/v1/orders/{order['id']}", headers={"X-Tenant-ID": "default"}).status_code == 200
    assert pay(client, order["id"], "other").status_code == 404
    assert pay(client, order["id"], None).status_code == 200


def test_webhooks_are_tenant_less(client):
    order = create(client, "A")
    body = webhook_body(order["id"], "pr_1")
    response = client.post("/webhooks/payments", data=body, headers=signed_headers(body))
    assert response.status_code == 200 and response.json["order"]["tenant"] == "A"


def test_order_tenant_mutant_lets_any_tenant_read_and_pay(settings, rclient):
    """The negative control: tenant B reads and pays tenant A's order."""
    client = create_app(replace(settings, unsafe_disable=frozenset({"order-tenant"}))).test_client()
    order = create(client, "A")
    read = client.get(f"/api/v1/orders/{order['id']}", headers={"X-Tenant-ID": "B"})
    assert read.status_code == 200 and read.json["tenant"] == "A"
    paid = pay(client, order["id"], "B")
    assert paid.status_code == 200 and paid.json["order"]["status"] == "PAID"
    assert rclient.hget("ta:counters", "tenant_refusals") is None
