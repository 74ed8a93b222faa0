"""Deliveries sent over HTTP to a receiver started in the test, which verifies them with
the independent verifiers: what a provider sends, retries, copies and reorders, and the
bad deliveries every one of which that receiver refuses."""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Callable

import pytest
import requests

from harness.ports import free_port
from harness.toxiproxy.server import EmbeddedToxiproxy
from harness.webhooks import deliveries as kinds
from harness.webhooks.deliveries import DeliveryError, DeliveryPlanner
from harness.webhooks.events import EventMaker, EventTemplate
from harness.webhooks.schemes import SCHEME_NAMES, scheme_named
from harness.webhooks.sender import DEFAULT_TIMEOUT, RetrySchedule, Sender, WebhookProvider
from tests.webhooks.receiver import Receiver, reset_server, running
from tests.webhooks.verifiers import independent_verify

SECRETS = {"stripe": "whsec_abcdefghijklmnop", "standard": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
           "github": "gh-secret", "shopify": "shpss_secret"}
TEMPLATES = {
    "stripe": {"data": {"object": {"id": "pi_{uuid}", "object": "payment_intent", "amount": "{int:100-9999}",
                                   "currency": "{choice:eur|usd}"}}},
    "standard": {"data": {"object": {"id": "inv_{uuid}", "amount": "{int:1-9}"}}},
    "github": {"action": "created", "data": {"object": {"id": "{uuid}"}}},
    "shopify": {"data": {"object": {"id": "{uuid}", "total": "{int:1-99}"}}},
}
FAST = RetrySchedule.exponential(0.05, retries=3)


def stepping_clock(step: float = 1.0) -> Callable[[], float]:
    """Real time plus `step` more seconds at every call: each signature gets a later timestamp."""
    counter = itertools.count()
    start = time.time()
    return lambda: start + step * next(counter)


def provider(scheme_name: str, url: str, *, timeout: float = 2.0, schedule: RetrySchedule = FAST,
             sequence: tuple[str, ...] = (), copies: int = 2, late_after: float = 0.0,
             clock: Callable[[], float] | None = None) -> WebhookProvider:
    scheme = scheme_named(scheme_name)
    rng = random.Random(11)
    clock = clock or stepping_clock(0.0)
    template = EventTemplate(body=TEMPLATES[scheme_name], type=sequence[0] if sequence else "payment_intent.succeeded",
                             fact="/data/object/id", sequence=sequence)
    maker = EventMaker(scheme, template, rng, clock=clock)
    planner = DeliveryPlanner(scheme, SECRETS[scheme_name], rng=rng, clock=clock)
    return WebhookProvider(maker, planner, Sender(url, "/hooks", timeout=timeout, user_agent=scheme.user_agent),
                           schedule=schedule, copies=copies, late_after=late_after)


@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_a_first_delivery_is_verified_and_applied(name: str) -> None:
    with running(Receiver(name, SECRETS[name])) as receiver:
        outcomes = provider(name, receiver.url).play(kinds.FIRST)
    assert [(o.delivery.kind, o.status, o.acknowledged) for o in outcomes] == [("first", 200, True)]
    delivery = outcomes[0].delivery
    assert receiver.applied == [(delivery.event_id, delivery.fact)]
    assert receiver.arrivals[0].body == delivery.body and delivery.fact is not None
    assert not delivery.must_refuse and outcomes[0].error is None


@pytest.mark.parametrize("name", ["stripe", "standard"])
def test_a_non_2xx_is_retried_with_the_same_id_and_a_fresh_signature(name: str) -> None:
    with running(Receiver(name, SECRETS[name], fail_first=True)) as receiver:
        outcomes = provider(name, receiver.url, clock=stepping_clock(1.0)).play(kinds.FIRST)
    assert [(o.delivery.kind, o.delivery.attempt, o.status) for o in outcomes] == [("first", 1, 500), ("retry", 2, 200)]
    first, retry = (o.delivery for o in outcomes)
    assert first.event_id == retry.event_id and first.body == retry.body and retry.retry_of == "first"
    assert retry.timestamp is not None and first.timestamp is not None and retry.timestamp > first.timestamp
    signature_header = scheme_named(name).signature_header
    assert first.headers[signature_header] != retry.headers[signature_header]
    assert receiver.applied == [(first.event_id, first.fact)]


