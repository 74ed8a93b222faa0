"""The signature schemes: published test vectors, and the independent verifiers
(stripe's SDK, standardwebhooks, the documented GitHub and Shopify checks) accept
what the harness signs and refuse every bad variant it makes."""

from __future__ import annotations

import random
import time

import pytest
import stripe

from harness.webhooks.schemes import SCHEME_NAMES, scheme_named
from harness.webhooks.schemes.base import Scheme, SchemeError, SignatureError
from tests.webhooks.verifiers import independent_verify

SECRETS = {"stripe": "whsec_test_secret", "standard": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
           "github": "It's a Secret to Everybody", "shopify": "shpss_test"}
BODY = b'{\n  "id": "evt_1",\n  "object": "event",\n  "data": {"object": {"id": "pi_1", "amount": 1999}}\n}'


def signed(scheme: Scheme, *, timestamp: int | None = None, secret: str | None = None,
           body: bytes = BODY) -> dict[str, str]:
    return scheme.sign(secret or SECRETS[scheme.name], body, timestamp=timestamp or int(time.time()),
                       event_id="evt_1" if scheme.name == "stripe" else "msg_1", topic="payment_intent.succeeded")


def test_github_signs_its_documented_test_vector() -> None:
    headers = scheme_named("github").sign("It's a Secret to Everybody", b"Hello, World!", timestamp=0,
                                          event_id="d-1", topic="ping")
    assert headers["X-Hub-Signature-256"] == \
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert headers["X-GitHub-Delivery"] == "d-1" and headers["X-GitHub-Event"] == "ping"


