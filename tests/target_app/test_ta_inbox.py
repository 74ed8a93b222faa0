"""The inbox and the consumer: dedup, retries, reclaim, dead letters, races, mutants."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest
from ta_helpers import INTERNAL, ROOT, settings_env

from target_app.app import create_app
from target_app.consumer import Consumer, publish_payment
from target_app.domain import Domain
from target_app.inbox import HandlerFailed, Inbox, PaymentMessage


def make_order(rclient, amount=1000) -> str:
    order = Domain(rclient).create_order(tenant="default", idempotency_key=None, sku="sku-1",
                                         quantity=1, amount_cents=amount, currency="EUR").order
    return order["id"]


def effects(rclient) -> list[dict]:
    return [json.loads(raw) for raw in rclient.lrange("ta:message_effects", 0, -1)]


def payments(rclient, order_id) -> list[dict]:
    return [json.loads(raw) for raw in rclient.lrange(f"ta:order:{order_id}:payments", 0, -1)]


@pytest.fixture
def seeded(settings, rclient):
    create_app(settings)  # seeds the inventory
    return rclient


def test_inbox_skips_redelivery_and_retries_failures(seeded):
    rclient = seeded
    order_id = make_order(rclient)
    failures = {"left": 1}

    def flaky(message):
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("downstream timeout")

    inbox = Inbox(rclient, before_apply=flaky)
    message = PaymentMessage("m1", order_id, "pr_1", 1000)
    with pytest.raises(HandlerFailed):
        inbox.process(message)
    assert effects(rclient) == [] and not rclient.sismember("ta:inbox:processed", "m1")
    assert inbox.process(message) == "paid"
    assert inbox.process(message) == "duplicate"
    assert inbox.process(message) == "duplicate"
    assert [e["outcome"] for e in effects(rclient)] == ["paid"]
    assert len(payments(rclient, order_id)) == 1
    assert rclient.hget("ta:counters", "inbox_duplicates_skipped") == "2"
    # the same fact under a new message id: the inbox runs it, the domain stops it
    assert inbox.process(PaymentMessage("m2", order_id, "pr_1", 1000)) == "already_paid"
    assert len(payments(rclient, order_id)) == 1


def test_consumer_acks_reclaims_and_dead_letters(settings, seeded):
    rclient = seeded
    settings = replace(settings, reclaim_idle_ms=50, max_deliveries=2, consumer_block_ms=10)
    order_id = make_order(rclient)
    broken = Consumer(rclient, settings, name="c-broken",
                      inbox=Inbox(rclient, before_apply=lambda m: (_ for _ in ()).throw(RuntimeError("x"))))
    good = Consumer(rclient, settings, name="c-good")
    good.ensure_group()
    publish_payment(rclient, "payments", "m-ok", order_id, "pr_1", 1000)
    publish_payment(rclient, "payments", "m-ok", order_id, "pr_1", 1000)  # producer duplicate
    poison = publish_payment(rclient, "payments", "m-poison", "ord_missing", "pr_x", 5)
    bad = publish_payment(rclient, "payments", "", order_id, "pr_1", 1000)
    # the broken consumer reads everything and applies nothing (delivery 1)
    broken.step(block_ms=10)
    assert effects(rclient) == []
    assert rclient.xpending("payments", "target-app")["pending"] == 3  # no-id entry dead-lettered
    time.sleep(0.06)
    good.step(block_ms=10)  # reclaims (delivery 2) and applies
    assert [e["message_id"] for e in effects(rclient)] == ["m-ok", "m-poison"]
    assert effects(rclient)[1]["outcome"] == "unknown_order"
    assert rclient.hget("ta:counters", "inbox_duplicates_skipped") == "1"
    assert rclient.xpending("payments", "target-app")["pending"] == 0
    dead = rclient.xrange("payments-dead")
    assert [(d["entry_id"], d["reason"]) for _, d in dead] == [(bad, "no message_id")]

    # an entry whose handler keeps failing is dead-lettered when its failures reach max_deliveries
    stuck = publish_payment(rclient, "payments", "m-stuck", order_id, "pr_1", 1000)
    broken.step(block_ms=10)  # delivery 1, failure 1
    time.sleep(0.06)
    broken.step(block_ms=10)  # delivery 2 (reclaimed by itself), failure 2 = max → parked
    dead = rclient.xrange("payments-dead")
    assert dead[-1][1]["entry_id"] == stuck and dead[-1][1]["deliveries"] == "2"
    assert dead[-1][1]["reason"] == "handler failed 2 times"
    assert not rclient.hexists("ta:inbox:failures", stuck)  # cleaned up with the dead letter
    assert "m-stuck" not in [e["message_id"] for e in effects(rclient)]
    assert rclient.hget("ta:counters", "messages_dead_lettered") == "2"
    assert int(rclient.hget("ta:counters", "messages_reclaimed")) == 4  # 3 by good, 1 by broken
    assert poison not in [d["entry_id"] for _, d in dead]
    export = create_app(settings).test_client().get("/internal/v1/export", headers=INTERNAL).data.decode().splitlines()
    lines = [json.loads(line) for line in export]
    assert {"kind": "dead_letter", "message_id": "m-stuck", "entry_id": stuck, "deliveries": 2,
            "reason": "handler failed 2 times", "order_id": order_id, "provider_ref": "pr_1",
            "amount_cents": 1000, "valid": True} in lines
    assert {"kind": "dead_letter", "message_id": None, "entry_id": bad, "deliveries": 1,
            "reason": "no message_id", "order_id": order_id, "provider_ref": "pr_1",
            "amount_cents": 1000, "valid": False} in lines
    assert lines[-1]["messages_reclaimed"] == 4


def race(settings, rclient, mode: str, delay_ms: int) -> tuple[list[str], str]:
    """Two consumers hold the same redelivered entry and handle it at the same time."""
    settings = replace(settings, reclaim_idle_ms=1, handler_delay_ms=delay_ms, consumer_block_ms=10)
    order_id = make_order(rclient)
    # Both handlers meet inside the window (after the nonatomic inbox's check, before
    # any effect), so the race is decided by the inbox alone, not by thread timing.
    window = threading.Barrier(2)

    def rendezvous(_message):
        window.wait(5)

    first = Consumer(rclient, settings, name="c1", inbox=Inbox(
        rclient, mode=mode, handler_delay_ms=delay_ms, before_apply=rendezvous))
    second = Consumer(rclient, settings, name="c2", inbox=Inbox(
        rclient, mode=mode, handler_delay_ms=delay_ms, before_apply=rendezvous))
    first.ensure_group()
    entry = publish_payment(rclient, "payments", "m-race", order_id, "pr_1", 1000)
    # c1 reads the entry and stalls (a paused consumer)…
    [[_, [(got, fields)]]] = rclient.xreadgroup("target-app", "c1", {"payments": ">"}, count=1)
    assert got == entry
    time.sleep(0.01)
    # …c2 reclaims it (a redelivery), then both handle it at once.
    [(reclaimed_id, reclaimed_fields, deliveries)] = second.reclaim()
    assert reclaimed_id == entry and deliveries == 2
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def handle(consumer, fields):
        barrier.wait(5)
        outcomes.append(consumer.inbox.process(PaymentMessage.from_fields(fields)))

    threads = [threading.Thread(target=handle, args=(first, fields)),
               threading.Thread(target=handle, args=(second, reclaimed_fields))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return sorted(outcomes), order_id


def test_two_consumers_racing_on_a_redelivered_entry_apply_one_effect(settings, seeded):
    outcomes, order_id = race(settings, seeded, "atomic", delay_ms=100)
    assert outcomes == ["duplicate", "paid"]
    assert len(effects(seeded)) == 1 and len(payments(seeded, order_id)) == 1


def test_nonatomic_inbox_mutant_applies_the_effect_twice(settings, seeded):
    outcomes, order_id = race(settings, seeded, "nonatomic", delay_ms=100)
    # both passed the check before either marked: two receipts (the domain still
    # stops the second payment, which is the point of having three layers)
    assert outcomes == ["already_paid", "paid"]
    assert [e["message_id"] for e in effects(seeded)] == ["m-race", "m-race"]
    assert len(payments(seeded, order_id)) == 1


def test_inbox_mutant_runs_every_delivery(settings, seeded):
    outcomes, _ = race(settings, seeded, "none", delay_ms=0)
    assert outcomes == ["already_paid", "paid"]
    assert len(effects(seeded)) == 2
    # and even strictly one after the other
    inbox = Inbox(seeded, mode="none")
    inbox.process(PaymentMessage("m-seq", make_order(seeded), "pr_1", 1000))
    inbox.process(PaymentMessage("m-seq", make_order(seeded), "pr_1", 1000))
    assert [e["message_id"] for e in effects(seeded)].count("m-seq") == 2


def test_inbox_modes_follow_the_settings(settings, seeded):
    assert Inbox.for_settings(seeded, settings).mode == "atomic"
    assert Inbox.for_settings(seeded, replace(settings, unsafe_disable=frozenset({"inbox"}))).mode == "none"
    nonatomic = replace(settings, unsafe_disable=frozenset({"inbox-nonatomic"}))
    assert Inbox.for_settings(seeded, nonatomic).mode == "nonatomic"


def test_consumer_process_drains_and_stops_on_sigterm(settings, seeded, tmp_path):
    order_id = make_order(seeded)
    for n in range(5):
        publish_payment(seeded, "payments", f"m{n}", order_id, "pr_1", 1000)
    env = {**os.environ, **settings_env(settings), "TARGET_APP_CONSUMER_NAME": "proc-1",
           "TARGET_APP_CONSUMER_BLOCK_MS": "50"}
    with open(tmp_path / "consumer.log", "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "target_app.consumer"], cwd=ROOT, env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 15
            while len(effects(seeded)) < 5 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(effects(seeded)) == 5
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert seeded.xpending("payments", "target-app")["pending"] == 0
    assert len(payments(seeded, order_id)) == 1
    assert "stopped" in (tmp_path / "consumer.log").read_text()


def test_consumer_rejects_unknown_unsafe_layer(settings, tmp_path):
    env = {**os.environ, **settings_env(settings), "TARGET_APP_UNSAFE_DISABLE": "inbox,bogus"}
    result = subprocess.run([sys.executable, "-m", "target_app.consumer"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2 and "bogus" in result.stderr


def consumer_processes_race(settings, rclient, tmp_path, unsafe: str) -> list[dict]:
    """Two real consumer processes; the slow handler lets the second reclaim the entry
    (idle > reclaim time) while the first still holds it: a broker redelivery."""
    order_id = make_order(rclient)
    env = {**os.environ, **settings_env(settings), "TARGET_APP_UNSAFE_DISABLE": unsafe,
           "TARGET_APP_HANDLER_DELAY_MS": "800", "TARGET_APP_RECLAIM_IDLE_MS": "100",
           "TARGET_APP_CONSUMER_BLOCK_MS": "20"}
    processes = []
    with contextlib.ExitStack() as logs:
        try:
            for name in ("proc-a", "proc-b"):
                log = logs.enter_context(open(tmp_path / f"{name}.log", "wb"))
                processes.append((subprocess.Popen([sys.executable, "-m", "target_app.consumer"], cwd=ROOT,
                                                   env={**env, "TARGET_APP_CONSUMER_NAME": name},
                                                   stdout=log, stderr=subprocess.STDOUT), log))
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:  # both consumers are in their read loop
                readers = [c for c in rclient.client_list() if c.get("cmd") in ("xreadgroup", "xautoclaim")]
                if len(readers) >= 2:
                    break
                time.sleep(0.05)
            publish_payment(rclient, "payments", "m-proc", order_id, "pr_1", 1000)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                if rclient.xpending("payments", "target-app")["pending"] == 0 and effects(rclient):
                    break
                time.sleep(0.05)
            time.sleep(0.3)  # let a late second handler land, if there is one
            claims = {c["name"]: c for c in rclient.xinfo_consumers("payments", "target-app")}
            assert set(claims) == {"proc-a", "proc-b"}
        finally:
            for process, _log in processes:
                process.send_signal(signal.SIGTERM)
            for process, _log in processes:
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    assert len(payments(rclient, order_id)) == 1  # the domain layer holds either way
    return effects(rclient)


def test_consumer_processes_racing_on_a_redelivered_entry_apply_one_effect(settings, seeded, tmp_path):
    assert [e["outcome"] for e in consumer_processes_race(settings, seeded, tmp_path, "")] == ["paid"]
    assert seeded.hget("ta:counters", "inbox_duplicates_skipped") == "1"


def test_consumer_processes_nonatomic_mutant_apply_it_twice(settings, seeded, tmp_path):
    result = consumer_processes_race(settings, seeded, tmp_path, "inbox-nonatomic")
    assert sorted(e["outcome"] for e in result) == ["already_paid", "paid"]
    assert {e["message_id"] for e in result} == {"m-proc"}
