"""The Idempotency-Key middleware, against both stores (in-memory and Redis)."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis
from flask import Flask, Response, request

from target_app.errors import StoreUnavailable
from target_app.idempotency import (
    IdempotencyContext,
    IdempotencyMiddleware,
    MemoryStore,
    RedisStore,
    context_of,
    fingerprint,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "redis"])
def store_kind(request) -> str:
    return request.param


def make_store(kind: str, redis_url: str):
    if kind == "memory":
        return MemoryStore()
    return RedisStore(redis.Redis.from_url(redis_url))


def build(store, *, lease: int = 30, ttl: int = 3600, gate: threading.Event | None = None):
    """A tiny app whose handler counts its runs; `/fail` answers 500 while told to."""
    app = Flask(__name__)
    state = {"runs": 0, "fail": False}

    @app.post("/things")
    def things():
        state["runs"] += 1
        if gate is not None:
            gate.wait(5)
        body = {"run": state["runs"], "echo": request.get_json(silent=True)}
        return Response(json.dumps(body), status=201, mimetype="application/json",
                        headers={"Location": f"/things/{state['runs']}", "X-Noise": "n"})

    @app.post("/fail")
    def fail():
        state["runs"] += 1
        if state["fail"]:
            return Response("boom", status=500)
        return Response(json.dumps({"run": state["runs"]}), status=200, mimetype="application/json")

    @app.post("/open")
    def open_():
        return "open"

    app.wsgi_app = IdempotencyMiddleware(
        app.wsgi_app, store=store, applies=lambda m, p: m == "POST" and p != "/open",
        ttl_seconds=ttl, lease_seconds=lease, max_body_bytes=1024)
    return app, state


def test_duplicate_request_runs_the_handler_once(store_kind, redis_url):
    app, state = build(make_store(store_kind, redis_url))
    client = app.test_client()
    first = client.post("/things", json={"a": 1}, headers={"Idempotency-Key": "k1"})
    second = client.post("/things", json={"a": 1}, headers={"Idempotency-Key": "k1"})
    assert state["runs"] == 1
    assert first.status_code == second.status_code == 201
    assert second.data == first.data
    assert second.headers["Location"] == first.headers["Location"]
    assert second.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    different = client.post("/things", json={"a": 2}, headers={"Idempotency-Key": "k1"})
    assert different.status_code == 409
    assert different.content_type == "application/problem+json"
    assert different.json["status"] == 409
    other_path = client.post("/fail", json={"a": 1}, headers={"Idempotency-Key": "k1"})
    assert other_path.status_code == 409
    assert state["runs"] == 1


def test_server_error_is_not_cached(store_kind, redis_url):
    app, state = build(make_store(store_kind, redis_url))
    client = app.test_client()
    state["fail"] = True
    assert client.post("/fail", data=b"x", headers={"Idempotency-Key": "k"}).status_code == 500
    state["fail"] = False
    retry = client.post("/fail", data=b"x", headers={"Idempotency-Key": "k"})
    assert retry.status_code == 200
    assert "Idempotent-Replayed" not in retry.headers
    assert state["runs"] == 2
    again = client.post("/fail", data=b"x", headers={"Idempotency-Key": "k"})
    assert again.headers["Idempotent-Replayed"] == "true" and state["runs"] == 2


def test_exception_in_handler_releases_the_key(store_kind, redis_url):
    app, _state = build(make_store(store_kind, redis_url))
    app.testing = False
    calls = {"n": 0}

    @app.post("/raise")
    def raising():
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("crash")
        return "ok"

    client = app.test_client()
    assert client.post("/raise", headers={"Idempotency-Key": "r"}).status_code == 500
    assert client.post("/raise", headers={"Idempotency-Key": "r"}).status_code == 200
    assert calls["n"] == 2


def test_in_flight_request_gets_409_with_retry_after(store_kind, redis_url):
    gate = threading.Event()
    app, state = build(make_store(store_kind, redis_url), gate=gate)
    results = {}

    def first():
        results["first"] = app.test_client().post("/things", json={}, headers={"Idempotency-Key": "f"})

    thread = threading.Thread(target=first)
    thread.start()
    deadline = time.monotonic() + 5
    while state["runs"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    second = app.test_client().post("/things", json={}, headers={"Idempotency-Key": "f"})
    gate.set()
    thread.join(5)
    assert second.status_code == 409
    assert int(second.headers["Retry-After"]) >= 1
    assert second.content_type == "application/problem+json"
    assert results["first"].status_code == 201 and state["runs"] == 1


@pytest.mark.parametrize("key", ["", " ", "x" * 256, "bad\x01key", "tab\tkey", "caf\u00e9"])
def test_bad_keys_are_rejected(store_kind, redis_url, key):
    app, state = build(make_store(store_kind, redis_url))
    response = app.test_client().post("/things", json={}, headers={"Idempotency-Key": key})
    assert response.status_code == 400
    assert response.content_type == "application/problem+json"
    assert state["runs"] == 0


def test_missing_key_is_rejected_and_other_routes_pass(store_kind, redis_url):
    app, _state = build(make_store(store_kind, redis_url))
    client = app.test_client()
    assert client.post("/things", json={}).status_code == 400
    assert client.post("/open").data == b"open"
    assert client.post("/things", json={}, headers={"Idempotency-Key": "x" * 255}).status_code == 201


def test_body_over_the_limit_is_413(store_kind, redis_url):
    app, state = build(make_store(store_kind, redis_url))
    response = app.test_client().post("/things", data=b"x" * 2000, headers={"Idempotency-Key": "big"})
    assert response.status_code == 413
    assert response.content_type == "application/problem+json"
    assert state["runs"] == 0


def test_tenants_never_share_records(store_kind, redis_url):
    app, _state = build(make_store(store_kind, redis_url))
    client = app.test_client()
    a = client.post("/things", json={"t": 1}, headers={"Idempotency-Key": "same", "X-Tenant-ID": "A"})
    b = client.post("/things", json={"t": 1}, headers={"Idempotency-Key": "same", "X-Tenant-ID": "B"})
    assert a.status_code == b.status_code == 201
    assert "Idempotent-Replayed" not in b.headers
    assert a.json["run"] == 1 and b.json["run"] == 2
    # a tenant whose name embeds the other's key cannot collide either
    c = client.post("/things", json={"t": 1}, headers={"Idempotency-Key": "B:same", "X-Tenant-ID": "A"})
    assert c.json["run"] == 3
    replay_b = client.post("/things", json={"t": 1}, headers={"Idempotency-Key": "same", "X-Tenant-ID": "B"})
    assert replay_b.json["run"] == 2 and replay_b.headers["Idempotent-Replayed"] == "true"


def test_expired_in_flight_lease_no_longer_blocks(store_kind, redis_url):
    store = make_store(store_kind, redis_url)
    clock = Clock()
    if store_kind == "memory":
        store = MemoryStore(clock=clock)
    fp = fingerprint("POST", "/things", b"{}")
    crashed = store.begin("default", "lease", fp, lease_seconds=1)  # a worker that dies here
    assert crashed.outcome == "started"
    assert store.begin("default", "lease", fp, lease_seconds=1).outcome == "in_flight"
    if store_kind == "memory":
        clock.now += 1.01
    else:
        time.sleep(1.1)
    retry = store.begin("default", "lease", fp, lease_seconds=1)
    assert retry.outcome == "started"
    # the crashed worker's late finish must not overwrite the new owner's record
    assert not store.finish("default", "lease", crashed.token, status=201, headers=[], body=b"old",
                            ttl_seconds=60)
    assert store.finish("default", "lease", retry.token, status=201, headers=[], body=b"new",
                        ttl_seconds=60)
    replay = store.begin("default", "lease", fp, lease_seconds=1)
    assert replay.outcome == "replay" and replay.body == b"new"


def test_records_expire_after_the_ttl(store_kind, redis_url):
    clock = Clock()
    store = MemoryStore(clock=clock) if store_kind == "memory" else make_store(store_kind, redis_url)
    fp = fingerprint("POST", "/things", b"{}")
    begun = store.begin("default", "ttl", fp, lease_seconds=30)
    assert store.finish("default", "ttl", begun.token, status=201, headers=[], body=b"b", ttl_seconds=1)
    assert store.begin("default", "ttl", fp, lease_seconds=30).outcome == "replay"
    if store_kind == "memory":
        clock.now += 1.01
    else:
        time.sleep(1.1)
    assert store.begin("default", "ttl", fp, lease_seconds=30).outcome == "started"


def test_redis_store_counts_replays_and_conflicts(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    app, _ = build(RedisStore(redis.Redis.from_url(redis_url)))
    test = app.test_client()
    test.post("/things", json={}, headers={"Idempotency-Key": "c"})
    test.post("/things", json={}, headers={"Idempotency-Key": "c"})
    test.post("/things", json={"x": 1}, headers={"Idempotency-Key": "c"})
    counters = client.hgetall("ta:counters")
    assert counters["api_replays"] == "1" and counters["api_fingerprint_conflicts"] == "1"


class FlakyFinish(MemoryStore):
    """A store whose finish fails a given number of times (a Redis brownout)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def finish(self, *args, **kwargs):
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("brownout")
        return super().finish(*args, **kwargs)


