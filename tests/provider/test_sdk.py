"""The official stripe SDK (pinned in pyproject) through the provider, unchanged: create with
and without confirm, confirm, capture, retrieve, list, search by metadata, cancel, refund,
events; declines as the SDK's CardError; auth and error envelopes."""

from __future__ import annotations

import base64

import pytest
import requests
import stripe

from harness.provider.server import EmbeddedProvider, ProviderConfig
from tests.provider.conftest import KEY, Raw

VISA = "pm_card_visa"


def pay(client: stripe.StripeClient, order: str, method: str = VISA, **extra: object) -> stripe.PaymentIntent:
    params = {"amount": 1250, "currency": "eur", "payment_method": method, "confirm": True,
              "metadata": {"order_id": order}, **extra}
    return client.v1.payment_intents.create(params=params)  # type: ignore[arg-type]


def test_create_then_confirm_retrieve_and_refund(client: stripe.StripeClient, provider: EmbeddedProvider) -> None:
    intent = client.v1.payment_intents.create(params={"amount": 2000, "currency": "EUR",
                                                      "metadata": {"order_id": "o-1"}})
    assert intent.id.startswith("pi_") and intent.object == "payment_intent"
    assert intent.status == "requires_payment_method" and intent.currency == "eur"
    assert intent.metadata["order_id"] == "o-1" and intent.latest_charge is None
    confirmed = client.v1.payment_intents.confirm(intent.id, params={"payment_method": VISA,
                                                                     "expand": ["latest_charge"]})
    assert confirmed.status == "succeeded" and confirmed.amount_received == 2000
    charge = confirmed.latest_charge
    assert isinstance(charge, stripe.Charge) and charge.id.startswith("ch_")
    assert charge.captured and charge.paid and charge.amount_captured == 2000
    assert charge.metadata["order_id"] == "o-1"
    again = client.v1.payment_intents.retrieve(intent.id)
    assert again.status == "succeeded" and again.latest_charge == charge.id
    refund = client.v1.refunds.create(params={"payment_intent": intent.id, "amount": 500})
    assert refund.id.startswith("re_") and refund.status == "succeeded" and refund.amount == 500
    assert client.v1.refunds.retrieve(refund.id).charge == charge.id
    assert client.v1.charges.retrieve(charge.id).amount_refunded == 500
    rest = client.v1.refunds.create(params={"charge": charge.id})
    assert rest.amount == 1500 and client.v1.charges.retrieve(charge.id).refunded
    with pytest.raises(stripe.InvalidRequestError) as refused:
        client.v1.refunds.create(params={"charge": charge.id})
    assert refused.value.code == "charge_already_refunded" and refused.value.http_status == 400
    states = [record.state for record in provider.ledger.records() if record.record == "charge"]
    assert states == ["refunded"]


def test_manual_capture(client: stripe.StripeClient) -> None:
    intent = pay(client, "o-cap", capture_method="manual")
    assert intent.status == "requires_capture" and intent.amount_capturable == 1250
    assert intent.amount_received == 0
    captured = client.v1.payment_intents.capture(intent.id, params={"amount_to_capture": 1000})
    assert captured.status == "succeeded" and captured.amount_received == 1000
    with pytest.raises(stripe.InvalidRequestError) as twice:
        client.v1.payment_intents.capture(intent.id)
    assert twice.value.code == "payment_intent_unexpected_state"
    other = pay(client, "o-cancel", capture_method="manual")
    assert client.v1.payment_intents.cancel(other.id).status == "canceled"
    assert client.v1.charges.retrieve(str(other.latest_charge)).refunded  # the authorization released
    later = client.v1.payment_intents.create(params={"amount": 300, "currency": "eur"})
    held = client.v1.payment_intents.confirm(later.id, params={"payment_method": VISA, "capture_method": "manual"})
    assert held.status == "requires_capture"
    done = client.v1.payment_intents.capture(later.id, params={"metadata": {"shipped": "yes"}})
    assert done.status == "succeeded" and done.metadata["shipped"] == "yes"


def test_list_and_search_by_metadata(client: stripe.StripeClient) -> None:
    ids = [pay(client, f"o-{index % 2}").id for index in range(5)]
    listed = client.v1.payment_intents.list(params={"limit": 2})
    assert [intent.id for intent in listed.data] == ids[::-1][:2] and listed.has_more
    assert [intent.id for intent in listed.auto_paging_iter()] == ids[::-1]
    found = client.v1.payment_intents.search(params={"query": "metadata['order_id']:'o-1'"})
    assert sorted(intent.id for intent in found.data) == sorted(ids[1::2])
    both = client.v1.payment_intents.search(params={"query": "metadata[\"order_id\"]:\"o-0\" AND status:'succeeded'"})
    assert len(both.data) == 3
    with pytest.raises(stripe.InvalidRequestError) as bad:
        client.v1.payment_intents.search(params={"query": "customer:'cus_1' OR amount>3"})
    assert bad.value.param == "query"


def test_the_legacy_global_api_base(provider: EmbeddedProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stripe, "api_key", KEY)
    monkeypatch.setattr(stripe, "api_base", provider.url)
    monkeypatch.setattr(stripe, "max_network_retries", 0)
    intent = stripe.PaymentIntent.create(amount=700, currency="usd", payment_method=VISA, confirm=True,
                                         metadata={"order_id": "legacy"})
    assert intent.status == "succeeded"
    assert stripe.PaymentIntent.retrieve(intent.id).amount == 700
    assert stripe.Refund.create(payment_intent=intent.id).status == "succeeded"