def test_standard_webhooks_signs_the_reference_libraries_test_vector() -> None:
    # The vector of the reference libraries' sign tests (Go, Python) in standard-webhooks.
    headers = scheme_named("standard").sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", b'{"test": 2432232314}',
                                            timestamp=1614265330, event_id="msg_p5jXN8AQM9LWM0D4loKWxJek")
    assert headers == {"webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "webhook-timestamp": "1614265330",
                       "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}


def test_stripe_and_shopify_sign_vectors_computed_with_openssl() -> None:
    # Neither provider publishes a vector; these were computed with OpenSSL, e.g.
    # printf '%s' '1614265330.{"id":"evt_1"}' | openssl dgst -sha256 -hmac whsec_test
    stripe_headers = scheme_named("stripe").sign("whsec_test", b'{"id":"evt_1"}', timestamp=1614265330,
                                                 event_id="evt_1")
    assert stripe_headers == {"Stripe-Signature": "t=1614265330,v1="
                              "347e9afe3d74ec4c5cbefd270edc9246513ae3da7b375223e302560fbd4146eb"}
    # printf '%s' '{"id":1}' | openssl dgst -sha256 -hmac shpss_test -binary | base64
    shopify_headers = scheme_named("shopify").sign("shpss_test", b'{"id":1}', timestamp=0, event_id="w-1",
                                                   topic="orders/create")
    assert shopify_headers["X-Shopify-Hmac-Sha256"] == "1GxccvotnkOedTjSm8S0m/VA3yAUKshyqT52ccNYHj4="
    assert shopify_headers["X-Shopify-Webhook-Id"] == "w-1" and shopify_headers["X-Shopify-Topic"] == "orders/create"


def test_stripe_matches_the_sdks_own_test_signer() -> None:
    header = stripe.WebhookSignature.generate_signature_header(BODY.decode(), "whsec_abc", timestamp=1700000000)
    assert signed(scheme_named("stripe"), timestamp=1700000000, secret="whsec_abc") == {"Stripe-Signature": header}


@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_the_independent_verifier_accepts_a_fresh_signature(name: str) -> None:
    scheme = scheme_named(name)
    headers = signed(scheme)
    assert independent_verify(name, SECRETS[name], BODY, headers) is None
    verified = scheme.verify(SECRETS[name], BODY, headers)
    assert verified.event_id == ("evt_1" if name == "stripe" else "msg_1")


@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_a_tampered_body_and_a_wrong_secret_fail_both_verifiers(name: str) -> None:
    scheme = scheme_named(name)
    headers = signed(scheme)
    tampered = BODY.replace(b"1999", b"1")
    wrong = scheme.new_secret(random.Random(3))
    assert wrong != SECRETS[name]
    assert independent_verify(name, SECRETS[name], tampered, headers) is not None
    assert independent_verify(name, wrong, BODY, headers) is not None
    with pytest.raises(SignatureError, match="match"):
        scheme.verify(SECRETS[name], tampered, headers)
    with pytest.raises(SignatureError, match="match"):
        scheme.verify(wrong, BODY, headers)


@pytest.mark.parametrize("name", ["stripe", "standard"])
def test_stale_and_future_timestamps_fail_beyond_the_tolerance(name: str) -> None:
    scheme = scheme_named(name)
    now = int(time.time())
    stale, future, edge = signed(scheme, timestamp=now - 900), signed(scheme, timestamp=now + 900), \
        signed(scheme, timestamp=now - 200)
    assert independent_verify(name, SECRETS[name], BODY, stale) is not None
    assert independent_verify(name, SECRETS[name], BODY, future) is not None
    assert independent_verify(name, SECRETS[name], BODY, edge) is None
    with pytest.raises(SignatureError, match="older"):
        scheme.verify(SECRETS[name], BODY, stale, now=now)
    with pytest.raises(SignatureError, match="future"):
        scheme.verify(SECRETS[name], BODY, future, now=now)
    assert scheme.verify(SECRETS[name], BODY, edge, now=now).timestamp == now - 200
    # Tolerance 0 turns the check off.
    assert scheme.verify(SECRETS[name], BODY, stale, tolerance=0, now=now).timestamp == now - 900


def test_the_stripe_sdk_lets_a_future_timestamp_through_which_is_why_receivers_check_it() -> None:
    # stripe-python refuses only timestamps that are too old: the harness's future_timestamp
    # delivery catches receivers relying on it alone (its own verify refuses both).
    future = signed(scheme_named("stripe"), timestamp=int(time.time()) + 900)
    assert stripe.Webhook.construct_event(BODY, future["Stripe-Signature"], SECRETS["stripe"])["id"] == "evt_1"


@pytest.mark.parametrize("name", ["stripe", "standard"])
def test_official_refuses_future_is_what_the_providers_own_verifier_does(name: str) -> None:
    # The probe holds a receiver to its provider's official verifier (a stricter check is
    # advice): each scheme's flag must say what that SDK does with a future timestamp.
    scheme = scheme_named(name)
    future = signed(scheme, timestamp=int(time.time()) + 900)
    refused = independent_verify(name, SECRETS[name], BODY, future, future=False) is not None
    assert scheme.official_refuses_future is refused


@pytest.mark.parametrize("name", ["github", "shopify"])
def test_untimestamped_schemes_verify_any_age(name: str) -> None:
    scheme = scheme_named(name)
    assert not scheme.timestamped
    old = signed(scheme, timestamp=1)
    assert independent_verify(name, SECRETS[name], BODY, old) is None
    assert scheme.verify(SECRETS[name], BODY, old).timestamp is None


@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_a_missing_or_malformed_signature_header_fails_both_verifiers(name: str) -> None:
    scheme = scheme_named(name)
    headers = signed(scheme)
    missing = {key: value for key, value in headers.items() if key != scheme.signature_header}
    malformed = scheme.malformed(headers)
    assert malformed[scheme.signature_header] != headers[scheme.signature_header]
    for bad in (missing, malformed):
        assert independent_verify(name, SECRETS[name], BODY, bad) is not None
        with pytest.raises(SignatureError):
            scheme.verify(SECRETS[name], BODY, bad)


def test_stripe_v0_only_is_refused_and_the_other_schemes_have_no_downgrade() -> None:
    scheme = scheme_named("stripe")
    downgraded = scheme.downgraded(SECRETS["stripe"], BODY, timestamp=int(time.time()), event_id="evt_1")
    assert downgraded is not None and ",v0=" in downgraded["Stripe-Signature"]
    assert "v1=" not in downgraded["Stripe-Signature"]
    assert independent_verify("stripe", SECRETS["stripe"], BODY, downgraded) is not None
    with pytest.raises(SignatureError, match="no v1"):
        scheme.verify(SECRETS["stripe"], BODY, downgraded)
    # The v0 value is the right HMAC: only its label is wrong, so a receiver that accepts any label takes it.
    relabelled = {"Stripe-Signature": downgraded["Stripe-Signature"].replace("v0=", "v1=")}
    assert independent_verify("stripe", SECRETS["stripe"], BODY, relabelled) is None
    for name in ("standard", "github", "shopify"):
        assert scheme_named(name).downgraded(SECRETS[name], BODY, timestamp=0, event_id="x") is None


def test_stripe_accepts_one_of_several_v1_entries_while_a_secret_is_rolled() -> None:
    scheme = scheme_named("stripe")
    now = int(time.time())
    old = signed(scheme, timestamp=now, secret="whsec_old")["Stripe-Signature"]
    new = signed(scheme, timestamp=now, secret="whsec_new")["Stripe-Signature"].split(",")[1]
    both = {"Stripe-Signature": f"{old},{new}"}
    assert scheme.verify("whsec_new", BODY, both).timestamp == now
    assert independent_verify("stripe", "whsec_new", BODY, both) is None


def test_secrets_and_ids_have_each_providers_shape() -> None:
    rng = random.Random(5)
    assert scheme_named("stripe").new_event_id(rng).startswith("evt_")
    assert len(scheme_named("stripe").new_event_id(rng)) == 28
    assert scheme_named("standard").new_event_id(rng).startswith("msg_")
    assert len(scheme_named("github").new_event_id(rng)) == 36
    standard = scheme_named("standard")
    secret = standard.new_secret(rng)
    standard.check_secret(secret)
    assert independent_verify("standard", secret, BODY, signed(standard, secret=secret)) is None
    for bad in ("", "whsec_", "whsec_not base64!", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"):
        with pytest.raises(SchemeError, match="standard: the secret"):
            standard.check_secret(bad)
    with pytest.raises(SchemeError, match="stripe: the endpoint secret"):
        scheme_named("stripe").sign("", BODY, timestamp=0, event_id="evt_1")


def test_an_unknown_scheme_is_refused_by_name() -> None:
    with pytest.raises(SchemeError, match="unknown webhook scheme 'paypal' \\(known: stripe, standard, github, shopify\\)"):
        scheme_named("paypal")


def test_header_names_are_case_insensitive_when_verifying() -> None:
    scheme = scheme_named("standard")
    headers = {key.upper(): value for key, value in signed(scheme).items()}
    assert scheme.verify(SECRETS["standard"], BODY, headers).event_id == "msg_1"
