"""Events from a template: each scheme's envelope, the fact read from the body as sent,
the same object under a new id, one object's sequence, and the body generators."""

from __future__ import annotations

import json
import random
import re

import pytest

from harness.generators import is_generated, render_body
from harness.probe.config import parse_config
from harness.webhooks.events import EventError, EventMaker, EventTemplate, resolve_pointer
from harness.webhooks.schemes import scheme_named

TEMPLATE = {"data": {"object": {"id": "pi_{uuid}", "amount": "{int:100-200}", "currency": "{choice:eur|usd}"}}}


def maker(name: str, template: object = TEMPLATE, *, fact: str = "/data/object/id", seed: int = 1,
          sequence: tuple[str, ...] = ()) -> EventMaker:
    return EventMaker(scheme_named(name), EventTemplate(template, "payment_intent.succeeded", fact, sequence),
                      random.Random(seed), clock=lambda: 1_700_000_000.0)


def test_a_stripe_event_has_stripes_envelope_and_is_pretty_printed() -> None:
    event = maker("stripe").event()
    data = event.data()
    assert event.id.startswith("evt_") and data["id"] == event.id and data["object"] == "event"
    assert data["type"] == "payment_intent.succeeded" and data["created"] == 1_700_000_000 == event.created
    assert data["livemode"] is False
    obj = data["data"]["object"]
    assert obj["id"].startswith("pi_") and 100 <= obj["amount"] <= 200 and obj["currency"] in ("eur", "usd")
    assert event.fact == obj["id"]
    assert event.body.startswith(b"{\n  ")  # as Stripe sends it: re-serializing gives other bytes
    assert json.dumps(data, separators=(",", ":")).encode() != event.body


def test_a_template_cannot_override_the_fields_stripe_owns() -> None:
    event = maker("stripe", {"id": "evt_mine", "type": "x", "data": {"object": {"id": "o1"}}}).event()
    assert event.data()["id"] == event.id != "evt_mine" and event.data()["type"] == "payment_intent.succeeded"


def test_standard_github_and_shopify_envelopes() -> None:
    standard = maker("standard").event().data()
    assert standard["type"] == "payment_intent.succeeded" and standard["timestamp"] == "2023-11-14T22:13:20Z"
    github = maker("github").event()
    assert set(github.data()) == {"data"} and len(github.id) == 36
    assert b" " not in github.body  # compact JSON


def test_the_fact_must_be_in_the_body() -> None:
    with pytest.raises(EventError, match="fact: /data/object/nope is not in the stripe event body"):
        maker("stripe", fact="/data/object/nope").event()
    assert maker("stripe", fact="").event().fact is None
    assert maker("stripe", fact="/data/object/amount").event().fact.isdigit()  # type: ignore[union-attr]


def test_events_are_reproducible_per_seed_and_fresh_per_call() -> None:
    one, two = maker("stripe", seed=3), maker("stripe", seed=3)
    first, again = one.event(), two.event()
    assert first == again
    assert one.event().fact != first.fact


def test_the_same_object_under_a_new_event_id() -> None:
    events = maker("stripe")
    event = events.event()
    copy = events.same_object(event)
    assert copy.id != event.id and copy.fact == event.fact
    assert copy.data()["data"] == event.data()["data"] and copy.data()["id"] == copy.id
    assert events.same_object(event, "payment_intent.created").data()["type"] == "payment_intent.created"


def test_a_sequence_is_one_object_in_its_true_order() -> None:
    sequence = ("payment_intent.created", "payment_intent.succeeded")
    events = maker("stripe", sequence=sequence).sequence()
    assert [event.type for event in events] == list(sequence)
    assert len({event.fact for event in events}) == 1 and len({event.id for event in events}) == 2
    assert [event.type for event in maker("stripe").sequence()] == ["payment_intent.succeeded"]


def test_json_pointers() -> None:
    document = {"a": [{"b/c": 1, "d~e": 2}], "": 3}
    assert resolve_pointer(document, "/a/0/b~1c") == 1 and resolve_pointer(document, "/a/0/d~0e") == 2
    assert resolve_pointer(document, "/") == 3 and resolve_pointer(document, "") == document
    missing = resolve_pointer(document, "/a/1")
    assert missing is resolve_pointer(document, "a") is resolve_pointer(document, "/x/y")


def test_the_body_generators_leaf() -> None:
    assert is_generated({"a": ["{int:1-2}"]}) and is_generated("{choice:a|b}") and is_generated("{uuid}")
    assert not is_generated({"a": "{key}", "b": "order-{key}", "c": 1, "d": "{not_a_generator}"})
    assert is_generated({"b": "order-{uuid}"}) and is_generated(["pi_{int:1-9}"])
    rendered = render_body({"n": "{int:9-3}", "k": "{key}", "r": "r-{key}"}, random.Random(0), key=None)
    assert 3 <= rendered["n"] <= 9 and rendered["k"] == "" and rendered["r"] == "r-"


def test_generators_inside_a_string_and_stripe_ids() -> None:
    rng = random.Random(3)
    body = render_body({"pi": "pi_{int:1-9}", "two": "{choice:eur|usd}-{int:10-99}", "id": "{stripe_id:pi}",
                        "in": "x/{stripe_id:cus}/{key}", "n": "{int:1-1}", "keep": "{id} and {}"}, rng, key="k1")
    assert re.fullmatch(r"pi_[1-9]", body["pi"]), body
    assert re.fullmatch(r"(eur|usd)-[1-9][0-9]", body["two"]), body
    assert re.fullmatch(r"pi_[A-Za-z0-9]{24}", body["id"]), body
    assert re.fullmatch(r"x/cus_[A-Za-z0-9]{24}/k1", body["in"]), body
    assert body["n"] == 1 and body["keep"] == "{id} and {}"
    # From the caller's rng: one seed, one body; two occurrences are drawn separately.
    again = render_body({"id": "{stripe_id:pi}"}, random.Random(3), key=None)
    assert again == render_body({"id": "{stripe_id:pi}"}, random.Random(3), key=None)
    twice = render_body("{stripe_id:ch} {stripe_id:ch}", random.Random(4), key=None).split()
    assert len(set(twice)) == 2
    # A fact generated inside text makes events of their own, and a body whose only generator
    # is inside text is a generated body (the payload-mismatch duplicate changes that field).
    events = maker("stripe", {"data": {"object": {"id": "pi_{int:1-999999}"}}})
    assert events.event().fact != events.event().fact
    config = parse_config({"endpoints": [{"path": "/orders", "body": {"ref": "ord_{int:1-999999}"},
                                          "id": {"pointer": "/id"}}]})
    assert config.endpoints[0].body == {"ref": "ord_{int:1-999999}"}


def test_wrap_puts_a_callers_own_object_in_the_envelope() -> None:
    events = maker("stripe", fact="/data/object/metadata/order_id")
    intent = {"id": "pi_1", "object": "payment_intent", "metadata": {"order_id": "o-7"}}
    event = events.wrap({"data": {"object": intent}, "request": {"id": "req_1", "idempotency_key": "k"}},
                        "payment_intent.succeeded", event_id="evt_given", created=5)
    data = event.data()
    assert (event.id, event.created, event.fact) == ("evt_given", 5, "o-7")
    assert data["id"] == "evt_given" and data["data"]["object"] == intent and data["request"]["idempotency_key"] == "k"
    assert events.wrap({"data": {"object": intent}}, "charge.refunded").id.startswith("evt_")
