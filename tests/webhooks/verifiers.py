"""Independent verifiers for the tests: the providers' own SDKs where PyPI has one
(stripe's `Webhook.construct_event`, `standardwebhooks`), and for GitHub and Shopify a
check written here from their documentation, sharing no code with harness/webhooks.

`independent_verify(scheme_name, secret, body, headers, tolerance=300)` returns None
when the delivery verifies and the refusal's text otherwise. Stripe's SDK checks only
that a timestamp is not too old (a future one passes); the receivers in these tests
also refuse one too far ahead, as stripe-php does, so the Stripe check adds that.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Mapping

import standardwebhooks
import stripe


def _get(headers: Mapping[str, str], name: str) -> str | None:
    return next((value for key, value in headers.items() if key.lower() == name.lower()), None)


def stripe_sdk(secret: str, body: bytes, headers: Mapping[str, str], tolerance: int = 300, *,
               future: bool = True) -> str | None:
    value = _get(headers, "Stripe-Signature")
    try:
        stripe.Webhook.construct_event(body, value, secret, tolerance=tolerance)
    except (stripe.SignatureVerificationError, ValueError) as error:
        return f"stripe: {error}"
    stamps = [int(part[2:]) for part in (value or "").split(",") if part.startswith("t=")]
    if future and tolerance and stamps and stamps[0] > time.time() + tolerance:
        return "stripe: timestamp in the future"
    return None


def standard_sdk(secret: str, body: bytes, headers: Mapping[str, str], tolerance: int = 300, *,
                 future: bool = True) -> str | None:
    # standardwebhooks has a fixed 5 min tolerance.
    try:
        standardwebhooks.Webhook(secret).verify(body, dict(headers))
    except Exception as error:  # noqa: BLE001 - it raises ValueError, not only its own error, on a bad entry
        return f"standard: {type(error).__name__}: {error}"
    return None


def github_doc(secret: str, body: bytes, headers: Mapping[str, str], tolerance: int = 300, *,
               future: bool = True) -> str | None:
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    given = _get(headers, "X-Hub-Signature-256") or ""
    return None if hmac.compare_digest(expected, given) else "github: signature mismatch"


def shopify_doc(secret: str, body: bytes, headers: Mapping[str, str], tolerance: int = 300, *,
                future: bool = True) -> str | None:
    expected = base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode()
    given = _get(headers, "X-Shopify-Hmac-Sha256") or ""
    return None if hmac.compare_digest(expected, given) else "shopify: signature mismatch"


VERIFIERS = {"stripe": stripe_sdk, "standard": standard_sdk, "github": github_doc, "shopify": shopify_doc}


def independent_verify(scheme: str, secret: str, body: bytes, headers: Mapping[str, str],
                       tolerance: int = 300, *, future: bool = True) -> str | None:
    """None when the delivery verifies; `future=False` leaves Stripe's SDK alone (no check ahead)."""
    return VERIFIERS[scheme](secret, body, headers, tolerance, future=future)


def independent_event_id(scheme: str, body: bytes, headers: Mapping[str, str]) -> str | None:
    """The id a receiver dedupes on, read the way each provider documents it."""
    if scheme == "stripe":
        return str(json.loads(body)["id"])
    name = {"standard": "webhook-id", "github": "X-GitHub-Delivery", "shopify": "X-Shopify-Webhook-Id"}[scheme]
    return _get(headers, name)
