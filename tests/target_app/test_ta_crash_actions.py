"""Each crash-point action where it sits in the app: the API layer, the domain, the
webhook, the consumer; a crashed gunicorn worker comes back (gunicorn's master forks a
new one) and a crashed consumer process leaves its entry pending; and the three
controls a failure between two steps breaks, against the correct app at the same
point (the end-to-end proofs under load are in tests/e2e/test_crash_controls.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import requests
from ta_helpers import INTERNAL, ORDER, ROOT, settings_env, signed_headers, webhook_body

from target_app.app import create_app
from target_app.consumer import Consumer, publish_payment
from target_app.crashpoints import CrashPoints


@pytest.fixture
def cp_settings(settings, tmp_path: Path):
    return replace(settings, crash_points_dir=str(tmp_path / "cp"))


def arm(target, name: str, **arming) -> None:
    """Arm through the app's internal endpoint (a test client), or a process's own
    CrashPoints (a consumer), or, given a folder, as another process would."""
    if isinstance(target, CrashPoints):
        target.arm(name, arming)
    elif isinstance(target, str):
        CrashPoints(Path(target), "app").arm(name, arming)
    else:
        response = target.put(f"/internal/v1/crash-points/{name}", json=arming, headers=INTERNAL)
        assert response.status_code == 200, response.json


def hits(directory: str) -> list[tuple[str, str, str]]:
    return [(h.name, h.action, h.process) for h in CrashPoints(Path(directory), "app").hits()]


def create(client, key: str):
    return client.post("/api/v1/orders", json=ORDER, headers={"Idempotency-Key": key})


def orders_for_key(rclient, key: str) -> list[str]:
    return [oid for oid in rclient.smembers("ta:orders")
            if rclient.hget(f"ta:order:{oid}", "idempotency_key") == key]


def effects(rclient) -> list[dict]:
    return [json.loads(raw) for raw in rclient.lrange("ta:message_effects", 0, -1)]


def payments(rclient, order_id: str) -> list[dict]:
    return [json.loads(raw) for raw in rclient.lrange(f"ta:order:{order_id}:payments", 0, -1)]


def pending(rclient) -> int:
    return int(rclient.xpending("payments", "target-app")["pending"])


# --- API layer and domain (Flask test client) ------------------------------------------

def test_error_after_claim_is_503_and_releases_the_key(cp_settings, rclient):
    client = create_app(cp_settings).test_client()
    arm(client, "api.after_claim", action="error", count=1)
    failed = create(client, "k1")
    assert failed.status_code == 503 and failed.headers["Retry-After"] == "1"
    assert orders_for_key(rclient, "k1") == []
    assert create(client, "k1").status_code == 201  # the key was released, not left in flight
    assert hits(cp_settings.crash_points_dir) == [("api.after_claim", "error", "app")]


@pytest.mark.parametrize("point", ["api.after_domain", "domain.after_create"])
def test_error_after_the_effect_is_503_and_the_retry_recovers_the_order(cp_settings, rclient, point):
    client = create_app(cp_settings).test_client()
    arm(client, point, action="error", count=1)
    assert create(client, "k1").status_code == 503
    [order_id] = orders_for_key(rclient, "k1")  # the effect happened
    retry = create(client, "k1")
    assert retry.status_code == 201 and retry.json["id"] == order_id
    assert rclient.hget("ta:counters", "api_recovered") == "1"


def test_error_after_the_store_replays_the_stored_answer(cp_settings, rclient):
    client = create_app(cp_settings).test_client()
    arm(client, "api.after_store", action="error", count=1)
    assert create(client, "k1").status_code == 503
    retry = create(client, "k1")
    assert retry.status_code == 201 and retry.headers["Idempotent-Replayed"] == "true"
    assert len(orders_for_key(rclient, "k1")) == 1


def test_delay_and_error_after_the_guard(cp_settings, rclient):
    client = create_app(cp_settings).test_client()
    order = create(client, "k1").json
    arm(client, "domain.after_guard", action="error", count=1)
    pay = {"provider_ref": "pr_1", "amount_cents": 1000}
    assert client.post(f"/api/v1/orders/{order['id']}/payments", json=pay,
                       headers={"Idempotency-Key": "p1"}).status_code == 503
    assert len(payments(rclient, order["id"])) == 1  # paid before the error
    arm(client, "domain.after_guard", action="delay", delay_ms=200)
    started = time.monotonic()
    again = client.post(f"/api/v1/orders/{order['id']}/payments", json=pay, headers={"Idempotency-Key": "p1"})
    assert again.status_code == 200 and again.json["already_paid"] is True
    assert time.monotonic() - started >= 0.2


def test_webhook_points(cp_settings, rclient):
    client = create_app(cp_settings).test_client()
    order = create(client, "k1").json
    arm(client, "webhook.after_verify", action="error", count=1)
    body = webhook_body(order["id"], "pr_1")
    assert client.post("/webhooks/payments", data=body, headers=signed_headers(body)).status_code == 503
    assert payments(rclient, order["id"]) == []  # verified, nothing applied
    arm(client, "webhook.after_apply", action="error", count=1)
    assert client.post("/webhooks/payments", data=body, headers=signed_headers(body)).status_code == 503
    assert len(payments(rclient, order["id"])) == 1  # applied, answer lost
    retry = client.post("/webhooks/payments", data=body, headers=signed_headers(body))
    assert retry.status_code == 200 and retry.json["already_paid"] is True


# --- the new controls against the correct app, at the same point -------------------------

def test_recovery_nonatomic_loses_the_recovery_point_at_a_failure(cp_settings, rclient):
    client = create_app(replace(cp_settings, unsafe_disable=frozenset({"recovery-nonatomic"}))).test_client()
    arm(client, "domain.after_create", action="error", count=1)
    assert create(client, "k1").status_code == 503
    assert create(client, "k1").status_code == 201
    assert len(orders_for_key(rclient, "k1")) == 2  # the retry could not find the first order
    # without a failure the control still writes the point (one step later)
    assert create(client, "k2").status_code == 201 and create(client, "k2").status_code == 201
    assert len(orders_for_key(rclient, "k2")) == 1


def test_domain_nonatomic_leaves_a_paid_order_without_payment(cp_settings, rclient):
    for unsafe, expected in ((frozenset(), 1), (frozenset({"domain-nonatomic"}), 0)):
        client = create_app(replace(cp_settings, unsafe_disable=unsafe)).test_client()
        order = create(client, f"k-{expected}").json
        arm(client, "domain.after_guard", action="error", count=1)
        pay = {"provider_ref": "pr_1", "amount_cents": 1000}
        assert client.post(f"/api/v1/orders/{order['id']}/payments", json=pay,
                           headers={"Idempotency-Key": f"p-{expected}"}).status_code == 503
        assert rclient.hget(f"ta:order:{order['id']}", "status") == "PAID"
        assert len(payments(rclient, order["id"])) == expected
    # the control without a failure records the payment (one step later)
    client = create_app(replace(cp_settings, unsafe_disable=frozenset({"domain-nonatomic"}))).test_client()
    order = create(client, "k-ok").json
    client.post(f"/api/v1/orders/{order['id']}/payments", json={"provider_ref": "pr_2", "amount_cents": 1000},
                headers={"Idempotency-Key": "p-ok"})
    assert len(payments(rclient, order["id"])) == 1


# --- the consumer (in process: error and drop-reply) ------------------------------------

def consumer_for(settings, rclient, unsafe: frozenset[str] = frozenset()) -> Consumer:
    create_app(settings)  # seeds the inventory
    return Consumer(rclient, replace(settings, unsafe_disable=unsafe, consumer_block_ms=10), name="c1")


def paid_order(settings) -> str:
    client = create_app(settings).test_client()
    return create(client, os.urandom(6).hex()).json["id"]


def test_consumer_error_after_read_leaves_the_entry_pending(cp_settings, rclient):
    consumer = consumer_for(cp_settings, rclient)
    consumer.ensure_group()
    order_id = paid_order(cp_settings)
    publish_payment(rclient, "payments", "m1", order_id, "pr_1", 1000)
    arm(consumer.crash_points, "consumer.after_read", action="error", count=1)
    assert consumer.step(block_ms=10) == 0
    assert pending(rclient) == 1 and effects(rclient) == []
    assert rclient.hget("ta:inbox:failures", "1") is None  # counted against nothing


def test_consumer_drop_reply_applies_but_never_acknowledges(cp_settings, rclient):
    consumer = consumer_for(cp_settings, rclient)
    consumer.ensure_group()
    order_id = paid_order(cp_settings)
    publish_payment(rclient, "payments", "m1", order_id, "pr_1", 1000)
    arm(consumer.crash_points, "consumer.after_inbox_mark", action="drop-reply", count=1)
    consumer.step(block_ms=10)
    assert [e["outcome"] for e in effects(rclient)] == ["paid"] and pending(rclient) == 1
    assert hits(cp_settings.crash_points_dir) == [("consumer.after_inbox_mark", "drop-reply", "consumer")]


@pytest.mark.parametrize(("unsafe", "outcomes"), [("", ["paid"]), ("inbox-nonatomic", ["paid", "already_paid"])])
def test_an_error_after_the_effect_and_the_redelivery(cp_settings, rclient, unsafe, outcomes):
    """The atomic inbox marked the message with its effect: the redelivery is a
    duplicate. The naive inbox marks it after the point: the redelivery runs again."""
    settings = replace(cp_settings, reclaim_idle_ms=1)
    consumer = consumer_for(settings, rclient, frozenset({unsafe} - {""}))
    consumer.ensure_group()
    order_id = paid_order(settings)
    publish_payment(rclient, "payments", "m1", order_id, "pr_1", 1000)
    arm(consumer.crash_points, "consumer.after_effect", action="error", count=1)
    consumer.step(block_ms=10)
    assert pending(rclient) == 1
    time.sleep(0.01)
    consumer.step(block_ms=10)  # reclaims and handles it again
    assert [e["outcome"] for e in effects(rclient)] == outcomes and pending(rclient) == 0


def test_consumer_error_after_reclaim_leaves_the_entries_pending(cp_settings, rclient):
    settings = replace(cp_settings, reclaim_idle_ms=1)
    consumer = consumer_for(settings, rclient)
    consumer.ensure_group()
    order_id = paid_order(settings)
    publish_payment(rclient, "payments", "m1", order_id, "pr_1", 1000)
    # another consumer read it and died: it is pending, idle, in that one's name
    rclient.xreadgroup("target-app", "dead-one", {"payments": ">"}, count=10)
    time.sleep(0.01)
    arm(consumer.crash_points, "consumer.after_reclaim", action="error", count=1)
    assert consumer.step(block_ms=10) == 0
    assert pending(rclient) == 1 and effects(rclient) == []
    time.sleep(0.01)
    assert consumer.step(block_ms=10) == 1  # reclaimed again, and handled
    assert [e["outcome"] for e in effects(rclient)] == ["paid"] and pending(rclient) == 0


@pytest.mark.parametrize(("unsafe", "applied"), [("", True), ("consumer-ack-early", False)])
def test_ack_early_loses_the_message_at_a_failure_after_the_ack(cp_settings, rclient, unsafe, applied):
    consumer = consumer_for(cp_settings, rclient, frozenset({unsafe} - {""}))
    consumer.ensure_group()
    order_id = paid_order(cp_settings)
    publish_payment(rclient, "payments", "m1", order_id, "pr_1", 1000)
    arm(consumer.crash_points, "consumer.after_ack", action="error", count=1)
    consumer.step(block_ms=10)
    assert pending(rclient) == 0  # acknowledged either way
    assert bool(effects(rclient)) is applied


# --- real processes: a crashed gunicorn worker and a crashed consumer ----------------------

def test_drop_reply_closes_the_connection_and_the_retry_is_replayed(gunicorn, cp_settings):
    server = gunicorn(workers=2, crash_points_dir=cp_settings.crash_points_dir)
    arm(cp_settings.crash_points_dir, "api.after_store", action="drop-reply", count=1)
    time.sleep(0.25)  # past one poll interval of every worker
    with pytest.raises(requests.ConnectionError):
        requests.post(server.url + "/api/v1/orders", json=ORDER, headers={"Idempotency-Key": "k1"}, timeout=10)
    retry = requests.post(server.url + "/api/v1/orders", json=ORDER, headers={"Idempotency-Key": "k1"}, timeout=10)
    assert retry.status_code == 201 and retry.headers["Idempotent-Replayed"] == "true"


def _worker_pids(master: int) -> set[int]:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return {int(pid) for pid in children}


def test_a_crashed_gunicorn_worker_is_replaced_by_the_master(gunicorn, cp_settings, rclient):
    server = gunicorn(workers=2, crash_points_dir=cp_settings.crash_points_dir)
    assert server.process is not None
    before = _worker_pids(server.process.pid)
    assert len(before) == 2
    arm(cp_settings.crash_points_dir, "api.after_store", action="crash", count=1)
    time.sleep(0.25)
    with pytest.raises(requests.ConnectionError):
        requests.post(server.url + "/api/v1/orders", json=ORDER, headers={"Idempotency-Key": "k1"}, timeout=10)
    [hit] = CrashPoints(Path(cp_settings.crash_points_dir), "app").hits()
    assert hit.pid in before and hit.action == "crash"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        now = _worker_pids(server.process.pid)
        if len(now) == 2 and hit.pid not in now:
            break
        time.sleep(0.1)
    assert hit.pid not in now and len(now) == 2, now
    retry = requests.post(server.url + "/api/v1/orders", json=ORDER, headers={"Idempotency-Key": "k1"}, timeout=10)
    assert retry.status_code == 201 and retry.headers["Idempotent-Replayed"] == "true"
    assert requests.get(server.url + "/internal/v1/crash-points/hits", headers=INTERNAL, timeout=10).json()[
        "hits"][0]["pid"] == hit.pid


def test_a_crashed_consumer_process_dies_by_sigkill_with_its_entry_pending(cp_settings, rclient, tmp_path):
    order_id = paid_order(cp_settings)
    Consumer(rclient, cp_settings, name="setup").ensure_group()
    publish_payment(rclient, "payments", "m1", order_id, "pr_1", 1000)
    arm(cp_settings.crash_points_dir, "consumer.after_effect", action="crash", count=1)
    env = {**os.environ, **settings_env(cp_settings), "TARGET_APP_CONSUMER_NAME": "proc-1",
           "TARGET_APP_CONSUMER_BLOCK_MS": "50"}
    with open(tmp_path / "consumer.log", "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "target_app.consumer"], cwd=ROOT, env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            assert process.wait(timeout=20) == -signal.SIGKILL
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert [e["outcome"] for e in effects(rclient)] == ["paid"]
    assert pending(rclient) == 1  # not acknowledged: another consumer reclaims it
    assert hits(cp_settings.crash_points_dir) == [("consumer.after_effect", "crash", "consumer")]
    assert "stopped" not in (tmp_path / "consumer.log").read_text()  # no orderly exit
