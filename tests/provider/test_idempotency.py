"""Stripe's idempotency rules at the provider: replays (same object, `Idempotent-Replayed:
true`), errors stored and replayed, other parameters refused (idempotency_error), a
concurrent reuse refused (409 idempotency_key_in_use), validation failures not stored,
keys scoped per secret key, the window, and the SDK's own retries never charging twice."""

from __future__ import annotations

import threading
import time

import requests
import stripe

from harness.provider.faults import FaultRule
from harness.provider.records import ChargeRecord, RequestRecord
from harness.provider.server import EmbeddedProvider, ProviderConfig
from tests.provider.conftest import KEY, Raw

ORDER = {"amount": "1250", "currency": "eur", "payment_method": "pm_card_visa", "confirm": "true",
         "metadata[order_id]": "o-1"}


def charges(provider: EmbeddedProvider) -> list[ChargeRecord]:
    return [record for record in provider.ledger.records() if isinstance(record, ChargeRecord)]


def test_a_replay_is_the_same_object_and_says_so(raw: Raw, provider: EmbeddedProvider) -> None:
    first = raw.post("/v1/payment_intents", ORDER, key="k-1")
    again = raw.post("/v1/payment_intents", ORDER, key="k-1")
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert again.headers["Original-Request"] == first.headers["Request-Id"] != again.headers["Request-Id"]
    assert len(charges(provider)) == 1
    assert charges(provider)[0].request.idempotency_key == "k-1"
    fresh = raw.post("/v1/payment_intents", ORDER, key="k-2")
    assert fresh.json()["id"] != first.json()["id"] and len(charges(provider)) == 2


def test_errors_are_stored_and_replayed(raw: Raw, provider: EmbeddedProvider) -> None:
    declined = {**ORDER, "payment_method": "pm_card_chargeDeclined"}
    first = raw.post("/v1/payment_intents", declined, key="k-d")
    again = raw.post("/v1/payment_intents", declined, key="k-d")
    assert first.status_code == again.status_code == 402
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    assert [record.state for record in charges(provider)] == ["failed"]


def test_other_parameters_are_an_idempotency_error(raw: Raw, provider: EmbeddedProvider) -> None:
    assert raw.post("/v1/payment_intents", ORDER, key="k-1").status_code == 200
    other = raw.post("/v1/payment_intents", {**ORDER, "amount": "999"}, key="k-1")
    assert other.status_code == 400 and other.json()["error"]["type"] == "idempotency_error"
    elsewhere = raw.post("/v1/refunds", {"payment_intent": "pi_x"}, key="k-1")
    assert elsewhere.status_code == 400 and elsewhere.json()["error"]["type"] == "idempotency_error"
    assert len(charges(provider)) == 1


def test_the_sdk_raises_idempotency_error(client: stripe.StripeClient) -> None:
    params = {"amount": 100, "currency": "eur"}
    client.v1.payment_intents.create(params=params, options={"idempotency_key": "sdk-k"})  # type: ignore[arg-type]
    try:
        client.v1.payment_intents.create(params={"amount": 101, "currency": "eur"},
                                         options={"idempotency_key": "sdk-k"})
    except stripe.IdempotencyError as error:
        assert error.http_status == 400
    else:
        raise AssertionError("a reuse with other parameters was accepted")


def test_validation_failures_are_not_stored(raw: Raw, provider: EmbeddedProvider) -> None:
    broken = raw.post("/v1/payment_intents", {"currency": "eur"}, key="k-v")
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "parameter_missing"
    fixed = raw.post("/v1/payment_intents", ORDER, key="k-v")
    assert fixed.status_code == 200 and "Idempotent-Replayed" not in fixed.headers
    assert len(charges(provider)) == 1


def test_keys_are_scoped_per_secret_key(provider: EmbeddedProvider) -> None:
    alice, bob = Raw(provider.url, KEY), Raw(provider.url, "sk_test_another_account_2")
    one = alice.post("/v1/payment_intents", ORDER, key="shared")
    two = bob.post("/v1/payment_intents", ORDER, key="shared")
    assert one.status_code == two.status_code == 200 and one.json()["id"] != two.json()["id"]
    assert "Idempotent-Replayed" not in two.headers
    assert {record.request.key_scope for record in charges(provider)} == {"sk_test_…ts_1", "sk_test_…nt_2"}
    lookalike = Raw(provider.url, "sk_test_another_XXXXXXX_2")  # the same shown tail, another key
    three = lookalike.post("/v1/payment_intents", ORDER, key="shared")
    assert "Idempotent-Replayed" not in three.headers and three.json()["id"] != two.json()["id"]
    assert len(charges(provider)) == 3


