"""The domain guard and inventory, through the HTTP API and the Domain class."""

from __future__ import annotations

import uuid

import pytest
import redis
from hypothesis import HealthCheck, Phase
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from ta_helpers import INTERNAL, create_order, signed_headers, webhook_body

from target_app.app import create_app
from target_app.consumer import publish_payment
from target_app.domain import Domain
from target_app.inbox import Inbox, PaymentMessage
from target_app.settings import Settings


def pay(client, order_id, provider_ref, amount=1000, key=None):
    return client.post(f"/api/v1/orders/{order_id}/payments",
                       json={"provider_ref": provider_ref, "amount_cents": amount},
                       headers={"Idempotency-Key": key or uuid.uuid4().hex})


def test_domain_guard_makes_payment_idempotent(client):
    order = create_order(client)
    first = pay(client, order["id"], "pr_1")
    assert first.status_code == 200 and first.json["already_paid"] is False
    assert first.json["order"]["status"] == "PAID"
    # the same fact again under a new idempotency key, and through the webhook
    again = pay(client, order["id"], "pr_1")
    assert again.status_code == 200 and again.json["already_paid"] is True
    body = webhook_body(order["id"], "pr_1")
    hook = client.post("/webhooks/payments", data=body, headers=signed_headers(body))
    assert hook.status_code == 200 and hook.json["already_paid"] is True
    other = pay(client, order["id"], "pr_2")
    assert other.status_code == 409 and other.content_type == "application/problem+json"
    wrong = pay(client, order["id"], "pr_1", amount=999)
    assert wrong.status_code == 422
    unknown = pay(client, "ord_nope", "pr_1")
    assert unknown.status_code == 404
    payments = client.get(f"/api/v1/orders/{order['id']}").json["payments"]
    assert len(payments) == 1
    assert payments[0]["source"] == "api" and payments[0]["provider_ref"] == "pr_1"


def test_domain_mutant_writes_a_second_payment(settings):
    from dataclasses import replace

    client = create_app(replace(settings, unsafe_disable=frozenset({"domain"}))).test_client()
    order = create_order(client)
    assert pay(client, order["id"], "pr_1").status_code == 200
    assert pay(client, order["id"], "pr_1").status_code == 200
    assert pay(client, order["id"], "pr_1", amount=5).status_code == 422  # only the guard is gone
    assert len(client.get(f"/api/v1/orders/{order['id']}").json["payments"]) == 2


def test_inventory_is_reserved_and_never_below_zero(client):
    create_order(client, sku="sku-2", quantity=3)
    out = client.post("/api/v1/orders", json={"sku": "sku-2", "quantity": 3, "amount_cents": 1,
                                              "currency": "EUR"}, headers={"Idempotency-Key": "oos"})
    assert out.status_code == 409 and out.content_type == "application/problem+json"
    assert client.get("/api/v1/inventory/sku-2").json["available"] == 2
    create_order(client, sku="sku-2", quantity=2)
    assert client.get("/api/v1/inventory/sku-2").json["available"] == 0
    put = client.put("/internal/v1/inventory/sku-2", json={"available": 10}, headers=INTERNAL)
    assert put.status_code == 200 and put.json == {"sku": "sku-2", "available": 10, "added_total": 15}
    put = client.put("/internal/v1/inventory/sku-9", json={"available": 4}, headers=INTERNAL)
    assert put.json["added_total"] == 4
    assert client.get("/api/v1/inventory/sku-404").status_code == 404


def test_inventory_seed_only_for_new_skus(settings, rclient):
    from dataclasses import replace

    client = create_app(settings).test_client()
    create_order(client, sku="sku-2", quantity=2)
    # a second worker (or a restart) with another seed must not reset existing stock
    create_app(replace(settings, inventory={"sku-2": 100, "sku-3": 7}))
    assert client.get("/api/v1/inventory/sku-2").json == {"sku": "sku-2", "available": 3, "added_total": 5}
    assert client.get("/api/v1/inventory/sku-3").json["available"] == 7


