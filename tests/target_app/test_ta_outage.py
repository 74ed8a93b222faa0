"""A Redis outage: 503 problem+json, nothing stored, and a real retry after recovery."""

from __future__ import annotations

import json
import time

import pytest
import redis
from ta_helpers import (
    INTERNAL,
    INTERNAL_TOKEN,
    ORDER,
    SECRET,
    signed_headers,
    webhook_body,
)

from harness.stack.redis_server import RedisServer
from target_app.app import create_app
from target_app.idempotency import MemoryStore
from target_app.settings import Settings


@pytest.fixture
def own_redis(tmp_path):
    server = RedisServer(data_dir=tmp_path / "redis", appendonly=True)
    server.start()
    yield server
    server.stop()


def test_outage_gives_503_stores_nothing_and_the_retry_runs_for_real(own_redis):
    settings = Settings(redis_url=own_redis.url, webhook_secret=SECRET, redis_timeout=0.5,
                        internal_token=INTERNAL_TOKEN)
    client = create_app(settings).test_client()
    own_redis.stop()
    headers = {"Idempotency-Key": "during-outage"}
    for response in (client.post("/api/v1/orders", json=ORDER, headers=headers),
                     client.get("/healthz"), client.get("/api/v1/inventory/sku-1"),
                     client.get("/internal/v1/export", headers=INTERNAL)):
        assert response.status_code == 503
        assert response.content_type == "application/problem+json"
    body = webhook_body("ord_x", "pr_1")
    assert client.post("/webhooks/payments", data=body, headers=signed_headers(body)).status_code == 503

    own_redis.start()
    check = redis.Redis.from_url(own_redis.url, decode_responses=True)
    assert [k for k in check.scan_iter("ta:idem:*")] == []
    assert check.scard("ta:orders") == 0
    retry = client.post("/api/v1/orders", json=ORDER, headers=headers)
    assert retry.status_code == 201 and "Idempotent-Replayed" not in retry.headers
    replay = client.post("/api/v1/orders", json=ORDER, headers=headers)
    assert replay.headers["Idempotent-Replayed"] == "true" and replay.json["id"] == retry.json["id"]
    assert check.scard("ta:orders") == 1
    assert check.hget("ta:inventory:sku-1", "available") == "999"
    check.close()


def test_domain_outage_after_begin_is_not_cached(own_redis):
    """The key store answers but the domain's Redis fails: 503, key released."""
    store = MemoryStore()
    settings = Settings(redis_url=own_redis.url, webhook_secret=SECRET, redis_timeout=0.5,
                        internal_token=INTERNAL_TOKEN)
    client = create_app(settings, idempotency_store=store).test_client()
    headers = {"Idempotency-Key": "k"}
    own_redis.stop()
    failed = client.post("/api/v1/orders", json=ORDER, headers=headers)
    assert failed.status_code == 503 and failed.content_type == "application/problem+json"
    own_redis.start()
    retry = client.post("/api/v1/orders", json=ORDER, headers=headers)
    assert retry.status_code == 201 and "Idempotent-Replayed" not in retry.headers
    assert store.counters["api_replays"] == 0


def test_app_starts_while_redis_is_down_and_seeds_later(tmp_path):
    server = RedisServer(data_dir=tmp_path / "late", appendonly=False)
    from harness.ports import free_port

    server.port = free_port()
    settings = Settings(redis_url=server.url, webhook_secret=SECRET, redis_timeout=0.5,
                        internal_token=INTERNAL_TOKEN)
    client = create_app(settings).test_client()
    assert client.get("/healthz").status_code == 503
    server.start()
    try:
        deadline = time.monotonic() + 5
        while client.get("/healthz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.get("/api/v1/inventory/sku-1").json["available"] == 1000
        lines = [json.loads(x) for x in client.get("/internal/v1/export", headers=INTERNAL).data.decode().splitlines()]
        assert lines[-1]["kind"] == "counters"
    finally:
        server.stop()


def test_crashed_worker_lease_expires(redis_url):
    """A worker that began a request and died leaves an in-flight record; once its
    lease ends the same key runs for real."""
    from target_app.idempotency import RedisStore, fingerprint

    settings = Settings(redis_url=redis_url, webhook_secret=SECRET, inflight_lease=1)
    client = create_app(settings).test_client()
    body = json.dumps(ORDER).encode()
    store = RedisStore(redis.Redis.from_url(redis_url))
    assert store.begin("default", "crash", fingerprint("POST", "/api/v1/orders", body),
                       lease_seconds=1).outcome == "started"  # the worker dies here
    headers = {"Idempotency-Key": "crash", "Content-Type": "application/json"}
    blocked = client.post("/api/v1/orders", data=body, headers=headers)
    assert blocked.status_code == 409 and blocked.headers["Retry-After"] == "1"
    time.sleep(1.1)
    after = client.post("/api/v1/orders", data=body, headers=headers)
    assert after.status_code == 201 and "Idempotent-Replayed" not in after.headers
