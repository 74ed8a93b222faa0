"""MemoryStore is the model of RedisStore: a Hypothesis state machine drives both.

Every rule calls the same store operation with the same arguments on both stores
(a MemoryStore and a RedisStore on the test's own database of the private
redis-server): `begin`, `finish` with a token a `begin` handed out (possibly stale,
already used or taken over), `finish` with a token never handed out, `count`, and
`advance`, which lets time pass. The invariants: both stores gave the same
observable result for the last operation (outcome, whether a token came back,
replayed status, headers and body, Retry-After; `finish`'s True/False), and their
counters agree.

Time: MemoryStore reads an injected clock (real monotonic time plus an offset);
Redis expires keys on its own clock, so `advance(s)` adds `s` to the offset and
shortens the TTL of every record in Redis by `s` (deleting those it ends), which is
what `s` seconds of waiting would do, without the wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import redis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from target_app.idempotency import Begin, IdempotencyStore, MemoryStore, RedisStore
from target_app.idempotency.store import Headers

Clock = Callable[[], float]
Observed = tuple[object, ...]

TENANTS = st.sampled_from(["default", "tenant-b"])
# One key under two tenants: few record identities, so operations meet on the same
# record often (and tenant scoping is still exercised).
KEYS = st.just("k1")
FINGERPRINTS = st.sampled_from(["fp-a", "fp-b"])
LEASES = st.integers(min_value=1, max_value=2)
# Mostly longer than a lease, as in the app (a day against 30 s), sometimes not.
TTLS = st.integers(min_value=1, max_value=4)
STATUSES = st.sampled_from([200, 201, 409, 422, 500, 503])
HEADERS = st.sampled_from([[], [("Content-Type", "application/json")],
                           [("Content-Type", "application/json"), ("Location", "/api/v1/orders/o1")]])
BODIES = st.binary(max_size=8)
COUNTERS = st.sampled_from(["api_incomplete_bodies", "api_replays"])


@dataclass(frozen=True)
class Claim:
    """The tokens one `begin` handed out, by each store, for (tenant, key)."""

    tenant: str
    key: str
    model_token: str
    real_token: str


def observed_begin(found: Begin) -> Observed:
    # Tokens are random per store; that one was handed out is what is observable.
    return ("begin", found.outcome, bool(found.token), found.status, found.headers, found.body,
            found.retry_after)


class StoreModelMachine(RuleBasedStateMachine):
    claims = Bundle("claims")

    def __init__(self, redis_url: str, model: Callable[[Clock], IdempotencyStore]) -> None:
        super().__init__()
        self.client: redis.Redis[bytes] = redis.Redis.from_url(redis_url)
        self.client.flushdb()
        self.offset = 0.0
        self.model = model(lambda: time.monotonic() + self.offset)
        self.real = RedisStore(self.client)
        self.last: tuple[Observed, Observed] | None = None

    def teardown(self) -> None:
        self.client.close()

    @rule(target=claims, tenant=TENANTS, key=KEYS, fingerprint=FINGERPRINTS, lease=LEASES)
    def begin(self, tenant: str, key: str, fingerprint: str, lease: int) -> object:
        model = self.model.begin(tenant, key, fingerprint, lease_seconds=lease)
        real = self.real.begin(tenant, key, fingerprint, lease_seconds=lease)
        self.last = (observed_begin(model), observed_begin(real))
        if model.token or real.token:
            return Claim(tenant, key, model.token, real.token)
        return multiple()

    @rule(claim=claims, status=STATUSES, headers=HEADERS, body=BODIES, ttl=TTLS)
    def finish(self, claim: Claim, status: int, headers: Headers, body: bytes, ttl: int) -> None:
        model = self.model.finish(claim.tenant, claim.key, claim.model_token, status=status,
                                  headers=headers, body=body, ttl_seconds=ttl)
        real = self.real.finish(claim.tenant, claim.key, claim.real_token, status=status,
                                headers=headers, body=body, ttl_seconds=ttl)
        self.last = (("finish", model), ("finish", real))

    @rule(tenant=TENANTS, key=KEYS, status=STATUSES)
    def finish_with_a_foreign_token(self, tenant: str, key: str, status: int) -> None:
        foreign = "f" * 32
        model = self.model.finish(tenant, key, foreign, status=status, headers=[], body=b"x",
                                  ttl_seconds=5)
        real = self.real.finish(tenant, key, foreign, status=status, headers=[], body=b"x",
                                ttl_seconds=5)
        self.last = (("finish", model), ("finish", real))

    @rule(name=COUNTERS)
    def count(self, name: str) -> None:
        self.model.count(name)
        self.real.count(name)
        self.last = None

    @rule(seconds=st.integers(min_value=1, max_value=3))
    def advance(self, seconds: int) -> None:
        self.offset += seconds
        for record in self.client.scan_iter(match="ta:idem:*"):
            remaining = int(self.client.pttl(record)) - seconds * 1000
            if remaining <= 0:
                self.client.delete(record)
            else:
                self.client.pexpire(record, remaining)
        self.last = None

    @invariant()
    def same_result(self) -> None:
        if self.last is not None:
            model, real = self.last
            assert model == real, f"MemoryStore {model} but RedisStore {real}"

    @invariant()
    def same_counters(self) -> None:
        real = {name.decode(): int(value) for name, value in self.client.hgetall("ta:counters").items()}
        model_counters = getattr(self.model, "counters", {})
        model = {name: value for name, value in model_counters.items() if value}
        assert model == real


def run(redis_url: str, model: Callable[[Clock], IdempotencyStore], *, shrink: bool = True,
        max_examples: int = 150) -> None:
    run_state_machine_as_test(
        lambda: StoreModelMachine(redis_url, model),
        settings=settings(max_examples=max_examples, stateful_step_count=40, deadline=None,
                          database=None, print_blob=False, report_multiple_bugs=False,
                          suppress_health_check=[HealthCheck.too_slow],
                          phases=list(Phase) if shrink else [Phase.generate]))


def test_memory_store_models_the_redis_store(redis_url: str) -> None:
    run(redis_url, lambda clock: MemoryStore(clock=clock))


class KeepsServerErrors(MemoryStore):
    """A wrong model: it stores a 5xx like any answer instead of releasing the key."""

    def finish(self, tenant: str, key: str, token: str, *, status: int, headers: Headers,
               body: bytes, ttl_seconds: int) -> bool:
        return super().finish(tenant, key, token, status=min(status, 499), headers=headers,
                              body=body, ttl_seconds=ttl_seconds)


def test_the_machine_catches_a_model_that_disagrees(redis_url: str) -> None:
    with pytest.raises(AssertionError):
        run(redis_url, lambda clock: KeepsServerErrors(clock=clock), shrink=False, max_examples=200)