def test_a_timeout_is_retried_while_the_first_still_runs_and_the_receiver_applies_once() -> None:
    # The receiver stalls the first arrival 1.5 s; the provider gives up after 0.3 s and retries.
    with running(Receiver("stripe", SECRETS["stripe"], slow_first=1.5)) as receiver:
        outcomes = provider("stripe", receiver.url, timeout=0.3).play(kinds.FIRST)
        time.sleep(1.5)  # let the stalled first one finish before the server stops
    assert [(o.delivery.kind, o.error, o.status) for o in outcomes] == [("first", "timeout", None),
                                                                     ("retry", None, 200)]
    assert 0.29 <= outcomes[0].elapsed < 1.5
    assert len({arrival.event_id for arrival in receiver.arrivals}) == 1 and len(receiver.arrivals) == 2
    assert len(receiver.applied) == 1


def test_a_reset_is_retried_until_the_schedule_runs_out() -> None:
    with reset_server() as url:
        outcomes = provider("github", url, schedule=RetrySchedule((0.01, 0.01))).play(kinds.FIRST)
    assert [(o.delivery.kind, o.error) for o in outcomes] == [("first", "reset"), ("retry", "reset"),
                                                              ("retry", "reset")]
    assert {o.delivery.event_id for o in outcomes} == {outcomes[0].delivery.event_id}


def test_nothing_listening_is_unreachable_not_an_exception() -> None:
    outcomes = provider("shopify", f"http://127.0.0.1:{free_port()}", schedule=RetrySchedule(())).play(kinds.FIRST)
    assert [(o.error, o.status, o.acknowledged) for o in outcomes] == [("unreachable", None, False)]


@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_concurrent_copies_are_in_flight_together(name: str) -> None:
    # The receiver holds each request until three are in flight (503 otherwise).
    with running(Receiver(name, SECRETS[name], barrier=3)) as receiver:
        outcomes = provider(name, receiver.url, copies=3).play(kinds.CONCURRENT_COPY)
    assert sorted(o.delivery.kind for o in outcomes) == ["concurrent_copy", "concurrent_copy", "first"]
    assert [o.status for o in outcomes] == [200, 200, 200]
    assert len({o.delivery.event_id for o in outcomes}) == 1
    assert len(receiver.arrivals) == 3 and len(receiver.applied) == 1


def test_the_same_object_comes_again_under_a_new_event_id() -> None:
    with running(Receiver("stripe", SECRETS["stripe"])) as receiver:
        outcomes = provider("stripe", receiver.url).play(kinds.SAME_OBJECT_NEW_EVENT)
    first, again = (o.delivery for o in outcomes)
    assert (first.kind, again.kind) == ("first", "same_object_new_event")
    assert first.event_id != again.event_id and first.fact == again.fact and first.event_type == again.event_type
    # A receiver that dedupes on the event id alone applies the one fact twice.
    assert receiver.applied == [(first.event_id, first.fact), (again.event_id, first.fact)]


def test_out_of_order_sends_one_objects_events_against_their_true_order() -> None:
    sequence = ("payment_intent.created", "payment_intent.processing", "payment_intent.succeeded")
    with running(Receiver("stripe", SECRETS["stripe"])) as receiver:
        outcomes = provider("stripe", receiver.url, sequence=sequence).play(kinds.OUT_OF_ORDER)
    sent = [o.delivery for o in outcomes]
    assert [d.event_type for d in sent] == list(reversed(sequence)) and [d.order for d in sent] == [2, 1, 0]
    assert {d.kind for d in sent} == {"out_of_order"} and len({d.fact for d in sent}) == 1
    assert [json.loads(a.body)["type"] for a in receiver.arrivals] == list(reversed(sequence))


def test_out_of_order_needs_a_sequence() -> None:
    player = provider("stripe", "http://127.0.0.1:9")
    assert kinds.OUT_OF_ORDER not in player.kinds()
    with pytest.raises(DeliveryError, match="at least two event types"):
        player.play(kinds.OUT_OF_ORDER)


def test_a_late_duplicate_is_the_old_event_id_freshly_signed() -> None:
    with running(Receiver("standard", SECRETS["standard"])) as receiver:
        outcomes = provider("standard", receiver.url, late_after=0.2, clock=stepping_clock(1.0)).play(
            kinds.LATE_DUPLICATE)
    first, late = (o.delivery for o in outcomes)
    assert (first.kind, late.kind) == ("first", "late_duplicate") and first.event_id == late.event_id
    assert late.timestamp is not None and first.timestamp is not None and late.timestamp > first.timestamp
    assert outcomes[1].started - outcomes[0].started >= 0.2
    assert [o.status for o in outcomes] == [200, 200] and len(receiver.applied) == 1


