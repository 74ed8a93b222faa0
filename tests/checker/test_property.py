"""Hypothesis: a correct app's history never fails; one injected fault always does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checker_builders import digest
from checker_model import CorrectApp, play
from harness.checker import check

MODES = st.sampled_from(["ok", "ok", "ok", "info_applied", "info_lost", "5xx"])
ORDER = st.integers(0, 9)
REF = st.integers(0, 2)

ACTION = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(["default", "t2"]),
              st.sampled_from(["k0", "k1", "k2", "k3"]), st.integers(1, 3), MODES),
    st.tuples(st.just("pay"), ORDER, REF, st.sampled_from(["pk0", "pk1", "pk2", "pk3", "pk4"]),
              MODES, st.sampled_from([False, False, False, True])),
    st.tuples(st.just("webhook"), ORDER, REF, st.sampled_from(["ev0", "ev1", "ev2"]), MODES,
              st.sampled_from([False, False, True])),
    st.tuples(st.just("publish"), ORDER, REF, st.sampled_from(["m0", "m1", "m2", "m3"]),
              st.sampled_from(["ok", "ok", "info_applied", "info_lost"])),
)
# Every history starts with one order that surely exists, so injections have a target.
HISTORIES = st.lists(ACTION, max_size=40).map(lambda actions: [("create", "default", "k-first", 1, "ok")] + actions)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def judge(app: CorrectApp) -> Any:
    return check(app.run.operations, app.run.export)


@SETTINGS
@given(HISTORIES)
def test_a_correct_app_never_fails(actions: list[tuple[Any, ...]]) -> None:
    app = play(actions)
    result = judge(app)
    assert result.valid, [v.message for i in result.invariants for v in i.violations]
    assert result.jepsen["lost"] == 0 and result.jepsen["unexpected"] == 0
    assert result.counts["operations"] == len(actions)


# -- injections: each breaks one invariant the way a broken layer would ----------

def duplicate_payment(app: CorrectApp) -> str:
    order_id = next(iter(app.orders))
    app.run.webhook(order_id, "pr-dup", "ev-dup", "info")
    app.run.payment(order_id, "pr-dup", "webhook", "ev-dup")
    return "one_payment_per_order"


def second_order_for_a_key(app: CorrectApp) -> str:
    first = next(line for line in app.run.export if line["kind"] == "order")
    app.run.order("ord_twin", first["idempotency_key"], tenant=first["tenant"], quantity=1)
    for line in app.run.export:
        if line["kind"] == "inventory":
            line["available"] -= 1  # keep stock conserved: only the key invariant may fail
    return "one_order_per_key"


def lost_acknowledgement(app: CorrectApp) -> str:
    order_id = next(iter(app.orders))
    app.run.pay(order_id, "pr-lost", "pk-lost", "ok")
    return "no_lost_acknowledgement"


def unexpected_payment(app: CorrectApp) -> str:
    order_id = next(iter(app.orders))
    app.run.payment(order_id, "pr-ghost", "api", "pk-ghost")
    return "nothing_unexpected"


def stale_replay(app: CorrectApp) -> str:
    app.run.pay(next(iter(app.orders)), "pr0", "pk-replay", "info")
    app.run.pay(next(iter(app.orders)), "pr0", "pk-replay", "ok", replayed=True, status=201,
                body_digest=digest("one"))
    app.run.pay(next(iter(app.orders)), "pr0", "pk-replay", "ok", replayed=True, status=201,
                body_digest=digest("two"))
    return "replay_fidelity"


def stock_drift(app: CorrectApp) -> str:
    for line in app.run.export:
        if line["kind"] == "inventory":
            line["available"] += 1
    return "inventory_conservation"


def second_effect(app: CorrectApp) -> str:
    effects = [line for line in app.run.export if line["kind"] == "message_effect"]
    if effects:
        app.run.export.append(dict(effects[0]))
    else:
        app.run.effect("m-twice", "ord_unknown", "pr0", "unknown_order")
        app.run.effect("m-twice", "ord_unknown", "pr0", "unknown_order")
    return "message_effects_once"


INJECTIONS: list[Callable[[CorrectApp], str]] = [
    duplicate_payment, second_order_for_a_key, lost_acknowledgement, unexpected_payment,
    stale_replay, stock_drift, second_effect,
]


@SETTINGS
@given(HISTORIES, st.sampled_from(INJECTIONS))
def test_one_injected_fault_always_fails_its_invariant(
    actions: list[tuple[Any, ...]], inject: Callable[[CorrectApp], str]
) -> None:
    app = play(actions)
    expected = inject(app)
    result = judge(app)
    assert not result.valid
    assert expected in result.failed, (expected, result.failed)
    outcome = result.invariant(expected)
    assert outcome.violations and outcome.violations[0].message
