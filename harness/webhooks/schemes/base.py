"""The interface every webhook signature scheme implements, and what they share.

A `Scheme` turns (secret, raw body, timestamp, event id, topic) into the headers a
provider sends (`sign`) and checks such headers the way a careful receiver does
(`verify`, which raises `SignatureError` naming what is wrong). Beyond those two, a
scheme knows the rest of what makes a delivery look like its provider's: the shape of
its event ids and secrets (`new_event_id`, `new_secret`), the envelope its event bodies
have and how they are encoded (`envelope`, `encode`), and the bad variants a receiver
must refuse (`malformed`, `downgraded`). Which refusals a scheme can express is part
of it: a scheme whose signature covers no timestamp (`timestamped = False`) has no
stale or future signature to send, and `official_refuses_future` says whether the
provider's own verifier refuses a future one (what the probe holds a receiver to).

`verify` is strict on purpose, stricter than some SDKs: it enforces the tolerance in
both directions (a timestamp too far in the future is refused as well as one too old)
and compares in constant time; the probe judges receivers by the official verifier
instead (`official_refuses_future`). It exists for the tests and for receivers written in
Python; the harness judges a team's receiver by its answers and effects, not by this.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import string
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessError

DEFAULT_TOLERANCE = 300  # seconds; the SDKs' default replay window
_BASE62 = string.ascii_letters + string.digits


class SignatureError(HarnessError):
    """A delivery's signature headers do not verify; the message says which check failed."""


class SchemeError(HarnessError):
    """A scheme was asked for something it cannot do: an unknown name, a secret of the wrong shape."""


@dataclass(frozen=True)
class Verified:
    """What a verified delivery proves: its event (or delivery) id and signed timestamp, when the scheme has them."""

    event_id: str | None
    timestamp: int | None


class Scheme(ABC):
    """One provider's way of signing webhook deliveries."""

    name: str = ""
    signature_header: str = ""  # the header a `missing_header` delivery leaves out
    timestamped: bool = False  # the signature covers a timestamp, so stale/future ones exist
    # What the provider's official verifier does with a timestamp beyond the tolerance in
    # the future: refuse it (Standard Webhooks' reference library) or accept it
    # (stripe-python's Webhook.construct_event checks only the age). The probe judges a
    # receiver by that verifier: a stricter check than it makes is advice, not a failure.
    official_refuses_future: bool = True
    user_agent: str = "idempotency-chaos-harness-webhooks"

    @abstractmethod
    def sign(self, secret: str, body: bytes, *, timestamp: int, event_id: str, topic: str = "") -> dict[str, str]:
        """The headers that sign `body` as sent at `timestamp` (unix seconds) for `event_id`."""

    @abstractmethod
    def verify(self, secret: str, body: bytes, headers: Mapping[str, str], *,
               tolerance: int = DEFAULT_TOLERANCE, now: float | None = None) -> Verified:
        """Check the headers of a delivery of `body`; raise SignatureError when they do not verify."""

    @abstractmethod
    def new_event_id(self, rng: random.Random) -> str:
        """A fresh id in the provider's format (the one that stays the same across retries)."""

    def new_secret(self, rng: random.Random) -> str:
        """A fresh secret of the provider's shape (a `wrong_secret` delivery is signed with one)."""
        return random_token(rng, 32)

    def check_secret(self, secret: str) -> None:
        """Raise SchemeError when `secret` cannot be used with this scheme."""
        if not secret:
            raise SchemeError(f"{self.name}: the secret must not be empty")

    def envelope(self, data: Any, *, event_id: str, event_type: str, created: int) -> Any:
        """The event body as the provider sends it, around the rendered template `data`.

        The default sends the template as it is (the event's id and type travel in headers)."""
        return data

    def encode(self, data: Any) -> bytes:
        """The raw body bytes that get signed and sent."""
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    @abstractmethod
    def malformed(self, headers: Mapping[str, str]) -> dict[str, str]:
        """`headers` with the signature header's value broken so that it does not parse."""

    def downgraded(self, secret: str, body: bytes, *, timestamp: int, event_id: str,
                   topic: str = "") -> dict[str, str] | None:
        """Headers signed correctly but only under a scheme version a receiver must not accept;
        None when the provider has no such version."""
        return None


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def header(headers: Mapping[str, str], name: str) -> str | None:
    """The value of header `name`, whatever its case (HTTP header names are case-insensitive)."""
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def with_header(headers: Mapping[str, str], name: str, value: str | None) -> dict[str, str]:
    """A copy of `headers` whose header `name` (any case) is `value`, or gone when None:
    how a scheme builds a malformed delivery from a correct one."""
    kept = {key: item for key, item in headers.items() if key.lower() != name.lower()}
    return kept if value is None else {**kept, name: value}


def required_header(headers: Mapping[str, str], name: str) -> str:
    value = header(headers, name)
    if not value:
        raise SignatureError(f"missing header {name}")
    return value


def check_timestamp(timestamp: int, *, tolerance: int, now: float | None) -> None:
    """Refuse a timestamp more than `tolerance` seconds from now, either way (0 turns the check off)."""
    if tolerance <= 0:
        return
    current = time.time() if now is None else now
    if timestamp < current - tolerance:
        raise SignatureError(f"timestamp {timestamp} is older than the tolerance of {tolerance}s")
    if timestamp > current + tolerance:
        raise SignatureError(f"timestamp {timestamp} is further in the future than the tolerance of {tolerance}s")


def random_token(rng: random.Random, length: int) -> str:
    """`length` letters and digits drawn from `rng` (ids and secrets are reproducible per seed)."""
    return "".join(rng.choice(_BASE62) for _ in range(length))


def random_uuid(rng: random.Random) -> str:
    """A v4 UUID drawn from `rng`, the shape of GitHub's and Shopify's delivery ids."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))
