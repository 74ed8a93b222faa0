"""What the harness computes over the bytes it sends: the request fingerprint and
the webhook signature, each written once from its documented format.

`fingerprint(method, path, body)` is the sha256 hex of `METHOD\nPATH\nraw body`
(docs/internals.md), over the method and path as they go on the wire (requests
upper-cases the method; the harness's paths are ASCII). The load and the probe
record it in every HTTP invoke; the checker compares it between requests under one
key (`answers_match_requests`).

`Webhook-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`,
the provider's format the app verifies (docs/scenarios.md).

The harness computes both with its own code and never imports the target app: a
load that borrowed the app's fingerprint or signer would agree with a broken one,
so a bug in the app's format would pass unnoticed. Stdlib only, so a test process
can import it without Locust's monkey-patching.

`signature_headers` also makes the deliberately bad signatures the scenarios send
(stale, future-dated, tampered, missing); the app must refuse each with 401.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "Webhook-Signature"
# Far outside the app's 300 s tolerance, so clock skew never turns a bad copy good.
SIGNATURE_SKEW = 3600
BAD_SIGNATURES = ("stale_signature", "future_signature", "tampered_signature", "missing_signature")


def fingerprint(method: str, path: str, body: bytes) -> str:
    """The request fingerprint the API layer compares a reused key against."""
    digest = hashlib.sha256()
    digest.update(method.upper().encode() + b"\n" + path.encode() + b"\n")
    digest.update(body)
    return digest.hexdigest()


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The header value that signs `body` as sent at `timestamp` (unix seconds)."""
    signed_payload = str(int(timestamp)).encode("ascii") + b"." + body
    mac = hmac.new(secret.encode("utf-8"), signed_payload, hashlib.sha256).hexdigest()
    return f"t={int(timestamp)},v1={mac}"


def signature_headers(secret: str, body: bytes, kind: str = "valid", *,
                      timestamp: int | None = None) -> dict[str, str]:
    """The headers for a `valid` signature or one of BAD_SIGNATURES."""
    now = int(time.time()) if timestamp is None else int(timestamp)
    if kind == "valid":
        return {SIGNATURE_HEADER: sign(secret, body, now)}
    if kind == "missing_signature":
        return {}
    if kind == "stale_signature":
        return {SIGNATURE_HEADER: sign(secret, body, now - SIGNATURE_SKEW)}
    if kind == "future_signature":
        return {SIGNATURE_HEADER: sign(secret, body, now + SIGNATURE_SKEW)}
    if kind == "tampered_signature":
        value = sign(secret, body, now)
        # One hex digit changed: well-formed, so only the MAC comparison can refuse it.
        flipped = "0" if value[-1] != "0" else "1"
        return {SIGNATURE_HEADER: value[:-1] + flipped}
    raise ValueError(f"unknown signature kind {kind!r}")
