"""The idempotency store alone, on a fake clock: claim, complete, release, the window and
the bound on its size."""

from __future__ import annotations

from harness.provider.idempotency import Claimed, IdempotencyStore, InUse, Mismatch, Replay, StoredAnswer

ANSWER = StoredAnswer(200, {"Request-Id": "req_1"}, b"{}")


def test_claim_complete_replay_mismatch_release() -> None:
    now = [0.0]
    store = IdempotencyStore(ttl=10, clock=lambda: now[0])
    assert store.claim("sk", "k", fingerprint="a", path="/v1/x") == Claimed()
    assert store.claim("sk", "k", fingerprint="a", path="/v1/x") == InUse()
    store.complete("sk", "k", ANSWER)
    assert store.claim("sk", "k", fingerprint="a", path="/v1/x") == Replay(ANSWER)
    assert store.claim("sk", "k", fingerprint="b", path="/v1/x") == Mismatch("/v1/x")
    assert store.claim("other", "k", fingerprint="b", path="/v1/x") == Claimed()  # another scope
    store.release("other", "k")
    assert store.claim("other", "k", fingerprint="c", path="/v1/x") == Claimed()  # released: runs again
    store.release("sk", "k")  # a finished entry is never released
    assert store.claim("sk", "k", fingerprint="a", path="/v1/x") == Replay(ANSWER)
    now[0] = 10.0
    assert store.claim("sk", "k", fingerprint="b", path="/v1/x") == Claimed()  # expired: a new request


def test_the_oldest_finished_entries_are_pruned_first() -> None:
    store = IdempotencyStore(max_keys=2, clock=lambda: 0.0)
    store.claim("sk", "running", fingerprint="a", path="/")
    store.claim("sk", "done", fingerprint="a", path="/")
    store.complete("sk", "done", ANSWER)
    store.claim("sk", "new", fingerprint="a", path="/")
    assert len(store) == 2
    assert store.claim("sk", "running", fingerprint="a", path="/") == InUse()
    assert store.claim("sk", "done", fingerprint="a", path="/") != Replay(ANSWER)