def test_a_concurrent_reuse_is_409(raw: Raw, provider: EmbeddedProvider) -> None:
    gate = threading.Event()
    provider.api.sleep = lambda seconds: gate.wait(10)  # the slow answer lasts until the test says
    provider.add_fault(FaultRule(operation="payment_intents.create", status=None, delay=1.0, count=1))
    answers: list[requests.Response] = []
    first = threading.Thread(target=lambda: answers.append(raw.post("/v1/payment_intents", ORDER, key="k-c")))
    first.start()
    try:
        deadline = time.monotonic() + 10
        while not charges(provider) and time.monotonic() < deadline:
            time.sleep(0.01)  # the first request has charged and is being slow to answer
        assert charges(provider), "the first request never ran"
        busy = Raw(provider.url).post("/v1/payment_intents", ORDER, key="k-c")
        assert busy.status_code == 409
        assert busy.json()["error"]["code"] == "idempotency_key_in_use"
    finally:
        gate.set()
        first.join(10)
    assert answers[0].status_code == 200
    replay = raw.post("/v1/payment_intents", ORDER, key="k-c")
    assert replay.headers["Idempotent-Replayed"] == "true" and replay.json()["id"] == answers[0].json()["id"]
    assert len(charges(provider)) == 1


def test_a_key_expires_after_the_window() -> None:
    now = [1000.0]
    with EmbeddedProvider(ProviderConfig(idempotency_ttl=60)) as provider:
        provider.idempotency.clock = lambda: now[0]  # the window on a clock of the test's, not the machine's
        raw = Raw(provider.url)
        first = raw.post("/v1/payment_intents", ORDER, key="k-t")
        now[0] += 59
        assert raw.post("/v1/payment_intents", ORDER, key="k-t").headers.get("Idempotent-Replayed") == "true"
        now[0] += 1
        later = raw.post("/v1/payment_intents", ORDER, key="k-t")
        assert "Idempotent-Replayed" not in later.headers and later.json()["id"] != first.json()["id"]
        assert len(charges(provider)) == 2


def test_a_get_ignores_the_key(raw: Raw, provider: EmbeddedProvider) -> None:
    raw.post("/v1/payment_intents", ORDER, key="k-g")
    listed = raw.session.get(provider.url + "/v1/payment_intents", headers={"Idempotency-Key": "k-g"}, timeout=10)
    assert listed.status_code == 200 and "Idempotent-Replayed" not in listed.headers


def test_the_sdk_sends_one_key_per_call_and_its_retries_never_charge_twice(provider: EmbeddedProvider) -> None:
    """stripe-python puts an Idempotency-Key on every POST (its own uuid when the caller gives
    none) and keeps it across its network retries; the provider answers 500 after charging,
    the SDK retries with the same key and gets the charge replayed: one charge."""
    provider.add_fault(FaultRule(operation="payment_intents.create", status=500, when="after", count=1,
                                 stored="result"))
    client = stripe.StripeClient(KEY, base_addresses={"api": provider.url}, max_network_retries=2)
    intent = client.v1.payment_intents.create(params={"amount": 500, "currency": "eur",
                                                      "payment_method": "pm_card_visa", "confirm": True})
    assert intent.status == "succeeded"
    creates = [r for r in provider.ledger.records() if isinstance(r, RequestRecord)
               and r.operation == "payment_intents.create"]
    assert [(r.status, r.replayed, r.fault) for r in creates] == [(500, False, "500 after"), (200, True, None)]
    assert creates[0].idempotency_key and creates[0].idempotency_key == creates[1].idempotency_key
    assert len(charges(provider)) == 1


def test_the_sdk_retrying_a_stored_500_gets_it_replayed_and_charges_once(provider: EmbeddedProvider) -> None:
    provider.add_fault(FaultRule(operation="payment_intents.create", status=500, when="after", count=1))
    client = stripe.StripeClient(KEY, base_addresses={"api": provider.url}, max_network_retries=1)
    try:
        client.v1.payment_intents.create(params={"amount": 500, "currency": "eur", "payment_method": "pm_card_visa",
                                                 "confirm": True})
    except stripe.APIError as error:
        assert error.http_status == 500
    else:
        raise AssertionError("the stored 500 was not replayed")
    creates = [(r.status, r.replayed) for r in provider.ledger.records() if isinstance(r, RequestRecord)]
    assert creates == [(500, False), (500, True)]
    assert len(charges(provider)) == 1
