"""Internal endpoints (`/internal/v1/export`, `PUT /internal/v1/inventory/<sku>`) need
`Authorization: Bearer <TARGET_APP_INTERNAL_TOKEN>`; without a configured token they
do not exist. Stock is no longer writable on the public API."""

from __future__ import annotations

from dataclasses import replace

import pytest
from ta_helpers import INTERNAL, INTERNAL_TOKEN

from target_app.app import create_app
from target_app.routes.internal import bearer_token_matches

ENDPOINTS = [("get", "/internal/v1/export", None), ("put", "/internal/v1/inventory/sku-1", {"available": 7})]


def call(client, method: str, path: str, body, headers=None):
    return getattr(client, method)(path, json=body, headers=headers or {})


@pytest.mark.parametrize("method,path,body", ENDPOINTS)
@pytest.mark.parametrize("headers", [
    None,
    {"Authorization": "Bearer wrong-token"},
    {"Authorization": f"Basic {INTERNAL_TOKEN}"},
    {"Authorization": f"Bearer {INTERNAL_TOKEN}x"},
    {"Authorization": "Bearer "},
    {"Authorization": INTERNAL_TOKEN},
])
def test_a_wrong_or_missing_token_is_401(client, rclient, method, path, body, headers):
    response = call(client, method, path, body, headers)
    assert response.status_code == 401 and response.content_type == "application/problem+json"
    assert response.json["type"] == "/problems/unauthorized" and response.headers["WWW-Authenticate"] == "Bearer"
    assert rclient.hget("ta:inventory:sku-1", "available") == "1000"


@pytest.mark.parametrize("method,path,body", ENDPOINTS)
def test_the_right_token_is_accepted(client, rclient, method, path, body):
    assert call(client, method, path, body, INTERNAL).status_code == 200
    assert call(client, method, path, body, {"Authorization": f"bearer  {INTERNAL_TOKEN} "}).status_code == 200


@pytest.mark.parametrize("method,path,body", ENDPOINTS)
def test_without_a_configured_token_internal_endpoints_do_not_exist(settings, rclient, method, path, body):
    client = create_app(replace(settings, internal_token="")).test_client()
    for headers in (None, {"Authorization": "Bearer "}, INTERNAL):
        response = call(client, method, path, body, headers)
        assert response.status_code == 404 and response.content_type == "application/problem+json"
    assert rclient.hget("ta:inventory:sku-1", "available") == "1000"


def test_stock_is_not_writable_on_the_public_api(client, rclient):
    response = client.put("/api/v1/inventory/sku-1", json={"available": 1}, headers=INTERNAL)
    assert response.status_code == 405 and response.content_type == "application/problem+json"
    assert client.get("/api/v1/inventory/sku-1").json["available"] == 1000  # reads stay public


def test_bearer_token_matches():
    assert bearer_token_matches("Bearer abc", "abc") and bearer_token_matches("BEARER abc", "abc")
    for header in (None, "", "Bearer", "Bearer ab", "Bearer abcd", "Token abc", "abc"):
        assert not bearer_token_matches(header, "abc")
    assert not bearer_token_matches("Bearer ", "")  # no token configured: nothing matches
    assert not bearer_token_matches("Bearer \udcff", "abc")  # undecodable input is just a mismatch
