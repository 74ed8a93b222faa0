"""What a Stripe integration such as dj-stripe touches on the way to a payment: the account,
Customers, Checkout Sessions, Balance Transactions, `expand[]` of them, Stripe's
`resource_missing` for an unknown id (also one with `-`, what `{uuid}` makes) against
"Unrecognized request URL" for an unknown path, and the objects of webhook events made
elsewhere (the probe's) served once adopted (`Ledger.adopt_event_objects`)."""

from __future__ import annotations

import json
import random

import pytest
import stripe

from harness.provider.server import EmbeddedProvider
from harness.webhooks.events import EventMaker, EventTemplate
from harness.webhooks.schemes.stripe import SCHEME
from tests.provider.conftest import Raw

VISA = "pm_card_visa"


def test_the_account(client: stripe.StripeClient, raw: Raw) -> None:
    account = client.v1.accounts.retrieve_current()
    assert account.object == "account" and account.id.startswith("acct_") and account.charges_enabled
    assert client.v1.accounts.retrieve(account.id).id == account.id
    other = raw.get("/v1/accounts/acct_nope")
    assert other.status_code == 404 and other.json()["error"]["code"] == "resource_missing"


def test_customers_create_retrieve_update_list_delete(client: stripe.StripeClient) -> None:
    made = client.v1.customers.create(params={"email": "ada@example.com", "name": "Ada",
                                              "metadata": {"user": "7", "tier": "gold"}})
    assert made.id.startswith("cus_") and made.object == "customer" and made.email == "ada@example.com"
    assert client.v1.customers.retrieve(made.id).name == "Ada"
    changed = client.v1.customers.update(made.id, params={"name": "Ada L.", "metadata": {"tier": ""}})
    assert changed.name == "Ada L." and changed.metadata.to_dict() == {"user": "7"}
    other = client.v1.customers.create(params={"email": "bob@example.com"})
    listed = client.v1.customers.list()
    assert [c.id for c in listed.data] == [other.id, made.id]
    assert [c.id for c in client.v1.customers.list(params={"email": "ada@example.com"}).data] == [made.id]
    gone = client.v1.customers.delete(other.id)
    assert gone.deleted is True
    assert [c.id for c in client.v1.customers.list().data] == [made.id]
    with pytest.raises(stripe.InvalidRequestError) as unknown:
        client.v1.customers.retrieve("cus_nope")
    assert unknown.value.http_status == 404 and unknown.value.code == "resource_missing"


