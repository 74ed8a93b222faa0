"""GitHub's webhook signature: `X-Hub-Signature-256: sha256=<hex>`.

The signature is the hex HMAC-SHA256 of the raw body alone, keyed with the secret's
UTF-8 bytes. It covers no timestamp, so there is no replay window to enforce and no
stale or future delivery to send (`timestamped = False`): a replayed delivery verifies
forever, and only deduplication on `X-GitHub-Delivery` (a GUID that stays the same
when a delivery is redelivered) protects a receiver. `X-GitHub-Event` names the event
(the `topic`). GitHub documents a test vector, which the tests sign.
"""

from __future__ import annotations

import hmac
import random
from collections.abc import Mapping

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

HEADER = "X-Hub-Signature-256"
DELIVERY_HEADER = "X-GitHub-Delivery"
EVENT_HEADER = "X-GitHub-Event"


def signature(secret: str, body: bytes) -> str:
    """The header value, `sha256=<hex>`."""
    return "sha256=" + hmac_sha256(secret.encode("utf-8"), body).hex()


class GitHubScheme(Scheme):
    name = "github"
    signature_header = HEADER
    timestamped = False
    user_agent = "GitHub-Hookshot/harness"

    def sign(self, secret: str, body: bytes, *, timestamp: int, event_id: str, topic: str = "") -> dict[str, str]:
        self.check_secret(secret)
        headers = {HEADER: signature(secret, body), DELIVERY_HEADER: event_id}
        if topic:
            headers[EVENT_HEADER] = topic
        return headers

    def verify(self, secret: str, body: bytes, headers: Mapping[str, str], *,
               tolerance: int = DEFAULT_TOLERANCE, now: float | None = None) -> Verified:
        value = required_header(headers, HEADER)
        if not value.startswith("sha256="):
            raise SignatureError(f"{HEADER} must start with sha256=")
        if not hmac.compare_digest(signature(secret, body).encode(), value.encode()):
            raise SignatureError(f"{HEADER} does not match the body")
        return Verified(event_id=header(headers, DELIVERY_HEADER), timestamp=None)

    def new_event_id(self, rng: random.Random) -> str:
        return random_uuid(rng)

    def malformed(self, headers: Mapping[str, str]) -> dict[str, str]:
        # `sha256:<hex>`: the algorithm's separator is wrong, so the value is no sha256=<hex>.
        value = required_header(headers, HEADER)
        return with_header(headers, HEADER, value.replace("sha256=", "sha256:", 1))


SCHEME = GitHubScheme()