@pytest.mark.parametrize(("method", "code", "decline"), [
    ("pm_card_chargeDeclined", "card_declined", "generic_decline"),
    ("pm_card_visa_chargeDeclined", "card_declined", "generic_decline"),
    ("pm_card_chargeDeclinedInsufficientFunds", "card_declined", "insufficient_funds"),
    ("pm_card_chargeDeclinedExpiredCard", "expired_card", "expired_card"),
    ("pm_card_chargeDeclinedProcessingError", "processing_error", "processing_error"),
])
def test_declines(client: stripe.StripeClient, provider: EmbeddedProvider, method: str, code: str,
                  decline: str) -> None:
    with pytest.raises(stripe.CardError) as declined:
        pay(client, "o-d", method)
    assert declined.value.http_status == 402 and declined.value.code == code
    assert declined.value.error is not None and declined.value.error.decline_code == decline
    intent = provider.ledger.records()[0]
    assert intent.record == "charge" and intent.state == "failed" and intent.failure_code == code
    [only] = client.v1.payment_intents.list().data
    assert only.status == "requires_payment_method" and only.last_payment_error is not None
    # the retry a processing_error invites: the same intent, confirmed again with a good card
    assert client.v1.payment_intents.confirm(only.id, params={"payment_method": VISA}).status == "succeeded"


def test_authentication_required_waits_without_a_charge(client: stripe.StripeClient,
                                                        provider: EmbeddedProvider) -> None:
    intent = pay(client, "o-3ds", "pm_card_authenticationRequired")
    assert intent.status == "requires_action" and intent.next_action is not None
    assert not [r for r in provider.ledger.records() if r.record == "charge"]


def test_events_are_listed_and_retrieved_in_order(client: stripe.StripeClient) -> None:
    intent = pay(client, "o-ev")
    events = client.v1.events.list().data
    assert [event.type for event in events] == ["payment_intent.succeeded", "charge.succeeded",
                                                "payment_intent.created"]
    first = client.v1.events.retrieve(events[-1].id)
    assert first.id.startswith("evt_") and first.data.object["id"] == intent.id  # type: ignore[index]
    typed = client.v1.events.list(params={"type": "charge.*"}).data
    assert [event.type for event in typed] == ["charge.succeeded"]


def test_errors_in_stripes_envelope(raw: Raw) -> None:
    missing = raw.get("/v1/payment_intents/pi_nope")
    assert missing.status_code == 404
    assert missing.json()["error"] == {"type": "invalid_request_error", "code": "resource_missing",
                                       "message": "No such payment_intent: 'pi_nope'", "param": "intent"}
    assert missing.headers["Request-Id"].startswith("req_")
    unknown = raw.post("/v1/payment_intents", {"amount": "100", "currency": "eur", "colour": "red"})
    assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "parameter_unknown"
    assert unknown.json()["error"]["param"] == "colour"
    no_amount = raw.post("/v1/payment_intents", {"currency": "eur"})
    assert no_amount.json()["error"]["code"] == "parameter_missing"
    bad_int = raw.post("/v1/payment_intents", "amount=ten&currency=eur&metadata[order_id]=o")
    assert bad_int.json()["error"]["code"] == "parameter_invalid_integer"
    no_card = raw.post("/v1/payment_intents", {"amount": "100", "currency": "eur", "payment_method": "pm_card_nope"})
    assert no_card.json()["error"]["code"] == "resource_missing"
    tangled = raw.post("/v1/payment_intents", "amount=100&currency=eur&metadata=x&metadata[a]=b")
    assert tangled.status_code == 400 and tangled.json()["error"]["param"] == "metadata[a]"
    route = raw.get("/v1/subscriptions")
    assert route.status_code == 404 and route.json()["error"]["type"] == "invalid_request_error"
    assert "code" not in route.json()["error"]


@pytest.mark.parametrize("authorization", [None, "Bearer sk_live_abcdefgh12345", "Bearer pk_test_abcdef123",
                                           "Bearer nonsense", "Basic !!!"])
def test_a_missing_or_bad_key_is_401(provider: EmbeddedProvider, authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    answer = requests.get(provider.url + "/v1/payment_intents", headers=headers, timeout=10)
    assert answer.status_code == 401
    assert answer.json()["error"]["type"] == "authentication_error"
    control = requests.get(provider.url + "/_harness/ledger", headers=headers, timeout=10)
    assert control.status_code == 401


def test_basic_auth_and_configured_keys() -> None:
    config = ProviderConfig(api_keys=frozenset({KEY}))
    with EmbeddedProvider(config) as provider:
        basic = "Basic " + base64.b64encode(f"{KEY}:".encode()).decode()
        assert requests.get(provider.url + "/v1/payment_intents", headers={"Authorization": basic},
                            timeout=10).status_code == 200
        other = requests.get(provider.url + "/v1/payment_intents",
                             headers={"Authorization": "Bearer sk_test_someone_else"}, timeout=10)
        assert other.status_code == 401


def test_ids_are_deterministic_per_seed() -> None:
    def ids(seed: int) -> list[str]:
        with EmbeddedProvider(ProviderConfig(seed=seed)) as provider:
            client = stripe.StripeClient(KEY, base_addresses={"api": provider.url}, max_network_retries=0)
            intent = pay(client, "o-seed")
            return [intent.id, str(intent.latest_charge), *(e.id for e in client.v1.events.list().data)]

    assert ids(3) == ids(3)
    assert ids(3) != ids(4)


def test_a_stopped_provider_answers_nothing_on_a_kept_alive_connection() -> None:
    provider = EmbeddedProvider().start()
    raw = Raw(provider.url)
    assert raw.get("/v1/payment_intents").status_code == 200  # the session keeps this connection open
    provider.stop()
    with pytest.raises(requests.ConnectionError):
        raw.get("/v1/payment_intents")
    assert not [r for r in provider.ledger.records() if r.record == "request"][1:]
