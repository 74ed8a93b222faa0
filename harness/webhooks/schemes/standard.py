"""Standard Webhooks (spec v1.0.0, also Svix's scheme): `webhook-id`, `webhook-timestamp`
and `webhook-signature: v1,<base64>`.

The signature is the base64 HMAC-SHA256 of `"<id>.<timestamp>.<raw body>"`, keyed with
the base64-**decoded** part of a `whsec_<base64>` secret (unlike Stripe, whose key is the
secret's text). `webhook-signature` is a space-separated list of `version,signature`
entries; only `v1` (symmetric) is produced and accepted here (`v1a`, the ed25519 variant,
is not implemented). The id is the idempotency key a receiver should dedupe on: it
stays the same across retries, while the timestamp is each attempt's own.

Event ids are `msg_` and 24 letters and digits (the shape Svix uses); secrets are
`whsec_` and the base64 of 24 random bytes. Bodies follow the spec's recommended
shape `{"type", "timestamp", "data"}` when the template is an object.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import random
from collections.abc import Mapping
from datetime import UTC, datetime
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

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
PREFIX = "whsec_"


def secret_key(secret: str) -> bytes:
    """The HMAC key of a `whsec_<base64>` secret (the prefix is optional, padding too)."""
    text = secret[len(PREFIX):] if secret.startswith(PREFIX) else secret
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise SchemeError("standard: the secret must be whsec_ followed by base64") from None
    if not key:
        raise SchemeError("standard: the secret must not be empty (whsec_ followed by base64)")
    return key


def signature(secret: str, body: bytes, *, event_id: str, timestamp: int) -> str:
    """The base64 `v1` value for `body` sent as `event_id` at `timestamp`."""
    signed = event_id.encode("utf-8") + b"." + str(int(timestamp)).encode("ascii") + b"." + body
    return base64.b64encode(hmac_sha256(secret_key(secret), signed)).decode("ascii")


class StandardScheme(Scheme):
    name = "standard"
    signature_header = SIGNATURE_HEADER
    timestamped = True

    def sign(self, secret: str, body: bytes, *, timestamp: int, event_id: str, topic: str = "") -> dict[str, str]:
        return {ID_HEADER: event_id, TIMESTAMP_HEADER: str(int(timestamp)),
                SIGNATURE_HEADER: "v1," + signature(secret, body, event_id=event_id, timestamp=timestamp)}

    def verify(self, secret: str, body: bytes, headers: Mapping[str, str], *,
               tolerance: int = DEFAULT_TOLERANCE, now: float | None = None) -> Verified:
        event_id = required_header(headers, ID_HEADER)
        stamp = required_header(headers, TIMESTAMP_HEADER)
        value = required_header(headers, SIGNATURE_HEADER)
        if not stamp.isdigit():
            raise SignatureError(f"{TIMESTAMP_HEADER} must be integer unix seconds, not {stamp!r}")
        timestamp = int(stamp)
        check_timestamp(timestamp, tolerance=tolerance, now=now)
        candidates = []
        for entry in value.split(" "):
            version, sep, encoded = entry.partition(",")
            if not sep or not encoded:
                raise SignatureError(f"{SIGNATURE_HEADER} entry {entry!r} is not version,signature")
            if version == "v1":
                candidates.append(encoded)
        if not candidates:
            raise SignatureError(f"{SIGNATURE_HEADER} has no v1 signature")
        expected = signature(secret, body, event_id=event_id, timestamp=timestamp)
        if not any(hmac.compare_digest(expected.encode(), candidate.encode()) for candidate in candidates):
            raise SignatureError(f"no v1 signature in {SIGNATURE_HEADER} matches the body")
        return Verified(event_id=event_id, timestamp=timestamp)

    def new_event_id(self, rng: random.Random) -> str:
        return "msg_" + random_token(rng, 24)

    def new_secret(self, rng: random.Random) -> str:
        return PREFIX + base64.b64encode(rng.randbytes(24)).decode("ascii")

    def check_secret(self, secret: str) -> None:
        if not secret.startswith(PREFIX):
            raise SchemeError(f"standard: the secret must start with {PREFIX} (then base64)")
        secret_key(secret)

    def envelope(self, data: Any, *, event_id: str, event_type: str, created: int) -> Any:
        if not isinstance(data, dict):
            return data
        stamp = datetime.fromtimestamp(created, tz=UTC).isoformat().replace("+00:00", "Z")
        return {**data, "type": event_type, "timestamp": stamp}

    def malformed(self, headers: Mapping[str, str]) -> dict[str, str]:
        # The comma between version and signature is gone: `v1abc=` is no `version,signature` entry.
        value = required_header(headers, SIGNATURE_HEADER)
        return with_header(headers, SIGNATURE_HEADER, value.replace(",", "", 1))


SCHEME = StandardScheme()
