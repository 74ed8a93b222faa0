"""The `messages:` config, the producer (on a real Redis Streams broker) and the message
invariants' verdict rules (on outcomes built here, one rule at a time)."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from harness.history import history_files, iter_operations
from harness.probe.config import ProbeConfigError, parse_config
from harness.probe.messages.checks import check_messages, combine
from harness.probe.messages.play import MessageOutcome
from harness.probe.messages.producer import Producer
from harness.probe.messages.spec import fact_of

BODY = {"message_id": "{message_id}", "payment": "pay-{uuid}", "amount_cents": "{int:100-999}"}
EFFECTS = {"dsn": "postgresql://postgres@127.0.0.1:5432/payments",
           "query": "SELECT count(*) FROM payments WHERE payment_ref = :fact"}


def entry(**changes: Any) -> dict[str, Any]:
    raw = {"name": "payments", "broker": "rabbitmq", "url": "amqp://guest:guest@127.0.0.1:5672/%2F",
           "queue": "payments", "body": BODY, "fact": "/payment", "effects": EFFECTS}
    raw.update(changes)
    return {key: value for key, value in raw.items() if value is not None}


def error_of(raw: dict[str, Any]) -> str:
    with pytest.raises(ProbeConfigError) as caught:
        parse_config({"messages": [raw]}, source="probe.yaml")
    return str(caught.value)


# --- config ----------------------------------------------------------------------------

def test_a_messages_only_config_reads_back_the_same() -> None:
    config = parse_config({"messages": [entry(management="http://guest:guest@127.0.0.1:15672",
                                              dead_letter="payments.dead", count=12, drain_timeout="3s")]})
    assert config.endpoints == ()
    [message] = config.messages
    assert (message.spec.count, message.spec.drain_timeout, message.spec.dead_letter) == (12, 3.0, "payments.dead")
    assert message.effects.params == ("fact",)
    assert parse_config(config.to_dict()).messages == config.messages


def test_message_id_fills_the_body_and_the_fact_is_found() -> None:
    spec = parse_config({"messages": [entry()]}).messages[0].spec
    body = spec.render(random.Random(1), "msg-abc")
    assert body["message_id"] == "msg-abc" and body["payment"].startswith("pay-")
    assert fact_of(body, "/payment") == body["payment"]
    assert spec.render(random.Random(2), "msg-abc")["payment"] != body["payment"]


@pytest.mark.parametrize(("changes", "message"), [
    ({"broker": "kafka"}, "messages[0].broker: must be one of redis-streams, rabbitmq, nats, not 'kafka' (no Kafka"),
    ({"url": "http://127.0.0.1:5672"}, "messages[0].url: must be a amqp://host:port URL for rabbitmq"),
    ({"fact": "payment"}, "messages[0].fact: must be a JSON pointer into the body"),
    ({"fact": "/missing"}, "messages[0].fact: '/missing' is not in the body template"),
    ({"body": {"message_id": "{message_id}", "payment": "fixed"}}, "messages[0].fact: the fact at '/payment' must be generated"),
    ({"body": {"payment": "{uuid}-{message_id}"}}, "must not contain {message_id}"),
    ({"effects": None}, "messages[0].effects: is required"),
    ({"effects": {"dsn": EFFECTS["dsn"], "query": "SELECT count(*) FROM p WHERE id = :id"}},
     "messages[0].effects.query: must take the fact as its one parameter"),
    ({"management": "http://127.0.0.1:15672", "broker": "nats", "url": "nats://127.0.0.1:4222"},
     "messages[0].management: is RabbitMQ's management API"),
    ({"count": 0}, "messages[0].count: must be an integer >= 1"),
    ({"queue": "has space"}, "messages[0].queue: must be a queue, stream or subject name"),
    ({"headers": {"x-t": "1"}, "broker": "nats", "url": "nats://127.0.0.1:4222"},
     "messages[0].headers: is AMQP's, taken on broker rabbitmq only, not 'nats'"),
    ({"headers": ["x-t"]}, "messages[0].headers: must be a mapping of names to templates"),
    ({"headers": {"x t": "1"}}, "messages[0].headers.x t: must be a header name"),
    ({"headers": {"X-Probe-Kind": "first"}}, "messages[0].headers.X-Probe-Kind: is the probe's own header"),
    ({"headers": {"x-t": {"a": 1}}}, "messages[0].headers.x-t: must be text or a whole number"),
    ({"properties": {"message_id": "{uuid}"}}, "messages[0].properties.message_id: is not one of the properties"),
    ({"properties": {"priority": 300}}, "messages[0].properties.priority: must be a whole number from 0 to 255"),
    ({"properties": {"type": 5}}, "messages[0].properties.type: must be text"),
])
def test_config_errors_name_the_field(changes: dict[str, Any], message: str) -> None:
    assert message in error_of(entry(**changes))


def test_headers_and_properties_are_rendered_once_per_message_and_read_back() -> None:
    spec = parse_config({"messages": [entry(headers={"x-tenant": "t-{int:1-9}", "x-trace": "{message_id}"},
                                            properties={"type": "payment.created", "priority": 3})]}).messages[0].spec
    headers, properties = spec.render_envelope(random.Random(1), "msg-abc")
    assert headers["x-trace"] == "msg-abc" and str(headers["x-tenant"]).startswith("t-")
    assert properties == {"type": "payment.created", "priority": 3}
    assert parse_config({"messages": [{**spec.to_raw(), "effects": EFFECTS}]}).messages[0].spec == spec
    # Without them nothing is drawn from the seed's sequence: earlier runs' ids stay the same.
    plain = parse_config({"messages": [entry()]}).messages[0].spec
    rng = random.Random(1)
    assert plain.render_envelope(rng, "msg-abc") == ({}, {}) and rng.random() == random.Random(1).random()


def test_names_are_unique_and_something_is_probed() -> None:
    with pytest.raises(ProbeConfigError, match="messages: names must be unique: payments"):
        parse_config({"messages": [entry(), entry()]})
    with pytest.raises(ProbeConfigError, match="missing endpoints \\(or messages\\)"):
        parse_config({"load": {"duration": "2s"}})


# --- the producer on a real broker -------------------------------------------------------

def test_producer_plays_every_kind_and_records_each_publish(redis_url: str, tmp_path: Path) -> None:
    stream = f"probe-producer-{time.monotonic_ns()}"
    spec = parse_config({"messages": [entry(broker="redis-streams", url=redis_url, queue=stream, count=30)]}
                        ).messages[0].spec
    producer = Producer(spec, tmp_path / "history", seed=7, nonce="n1", spread=0.5)
    producer.setup()
    producer.start()
    assert producer.wait(30)
    producer.stop()
    assert producer.error is None
    operations = [op for op in iter_operations(history_files(tmp_path / "history")) if op.get("op") == "publish"]
    kinds = Counter(op["kind"] for op in operations)
    assert set(kinds) == {"first", "duplicate", "concurrent_duplicate", "same_fact_new_id", "burst"}
    assert all(op["type"] == "ok" and op["confirmed"] for op in operations)
    entries = redis.Redis.from_url(redis_url).xrange(stream)
    assert len(entries) == len(operations)  # every confirmed publish is in the stream
    by_id: dict[str, list[dict[str, Any]]] = {}
    for op in operations:
        by_id.setdefault(op["message_id"], []).append(op)
    for copies in by_id.values():
        # Every copy of one message id carries the same fact; a duplicate kind never has its own id.
        assert len({json.dumps(op["fact"]) for op in copies}) == 1
        if any(op["kind"] in ("duplicate", "concurrent_duplicate") for op in copies):
            assert len(copies) == 2
    renamed = [op for op in operations if op["kind"] == "same_fact_new_id"]
    firsts = {json.dumps(op["fact"]): op["message_id"] for op in operations if op["kind"] == "first"}
    assert renamed and all(firsts[json.dumps(op["fact"])] != op["message_id"] for op in renamed)
    for _, fields in entries:
        body = json.loads(fields[b"body"])
        assert body["message_id"] == fields[b"message_id"].decode()


# --- the verdict rules -------------------------------------------------------------------

def publish(fact: str, kind: str = "first", completion: str = "ok", message_id: str | None = None) -> dict[str, Any]:
    return {"op": "publish", "type": completion, "message": "payments", "fact": fact, "kind": kind,
            "message_id": message_id or f"id-{fact}-{kind}"}


def outcome(effects: list[tuple[str, int]], **changes: Any) -> MessageOutcome:
    values: dict[str, Any] = {"name": "payments", "broker": "rabbitmq", "effects": effects, "drained": True,
                              "backlog": 0, "redeliveries": 3, "stats_current": True}
    values.update(changes)
    return MessageOutcome(**values)


def verdict(operations: list[dict[str, Any]], outcomes: list[MessageOutcome]) -> tuple[str, set[str], list[str]]:
    from harness.probe.checker import ProbeCheck

    empty = ProbeCheck(invariants=[], counts={}, verdict="pass", inconclusive_reasons=[])
    result = combine(empty, check_messages(operations, outcomes), endpoints=False)
    return result.verdict, {inv.name for inv in result.invariants if not inv.passed}, result.inconclusive_reasons


def test_every_fact_once_with_redeliveries_passes() -> None:
    ops = [publish("a"), publish("a", "duplicate", message_id="id-a-first"), publish("b"),
           publish("b", "same_fact_new_id")]
    assert verdict(ops, [outcome([("a", 1), ("b", 1)])]) == ("pass", set(), [])


def test_a_fact_applied_twice_fails_fact_applied_once() -> None:
    ops = [publish("a"), publish("a", "same_fact_new_id")]
    result, failed, _ = verdict(ops, [outcome([("a", 2)])])
    assert (result, failed) == ("fail", {"fact_applied_once"})


def test_a_confirmed_fact_without_effect_after_the_drain_is_lost() -> None:
    ops = [publish("a"), publish("b")]
    assert verdict(ops, [outcome([("a", 1), ("b", 0)])])[:2] == ("fail", {"published_fact_applied"})


def test_an_unconfirmed_publish_may_be_missing() -> None:
    ops = [publish("a"), publish("b", completion="info")]
    assert verdict(ops, [outcome([("a", 1), ("b", 0)])])[:2] == ("pass", set())


def test_not_drained_is_inconclusive_not_a_loss() -> None:
    ops = [publish("a"), publish("b")]
    result, failed, reasons = verdict(ops, [outcome([("a", 1), ("b", 0)], drained=False, backlog=1)])
    assert (result, failed) == ("inconclusive", set())
    assert "did not drain" in reasons[0]


def test_a_consumer_that_took_nothing_is_inconclusive_never_pass() -> None:
    ops = [publish("a"), publish("b")]
    result, failed, reasons = verdict(ops, [outcome([("a", 0), ("b", 0)], backlog=0, redeliveries=0)])
    assert (result, failed) == ("inconclusive", set())
    assert any("no fact took effect" in reason for reason in reasons)


def test_no_redelivery_by_the_broker_is_inconclusive() -> None:
    ops = [publish("a")]
    result, _, reasons = verdict(ops, [outcome([("a", 1)], redeliveries=0)])
    assert result == "inconclusive" and "redelivered nothing" in reasons[0]
    result, _, reasons = verdict(ops, [outcome([("a", 1)], redeliveries=None)])
    assert result == "inconclusive" and "give `management:`" in reasons[0]


def test_dead_lettered_valid_messages_are_listed_and_judged() -> None:
    ops = [publish("a"), publish("b")]
    parked = [{"message_id": "id-a-first", "fact": "a"}, {"message_id": "id-b-first", "fact": "b"}]
    check = check_messages(ops, [outcome([("a", 1), ("b", 0)], dead_letters=parked, dead_letter_count=2)])
    by_name = {inv.name: inv for inv in check.invariants}
    dead = by_name["no_valid_message_dead_lettered"]
    assert dead.checked == 2 and dead.violation_count == 1
    assert dead.violations[0]["evidence"]["fact"] == "b"
    assert check.counts["messages"]["payments"]["dead_letters"] == 2


def test_facts_that_had_effects_before_the_run_are_not_judged_and_the_run_is_inconclusive() -> None:
    # A rerun finds 'a' already paid twice by an earlier run's rows: not this run's doing, not a PASS either.
    ops = [publish("a"), publish("b")]
    result, failed, reasons = verdict(ops, [outcome([("a", 2), ("b", 1)], preexisting=[("a", 2)])])
    assert (result, failed) == ("inconclusive", set())
    assert any("1 facts already had effects before this run" in r and "'a'" in r for r in reasons), reasons


def test_a_consumer_that_applied_nothing_never_passes_on_an_earlier_runs_rows() -> None:
    # Every fact already had its row (an earlier run with the same facts); this run's consumer applied nothing.
    ops = [publish("a"), publish("b")]
    result, _, reasons = verdict(ops, [outcome([("a", 1), ("b", 1)], preexisting=[("a", 1), ("b", 1)])])
    assert result == "inconclusive", reasons


def test_an_earlier_runs_dead_letters_are_left_out() -> None:
    ops = [publish("a")]
    parked = [{"message_id": "id-old", "fact": "from-yesterday"}]
    check = check_messages(ops, [outcome([("a", 1)], dead_letters=parked, dead_letter_count=0)])
    dead = {inv.name: inv for inv in check.invariants}["no_valid_message_dead_lettered"]
    assert (dead.checked, dead.violation_count) == (0, 0)


def test_one_seed_plays_the_same_rounds_with_facts_of_each_runs_own(tmp_path: Path) -> None:
    spec = parse_config({"messages": [entry(count=40)]}).messages[0].spec

    def rounds(nonce: str) -> tuple[list[list[str]], list[Any]]:
        producer = Producer(spec, tmp_path / nonce, seed=7, nonce=nonce, spread=0.0)
        kinds = [[p[0].kind if isinstance(p, tuple) else p.kind for p in publishes] for publishes in producer.plan()]
        return kinds, producer.planned_facts()

    (kinds_1, facts_1), (kinds_2, facts_2), (kinds_again, facts_again) = rounds("r1"), rounds("r2"), rounds("r1")
    assert kinds_1 == kinds_2 and len(facts_1) == len(facts_2) > 30
    assert not {json.dumps(f) for f in facts_1} & {json.dumps(f) for f in facts_2}
    assert (kinds_again, facts_again) == (kinds_1, facts_1)


# --- the summary line ---------------------------------------------------------------------

def _summary(operations: int, ops: list[dict[str, Any]], outcomes: list[MessageOutcome], endpoints: bool) -> str:
    from harness.probe.checker import ProbeCheck
    from harness.probe.runner import ProbeResult

    base = ProbeCheck(invariants=[], counts={"operations": operations, "acknowledged": operations,
                                             "duplicated_keys": 0}, verdict="pass", inconclusive_reasons=[])
    check = combine(base, check_messages(ops, outcomes), endpoints=endpoints)
    return ProbeResult(verdict=check.verdict, exit_code=0, run_dir=Path("/tmp/run"), check=check, conformance=(),
                       document={}).summary()


def test_a_messages_only_summary_names_what_was_played_not_requests() -> None:
    ops = [publish("a"), publish("a", "duplicate", message_id="id-a-first"), publish("b", completion="info"),
           publish("c")]
    line = _summary(0, ops, [outcome([("a", 1), ("b", 0), ("c", 1)], redeliveries=5)], endpoints=False)
    assert "(4 messages published, 3 confirmed, 5 redelivered)" in line, line
    assert "requests" not in line, line


def test_a_summary_with_requests_and_messages_names_both() -> None:
    line = _summary(12, [publish("a")], [outcome([("a", 1)], redeliveries=2)], endpoints=True)
    assert "(12 requests, 12 acknowledged, 0 keys duplicated, 1 messages published, 1 confirmed, 2 redelivered)" \
        in line, line
