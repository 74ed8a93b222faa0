"""Stripe's webhook signature: `Stripe-Signature: t=<unix seconds>,v1=<hex>`.

`v1` is the hex HMAC-SHA256 of `"<t>.<raw body>"`, keyed with the whole endpoint secret
as UTF-8 bytes (the `whsec_` prefix included, nothing decoded). A header may carry
several `v1` entries (one per secret while a secret is rolled); a receiver accepts the
delivery when one of them matches. Test-mode events also carry a `v0` entry that means
nothing: `downgraded` sends a correct HMAC labelled only `v0`, which a receiver that
accepts any scheme label would take, and must refuse.

Event ids are `evt_` and 24 letters and digits. Bodies are the event object
(`{"id", "object": "event", "type", "created", "data": {"object": ...}, ...}`),
pretty-printed as Stripe sends them, so a receiver that re-serializes the parsed JSON
before checking the signature gets other bytes and fails, as it would in production.
"""

from __future__ import annotations

import hmac
import json
import random
from collections.abc import Mapping
from typing import Any

from harness.webhooks.schemes.base import (
    DEFAULT_TOLERANCE,
    Scheme,
    SchemeError,
    SignatureError,
    Verified,
    check_timestamp,
    hmac_sha256,
    random_token,
    required_header,
    with_header,
)

HEADER = "Stripe-Signature"
EXPECTED = "v1"


def signature(secret: str, body: bytes, timestamp: int) -> str:
    """The hex `v1` value for `body` sent at `timestamp`."""
    return hmac_sha256(secret.encode("utf-8"), str(int(timestamp)).encode("ascii") + b"." + body).hex()


class StripeScheme(Scheme):
    name = "stripe"
    signature_header = HEADER
    timestamped = True
    official_refuses_future = False  # stripe-python's construct_event rejects only old timestamps
    user_agent = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"

    def sign(self, secret: str, body: bytes, *, timestamp: int, event_id: str, topic: str = "") -> dict[str, str]:
        self.check_secret(secret)
        return {HEADER: f"t={int(timestamp)},{EXPECTED}={signature(secret, body, timestamp)}"}

    def verify(self, secret: str, body: bytes, headers: Mapping[str, str], *,
               tolerance: int = DEFAULT_TOLERANCE, now: float | None = None) -> Verified:
        timestamp, entries = parse_header(required_header(headers, HEADER))
        candidates = [value for scheme, value in entries if scheme == EXPECTED]
        if not candidates:
            raise SignatureError(f"{HEADER} has no {EXPECTED} signature")
        expected = signature(secret, body, timestamp)
        if not any(hmac.compare_digest(expected, candidate) for candidate in candidates):
            raise SignatureError(f"no {EXPECTED} signature in {HEADER} matches the body")
        check_timestamp(timestamp, tolerance=tolerance, now=now)
        event_id = None
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("id"), str):
            event_id = parsed["id"]
        return Verified(event_id=event_id, timestamp=timestamp)

    def new_event_id(self, rng: random.Random) -> str:
        return "evt_" + random_token(rng, 24)

    def new_secret(self, rng: random.Random) -> str:
        return "whsec_" + random_token(rng, 32)

    def check_secret(self, secret: str) -> None:
        if not secret or not secret.strip():
            raise SchemeError("stripe: the endpoint secret must not be empty (it looks like whsec_...)")

    def envelope(self, data: Any, *, event_id: str, event_type: str, created: int) -> Any:
        if not isinstance(data, dict):
            raise SchemeError("stripe: an event template must be a JSON object (the event, with data.object)")
        # The fields Stripe owns are set whatever the template says; the rest is the template's.
        return {"id": event_id, "object": "event", "type": event_type, "created": created,
                "livemode": False, "pending_webhooks": 1,
                **{name: value for name, value in data.items() if name not in _OWNED}}

    def encode(self, data: Any) -> bytes:
        return json.dumps(data, indent=2, ensure_ascii=False).encode("utf-8")

    def malformed(self, headers: Mapping[str, str]) -> dict[str, str]:
        # The timestamp is not a number: the header cannot be parsed, let alone verified.
        value = required_header(headers, HEADER)
        broken = ",".join("t=now" if part.startswith("t=") else part for part in value.split(","))
        return with_header(headers, HEADER, broken)

    def downgraded(self, secret: str, body: bytes, *, timestamp: int, event_id: str,
                   topic: str = "") -> dict[str, str] | None:
        return {HEADER: f"t={int(timestamp)},v0={signature(secret, body, timestamp)}"}


_OWNED = frozenset({"id", "object", "type", "created"})


def parse_header(value: str) -> tuple[int, list[tuple[str, str]]]:
    """(timestamp, [(scheme, signature), ...]) from a `Stripe-Signature` value."""
    timestamp: int | None = None
    entries: list[tuple[str, str]] = []
    for part in value.split(","):
        name, sep, item = part.strip().partition("=")
        if not sep or not item:
            raise SignatureError(f"{HEADER} element {part.strip()!r} is not name=value")
        if name == "t":
            if timestamp is not None or not item.isdigit():
                raise SignatureError(f"{HEADER} needs one t=<unix seconds>, got {item!r}")
            timestamp = int(item)
        else:
            entries.append((name, item))
    if timestamp is None:
        raise SignatureError(f"{HEADER} has no t=<unix seconds>")
    return timestamp, entries


SCHEME = StripeScheme()