@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_every_delivery_that_must_be_refused_is_refused_by_the_independent_verifier(name: str) -> None:
    with running(Receiver(name, SECRETS[name])) as receiver:
        player = provider(name, receiver.url)
        refusals = player.planner.refusals()
        outcomes = [outcome for kind in refusals for outcome in player.play(kind)]
    expected = {"stripe": kinds.REFUSED_KINDS, "standard": kinds.REFUSED_KINDS[:-1],
                "github": kinds.REFUSED_KINDS[2:-1], "shopify": kinds.REFUSED_KINDS[2:-1]}[name]
    assert refusals == expected
    assert [o.delivery.kind for o in outcomes] == list(refusals)  # sent once each, never retried
    assert all(o.delivery.must_refuse and o.status == 400 for o in outcomes), \
        [(o.delivery.kind, o.status) for o in outcomes]
    assert receiver.applied == []
    assert len({o.delivery.fact for o in outcomes}) == len(outcomes)  # each on a fresh event


def test_refusals_that_a_scheme_cannot_express_are_errors() -> None:
    github = provider("github", "http://127.0.0.1:9")
    maker_event = github.maker.event()
    for kind in (kinds.STALE_SIGNATURE, kinds.FUTURE_TIMESTAMP, kinds.UNSUPPORTED_SCHEME):
        with pytest.raises(DeliveryError, match=f"github scheme cannot make a {kind}"):
            github.planner.refused(maker_event, kind)
    no_tolerance = DeliveryPlanner(scheme_named("stripe"), SECRETS["stripe"], tolerance=0)
    assert kinds.STALE_SIGNATURE not in no_tolerance.refusals()
    with pytest.raises(DeliveryError, match="not a delivery to refuse"):
        github.planner.refused(maker_event, kinds.FIRST)
    with pytest.raises(DeliveryError, match="not a delivery a receiver takes"):
        github.planner.signed(maker_event, kinds.TAMPERED_BODY)


def test_the_bad_deliveries_are_bad_in_the_intended_way_only() -> None:
    # A stale or future signature is otherwise valid: with the check off, the SDK takes it.
    player = provider("stripe", "http://127.0.0.1:9")
    for kind in (kinds.STALE_SIGNATURE, kinds.FUTURE_TIMESTAMP):
        delivery = player.planner.refused(player.maker.event(), kind)
        assert independent_verify("stripe", SECRETS["stripe"], delivery.body, delivery.headers) is not None
        assert independent_verify("stripe", SECRETS["stripe"], delivery.body, delivery.headers, tolerance=0) is None
        assert delivery.timestamp is not None and abs(delivery.timestamp - time.time()) > 300
    tampered = player.planner.refused(player.maker.event(), kinds.TAMPERED_BODY)
    assert b"harness_tampered" in tampered.body
    assert "matching the expected signature" in str(
        independent_verify("stripe", SECRETS["stripe"], tampered.body, tampered.headers))


def test_sender_defaults_and_outcome_summary() -> None:
    sender = Sender("http://127.0.0.1:1/", "hooks")
    assert sender.timeout == DEFAULT_TIMEOUT == 10.0 and sender.url == "http://127.0.0.1:1/hooks"
    with pytest.raises(DeliveryError, match="timeout"):
        Sender("http://127.0.0.1:1", "/h", timeout=0)
    with pytest.raises(DeliveryError, match="at least 2"):
        WebhookProvider(provider("stripe", "http://x").maker, provider("stripe", "http://x").planner, sender, copies=1)
    assert RetrySchedule.exponential(0.1, retries=3).delays == pytest.approx((0.1, 0.2, 0.4))
    assert RetrySchedule().attempts == 4
    with running(Receiver("stripe", SECRETS["stripe"])) as receiver:
        outcome = provider("stripe", receiver.url).play(kinds.FIRST)[0]
    summary = outcome.summary()
    assert summary["kind"] == "first" and summary["status"] == 200 and summary["must_refuse"] is False
    assert summary["event_id"] == outcome.delivery.event_id and str(summary["event_id"]).startswith("evt_")
    assert receiver.arrivals[0].headers["User-Agent"].startswith("Stripe/1.0")