def test_finish_survives_a_short_brownout():
    app, state = build(FlakyFinish(failures=2))
    client = app.test_client()
    first = client.post("/things", json={}, headers={"Idempotency-Key": "b"})
    assert first.status_code == 201
    assert client.post("/things", json={}, headers={"Idempotency-Key": "b"}).headers["Idempotent-Replayed"] == "true"
    assert state["runs"] == 1


def test_finish_failing_for_good_is_503_and_keeps_the_key_in_flight():
    app, state = build(FlakyFinish(failures=3))
    client = app.test_client()
    failed = client.post("/things", json={}, headers={"Idempotency-Key": "b"})
    assert failed.status_code == 503 and failed.content_type == "application/problem+json"
    # the effect may have happened: the key stays blocked until the lease ends
    assert client.post("/things", json={}, headers={"Idempotency-Key": "b"}).status_code == 409
    assert state["runs"] == 1


def test_the_handler_gets_an_explicit_context(redis_url):
    app = Flask(__name__)
    seen: list = []

    @app.post("/ctx")
    def ctx():
        seen.append(context_of(request.environ))
        return "ok"

    @app.post("/open")
    def open_():
        seen.append(context_of(request.environ))
        return "open"

    app.wsgi_app = IdempotencyMiddleware(
        app.wsgi_app, store=MemoryStore(), applies=lambda m, p: p == "/ctx",
        ttl_seconds=77, lease_seconds=5, max_body_bytes=1024)
    client = app.test_client()
    client.post("/ctx", data=b"body", headers={"Idempotency-Key": "k-ctx", "X-Tenant-ID": "T"})
    client.post("/open", data=b"body", headers={"Idempotency-Key": "k-ctx"})
    assert seen == [IdempotencyContext(tenant="T", key="k-ctx", fingerprint=fingerprint("POST", "/ctx", b"body"),
                                       ttl_seconds=77), None]
    with pytest.raises(AttributeError):
        seen[0].key = "other"


def test_a_release_request_from_the_handler_leaves_the_key_free(redis_url):
    app = Flask(__name__)
    runs = {"n": 0}

    @app.post("/refuse")
    def refuse():
        runs["n"] += 1
        if runs["n"] == 1:
            context = context_of(request.environ)
            assert context is not None
            context.release_key()
            return Response("{}", status=409, mimetype="application/json")
        return Response("{}", status=201, mimetype="application/json")

    app.wsgi_app = IdempotencyMiddleware(app.wsgi_app, store=MemoryStore(), applies=lambda m, p: True,
                                         ttl_seconds=60, lease_seconds=5, max_body_bytes=1024)
    client = app.test_client()
    assert client.post("/refuse", data=b"x", headers={"Idempotency-Key": "r"}).status_code == 409
    assert client.post("/refuse", data=b"y", headers={"Idempotency-Key": "r"}).status_code == 201
    again = client.post("/refuse", data=b"y", headers={"Idempotency-Key": "r"})
    assert again.headers["Idempotent-Replayed"] == "true" and runs["n"] == 2
