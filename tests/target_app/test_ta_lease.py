"""The in-flight lease and its negative control `lease-wall-clock`.

The correct store's lease is a Redis expiry: the app's clock is not read at all. The
control stores the deadline `app clock + lease` and frees a claim once the app's clock
has passed it. A creation held after its order script (crash point delay at
`domain.after_create`) while the app's clock jumps an hour: the correct app refuses the
duplicate in flight; the control lets it run the handler again, which the atomic
recovery point still answers with the first order, and only beside `recovery-nonatomic`
(the point written after the hold) makes a second order. The same story on a real stack
under libfaketime, judged by the checker: tests/e2e/test_lease_clock.py.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from target_app.app import create_app
from target_app.crashpoints import CrashPoints
from target_app.idempotency import RedisStore, fingerprint
from target_app.keys import idempotency_key

ORDER = {"sku": "sku-1", "quantity": 1, "amount_cents": 1000, "currency": "EUR"}
LEASE_MS = 30_000


class Clock:
    """The app's wall clock, moved by the test."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def orders_for_key(rclient: redis.Redis, key: str) -> list[str]:
    return [oid for oid in rclient.smembers("ta:orders")
            if rclient.hget(f"ta:order:{oid}", "idempotency_key") == key]


def test_the_correct_lease_is_a_redis_expiry(redis_url: str, rclient: redis.Redis) -> None:
    store = RedisStore(redis.Redis.from_url(redis_url))
    assert store.begin("t", "k", "fp", lease_seconds=30).outcome == "started"
    assert 0 < rclient.pttl(idempotency_key("t", "k")) <= LEASE_MS
    held = store.begin("t", "k", "fp", lease_seconds=30)
    assert (held.outcome, held.retry_after) == ("in_flight", 30)
    assert rclient.hget(idempotency_key("t", "k"), "until") is None


def test_lease_wall_clock_frees_a_claim_once_the_apps_clock_passes_its_deadline(
        redis_url: str, rclient: redis.Redis) -> None:
    clock = Clock()
    store = RedisStore(redis.Redis.from_url(redis_url), lease_clock=clock)
    first = store.begin("t", "k", "fp", lease_seconds=30)
    assert first.outcome == "started"
    assert rclient.pttl(idempotency_key("t", "k")) == -1  # no Redis expiry: the app's clock alone
    clock.now += 29.5
    held = store.begin("t", "k", "fp", lease_seconds=30)
    assert (held.outcome, held.retry_after) == ("in_flight", 1)
    clock.now += 3600  # the app's clock jumps while the first request is still running
    second = store.begin("t", "k", "fp", lease_seconds=30)
    assert second.outcome == "started" and second.token != first.token
    assert not store.finish("t", "k", first.token, status=201, headers=[], body=b"a", ttl_seconds=60)
    assert store.finish("t", "k", second.token, status=201, headers=[], body=b"b", ttl_seconds=60)
    assert 0 < rclient.pttl(idempotency_key("t", "k")) <= 60_000
    assert rclient.hget(idempotency_key("t", "k"), "until") is None


def test_the_control_reads_the_apps_own_wall_clock(settings, redis_url: str) -> None:
    # A claim whose deadline the app's clock has passed (made by a process an hour
    # behind): free for the control, in flight for the correct app (its Redis
    # expiry, set now, has 30 s to run).
    body = json.dumps(ORDER).encode()
    digest = fingerprint("POST", "/api/v1/orders", body)
    behind = RedisStore(redis.Redis.from_url(redis_url), lease_clock=lambda: time.time() - 3600)
    correct = RedisStore(redis.Redis.from_url(redis_url))
    for unsafe, key, expected in ((frozenset(), "k-correct", 409), (frozenset({"lease-wall-clock"}), "k-ctl", 201)):
        (behind if unsafe else correct).begin("default", key, digest, lease_seconds=30)
        client = create_app(replace(settings, unsafe_disable=unsafe)).test_client()
        answer = client.post("/api/v1/orders", data=body, content_type="application/json",
                             headers={"Idempotency-Key": key})
        assert answer.status_code == expected, (unsafe, answer.json)


@pytest.mark.parametrize(("controls", "duplicate_status", "orders"), [
    ((), 409, 1),
    (("recovery-nonatomic",), 409, 1),
    (("lease-wall-clock",), 201, 1),  # the duplicate ran the handler; the recovery point answered
    (("lease-wall-clock", "recovery-nonatomic"), 201, 2),
])
def test_a_duplicate_of_a_held_creation_while_the_apps_clock_jumps(
        settings, redis_url: str, rclient: redis.Redis, tmp_path: Path,
        controls: tuple[str, ...], duplicate_status: int, orders: int) -> None:
    clock = Clock()
    lease_clock = clock if "lease-wall-clock" in controls else None
    store = RedisStore(redis.Redis.from_url(redis_url), lease_clock=lease_clock)
    mutant = replace(settings, unsafe_disable=frozenset(controls), crash_points_dir=str(tmp_path / "cp"))
    app = create_app(mutant, idempotency_store=store)
    points = CrashPoints(tmp_path / "cp", "app")
    points.arm("domain.after_create", {"action": "delay", "delay_ms": 1000, "count": 1})
    answers: dict[str, int] = {}

    def first() -> None:
        answers["first"] = app.test_client().post("/api/v1/orders", json=ORDER,
                                                  headers={"Idempotency-Key": "k1"}).status_code

    holder = threading.Thread(target=first)
    holder.start()
    deadline = time.monotonic() + 10
    while not points.hits() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert points.hits(), "the first request never reached its hold"
    clock.now += 3600
    duplicate = app.test_client().post("/api/v1/orders", json=ORDER, headers={"Idempotency-Key": "k1"})
    holder.join(10)
    assert answers == {"first": 201}
    assert duplicate.status_code == duplicate_status, duplicate.json
    if duplicate_status == 409:
        assert duplicate.json["type"] == "/problems/idempotency-key-in-flight"
        assert int(duplicate.headers["Retry-After"]) >= 1
    assert len(orders_for_key(rclient, "k1")) == orders
    recovered = rclient.hget("ta:counters", "api_recovered")
    assert recovered == ("1" if controls == ("lease-wall-clock",) else None)
