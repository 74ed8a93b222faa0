"""A response that could not be recorded must not let a retry repeat the effect."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import redis

from target_app.app import create_app
from target_app.errors import StoreUnavailable
from target_app.idempotency import RedisStore
from target_app.services import services_of
from target_app.settings import Settings

ORDER = {"sku": "sku-1", "quantity": 1, "amount_cents": 1000, "currency": "EUR"}


class FinishFailsOnce(RedisStore):
    """A Redis store whose `finish` fails while `broken` is set (a brownout that
    starts right after the handler's effect and outlasts the finish retries)."""

    broken = True

    def finish(self, *args, **kwargs):
        if self.broken:
            raise StoreUnavailable("brownout")
        return super().finish(*args, **kwargs)


def _orders_for_key(client: redis.Redis, key: str) -> list[str]:
    ids = client.smembers("ta:orders")
    return sorted(i for i in ids if client.hget(f"ta:order:{i}", "idempotency_key") == key)


def _post(http, key: str):
    return http.post("/api/v1/orders", data=json.dumps(ORDER),
                     headers={"Idempotency-Key": key, "Content-Type": "application/json"})


def test_a_retry_after_a_lost_record_returns_the_first_order(settings: Settings, redis_url: str) -> None:
    settings = replace(settings, inflight_lease=1)
    rclient = redis.Redis.from_url(redis_url, decode_responses=True)
    store = FinishFailsOnce(rclient)
    http = create_app(settings, idempotency_store=store).test_client()

    first = _post(http, "lost-record")
    assert first.status_code == 503
    assert len(_orders_for_key(rclient, "lost-record")) == 1

    store.broken = False
    time.sleep(1.2)  # the in-flight lease of the first attempt runs out
    retry = _post(http, "lost-record")
    assert retry.status_code == 201
    assert _orders_for_key(rclient, "lost-record") == [retry.get_json()["id"]]
    assert rclient.hget("ta:inventory:sku-1", "available") == "999"


def test_without_the_api_layer_there_is_no_recovery_point(settings: Settings, redis_url: str) -> None:
    settings = replace(settings, unsafe_disable=frozenset({"api"}))
    rclient = redis.Redis.from_url(redis_url, decode_responses=True)
    http = create_app(settings).test_client()
    assert _post(http, "k").status_code == 201
    assert _post(http, "k").status_code == 201
    assert len(_orders_for_key(rclient, "k")) == 2
    assert not rclient.keys("ta:order-by-key:*")


def lose_create_replies(http) -> dict:
    """Make the app's order script run but lose its reply once `state["lose"]` is set:
    the Redis connection drops after the script ran (a downstream fault)."""
    domain = services_of(http.application).domain
    real = domain._create
    state = {"lose": True}

    def create(*args, **kwargs):
        reply = real(*args, **kwargs)
        if state["lose"]:
            state["lose"] = False
            raise redis.ConnectionError("reply lost")
        return reply

    domain._create = create
    return state


def _post_body(http, key: str, order: dict, tenant: str | None = None):
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    if tenant:
        headers["X-Tenant-ID"] = tenant
    return http.post("/api/v1/orders", data=json.dumps(order), headers=headers)


def test_the_recovery_point_refuses_another_body_and_recovers_the_honest_retry(settings, redis_url):
    rclient = redis.Redis.from_url(redis_url, decode_responses=True)
    http = create_app(settings).test_client()
    lose_create_replies(http)
    first = _post_body(http, "lost-reply", ORDER)
    assert first.status_code == 503  # the order exists, the key was released (a 5xx)
    [created] = _orders_for_key(rclient, "lost-reply")

    other = _post_body(http, "lost-reply", {**ORDER, "quantity": 2})
    assert other.status_code == 409 and other.json["type"] == "/problems/idempotency-key-mismatch"
    assert other.content_type == "application/problem+json"
    assert rclient.hget("ta:counters", "api_fingerprint_conflicts") == "1"
    assert _orders_for_key(rclient, "lost-reply") == [created]

    honest = _post_body(http, "lost-reply", ORDER)  # not refused by a stored 409
    assert honest.status_code == 201 and honest.json["id"] == created
    assert rclient.hget("ta:counters", "api_recovered") == "1"
    replay = _post_body(http, "lost-reply", ORDER)
    assert replay.headers["Idempotent-Replayed"] == "true" and replay.json["id"] == created
    assert rclient.hget("ta:inventory:sku-1", "available") == "999"


def test_the_recovery_point_is_scoped_by_tenant(settings, redis_url):
    rclient = redis.Redis.from_url(redis_url, decode_responses=True)
    http = create_app(settings).test_client()
    lose_create_replies(http)
    assert _post_body(http, "shared", ORDER, tenant="A").status_code == 503
    b = _post_body(http, "shared", ORDER, tenant="B")
    assert b.status_code == 201 and b.json["tenant"] == "B"
    assert len(_orders_for_key(rclient, "shared")) == 2


def test_api_fingerprint_mutant_replays_another_body(settings, redis_url):
    """The negative control: a reused key with another body gets the first answer."""
    http = create_app(replace(settings, unsafe_disable=frozenset({"api-fingerprint"}))).test_client()
    first = _post_body(http, "k", ORDER)
    other = _post_body(http, "k", {**ORDER, "sku": "sku-2", "quantity": 3})
    assert first.status_code == other.status_code == 201
    assert other.headers["Idempotent-Replayed"] == "true"
    assert other.json["sku"] == "sku-1" and other.json["id"] == first.json["id"]


def test_api_tenant_mutant_shares_keys_across_tenants(settings, redis_url):
    """The negative control: tenant B's request with tenant A's key gets A's order."""
    rclient = redis.Redis.from_url(redis_url, decode_responses=True)
    http = create_app(replace(settings, unsafe_disable=frozenset({"api-tenant"}))).test_client()
    a = _post_body(http, "k", ORDER, tenant="A")
    b = _post_body(http, "k", ORDER, tenant="B")
    assert a.status_code == b.status_code == 201
    assert b.json["id"] == a.json["id"] and b.json["tenant"] == "A"
    # and the recovery point is shared too
    lose_create_replies(http)
    assert _post_body(http, "k2", ORDER, tenant="A").status_code == 503
    recovered = _post_body(http, "k2", ORDER, tenant="B")
    assert recovered.status_code == 201 and recovered.json["tenant"] == "A"
    assert len(_orders_for_key(rclient, "k2")) == 1
