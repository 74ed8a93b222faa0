"""Webhooks from the ledger: every state change is an event, stored (GET /v1/events) and
delivered to each configured endpoint with Stripe's signature, verified here by
stripe-python's own `stripe.Webhook.construct_event`; a failed delivery is retried with
the same event id and a fresh signature; what became of each is in the ledger."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import stripe

from harness.provider.cards import card_named
from harness.provider.errors import ProviderError
from harness.provider.ledger import Ledger
from harness.provider.outbox import OUTBOX_KINDS, Endpoint, Outbox
from harness.provider.records import DeliveryRecord, RequestInfo
from harness.provider.server import EmbeddedProvider, ProviderConfig
from harness.webhooks.deliveries import CONCURRENT_COPY, FIRST, LATE_DUPLICATE, OUT_OF_ORDER
from harness.webhooks.sender import RetrySchedule
from tests.provider.conftest import KEY

SECRET = "whsec_provider_test_secret"


@dataclass
class Arrival:
    signature: str
    event_id: str
    event_type: str
    object_id: str
    status: int


@dataclass
class StripeReceiver:
    """Verifies with stripe-python; answers 500 to the first try of the event ids in `fail_first`."""

    secret: str
    fail_once: bool = False
    arrivals: list[Arrival] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, body: bytes, signature: str) -> int:
        try:
            event = stripe.Webhook.construct_event(body.decode("utf-8"), signature, self.secret)
        except (stripe.SignatureVerificationError, ValueError) as error:
            with self.lock:
                self.refused.append(str(error))
            return 400
        with self.lock:
            seen = any(arrival.event_id == event.id for arrival in self.arrivals)
            status = 500 if self.fail_once and not seen else 200
            self.arrivals.append(Arrival(signature, event.id, event.type, event.data.object["id"], status))
        return status


@pytest.fixture
def receiver_url(request: pytest.FixtureRequest) -> Iterator[tuple[str, StripeReceiver]]:
    receiver = StripeReceiver(SECRET, fail_once=getattr(request, "param", False))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            status = receiver.handle(body, self.headers.get("Stripe-Signature", ""))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/webhooks/stripe", receiver
    server.shutdown()
    server.server_close()
    thread.join(5)


def wait_for(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        time.sleep(0.02)
    raise AssertionError("timed out waiting for the deliveries")


def test_every_state_change_is_delivered_signed(receiver_url: tuple[str, StripeReceiver]) -> None:
    url, receiver = receiver_url
    config = ProviderConfig(webhooks=(Endpoint(url, SECRET),))
    with EmbeddedProvider(config) as provider:
        client = stripe.StripeClient(KEY, base_addresses={"api": provider.url}, max_network_retries=0)
        paid = client.v1.payment_intents.create(params={"amount": 900, "currency": "eur", "confirm": True,
                                                        "payment_method": "pm_card_visa",
                                                        "metadata": {"order_id": "o-w"}})
        held = client.v1.payment_intents.create(params={"amount": 300, "currency": "eur", "confirm": True,
                                                        "payment_method": "pm_card_visa",
                                                        "capture_method": "manual"})
        client.v1.payment_intents.capture(held.id)
        with pytest.raises(stripe.CardError):
            client.v1.payment_intents.create(params={"amount": 100, "currency": "eur", "confirm": True,
                                                     "payment_method": "pm_card_chargeDeclined"})
        client.v1.refunds.create(params={"payment_intent": paid.id})
        stored = [event.id for event in client.v1.events.list(params={"limit": 100}).data][::-1]
        assert provider.outbox.drain(10)
        types = [arrival.event_type for arrival in receiver.arrivals]
        assert types == [
            "payment_intent.created", "charge.succeeded", "payment_intent.succeeded",
            "payment_intent.created", "charge.succeeded", "payment_intent.amount_capturable_updated",
            "charge.captured", "payment_intent.succeeded",
            "payment_intent.created", "charge.failed", "payment_intent.payment_failed",
            "refund.created", "charge.refunded"]
        assert [arrival.event_id for arrival in receiver.arrivals] == stored
        assert receiver.refused == [] and all(a.signature.startswith("t=") for a in receiver.arrivals)
        assert receiver.arrivals[1].object_id == str(paid.latest_charge)
        event = client.v1.events.retrieve(stored[0])
        assert event.request is not None and event.request["idempotency_key"]  # type: ignore[index]
    deliveries = [r for r in provider.ledger.records() if isinstance(r, DeliveryRecord)]
    assert len(deliveries) == len(stored) and all(d.acknowledged and d.attempts == 1 for d in deliveries)


def test_a_wrong_secret_is_refused_by_the_sdk(receiver_url: tuple[str, StripeReceiver]) -> None:
    url, receiver = receiver_url
    config = ProviderConfig(webhooks=(Endpoint(url, "whsec_not_the_receivers"),),
                            webhook_schedule=RetrySchedule(()))
    with EmbeddedProvider(config) as provider:
        client = stripe.StripeClient(KEY, base_addresses={"api": provider.url}, max_network_retries=0)
        client.v1.payment_intents.create(params={"amount": 900, "currency": "eur"})
        assert provider.outbox.drain(10)
    assert receiver.arrivals == [] and len(receiver.refused) == 1
    [delivery] = [r for r in provider.ledger.records() if isinstance(r, DeliveryRecord)]
    assert not delivery.acknowledged and delivery.statuses == (400,)


@pytest.mark.parametrize("receiver_url", [True], indirect=True)
def test_a_failed_delivery_is_retried_with_a_fresh_signature(receiver_url: tuple[str, StripeReceiver]) -> None:
    url, receiver = receiver_url
    config = ProviderConfig(webhooks=(Endpoint(url, SECRET),), webhook_schedule=RetrySchedule((1.1,)))
    with EmbeddedProvider(config) as provider:
        client = stripe.StripeClient(KEY, base_addresses={"api": provider.url}, max_network_retries=0)
        client.v1.payment_intents.create(params={"amount": 900, "currency": "eur"})
        wait_for(lambda: len(receiver.arrivals) == 2)
    first, retry = receiver.arrivals
    assert (first.status, retry.status) == (500, 200) and first.event_id == retry.event_id
    assert first.signature != retry.signature  # a new timestamp (1.1 s later), a new v1
    [delivery] = [r for r in provider.ledger.records() if isinstance(r, DeliveryRecord)]
    assert delivery.acknowledged and delivery.statuses == (500, 200) and delivery.attempts == 2


def test_a_full_queue_drops_and_records_never_blocks() -> None:
    ledger = Ledger(seed=1)
    recorded: list[DeliveryRecord] = []
    outbox = Outbox([Endpoint("http://127.0.0.1:9/never", SECRET)], recorded.append, queue_size=1)
    ledger.listeners.append(outbox.publish)  # not started: nothing leaves the queue
    request = RequestInfo("POST", "/v1/payment_intents", 1.0, "req_1", None, "sk_test_…abcd")
    ledger.create_intent(amount=100, currency="eur", capture_method="automatic", metadata={}, description=None,
                         card=card_named("pm_card_visa"), confirm=True, request=request)
    assert [event.event.type for event in ledger.events] == ["payment_intent.created", "charge.succeeded",
                                                             "payment_intent.succeeded"]
    assert [(r.event_type, r.dropped, r.attempts) for r in recorded] == [
        ("charge.succeeded", True, 0), ("payment_intent.succeeded", True, 0)]
    outbox.stop(drain_timeout=0)  # the one queued event is dropped too, without waiting for a schedule
    assert [r.event_type for r in recorded][-1] == "payment_intent.created"


def _pay(provider: EmbeddedProvider) -> list[str]:
    """One confirmed payment (three events); the event ids in the order the ledger made them."""
    client = stripe.StripeClient(KEY, base_addresses={"api": provider.url}, max_network_retries=0)
    client.v1.payment_intents.create(params={"amount": 900, "currency": "eur", "confirm": True,
                                            "payment_method": "pm_card_visa", "metadata": {"order_id": "o-d"}})
    return [event.id for event in client.v1.events.list(params={"limit": 100}).data][::-1]


def _deliveries(provider: EmbeddedProvider) -> list[DeliveryRecord]:
    return [r for r in provider.ledger.records() if isinstance(r, DeliveryRecord)]


@pytest.mark.parametrize("kind", [CONCURRENT_COPY, LATE_DUPLICATE])
def test_duplicates_arrive_each_freshly_signed_and_accepted(receiver_url: tuple[str, StripeReceiver],
                                                             kind: str) -> None:
    url, receiver = receiver_url
    config = ProviderConfig(webhooks=(Endpoint(url, SECRET, kinds=(kind,), late_after=1.1),))
    with EmbeddedProvider(config) as provider:
        stored = _pay(provider)
        assert provider.outbox.drain(15)
        records = _deliveries(provider)
    assert receiver.refused == []  # construct_event accepted every copy
    assert sorted(arrival.event_id for arrival in receiver.arrivals) == sorted(stored * 2)
    if kind == LATE_DUPLICATE:  # signed 1.1 s later: a new timestamp, so a new signature
        for event_id in stored:
            first, late = [a.signature for a in receiver.arrivals if a.event_id == event_id]
            assert first != late
    assert sorted(r.kind for r in records) == sorted([FIRST, kind] * len(stored))
    assert all(r.acknowledged for r in records)


def test_held_events_arrive_out_of_order(receiver_url: tuple[str, StripeReceiver]) -> None:
    url, receiver = receiver_url
    config = ProviderConfig(webhooks=(Endpoint(url, SECRET, kinds=(OUT_OF_ORDER,), late_after=0.5),))
    with EmbeddedProvider(config) as provider:
        created, charged, succeeded = _pay(provider)
        assert provider.outbox.drain(15)
        records = _deliveries(provider)
    # created is held and overtaken by charge.succeeded; succeeded is held with nothing after it,
    # so it goes out plainly once its wait is over.
    assert [a.event_id for a in receiver.arrivals] == [charged, created, succeeded]
    assert receiver.refused == []
    assert [(r.event_id, r.kind) for r in records] == [(charged, OUT_OF_ORDER), (created, OUT_OF_ORDER),
                                                       (succeeded, FIRST)]


def test_mixed_kinds_show_a_receiver_duplicates_and_disorder(receiver_url: tuple[str, StripeReceiver]) -> None:
    url, receiver = receiver_url
    config = ProviderConfig(seed=3, webhooks=(Endpoint(url, SECRET, kinds=OUTBOX_KINDS, late_after=0.3),))
    with EmbeddedProvider(config) as provider:
        stored: list[str] = []
        kinds: set[str] = set()
        for _ in range(15):  # the draws are seeded: bounded payments until every kind was played
            stored = _pay(provider)
            assert provider.outbox.drain(20)
            kinds = {r.kind for r in _deliveries(provider)}
            if kinds == set(OUTBOX_KINDS):
                break
    arrived = [a.event_id for a in receiver.arrivals]
    assert receiver.refused == [] and set(arrived) == set(stored)
    assert len(arrived) > len(set(arrived))  # duplicates
    firsts = list(dict.fromkeys(arrived))
    assert firsts != stored  # disorder: first arrivals not in the ledger's order
    assert kinds == set(OUTBOX_KINDS)


@pytest.mark.parametrize("kinds", [(), ("retry",), (FIRST, FIRST), ("tampered_body",)])
def test_an_endpoint_refuses_kinds_it_cannot_play(kinds: tuple[str, ...]) -> None:
    with pytest.raises(ProviderError, match="delivery kinds"):
        Endpoint("http://127.0.0.1:9/hooks", SECRET, kinds=kinds)


def test_a_held_event_never_sent_is_recorded_dropped_at_stop(receiver_url: tuple[str, StripeReceiver]) -> None:
    url, receiver = receiver_url
    config = ProviderConfig(webhooks=(Endpoint(url, SECRET, kinds=(OUT_OF_ORDER,), late_after=30),))
    provider = EmbeddedProvider(config).start()
    try:
        client = stripe.StripeClient(KEY, base_addresses={"api": provider.url}, max_network_retries=0)
        client.v1.payment_intents.create(params={"amount": 900, "currency": "eur"})  # one event: held
        wait_for(lambda: provider.outbox.pending() == 1 and not provider.outbox.drain(0))
    finally:
        provider.stop(drain_timeout=0)  # held for 30 s: stopping does not wait for it
    assert receiver.arrivals == []
    [record] = _deliveries(provider)
    assert (record.kind, record.dropped, record.attempts) == (OUT_OF_ORDER, True, 0)
