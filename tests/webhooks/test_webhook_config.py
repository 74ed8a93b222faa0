"""A webhook endpoint's config: a checked WebhookSpec, one-line errors naming the field,
the YAML form round-trips, and the spec builds a provider that a receiver accepts."""

from __future__ import annotations

import random
from typing import Any

import pytest

from harness.errors import HarnessError
from harness.fieldcheck import FieldChecker
from harness.webhooks import deliveries as kinds
from harness.webhooks.config import WebhookSpec, parse_webhook
from harness.webhooks.sender import RetrySchedule
from tests.webhooks.receiver import Receiver, running


class ConfigError(HarnessError):
    pass


def entry(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "path": "/webhooks/stripe", "scheme": "stripe", "secret": "whsec_test_123",
        "event": {"type": "payment_intent.succeeded",
                  "data": {"object": {"id": "pi_{uuid}", "amount": "{int:100-999}"}}},
        "fact": "/data/object/id",
    }
    raw.update(changes)
    return {key: value for key, value in raw.items() if value is not None}


def parse(raw: Any, **options: Any) -> WebhookSpec:
    return parse_webhook(FieldChecker("probe.yaml", ConfigError), raw, "webhooks[0]", **options)


def test_a_minimal_entry_gets_the_defaults() -> None:
    spec = parse(entry())
    assert (spec.name, spec.path, spec.scheme, spec.secret) == ("webhook-0", "/webhooks/stripe", "stripe",
                                                                "whsec_test_123")
    assert (spec.tolerance, spec.timeout) == (300, 10.0)
    assert spec.event.type == "payment_intent.succeeded" and spec.event.fact == "/data/object/id"
    assert "type" not in spec.event.body and spec.event.sequence == ()


def test_every_key_and_the_yaml_form_round_trips() -> None:
    spec = parse(entry(name="pi-events", tolerance="2m", timeout="500ms",
                       sequence=["payment_intent.created", "payment_intent.succeeded"]))
    assert (spec.name, spec.tolerance, spec.timeout) == ("pi-events", 120, 0.5)
    assert spec.event.sequence == ("payment_intent.created", "payment_intent.succeeded")
    assert parse(spec.to_raw()) == spec


@pytest.mark.parametrize(("changes", "message"), [
    ({"scheme": "paypal"}, "webhooks[0].scheme: must be one of stripe, standard, github, shopify, not 'paypal'"),
    ({"secret": ""}, "webhooks[0].secret: stripe: the endpoint secret must not be empty"),
    ({"scheme": "standard"}, "webhooks[0].secret: standard: the secret must be whsec_ followed by base64"),
    ({"scheme": "standard", "secret": "abc"}, "webhooks[0].secret: standard: the secret must start with whsec_"),
    ({"secret": 5}, "webhooks[0].secret: must be a string"),
    ({"path": "hooks"}, "webhooks[0].path: must be a URL path starting with /, not 'hooks'"),
    ({"tolerance": -1}, "webhooks[0].tolerance: not a duration: -1"),
    ({"tolerance": "1.5s"}, "webhooks[0].tolerance: must be whole seconds >= 0"),
    ({"timeout": 0}, "webhooks[0].timeout: must be longer than 0s"),
    ({"fact": "data.object.id"}, "webhooks[0].fact: must be a JSON pointer like /data/object/id"),
    ({"fact": "/data/object/nope"}, "webhooks[0].fact: /data/object/nope is not in the stripe event body"),
    ({"fact": "/type"}, "webhooks[0].fact: /type must be generated ({uuid}, {int:A-B}, ...) in event"),
    ({"event": {"data": {}}}, "webhooks[0].event: missing type"),
    ({"event": {"type": "has space", "data": {}}}, "webhooks[0].event.type: must be an event type"),
    ({"event": []}, "webhooks[0].event: must be a mapping"),
    ({"event": {"type": "t", "data": {"object": {"id": "{key}"}}}}, "webhooks[0].event: {key} means a request's"),
    ({"sequence": ["a.created"]}, "webhooks[0].sequence: must be a list of at least two event types"),
    ({"sequence": ["a.created", "a.created"]}, "webhooks[0].sequence: names an event type twice"),
    ({"name": "no spaces"}, "webhooks[0].name: must be letters, digits"),
    ({"effects": {"path": "/x"}}, "webhooks[0]: unknown key(s) effects"),
    ({"scheme": None}, "webhooks[0]: missing scheme"),
])
def test_errors_are_one_line_and_name_the_field(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(entry(**changes))
    text = str(caught.value)
    assert text.startswith("probe.yaml: ") and message in text and "\n" not in text, text


def test_a_key_the_caller_owns_is_left_to_it() -> None:
    assert parse(entry(effects={"path": "/x"}), also=("effects",)).path == "/webhooks/stripe"


def test_a_fact_in_stripes_envelope_is_the_event_id() -> None:
    # /id is the event id Stripe's envelope adds: generated per event, so it is a valid fact.
    assert parse(entry(fact="/id")).event.fact == "/id"


def test_the_type_goes_where_each_provider_puts_it() -> None:
    spec = parse(entry(scheme="github", secret="s", event={"type": "issues", "issue": {"id": "{uuid}"}},
                       fact="/issue/id"))
    event = spec.provider("http://127.0.0.1:9", rng=random.Random(1)).maker.event()
    assert event.type == "issues" and "type" not in event.data()


def test_the_spec_builds_a_provider_a_verifying_receiver_accepts() -> None:
    spec = parse(entry(scheme="standard", secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", timeout="2s"))
    with running(Receiver("standard", spec.secret)) as receiver:
        player = spec.provider(receiver.url, rng=random.Random(4), schedule=RetrySchedule(()))
        assert player.sender.url == receiver.url + "/webhooks/stripe" and player.sender.timeout == 2.0
        outcomes = player.play(kinds.FIRST) + player.play(kinds.TAMPERED_BODY)
    assert [(o.delivery.kind, o.status) for o in outcomes] == [("first", 200), ("tampered_body", 400)]
    assert receiver.applied == [(outcomes[0].delivery.event_id, outcomes[0].delivery.fact)]
