"""The load fingerprints requests and signs webhooks with its own code: its
fingerprints equal the app's for the requests the load sends, the signatures it
makes verify with the app's verifier (valid ones) or are refused by it (the
deliberately bad ones), and nothing under harness/load imports the target app.

The signer is imported directly: harness.load.signing is plain stdlib, so the
test process is not monkey-patched by Locust.
"""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

from harness.load.signing import (
    BAD_SIGNATURES,
    SIGNATURE_HEADER,
    SIGNATURE_SKEW,
    fingerprint,
    sign,
    signature_headers,
)
from target_app.idempotency.fingerprint import fingerprint as app_fingerprint
from target_app.webhooks import SIGNATURE_HEADER as APP_HEADER
from target_app.webhooks import SignatureError, verify_signature

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cret"
BODY = b'{"event_id":"evt-1","type":"payment.succeeded","order_id":"ord_1","amount_cents":100}'


def test_fingerprint_covers_method_path_and_body() -> None:
    base = fingerprint("POST", "/a", b"{}")
    assert base == fingerprint("post", "/a", b"{}")  # the method as it goes on the wire
    assert base != fingerprint("POST", "/b", b"{}")
    assert base != fingerprint("POST", "/a", b"{ }")
    assert base != fingerprint("PUT", "/a", b"{}")


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/api/v1/orders", b'{"sku":"sku-1","quantity":1,"amount_cents":1000,"currency":"EUR"}'),
    ("POST", "/api/v1/orders/ord_1/payments", b'{"provider_ref":"pr-1","amount_cents":1000}'),
    ("POST", "/webhooks/payments", BODY),
    ("GET", "/api/v1/orders/ord_1", b""),
])
def test_the_loads_fingerprint_is_the_apps(method: str, path: str, body: bytes) -> None:
    assert fingerprint(method, path, body) == app_fingerprint(method, path, body)


def test_a_valid_signature_verifies_with_the_apps_verifier() -> None:
    assert SIGNATURE_HEADER == APP_HEADER
    now = int(time.time())
    headers = signature_headers(SECRET, BODY, timestamp=now)
    verify_signature(SECRET, BODY, headers[SIGNATURE_HEADER], now=now)
    verify_signature(SECRET, BODY, sign(SECRET, BODY, now - 10), now=now)


def test_the_signature_covers_secret_timestamp_and_body() -> None:
    now = int(time.time())
    value = sign(SECRET, BODY, now)
    with pytest.raises(SignatureError):
        verify_signature("other", BODY, value, now=now)
    with pytest.raises(SignatureError):
        verify_signature(SECRET, BODY + b" ", value, now=now)
    forged = value.replace(f"t={now}", f"t={now + 1}")
    with pytest.raises(SignatureError):
        verify_signature(SECRET, BODY, forged, now=now)


@pytest.mark.parametrize("kind", BAD_SIGNATURES)
def test_every_bad_signature_is_refused_by_the_apps_verifier(kind: str) -> None:
    now = int(time.time())
    header = signature_headers(SECRET, BODY, kind, timestamp=now).get(SIGNATURE_HEADER)
    with pytest.raises(SignatureError):
        verify_signature(SECRET, BODY, header, now=now)


def test_stale_and_future_signatures_are_well_formed_and_only_badly_timed() -> None:
    now = int(time.time())
    for kind, shift in (("stale_signature", -SIGNATURE_SKEW), ("future_signature", SIGNATURE_SKEW)):
        header = signature_headers(SECRET, BODY, kind, timestamp=now)[SIGNATURE_HEADER]
        # Right MAC for its own timestamp: only the tolerance can refuse it.
        verify_signature(SECRET, BODY, header, now=now + shift)


def test_unknown_signature_kinds_are_an_error() -> None:
    with pytest.raises(ValueError, match="unknown signature kind"):
        signature_headers(SECRET, BODY, "forged")


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("folder", ["harness/load", "harness/locustfiles"])
def test_the_load_imports_nothing_from_the_target_app(folder: str) -> None:
    files = sorted((REPO / folder).rglob("*.py"))
    assert files
    offenders = {
        str(path.relative_to(REPO)): sorted(name for name in _imported_modules(path)
                                            if name == "target_app" or name.startswith("target_app."))
        for path in files
    }
    assert {path: names for path, names in offenders.items() if names} == {}
    for path in files:
        assert "importlib" not in path.read_text(), f"{path}: dynamic imports hide what the load uses"
