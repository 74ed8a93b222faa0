"""Real concurrency: gunicorn with several worker processes, 50 requests at once."""

from __future__ import annotations

import json
import threading
import uuid

import redis
import requests
from ta_helpers import ORDER, signed_headers, webhook_body

CONCURRENCY = 50


def burst(send) -> list[requests.Response]:
    """Run `send()` from 50 threads released together by a barrier."""
    barrier = threading.Barrier(CONCURRENCY)
    responses: list = [None] * CONCURRENCY

    def worker(index: int) -> None:
        with requests.Session() as session:
            barrier.wait(10)
            responses[index] = send(session)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(CONCURRENCY)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return responses


def orders_for_key(rclient: redis.Redis, key: str) -> list[str]:
    return [oid for oid in rclient.smembers("ta:orders")
            if rclient.hget(f"ta:order:{oid}", "idempotency_key") == key]


def same_key_burst(url: str, key: str) -> list[requests.Response]:
    return burst(lambda s: s.post(url + "/api/v1/orders", json=ORDER,
                                  headers={"Idempotency-Key": key}, timeout=20))


def test_fifty_simultaneous_requests_with_one_key_create_one_order(gunicorn, rclient):
    server = gunicorn(workers=4)
    responses = same_key_burst(server.url, "double-click")
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {201, 409}, statuses
    created = [r for r in responses if r.status_code == 201]
    assert len({r.json()["id"] for r in created}) == 1
    assert sum(1 for r in created if "Idempotent-Replayed" not in r.headers) == 1
    for r in responses:
        if r.status_code == 409:
            assert r.headers["Content-Type"] == "application/problem+json"
            assert "Retry-After" in r.headers
    assert len(orders_for_key(rclient, "double-click")) == 1
    assert rclient.hget("ta:inventory:sku-1", "available") == "999"


def test_api_mutant_creates_duplicate_orders(gunicorn, rclient):
    server = gunicorn(workers=4, unsafe_disable={"api"})
    responses = same_key_burst(server.url, "double-click")
    assert all(r.status_code == 201 for r in responses)
    assert not any("Idempotent-Replayed" in r.headers for r in responses)
    assert len(orders_for_key(rclient, "double-click")) == CONCURRENCY


def create_order(url: str) -> str:
    response = requests.post(url + "/api/v1/orders", json=ORDER,
                             headers={"Idempotency-Key": uuid.uuid4().hex}, timeout=10)
    assert response.status_code == 201
    return response.json()["id"]


def webhook_burst(url: str, order_id: str) -> list[requests.Response]:
    body = webhook_body(order_id, "pr_1", event_id="evt_dup")
    headers = signed_headers(body)
    return burst(lambda s: s.post(url + "/webhooks/payments", data=body, headers=headers, timeout=20))


def test_fifty_identical_webhooks_apply_one_payment(gunicorn, rclient):
    server = gunicorn(workers=4)
    order_id = create_order(server.url)
    responses = webhook_burst(server.url, order_id)
    assert [r.status_code for r in responses] == [200] * CONCURRENCY
    assert sum(1 for r in responses if not r.json()["already_paid"]) == 1
    payments = rclient.lrange(f"ta:order:{order_id}:payments", 0, -1)
    assert len(payments) == 1 and json.loads(payments[0])["source"] == "webhook"
    assert rclient.hget("ta:counters", "domain_already_paid") == str(CONCURRENCY - 1)


def test_domain_mutant_applies_duplicate_webhook_payments(gunicorn, rclient):
    server = gunicorn(workers=4, unsafe_disable={"domain"})
    order_id = create_order(server.url)
    responses = webhook_burst(server.url, order_id)
    assert [r.status_code for r in responses] == [200] * CONCURRENCY
    assert rclient.llen(f"ta:order:{order_id}:payments") == CONCURRENCY
