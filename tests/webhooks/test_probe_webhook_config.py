"""The probe config's `webhooks:` section: entries checked by harness.webhooks.config,
`effects` that count a fact's effects (`{fact}` / `:fact`), errors naming the field,
and the plain form the Locust processes get reading back to the same config."""

from __future__ import annotations

from typing import Any

import pytest

from harness.probe.config import ProbeConfigError, parse_config

ENDPOINT = {"path": "/orders", "body": {"ref": "{uuid}"}, "id": {"pointer": "/id"}}


def webhook(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "path": "/webhooks/stripe", "scheme": "stripe", "secret": "whsec_test_123",
        "event": {"type": "payment_intent.succeeded", "data": {"object": {"id": "pi_{uuid}", "amount": 500}}},
        "fact": "/data/object/id", "effects": {"path": "/payments?intent={fact}", "count": "/count"},
    }
    raw.update(changes)
    return {key: value for key, value in raw.items() if value is not None}


def config(*webhooks: dict[str, Any]) -> dict[str, Any]:
    return {"upstream": "127.0.0.1:8000", "endpoints": [ENDPOINT], "webhooks": list(webhooks)}


def test_webhooks_beside_endpoints() -> None:
    parsed = parse_config(config(webhook(), webhook(name="sql", effects={
        "dsn": "postgresql://u@127.0.0.1/db", "query": "select count(*) from payments where intent = :fact"})))
    first, second = parsed.webhooks
    assert first.spec.name == "webhook-0" and first.spec.scheme == "stripe" and first.spec.tolerance == 300
    assert first.effects is not None and first.effects.kind == "http" and first.effects.params == ("fact",)
    assert second.effects is not None and second.effects.kind == "sql" and second.effects.params == ("fact",)
    assert parse_config(parsed.to_dict()) == parsed


def test_effects_are_optional_and_no_webhooks_is_the_old_config() -> None:
    parsed = parse_config(config(webhook(effects=None)))
    assert parsed.webhooks[0].effects is None and parse_config(parsed.to_dict()) == parsed
    plain = parse_config({"upstream": "127.0.0.1:8000", "endpoints": [ENDPOINT]})
    assert plain.webhooks == () and "webhooks" not in plain.to_dict()


@pytest.mark.parametrize(("raw", "message"), [
    (config(webhook(scheme="paypal")), "<config>: webhooks[0].scheme: must be one of stripe, standard"),
    (config(webhook(effects={"path": "/payments/{id}", "count": "/n"})),
     "<config>: webhooks[0].effects.path: must take the fact as its one parameter"),
    (config(webhook(effects={"dsn": "postgresql://h/db", "query": "select 1 where a = :key"})),
     "<config>: webhooks[0].effects.query: must take the fact as its one parameter"),
    (config(webhook(effects={"path": "/p/{nope}", "count": "/n"})),
     "<config>: webhooks[0].effects.path: parameter 'nope' is neither key, id nor"),
    (config(webhook(name="same"), webhook(name="same")), "<config>: webhooks: names must be unique: same"),
    ({"endpoints": [ENDPOINT], "webhooks": []}, "<config>: webhooks: must be a non-empty list"),
    (config(webhook(tolerance="soon")), "<config>: webhooks[0].tolerance: "),
])
def test_errors_name_the_webhook_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ProbeConfigError) as caught:
        parse_config(raw)
    assert str(caught.value).startswith(message), str(caught.value)