class DomainMachine(RuleBasedStateMachine):
    """Payments through the API, webhooks and messages keep one payment per order."""

    redis_url: str = ""
    unsafe: frozenset = frozenset()

    @initialize()
    def setup(self):
        client = redis.Redis.from_url(self.redis_url, decode_responses=True)
        client.flushdb()
        self.redis = client
        settings = Settings(redis_url=self.redis_url, webhook_secret="test-webhook-secret",
                            inventory={"sku-1": 1000}, unsafe_disable=self.unsafe)
        self.http = create_app(settings).test_client()
        self.inbox = Inbox(client, domain_guard="domain" not in self.unsafe)
        self.orders = [create_order(self.http, amount_cents=1000)["id"] for _ in range(3)]
        self.first_ref: dict[str, str] = {}
        self.message_ids: set[str] = set()

    def _expect(self, order_id, ref, amount, status):
        if amount != 1000:
            assert status == 422
        elif order_id not in self.first_ref:
            assert status == 200
            self.first_ref[order_id] = ref
        elif self.first_ref[order_id] == ref:
            assert status == 200
        else:
            assert status == 409

    orders_idx = st.integers(0, 2)
    refs = st.sampled_from(["pr_a", "pr_b"])
    amounts = st.sampled_from([1000, 1000, 1000, 999])

    @rule(i=orders_idx, ref=refs, amount=amounts)
    def pay_api(self, i, ref, amount):
        response = pay(self.http, self.orders[i], ref, amount)
        self._expect(self.orders[i], ref, amount, response.status_code)

    @rule(i=orders_idx, ref=refs, amount=amounts, event=st.integers(0, 3))
    def webhook(self, i, ref, amount, event):
        body = webhook_body(self.orders[i], ref, amount, event_id=f"evt_{event}")
        response = self.http.post("/webhooks/payments", data=body, headers=signed_headers(body))
        self._expect(self.orders[i], ref, amount, response.status_code)

    @rule(i=orders_idx, ref=refs, amount=amounts, mid=st.integers(0, 5))
    def message(self, i, ref, amount, mid):
        message_id = f"m{mid}"
        outcome = self.inbox.process(PaymentMessage(message_id, self.orders[i], ref, amount))
        if message_id in self.message_ids:
            assert outcome == "duplicate"
            return
        self.message_ids.add(message_id)
        status = {"paid": 200, "already_paid": 200, "conflict": 409, "amount_mismatch": 422}[outcome]
        self._expect(self.orders[i], ref, amount, status)

    @invariant()
    def one_payment_per_order(self):
        if not hasattr(self, "orders"):
            return
        for order_id in self.orders:
            order = self.http.get(f"/api/v1/orders/{order_id}").json
            assert len(order["payments"]) <= 1
            assert (order["status"] == "PAID") == (len(order["payments"]) == 1)
            if order["payments"]:
                assert order["payments"][0]["provider_ref"] == self.first_ref[order_id]
        effects = self.redis.lrange("ta:message_effects", 0, -1)
        assert len(effects) == len(self.message_ids)


def run_machine(redis_url: str, unsafe: frozenset = frozenset()) -> None:
    machine = type("Machine", (DomainMachine,), {"redis_url": redis_url, "unsafe": unsafe})
    runner = machine.TestCase
    # The mutant run only has to fail; shrinking its counterexample would cost seconds.
    phases = [Phase.generate] if unsafe else list(Phase)
    runner.settings = hsettings(max_examples=25, stateful_step_count=20, deadline=None,
                                suppress_health_check=list(HealthCheck), database=None,
                                print_blob=False, phases=phases, report_multiple_bugs=False)
    runner("runTest").runTest()


def test_domain_state_machine(redis_url):
    run_machine(redis_url)


def test_domain_state_machine_catches_the_domain_mutant(redis_url):
    with pytest.raises(AssertionError):
        run_machine(redis_url, frozenset({"domain"}))


def test_publish_payment_helper(rclient):
    entry = publish_payment(rclient, "payments", "m1", "ord_1", "pr_1", 1000)
    assert rclient.xrange("payments")[0] == (entry, {"message_id": "m1", "order_id": "ord_1",
                                                      "provider_ref": "pr_1", "amount_cents": "1000"})


def test_domain_class_unknown_order(rclient):
    assert Domain(rclient).mark_paid("ord_x", provider_ref="p", amount_cents=1, source="api",
                                     source_id="k") == "unknown_order"
