"""Bodies cut off in transit and oversized chunked bodies: refused whole, never handled.

A body shorter than its Content-Length is 400 `/problems/incomplete-body`, counted,
never fingerprinted nor stored, on the guarded endpoints and the webhook alike; the
`incomplete-body` negative control handles (and stores) it as if it were complete.
"""

from __future__ import annotations

import json
import socket
from dataclasses import replace

from ta_helpers import ORDER, create_order, signed_headers, webhook_body

from target_app.app import create_app


def short(client, path: str, body: bytes, *, announced: int, headers: dict | None = None):
    """POST `body` while Content-Length announces `announced` bytes (the rest never arrives)."""
    return client.post(path, data=body, headers=headers or {},
                       environ_overrides={"CONTENT_LENGTH": str(announced)})


def counter(rclient, name: str) -> int:
    return int(rclient.hget("ta:counters", name) or 0)


def test_a_short_order_body_is_400_never_stored_and_the_full_retry_runs(client, rclient):
    full = json.dumps(ORDER).encode()
    cut = short(client, "/api/v1/orders", full[:20], announced=len(full),
                headers={"Idempotency-Key": "cut-1", "Content-Type": "application/json"})
    assert cut.status_code == 400 and cut.json["type"] == "/problems/incomplete-body"
    assert cut.content_type == "application/problem+json"
    assert counter(rclient, "api_incomplete_bodies") == 1
    assert list(rclient.scan_iter("ta:idem:*")) == []  # no begin: nothing fingerprinted
    assert rclient.scard("ta:orders") == 0
    retry = client.post("/api/v1/orders", data=full,
                        headers={"Idempotency-Key": "cut-1", "Content-Type": "application/json"})
    assert retry.status_code == 201 and "Idempotent-Replayed" not in retry.headers


def test_a_short_payment_body_is_400(client, rclient):
    order = create_order(client)
    full = json.dumps({"provider_ref": "pr_1", "amount_cents": 1000}).encode()
    cut = short(client, f"/api/v1/orders/{order['id']}/payments", full[:-1], announced=len(full),
                headers={"Idempotency-Key": "cut-pay"})
    assert cut.status_code == 400 and cut.json["type"] == "/problems/incomplete-body"
    assert client.get(f"/api/v1/orders/{order['id']}").json["status"] == "INVENTORY_RESERVED"


def test_a_short_webhook_is_400_and_never_handled(client, rclient):
    order = create_order(client)
    body = webhook_body(order["id"], "pr_1")
    # signed over the prefix that arrives: a cut body must not count as a valid event
    prefix = body[:-5]
    cut = short(client, "/webhooks/payments", prefix, announced=len(body), headers=signed_headers(prefix))
    assert cut.status_code == 400 and cut.json["type"] == "/problems/incomplete-body"
    assert counter(rclient, "api_incomplete_bodies") == 1
    assert counter(rclient, "webhook_bad_signatures") == 0  # refused before the signature check
    assert client.get(f"/api/v1/orders/{order['id']}").json["payments"] == []


def test_the_same_rule_without_the_api_layer(settings, rclient):
    client = create_app(replace(settings, unsafe_disable=frozenset({"api"}))).test_client()
    full = json.dumps(ORDER).encode()
    cut = short(client, "/api/v1/orders", full[:30], announced=len(full), headers={"Idempotency-Key": "k"})
    assert cut.status_code == 400 and cut.json["type"] == "/problems/incomplete-body"
    assert rclient.scard("ta:orders") == 0


def test_incomplete_body_mutant_stores_the_broken_request(settings, rclient):
    """The negative control: the short body is fingerprinted and its 400 stored, so the
    full retry with the same key is refused (409) for the key's whole TTL."""
    client = create_app(replace(settings, unsafe_disable=frozenset({"incomplete-body"}))).test_client()
    full = json.dumps(ORDER).encode()
    headers = {"Idempotency-Key": "cut-m", "Content-Type": "application/json"}
    cut = short(client, "/api/v1/orders", full[:20], announced=len(full), headers=headers)
    assert cut.status_code == 400 and cut.json["type"] == "/problems/malformed-json"  # handled
    assert len(list(rclient.scan_iter("ta:idem:*"))) == 1  # and stored
    retry = client.post("/api/v1/orders", data=full, headers=headers)
    assert retry.status_code == 409 and retry.json["type"] == "/problems/idempotency-key-mismatch"
    assert counter(rclient, "api_incomplete_bodies") == 0


def test_a_chunked_webhook_over_the_limit_is_413(settings, rclient):
    client = create_app(replace(settings, max_body_bytes=256)).test_client()
    order = create_order(client)
    body = json.dumps({"event_id": "e-big", "type": "payment.succeeded", "order_id": order["id"],
                       "provider_ref": "pr_1", "amount_cents": 1000, "pad": "x" * 400}).encode()
    # No Content-Length (chunked): the server marks the stream as terminated.
    chunked = {"CONTENT_LENGTH": "", "wsgi.input_terminated": True}
    response = client.post("/webhooks/payments", data=body, headers=signed_headers(body[:257]),
                           environ_overrides=chunked)
    assert response.status_code == 413 and response.json["type"] == "/problems/body-too-large"
    assert client.get(f"/api/v1/orders/{order['id']}").json["payments"] == []
    small = webhook_body(order["id"], "pr_1")
    ok = client.post("/webhooks/payments", data=small, headers=signed_headers(small),
                     environ_overrides=chunked)
    assert ok.status_code == 200 and ok.json["order"]["status"] == "PAID"


def raw_post(url: str, path: str, headers: dict[str, str], body: bytes, announced: int) -> tuple[int, dict]:
    """Send `body` after headers announcing `announced` bytes, then half-close: what a
    `limit_data` toxic does to a request in transit."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {announced}\r\nConnection: close\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
        sock.sendall(head.encode() + body)
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    status = int(reply.split(b" ", 2)[1])
    return status, json.loads(reply.split(b"\r\n\r\n", 1)[1] or b"{}")


def test_gunicorn_refuses_a_body_cut_off_in_transit(gunicorn, rclient):
    server = gunicorn(workers=1)
    full = json.dumps(ORDER).encode()
    status, problem = raw_post(server.url, "/api/v1/orders",
                               {"Idempotency-Key": "wire-cut", "Content-Type": "application/json"},
                               full[:25], len(full))
    assert status == 400 and problem["type"] == "/problems/incomplete-body"
    assert list(rclient.scan_iter("ta:idem:*")) == [] and rclient.scard("ta:orders") == 0
