"""A response that could not be recorded must not let a retry repeat the effect."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import redis

from target_app.app import create_app
from target_app.errors import StoreUnavailable
from target_app.idempotency_store import RedisStore
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
