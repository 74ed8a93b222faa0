"""The duplicate-producing flows the locustfiles run, one round per Locust task.

Each flow plays a real source of duplicates and tags every deliberate duplicate
with an `expect` value, so a run can count what it provoked:

- API clients: retries after a timeout (`retry_after_timeout`) or an in-flight 409
  (`retry_after_inflight`) with the same key and body, two clicks at once
  (`double_click`), a reused key with another body (`fingerprint_mismatch`).
- A payment provider: webhook bursts, delayed and out-of-order copies, a second
  `provider_ref` (`conflicting_ref`), a wrong amount, and copies whose signature is
  stale, future-dated, tampered or missing.
- A producer: the same `message_id` as a new entry (`producer_duplicate`) and the
  same fact under a new id (`same_fact_new_id`).
- All three channels at once for one payment (`cross_channel`).

Amounts always equal the order's amount except in the deliberate wrong-amount
case, and every intended payment gets its own `provider_ref`.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from harness.loadgen.actor import Actor, DelayedWebhook, Order, concurrently
from harness.loadgen.http import Reply
from target_app.webhooks import SIGNATURE_HEADER, sign_webhook

ORDERS_PATH = "/api/v1/orders"
WEBHOOK_PATH = "/webhooks/payments"
MAX_ATTEMPTS = 4
# A deliberately impatient client: gives up before the app can answer, so the
# response is lost after the server committed, even without network faults.
IMPATIENT_TIMEOUT = 0.001
IMPATIENT_SHARE = 0.15
BAD_SIGNATURES = ("stale_signature", "future_signature", "tampered_signature", "missing_signature")
SIGNATURE_SKEW = 3600  # seconds: far outside the app's 300 s tolerance


# --- API clients -----------------------------------------------------------------

def order_payload(actor: Actor) -> dict[str, Any]:
    return {
        "sku": actor.rng.choice(actor.settings.skus),
        "quantity": 1,
        "amount_cents": actor.rng.randrange(100, 100_000),
        "currency": "EUR",
    }


def send_with_retries(actor: Actor, op: str, path: str, payload: dict[str, Any], *,
                      headers: dict[str, str], fields: dict[str, Any],
                      expect: str | None = None, impatient: bool = False) -> Reply:
    """Send, then retry the same key and body after an `info` or an in-flight 409."""
    timeout = IMPATIENT_TIMEOUT if impatient else None
    reply = actor.post(op, path, payload, headers=headers, fields=fields, expect=expect,
                       timeout=timeout)
    for attempt in range(1, MAX_ATTEMPTS):
        if reply.completion == "info":
            retry_expect = "retry_after_timeout"
        elif reply.retry_after:
            retry_expect = "retry_after_inflight"
        else:
            break
        actor.sleep_backoff(attempt)
        reply = actor.post(op, path, payload, headers=headers, fields=fields, expect=retry_expect)
    return reply


def _create_request(actor: Actor, key: str, payload: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    headers = {"Idempotency-Key": key, **actor.tenant_headers()}
    fields = {"tenant": actor.tenant, "idempotency_key": key, "sku": payload["sku"],
              "quantity": payload["quantity"], "amount_cents": payload["amount_cents"]}
    return headers, fields


def _order_from(actor: Actor, reply: Reply, key: str, payload: dict[str, Any]) -> Order | None:
    if reply.completion != "ok" or not isinstance(reply.data, dict):
        return None
    order_id = reply.data.get("id")
    if not isinstance(order_id, str):
        return None
    order = Order(order_id, actor.tenant, key, payload)
    actor.recent_orders.append(order)
    return order


def create_order(actor: Actor, *, expect: str | None = None) -> Order | None:
    key = actor.new_id("k")
    payload = order_payload(actor)
    headers, fields = _create_request(actor, key, payload)
    impatient = actor.rng.random() < IMPATIENT_SHARE
    reply = send_with_retries(actor, "create_order", ORDERS_PATH, payload, headers=headers,
                              fields=fields, expect=expect, impatient=impatient)
    return _order_from(actor, reply, key, payload)


def pay(actor: Actor, order: Order, provider_ref: str, *, expect: str | None = None) -> Reply:
    key = actor.new_id("k")
    payload = {"provider_ref": provider_ref, "amount_cents": order.amount_cents}
    headers = {"Idempotency-Key": key, **actor.tenant_headers()}
    fields = {"tenant": actor.tenant, "idempotency_key": key, "order_id": order.id,
              "provider_ref": provider_ref, "amount_cents": order.amount_cents}
    impatient = actor.rng.random() < IMPATIENT_SHARE
    return send_with_retries(actor, "pay", f"{ORDERS_PATH}/{order.id}/payments", payload,
                             headers=headers, fields=fields, expect=expect, impatient=impatient)


def double_click_create(actor: Actor) -> Order | None:
    """Two submissions of one form at once: same key, same body, two connections."""
    key = actor.new_id("k")
    payload = order_payload(actor)
    headers, fields = _create_request(actor, key, payload)

    def click(clicker: Actor) -> Reply:
        return send_with_retries(clicker, "create_order", ORDERS_PATH, payload, headers=headers,
                                 fields=fields, expect="double_click")

    replies = concurrently([(actor, click), (actor.twins(1)[0], click)], timeout=_branch_timeout(actor))
    for reply in replies:
        if isinstance(reply, Reply):
            order = _order_from(actor, reply, key, payload)
            if order is not None:
                return order
    return None


def fingerprint_mismatch(actor: Actor, order: Order) -> Reply:
    """Reuse an order's key with another body: the API layer must answer 409."""
    payload = dict(order.payload, quantity=int(order.payload["quantity"]) + 1)
    headers, fields = _create_request(actor, order.idempotency_key, payload)
    return actor.post("create_order", ORDERS_PATH, payload, headers=headers, fields=fields,
                      expect="fingerprint_mismatch", must_reject=True)