def test_through_toxiproxy_a_delayed_answer_times_out_and_the_retry_lands(
        embedded_toxiproxy: EmbeddedToxiproxy) -> None:
    # The probe sends through its Toxiproxy proxy: a latency toxic on the answers makes the
    # first try time out; it is removed during the backoff, so the retry is answered.
    api = embedded_toxiproxy.url
    with running(Receiver("stripe", SECRETS["stripe"])) as receiver:
        port = free_port()
        upstream = receiver.url.removeprefix("http://")
        created = requests.post(f"{api}/proxies", json={"name": "receiver", "listen": f"127.0.0.1:{port}",
                                                        "upstream": upstream, "enabled": True}, timeout=5)
        assert created.status_code in (200, 201), created.text
        toxic = requests.post(f"{api}/proxies/receiver/toxics", timeout=5, json={
            "name": "slow", "type": "latency", "stream": "downstream", "attributes": {"latency": 1000}})
        assert toxic.status_code == 200, toxic.text

        def heal_then_sleep(seconds: float) -> None:
            requests.delete(f"{api}/proxies/receiver/toxics/slow", timeout=5).raise_for_status()
            time.sleep(seconds)

        player = provider("stripe", f"http://127.0.0.1:{port}", timeout=0.3)
        player.sleep = heal_then_sleep
        outcomes = player.play(kinds.FIRST)
        time.sleep(0.8)  # the delayed first answer drains before the receiver stops
    assert [(o.delivery.kind, o.error, o.status) for o in outcomes] == [("first", "timeout", None),
                                                                     ("retry", None, 200)]
    assert [a.event_id for a in receiver.arrivals] == [outcomes[0].delivery.event_id] * 2
    assert len(receiver.applied) == 1


def test_a_retry_keeps_the_true_order_and_names_what_it_retries() -> None:
    sequence = ("payment_intent.created", "payment_intent.succeeded")
    with running(Receiver("stripe", SECRETS["stripe"], fail_first=True)) as receiver:
        outcomes = provider("stripe", receiver.url, sequence=sequence).play(kinds.OUT_OF_ORDER)
    assert [(o.delivery.kind, o.delivery.retry_of, o.delivery.order, o.status) for o in outcomes] == [
        ("out_of_order", None, 1, 500), ("retry", "out_of_order", 1, 200),
        ("out_of_order", None, 0, 500), ("retry", "out_of_order", 0, 200)]
    assert outcomes[1].summary()["retry_of"] == "out_of_order"
    assert len(receiver.applied) == 2


# --- the receiver bugs each kind of delivery exposes (negative controls) ----------------

@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_a_receiver_that_verifies_nothing_applies_every_delivery_it_should_refuse(name: str) -> None:
    with running(Receiver(name, SECRETS[name], verify=False)) as receiver:
        player = provider(name, receiver.url)
        outcomes = [outcome for kind in player.planner.refusals() for outcome in player.play(kind)]
    assert all(o.status == 200 for o in outcomes)
    # Each applied one is told apart by its own fact: what refused_not_applied looks for.
    assert sorted(fact for _, fact in receiver.applied) == sorted(str(o.delivery.fact) for o in outcomes)


def test_a_stripe_receiver_relying_on_the_sdk_alone_takes_the_future_timestamp_only() -> None:
    with running(Receiver("stripe", SECRETS["stripe"], refuse_future=False)) as receiver:
        player = provider("stripe", receiver.url)
        statuses = {kind: player.play(kind)[0].status for kind in player.planner.refusals()}
    assert statuses == {kind: 200 if kind == kinds.FUTURE_TIMESTAMP else 400 for kind in kinds.REFUSED_KINDS}
    assert len(receiver.applied) == 1


def test_concurrent_copies_expose_a_check_then_insert_on_the_event_id() -> None:
    # The copies pass the check together, before any of them inserts: the fact is applied per copy.
    with running(Receiver("stripe", SECRETS["stripe"], barrier=3, racy=0.5)) as receiver:
        outcomes = provider("stripe", receiver.url, copies=3).play(kinds.CONCURRENT_COPY)
    assert [o.status for o in outcomes] == [200, 200, 200]
    assert len(receiver.applied) == 3 and len({fact for _, fact in receiver.applied}) == 1
    # The same receiver is right when the copies come one after another.
    with running(Receiver("stripe", SECRETS["stripe"], racy=0.01)) as receiver:
        player = provider("stripe", receiver.url)
        event = player.maker.event()
        player.deliver(event, kinds.FIRST)
        player.deliver(event, kinds.LATE_DUPLICATE)
    assert len(receiver.applied) == 1
