"""The duplicate-producing flows the locustfiles run, one round per Locust task.

Each flow plays a real source of duplicates and tags every deliberate duplicate
with an `expect` value, so a run can count what it provoked:

- API clients: retries after a timeout (`retry_after_timeout`) or an in-flight 409
  (`retry_after_inflight`) or a 400 for a body cut in transit
  (`retry_after_bad_request`) with the same key and body, two clicks at once
  (`double_click`), a reused key with another body (`fingerprint_mismatch`).
- Tenants sharing a key space on purpose: every tenant creates with the same
  Idempotency-Key at once (`shared_key`, each must get its own order), and another
  tenant reads or pays a user's order (`cross_tenant_read`, `cross_tenant_pay`: 404).
- A payment provider: webhook bursts, delayed and out-of-order copies, a second
  `provider_ref` (`conflicting_ref`), a wrong amount, and copies whose signature is
  stale, future-dated, tampered or missing.
- A producer: the same `message_id` as a new entry (`producer_duplicate`) and the
  same fact under a new id (`same_fact_new_id`).
- All three channels at once for one payment (`cross_channel`).

Amounts always equal the order's amount except in the deliberate wrong-amount
case, and every intended payment gets its own `provider_ref`. Which `expect`
values must be refused, and with which status, is `harness.history.REJECT_STATUS`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

import orjson

from harness.history import DEFAULT_TENANT
from harness.load.actor import TENANTS, Actor, DelayedWebhook, Order, concurrently
from harness.load.http import Reply
from harness.load.signing import BAD_SIGNATURES, signature_headers

ORDERS_PATH = "/api/v1/orders"
WEBHOOK_PATH = "/webhooks/payments"
MAX_ATTEMPTS = 4
# A deliberately impatient client: gives up before the app can answer, so the
# response is lost after the server committed, even without network faults.
IMPATIENT_TIMEOUT = 0.001
IMPATIENT_SHARE = 0.15
# Shares of timeout_replay rounds (modest: the plain create-and-pay path stays the
# bulk of the load, yet a 10-user, 8-second run makes several of each).
SHARED_KEY_SHARE = 0.12
CROSS_TENANT_READ_SHARE = 0.15
CROSS_TENANT_PAY_SHARE = 0.12
READ_SHARE = 0.2


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
                      expect: str | None = None, impatient: bool = False,
                      tenant: str | None = None) -> Reply:
    """Send, then retry the same key and body after an `info`, an in-flight 409, or
    (once) a 400.

    Every request here is well-formed, so a 400 means the body did not arrive whole
    (cut in transit): the client sends it again as it was. An app that stored the
    broken request under the key refuses this honest retry as a reused key.
    """
    timeout = IMPATIENT_TIMEOUT if impatient else None
    reply = actor.post(op, path, payload, headers=headers, fields=fields, expect=expect,
                       timeout=timeout, tenant=tenant)
    retried_bad_request = False
    for attempt in range(1, MAX_ATTEMPTS):
        if reply.completion == "info":
            retry_expect = "retry_after_timeout"
        elif reply.retry_after:
            retry_expect = "retry_after_inflight"
        elif reply.status == 400 and not retried_bad_request:
            retry_expect = "retry_after_bad_request"
            retried_bad_request = True
        else:
            break
        actor.sleep_backoff(attempt)
        reply = actor.post(op, path, payload, headers=headers, fields=fields, expect=retry_expect,
                           tenant=tenant)
    return reply


def _create_request(key: str, payload: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    headers = {"Idempotency-Key": key}
    fields = {"idempotency_key": key, "sku": payload["sku"],
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
    headers, fields = _create_request(key, payload)
    impatient = actor.rng.random() < IMPATIENT_SHARE
    reply = send_with_retries(actor, "create_order", ORDERS_PATH, payload, headers=headers,
                              fields=fields, expect=expect, impatient=impatient)
    return _order_from(actor, reply, key, payload)


def pay(actor: Actor, order: Order, provider_ref: str, *, expect: str | None = None) -> Reply:
    key = actor.new_id("k")
    payload = {"provider_ref": provider_ref, "amount_cents": order.amount_cents}
    headers = {"Idempotency-Key": key}
    fields = {"idempotency_key": key, "order_id": order.id,
              "provider_ref": provider_ref, "amount_cents": order.amount_cents}
    impatient = actor.rng.random() < IMPATIENT_SHARE
    return send_with_retries(actor, "pay", f"{ORDERS_PATH}/{order.id}/payments", payload,
                             headers=headers, fields=fields, expect=expect, impatient=impatient)


def double_click_create(actor: Actor) -> Order | None:
    """Two submissions of one form at once: same key, same body, two connections."""
    key = actor.new_id("k")
    payload = order_payload(actor)
    headers, fields = _create_request(key, payload)

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
    headers, fields = _create_request(order.idempotency_key, payload)
    return actor.post("create_order", ORDERS_PATH, payload, headers=headers, fields=fields,
                      expect="fingerprint_mismatch")


def read_order(actor: Actor, order: Order, *, tenant: str | None = None,
               expect: str | None = None) -> Reply:
    """GET an order as `tenant` (default: the actor's own)."""
    return actor.get("read_order", f"{ORDERS_PATH}/{order.id}", tenant=tenant,
                     fields={"order_id": order.id}, expect=expect)


def cross_tenant_read(actor: Actor, order: Order) -> Reply:
    """Another tenant reads this user's order: the app must answer 404."""
    return read_order(actor, order, tenant=actor.other_tenant(), expect="cross_tenant_read")


def cross_tenant_pay(actor: Actor, order: Order) -> Reply:
    """Another tenant pays this user's order (right amount, own key and ref): 404.

    Sent before the owner pays, while the order is still payable, so an app that
    let it through would record a payment from the wrong tenant."""
    key = actor.new_id("k")
    provider_ref = actor.new_id("pr")
    payload = {"provider_ref": provider_ref, "amount_cents": order.amount_cents}
    fields = {"idempotency_key": key, "order_id": order.id, "provider_ref": provider_ref,
              "amount_cents": order.amount_cents}
    return actor.post("pay", f"{ORDERS_PATH}/{order.id}/payments", payload,
                      headers={"Idempotency-Key": key}, fields=fields,
                      tenant=actor.other_tenant(), expect="cross_tenant_pay")


def shared_key(actor: Actor) -> str:
    """The next key of the run's shared pool: `shared-<run token>-<n>`.

    The token comes from the seed and the run's history directory, and `n` counts
    this user's shared-key rounds, so users in other processes that reach their
    n-th round use the same key too."""
    actor.shared_rounds += 1
    return f"shared-{actor.process.shared_token}-{actor.shared_rounds}"


def shared_payload(actor: Actor, key: str) -> dict[str, Any]:
    # The body depends on the key alone: every tenant and user sends the same bytes,
    # so an API layer that ignored the tenant would replay another tenant's order
    # (a visible tenant mix-up) instead of refusing a fingerprint mismatch.
    digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    skus = actor.settings.skus
    return {"sku": skus[digest % len(skus)], "quantity": 1,
            "amount_cents": 100 + digest % 99_900, "currency": "EUR"}


def shared_key_round(actor: Actor) -> None:
    """Every tenant creates an order with the same Idempotency-Key at once: each
    must get its own order (keys are scoped per tenant)."""
    key = shared_key(actor)
    payload = shared_payload(actor, key)
    headers, fields = _create_request(key, payload)
    branches = [actor, *actor.twins(len(TENANTS) - 1)]
    tenants = [actor.tenant, *(tenant for tenant in TENANTS if tenant != actor.tenant)]

    def create_as(tenant: str) -> Callable[[Actor], Reply]:
        return lambda branch: send_with_retries(branch, "create_order", ORDERS_PATH, payload,
                                                headers=headers, fields=fields,
                                                expect="shared_key", tenant=tenant)

    concurrently([(branch, create_as(tenant)) for branch, tenant in zip(branches, tenants, strict=True)],
                 timeout=_branch_timeout(actor))


def timeout_replay_round(actor: Actor) -> None:
    if actor.rng.random() < SHARED_KEY_SHARE:
        shared_key_round(actor)
        return
    if actor.rng.random() < 0.35:
        order = double_click_create(actor)
    else:
        order = create_order(actor)
    if order is None:
        return
    if actor.rng.random() < 0.35:
        fingerprint_mismatch(actor, order)
    if actor.rng.random() < CROSS_TENANT_READ_SHARE:
        cross_tenant_read(actor, order)
    if actor.rng.random() < CROSS_TENANT_PAY_SHARE:
        cross_tenant_pay(actor, order)
    pay(actor, order, actor.new_id("pr"))
    if actor.rng.random() < READ_SHARE:
        read_order(actor, order)


# --- payment provider --------------------------------------------------------------

def webhook_payload(order: Order, provider_ref: str, event_id: str, amount_cents: int) -> dict[str, Any]:
    return {"event_id": event_id, "type": "payment.succeeded", "order_id": order.id,
            "provider_ref": provider_ref, "amount_cents": amount_cents}


def send_webhook(actor: Actor, payload: dict[str, Any], *, signature: str = "valid",
                 timestamp: int | None = None, expect: str | None = None) -> Reply:
    body = orjson.dumps(payload)
    headers = signature_headers(actor.settings.webhook_secret, body, signature, timestamp=timestamp)
    fields = {"order_id": payload["order_id"], "event_id": payload["event_id"],
              "provider_ref": payload["provider_ref"], "amount_cents": payload["amount_cents"]}
    # Webhooks are tenant-less: the provider sends no tenant header.
    return actor.post("webhook", WEBHOOK_PATH, body, headers=headers, fields=fields,
                      expect=expect, tenant=DEFAULT_TENANT)


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
        send_webhook(actor, payload, signature=kind, expect=kind)
    wrong = webhook_payload(order, payload["provider_ref"], actor.new_id("evt"), order.amount_cents + 1)
    send_webhook(actor, wrong, expect="wrong_amount")

    def copy(sender: Actor) -> Reply:
        return send_webhook(sender, payload, expect="webhook_burst")

    burst = [actor, *actor.twins(2)]
    concurrently([(sender, copy) for sender in burst], timeout=_branch_timeout(actor))
    # The provider signed a retry later, and the later copy overtakes the earlier one.
    signed_at = int(time.time())
    send_webhook(actor, payload, timestamp=signed_at, expect="webhook_out_of_order")
    send_webhook(actor, payload, timestamp=signed_at - 5, expect="webhook_out_of_order")
    conflicting = webhook_payload(order, actor.new_id("pr"), actor.new_id("evt"), order.amount_cents)
    send_webhook(actor, conflicting, expect="conflicting_ref")
    # Earlier rounds' delayed copies again at the round's end, not only at the next
    # round's start: that start follows this end within the think time, before any copy
    # made now is due, so a user that managed two rounds in a load (a busy machine's)
    # never sent one (a suite run: 3 loads, no webhook_delayed).
    deliver_due_webhooks(actor)
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
