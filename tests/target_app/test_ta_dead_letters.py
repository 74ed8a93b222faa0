"""The consumer's dead-letter rule: only real handler failures count toward
`max_deliveries`; Redis errors and consumer crashes never do (a safety cap on raw
deliveries, 10 x max_deliveries, still parks an entry that keeps coming back).
The `inbox-dead-letter` negative control parks a valid payment on its first failure
or repeated delivery of any kind."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest
import redis
from ta_helpers import INTERNAL

from target_app.app import create_app
from target_app.consumer import Consumer, publish_payment
from target_app.domain import Domain
from target_app.inbox import Inbox, PaymentMessage


class BlippingInbox(Inbox):
    """An inbox whose Redis fails `blips` times before it works (a brownout)."""

    def __init__(self, client, blips: int, **kwargs) -> None:
        super().__init__(client, **kwargs)
        self.blips = blips

    def process(self, message: PaymentMessage) -> str:
        if self.blips:
            self.blips -= 1
            raise redis.ConnectionError("Connection reset by peer")
        return super().process(message)


@pytest.fixture
def order_id(settings, rclient) -> str:
    create_app(settings)  # seeds the inventory
    return Domain(rclient).create_order(tenant="default", idempotency_key=None, sku="sku-1", quantity=1,
                                        amount_cents=1000, currency="EUR").order["id"]


@pytest.fixture
def fast(settings):
    return replace(settings, reclaim_idle_ms=1, max_deliveries=2, consumer_block_ms=10)


def step(consumer: Consumer) -> None:
    """One loop iteration as `Consumer.run` does it: a Redis error ends the iteration."""
    time.sleep(0.005)  # past the reclaim idle time
    try:
        consumer.step(block_ms=10)
    except redis.RedisError:
        pass


def settle(rclient) -> dict:
    dead = [fields for _, fields in rclient.xrange("payments-dead")]
    effects = [json.loads(raw) for raw in rclient.lrange("ta:message_effects", 0, -1)]
    return {"dead": dead, "outcomes": [e["outcome"] for e in effects],
            "pending": rclient.xpending("payments", "target-app")["pending"]}


def crash(rclient, entry: str, times: int) -> None:
    """`times` consumers take the entry over and die before handling it (XCLAIM counts
    a delivery each time, exactly like a reclaim)."""
    for n in range(times):
        rclient.xclaim("payments", "target-app", f"crashed-{n}", 0, [entry])


def test_redis_errors_never_count_toward_dead_lettering(fast, rclient, order_id):
    consumer = Consumer(rclient, fast, name="c1", inbox=BlippingInbox(rclient, blips=6))
    consumer.ensure_group()
    publish_payment(rclient, "payments", "m-blip", order_id, "pr_1", 1000)
    for _ in range(7):
        step(consumer)
    state = settle(rclient)
    assert state == {"dead": [], "outcomes": ["paid"], "pending": 0}
    assert rclient.hlen("ta:inbox:failures") == 0
    assert int(rclient.hget("ta:counters", "messages_reclaimed")) == 6


def test_consumer_crashes_never_count_toward_dead_lettering(fast, rclient, order_id):
    consumer = Consumer(rclient, fast, name="c1")
    consumer.ensure_group()
    entry = publish_payment(rclient, "payments", "m-crash", order_id, "pr_1", 1000)
    rclient.xreadgroup("target-app", "crashed", {"payments": ">"}, count=1)  # delivery 1, then a kill
    crash(rclient, entry, 5)  # deliveries 2..6, three times max_deliveries
    step(consumer)  # delivery 7: well under the cap of 20
    assert settle(rclient) == {"dead": [], "outcomes": ["paid"], "pending": 0}


def test_the_raw_delivery_cap_still_parks_an_entry_that_keeps_coming_back(fast, rclient, order_id):
    consumer = Consumer(rclient, fast, name="c1")
    consumer.ensure_group()
    entry = publish_payment(rclient, "payments", "m-loop", order_id, "pr_1", 1000)
    rclient.xreadgroup("target-app", "crashed", {"payments": ">"}, count=1)
    crash(rclient, entry, 19)  # 20 deliveries = the cap
    step(consumer)  # the 21st
    state = settle(rclient)
    assert state["outcomes"] == [] and state["pending"] == 0
    assert [(d["entry_id"], d["reason"]) for d in state["dead"]] == [(entry, "delivered 21 times")]


def test_real_handler_failures_park_the_entry_at_max_deliveries(fast, rclient, order_id):
    def failing(_message):
        raise RuntimeError("the payment provider is broken")

    consumer = Consumer(rclient, fast, name="c1", inbox=Inbox(rclient, before_apply=failing))
    consumer.ensure_group()
    entry = publish_payment(rclient, "payments", "m-fail", order_id, "pr_1", 1000)
    step(consumer)
    assert rclient.hget("ta:inbox:failures", entry) == "1" and settle(rclient)["dead"] == []
    step(consumer)
    [dead] = settle(rclient)["dead"]
    assert (dead["entry_id"], dead["reason"], dead["deliveries"]) == (entry, "handler failed 2 times", "2")
    assert rclient.hlen("ta:inbox:failures") == 0


def test_a_success_after_a_failure_clears_the_failure_count(fast, rclient, order_id):
    failures = {"left": 1}

    def flaky(_message):
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("once")

    consumer = Consumer(rclient, fast, name="c1", inbox=Inbox(rclient, before_apply=flaky))
    consumer.ensure_group()
    publish_payment(rclient, "payments", "m-flaky", order_id, "pr_1", 1000)
    step(consumer)
    step(consumer)
    assert settle(rclient) == {"dead": [], "outcomes": ["paid"], "pending": 0}
    assert rclient.hlen("ta:inbox:failures") == 0


def export_dead_letters(settings) -> list[dict]:
    lines = create_app(settings).test_client().get("/internal/v1/export", headers=INTERNAL).data
    return [line for line in map(json.loads, lines.decode().splitlines()) if line["kind"] == "dead_letter"]


def test_inbox_dead_letter_mutant_parks_a_valid_payment_after_a_crash(fast, rclient, order_id):
    mutant = replace(fast, unsafe_disable=frozenset({"inbox-dead-letter"}))
    consumer = Consumer(rclient, mutant, name="c1")
    consumer.ensure_group()
    entry = publish_payment(rclient, "payments", "m-parked", order_id, "pr_1", 1000)
    rclient.xreadgroup("target-app", "crashed", {"payments": ">"}, count=1)  # a kill after reading
    step(consumer)  # delivery 2
    state = settle(rclient)
    assert state["outcomes"] == [] and state["pending"] == 0
    assert [(d["entry_id"], d["reason"]) for d in state["dead"]] == [(entry, "delivered 2 times")]
    [line] = export_dead_letters(mutant)
    assert line == {"kind": "dead_letter", "message_id": "m-parked", "entry_id": entry, "deliveries": 2,
                    "reason": "delivered 2 times", "order_id": order_id, "provider_ref": "pr_1",
                    "amount_cents": 1000, "valid": True}
    assert rclient.hget(f"ta:order:{order_id}", "status") == "INVENTORY_RESERVED"  # the payment is lost


def test_inbox_dead_letter_mutant_parks_a_valid_payment_on_a_redis_blip(fast, rclient, order_id):
    mutant = replace(fast, unsafe_disable=frozenset({"inbox-dead-letter"}))
    consumer = Consumer(rclient, mutant, name="c1", inbox=BlippingInbox(rclient, blips=1))
    consumer.ensure_group()
    entry = publish_payment(rclient, "payments", "m-blip", order_id, "pr_1", 1000)
    step(consumer)
    state = settle(rclient)
    assert state["outcomes"] == [] and state["pending"] == 0
    assert [(d["entry_id"], d["reason"]) for d in state["dead"]] == [(entry, "handler failed 1 times")]


def test_inbox_dead_letter_mutant_parks_on_the_first_handler_failure(fast, rclient, order_id):
    def failing_once(_message):
        raise RuntimeError("a hiccup the next delivery would have survived")

    mutant = replace(fast, unsafe_disable=frozenset({"inbox-dead-letter"}))
    consumer = Consumer(rclient, mutant, name="c1", inbox=Inbox(rclient, before_apply=failing_once))
    consumer.ensure_group()
    entry = publish_payment(rclient, "payments", "m-once", order_id, "pr_1", 1000)
    step(consumer)
    state = settle(rclient)
    assert state["outcomes"] == [] and state["pending"] == 0
    assert [(d["entry_id"], d["reason"]) for d in state["dead"]] == [(entry, "handler failed 1 times")]
