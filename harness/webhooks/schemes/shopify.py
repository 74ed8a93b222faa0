"""Shopify's webhook signature: `X-Shopify-Hmac-Sha256: <base64>`.

The signature is the **base64** HMAC-SHA256 of the raw body, keyed with the app's
client secret as UTF-8 bytes; no timestamp is signed (`timestamped = False`).
`X-Shopify-Webhook-Id` identifies the delivery and is what a receiver dedupes on (it is
the `event_id` here, the same on every retry); `X-Shopify-Topic` names the event
(`orders/create`); `X-Shopify-Triggered-At` says when it was triggered (informative,
not signed).
"""

from __future__ import annotations

import base64
import hmac
import random
from collections.abc import Mapping
from datetime import UTC, datetime

from harness.webhooks.schemes.base import (
    DEFAULT_TOLERANCE,
    Scheme,
    SignatureError,
    Verified,
    header,
    hmac_sha256,
    random_uuid,
    required_header,
    with_header,
)

HEADER = "X-Shopify-Hmac-Sha256"
WEBHOOK_ID_HEADER = "X-Shopify-Webhook-Id"
TOPIC_HEADER = "X-Shopify-Topic"
TRIGGERED_AT_HEADER = "X-Shopify-Triggered-At"


def signature(secret: str, body: bytes) -> str:
    return base64.b64encode(hmac_sha256(secret.encode("utf-8"), body)).decode("ascii")


class ShopifyScheme(Scheme):
    name = "shopify"
    signature_header = HEADER
    timestamped = False
    user_agent = "Shopify-Captain-Hook"

    def sign(self, secret: str, body: bytes, *, timestamp: int, event_id: str, topic: str = "") -> dict[str, str]:
        self.check_secret(secret)
        triggered = datetime.fromtimestamp(int(timestamp), tz=UTC).isoformat().replace("+00:00", "Z")
        headers = {HEADER: signature(secret, body), WEBHOOK_ID_HEADER: event_id, TRIGGERED_AT_HEADER: triggered}
        if topic:
            headers[TOPIC_HEADER] = topic
        return headers

    def verify(self, secret: str, body: bytes, headers: Mapping[str, str], *,
               tolerance: int = DEFAULT_TOLERANCE, now: float | None = None) -> Verified:
        value = required_header(headers, HEADER)
        if not hmac.compare_digest(signature(secret, body).encode(), value.encode()):
            raise SignatureError(f"{HEADER} does not match the body")
        return Verified(event_id=header(headers, WEBHOOK_ID_HEADER), timestamp=None)

    def new_event_id(self, rng: random.Random) -> str:
        return random_uuid(rng)

    def malformed(self, headers: Mapping[str, str]) -> dict[str, str]:
        # The digest in hex instead of base64: the right HMAC in the wrong encoding.
        value = required_header(headers, HEADER)
        hexed = base64.b64decode(value).hex()
        return with_header(headers, HEADER, hexed)


SCHEME = ShopifyScheme()