def test_expand_balance_transaction_on_a_charge_and_through_a_payment_intent(client: stripe.StripeClient,
                                                                              raw: Raw) -> None:
    intent = client.v1.payment_intents.create(params={"amount": 1500, "currency": "eur", "payment_method": VISA,
                                                      "confirm": True})
    assert isinstance(intent.latest_charge, str)
    charge = client.v1.charges.retrieve(intent.latest_charge, params={"expand": ["balance_transaction"]})
    txn = charge.balance_transaction
    assert isinstance(txn, stripe.BalanceTransaction)
    assert txn.id.startswith("txn_") and txn.amount == 1500 and txn.source == charge.id and txn.type == "charge"
    deep = raw.get(f"/v1/payment_intents/{intent.id}", **{"expand[]": "latest_charge.balance_transaction"})
    assert deep.status_code == 200
    assert deep.json()["latest_charge"]["balance_transaction"]["id"] == txn.id
    refund = client.v1.refunds.create(params={"charge": charge.id, "amount": 500,
                                              "expand": ["balance_transaction"]})
    assert refund.balance_transaction.amount == -500  # type: ignore[union-attr]
    listed = client.v1.balance_transactions.list(params={"source": charge.id})
    assert [t.id for t in listed.data] == [txn.id]
    assert client.v1.balance_transactions.retrieve(txn.id).net == 1500
    refused = raw.get(f"/v1/charges/{charge.id}", **{"expand[]": "colour"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "expand"


def test_checkout_sessions(client: stripe.StripeClient, raw: Raw) -> None:
    customer = client.v1.customers.create()
    session = client.v1.checkout.sessions.create(params={
        "mode": "payment", "success_url": "https://example.com/ok", "customer": customer.id,
        "client_reference_id": "order-9",
        "line_items": [{"quantity": 2, "price_data": {"currency": "eur", "unit_amount": 700,
                                                      "product_data": {"name": "Tea"}}}]})
    assert session.id.startswith("cs_test_") and session.object == "checkout.session"
    assert session.amount_total == 1400 and session.currency == "eur" and session.status == "open"
    assert client.v1.checkout.sessions.retrieve(session.id).client_reference_id == "order-9"
    assert [s.id for s in client.v1.checkout.sessions.list().data] == [session.id]
    assert client.v1.checkout.sessions.expire(session.id).status == "expired"
    again = raw.post(f"/v1/checkout/sessions/{session.id}/expire", {})
    assert again.status_code == 400
    no_mode = raw.post("/v1/checkout/sessions", {"success_url": "https://example.com"})
    assert no_mode.status_code == 400 and no_mode.json()["error"]["param"] == "mode"


@pytest.mark.parametrize("path", ["/v1/payment_intents/pi_3f2c-4b1e-9a77-0c1d", "/v1/charges/ch_6b7e-11ee-8c90",
                                  "/v1/customers/cus_d2f1-77aa", "/v1/events/evt_0e4f-aa12",
                                  "/v1/refunds/re_x-y", "/v1/checkout/sessions/cs_1-2",
                                  "/v1/balance_transactions/txn_a-b"])
def test_an_unknown_id_with_a_dash_is_resource_missing(raw: Raw, path: str) -> None:
    answer = raw.get(path)
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "resource_missing"
    assert error["message"].endswith(f"'{path.rsplit('/', 1)[1]}'") and "param" in error


@pytest.mark.parametrize("path", ["/v1/subscriptions", "/v1/subscriptions/sub_1", "/v1/nothing/here/at_all",
                                  "/v2/core/events"])
def test_an_unknown_path_is_unrecognized(raw: Raw, path: str) -> None:
    answer = raw.get(path)
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error == {"type": "invalid_request_error", "message": f"Unrecognized request URL (GET: {path})."}


def _probe_event(event_type: str, body: object) -> dict[str, object]:
    """An event as the probe's webhook play makes it (harness.webhooks.events, the Stripe scheme)."""
    maker = EventMaker(SCHEME, EventTemplate(body=body, type=event_type), random.Random(3))
    data: dict[str, object] = json.loads(maker.event().body)
    return data


def test_objects_of_events_made_elsewhere_are_served_once_adopted(client: stripe.StripeClient,
                                                                   provider: EmbeddedProvider, raw: Raw) -> None:
    event = _probe_event("payment_intent.succeeded",
                         {"data": {"object": {"id": "pi_{uuid}", "object": "payment_intent", "amount": 900,
                                              "currency": "eur", "status": "succeeded", "metadata": {}}}})
    ident = event["data"]["object"]["id"]  # type: ignore[index]
    assert "-" in ident
    assert raw.get(f"/v1/payment_intents/{ident}").status_code == 404  # not yet told about it
    assert provider.ledger.adopt_event_objects(event) == 2  # the object and the event
    assert provider.ledger.adopt_event_objects(event) == 0  # once
    intent = client.v1.payment_intents.retrieve(ident)
    assert intent.id == ident and intent.amount == 900 and intent.status == "succeeded"
    assert client.v1.events.retrieve(str(event["id"])).type == "payment_intent.succeeded"
    invoice = _probe_event("invoice.paid", {"data": {"object": {"id": "in_{uuid}", "object": "invoice",
                                                               "customer": "cus_1", "paid": True}}})
    provider.ledger.adopt_event_objects(invoice)
    invoice_id = invoice["data"]["object"]["id"]  # type: ignore[index]
    assert client.v1.invoices.retrieve(invoice_id).paid is True
    unknown = raw.get("/v1/invoices/in_nope")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "resource_missing"
    # An event about an object of the ledger's own never replaces it.
    own = client.v1.payment_intents.create(params={"amount": 100, "currency": "eur"})
    forged = _probe_event("payment_intent.succeeded", {"data": {"object": {"id": own.id, "object": "payment_intent",
                                                                           "amount": 1}}})
    provider.ledger.adopt_event_objects(forged)
    assert client.v1.payment_intents.retrieve(own.id).amount == 100