def timeout_replay_round(actor: Actor) -> None:
    if actor.rng.random() < 0.35:
        order = double_click_create(actor)
    else:
        order = create_order(actor)
    if order is None:
        return
    if actor.rng.random() < 0.35:
        fingerprint_mismatch(actor, order)
    pay(actor, order, actor.new_id("pr"))


# --- payment provider --------------------------------------------------------------

def webhook_payload(order: Order, provider_ref: str, event_id: str, amount_cents: int) -> dict[str, Any]:
    return {"event_id": event_id, "type": "payment.succeeded", "order_id": order.id,
            "provider_ref": provider_ref, "amount_cents": amount_cents}


def signature_header(secret: str, body: bytes, kind: str, *, timestamp: int | None = None) -> dict[str, str]:
    """The Webhook-Signature header for a valid or deliberately bad signature."""
    now = int(time.time()) if timestamp is None else timestamp
    if kind == "missing_signature":
        return {}
    if kind == "stale_signature":
        return {SIGNATURE_HEADER: sign_webhook(secret, body, now - SIGNATURE_SKEW)}
    if kind == "future_signature":
        return {SIGNATURE_HEADER: sign_webhook(secret, body, now + SIGNATURE_SKEW)}
    value = sign_webhook(secret, body, now)
    if kind == "tampered_signature":
        last = value[-1]
        value = value[:-1] + ("0" if last != "0" else "1")
    return {SIGNATURE_HEADER: value}


def send_webhook(actor: Actor, payload: dict[str, Any], *, signature: str = "valid",
                 timestamp: int | None = None, expect: str | None = None,
                 must_reject: bool = False) -> Reply:
    body = orjson.dumps(payload)
    headers = signature_header(actor.settings.webhook_secret, body, signature, timestamp=timestamp)
    fields = {"tenant": "default", "order_id": payload["order_id"], "event_id": payload["event_id"],
              "provider_ref": payload["provider_ref"], "amount_cents": payload["amount_cents"]}
    return actor.post("webhook", WEBHOOK_PATH, body, headers=headers, fields=fields,
                      expect=expect, must_reject=must_reject)


def deliver_due_webhooks(actor: Actor) -> None:
    """Send the delayed copies whose time has come (a provider's late re-delivery)."""
    now = time.monotonic()
    due = [copy for copy in actor.delayed if copy.due <= now]
    for copy in due:
        actor.delayed.remove(copy)
        send_webhook(actor, copy.payload, expect="webhook_delayed")


def webhook_round(actor: Actor) -> None:
    deliver_due_webhooks(actor)
    order = create_order(actor)
    if order is None:
        return
    payload = webhook_payload(order, actor.new_id("pr"), actor.new_id("evt"), order.amount_cents)
    # Bad copies first, while the order is still payable: one that slipped through
    # would pay the order and show up as an applied payment.
    for kind in BAD_SIGNATURES:
        send_webhook(actor, payload, signature=kind, expect=kind, must_reject=True)
    wrong = webhook_payload(order, payload["provider_ref"], actor.new_id("evt"), order.amount_cents + 1)
    send_webhook(actor, wrong, expect="wrong_amount", must_reject=True)

    def copy(sender: Actor) -> Reply:
        return send_webhook(sender, payload, expect="webhook_burst")

    burst = [actor, *actor.twins(2)]
    concurrently([(sender, copy) for sender in burst], timeout=_branch_timeout(actor))
    # The provider signed a retry later, and the later copy overtakes the earlier one.
    signed_at = int(time.time())
    send_webhook(actor, payload, timestamp=signed_at, expect="webhook_out_of_order")
    send_webhook(actor, payload, timestamp=signed_at - 5, expect="webhook_out_of_order")
    conflicting = webhook_payload(order, actor.new_id("pr"), actor.new_id("evt"), order.amount_cents)
    send_webhook(actor, conflicting, expect="conflicting_ref", must_reject=True)
    actor.delayed.append(DelayedWebhook(time.monotonic() + actor.rng.uniform(0.2, 1.5), order, payload))


# --- message producer ----------------------------------------------------------------

def message_round(actor: Actor) -> None:
    order = create_order(actor)
    if order is None:
        return
    provider_ref = actor.new_id("pr")
    message_id = actor.new_id("m")
    entry = actor.publish(message_id=message_id, order=order, provider_ref=provider_ref,
                          amount_cents=order.amount_cents)
    # A producer that retries (or just re-sends) appends the same message again.
    copies = 1 if entry is not None else 2
    for _ in range(copies):
        actor.publish(message_id=message_id, order=order, provider_ref=provider_ref,
                      amount_cents=order.amount_cents, expect="producer_duplicate")
    actor.publish(message_id=actor.new_id("m"), order=order, provider_ref=provider_ref,
                  amount_cents=order.amount_cents, expect="same_fact_new_id")


# --- all channels at once ---------------------------------------------------------------

def cross_channel_round(actor: Actor) -> None:
    """One payment through the API, the webhook and the stream at the same time."""
    order = create_order(actor)
    if order is None:
        return
    provider_ref = actor.new_id("pr")
    api_client, provider, producer = actor, *actor.twins(2)
    event = webhook_payload(order, provider_ref, provider.new_id("evt"), order.amount_cents)
    message_id = producer.new_id("m")
    concurrently(
        [
            (api_client, lambda a: pay(a, order, provider_ref, expect="cross_channel")),
            (provider, lambda a: send_webhook(a, event, expect="cross_channel")),
            (producer, lambda a: a.publish(message_id=message_id, order=order, provider_ref=provider_ref,
                                           amount_cents=order.amount_cents, expect="cross_channel")),
        ],
        timeout=_branch_timeout(actor),
    )


def _branch_timeout(actor: Actor) -> float:
    # Enough for every retry of one branch; a branch never waits longer than this.
    return MAX_ATTEMPTS * (actor.settings.request_timeout + 0.6) + 1.0
