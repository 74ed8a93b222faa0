"""`harness probe init --openapi FILE` (harness.probe.starter): a starter config from an
OpenAPI document that parses as a probe config as written, every write operation taking
an Idempotency-Key becoming an endpoint, and bad documents refused in one line (exit 2)."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cli.main import main
from harness.generators import render_body
from harness.probe.config import parse_config

KEY = {"name": "Idempotency-Key", "in": "header", "required": True, "schema": {"type": "string"}}
DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "payments", "version": "1"},
    "components": {
        "parameters": {"Key": KEY},
        "schemas": {
            "Money": {"type": "object", "required": ["amount_cents", "currency"],
                      "properties": {"amount_cents": {"type": "integer", "minimum": 100, "maximum": 99999},
                                     "currency": {"type": "string", "enum": ["EUR", "USD"]}}},
            "Payment": {"allOf": [{"$ref": "#/components/schemas/Money"},
                                  {"type": "object", "required": ["reference"],
                                   "properties": {"reference": {"type": "string"},
                                                  "note": {"type": "string"}}}]},
            "Created": {"type": "object", "properties": {"id": {"type": "string"}}},
        },
    },
    "paths": {
        "/payments": {
            "post": {"operationId": "createPayment", "parameters": [{"$ref": "#/components/parameters/Key"}],
                     "requestBody": {"content": {"application/json": {
                         "schema": {"$ref": "#/components/schemas/Payment"}}}},
                     "responses": {"201": {"description": "created", "content": {"application/json": {
                         "schema": {"$ref": "#/components/schemas/Created"}}}}}},
            "get": {"parameters": [{"name": "idempotency_key", "in": "query", "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "the payments of a key"}}},
        },
        "/payments/{payment_id}": {
            "parameters": [{"name": "payment_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "get": {"responses": {"200": {"description": "one payment"}}},
        },
        "/carts/{cart_id}/checkout": {
            "parameters": [{"name": "cart_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "put": {"parameters": [dict(KEY, required=False)],
                    "requestBody": {"content": {"application/json": {"schema": {
                        "type": "object", "properties": {"express": {"type": "boolean"}}}}}},
                    "responses": {"200": {"description": "checked out"}}},
        },
        "/refunds": {"post": {"responses": {"201": {"description": "no key: not probed"}}}},
    },
}


def write(tmp_path: Path, document: Any, name: str = "openapi.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document) if not isinstance(document, str) else document)
    return path


def test_init_writes_a_config_that_parses_with_each_key_taking_write_as_an_endpoint(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "init", "--openapi", str(write(tmp_path, DOCUMENT))]) == 0
    text = capsys.readouterr().out
    config = parse_config(yaml.safe_load(text), source="starter")
    by_name = {endpoint.name: endpoint for endpoint in config.endpoints}
    assert set(by_name) == {"createPayment", "put-carts-cart_id-checkout"}, text
    pay = by_name["createPayment"]
    assert (pay.method, pay.path, pay.requires_key) == ("POST", "/payments", True)
    assert pay.body == {"amount_cents": "{int:100-99999}", "currency": "{choice:EUR|USD}", "reference": "{uuid}"}
    rendered = render_body(pay.body, random.Random(1), key=None)
    assert 100 <= rendered["amount_cents"] <= 99999 and rendered["currency"] in ("EUR", "USD")
    assert pay.read is not None and pay.read.path == "/payments/{id}"
    assert pay.search is not None and pay.search.path == "/payments?idempotency_key={key}"
    cart = by_name["put-carts-cart_id-checkout"]
    assert (cart.method, cart.path, cart.requires_key) == ("PUT", "/carts/{uuid}/checkout", False)
    # Each guess is marked for the user: the read-back, the search, an id without `id` in the answer.
    assert text.count("CONFIRM") == 4, text


def test_init_writes_the_file_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document, out = write(tmp_path, DOCUMENT), tmp_path / "probe.yaml"
    assert main(["probe", "init", "--openapi", str(document), "--config", str(out)]) == 0
    assert parse_config(yaml.safe_load(out.read_text())).endpoints
    assert main(["probe", "init", "--openapi", str(document), "--config", str(out)]) == 2
    assert "exists" in capsys.readouterr().err


@pytest.mark.parametrize(("document", "message"), [
    ("just: [a, yaml, file]\n", "not an OpenAPI 3 document"),
    ("{not yaml: [", "not valid YAML"),
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested"),
    ({"openapi": "3.1.0", "info": {"title": "x"}, "paths": {}}, "not a valid OpenAPI document"),
    ({**DOCUMENT, "paths": {"/refunds": DOCUMENT["paths"]["/refunds"]}}, "no POST, PUT or PATCH operation"),
])
def test_a_file_that_is_not_an_openapi_document_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], document: Any, message: str) -> None:
    assert main(["probe", "init", "--openapi", str(write(tmp_path, document))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness: --openapi: ") and message in err and err.count("\n") == 1, err


def test_init_needs_openapi_and_openapi_needs_init(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "init"]) == 2
    assert "--openapi FILE is required" in capsys.readouterr().err
    assert main(["probe", "--openapi", str(write(tmp_path, DOCUMENT))]) == 2
    assert "only with `harness probe init`" in capsys.readouterr().err


def _with_responses(responses: dict[str, Any]) -> dict[str, Any]:
    document = yaml.safe_load(yaml.safe_dump(DOCUMENT))
    document["paths"]["/payments"]["post"]["responses"].update(responses)
    return document


def _pay(tmp_path: Path, capsys: pytest.CaptureFixture[str], document: dict[str, Any]) -> tuple[Any, str]:
    assert main(["probe", "init", "--openapi", str(write(tmp_path, document))]) == 0
    text = capsys.readouterr().out
    config = parse_config(yaml.safe_load(text), source="starter")
    return next(e for e in config.endpoints if e.name == "createPayment"), text


VALIDATION_422 = {"422": {"description": "Validation Error", "content": {"application/json": {
    "schema": {"$ref": "#/components/schemas/Created"}}}}}


@pytest.mark.parametrize(("responses", "written"), [
    # FastAPI's: a required header missing is its validation error, 422
    (VALIDATION_422, {"missing_key": 422}),
    ({"400": {"description": "The Idempotency-Key header is missing"},
      "409": {"description": "The key was reused with a different request body"}},
     {"missing_key": 400, "payload_mismatch": 409}),
    ({"409": {"description": "A request with this key is still in progress"},
      "422": {"description": "Idempotency-Key reused with another payload"}},
     {"in_flight": 409, "payload_mismatch": 422}),
    ({}, {}),  # nothing documented: the profile's codes, as advice
    ({"400": {"description": "Bad Request"}, "409": {"description": "Conflict"}}, {}),  # says nothing of the key
])
def test_init_writes_the_codes_the_document_gives_the_keys_misuses(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], responses: dict[str, Any],
        written: dict[str, int]) -> None:
    pay, text = _pay(tmp_path, capsys, _with_responses(responses))
    assert {name: getattr(pay.expect, name) for name in pay.expect.written} == written, text
    for name, code in written.items():
        assert f"{name}: {code}   # documented: {code} " in text, text
    if not written:
        assert "# expect: no documented response" in text


def test_init_on_the_fastapi_example_expects_its_422_for_a_missing_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    from tests.probe.probe_helpers import ROOT

    spec = importlib.util.spec_from_file_location("fastapi_payments", ROOT / "examples/frameworks/fastapi_payments.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fastapi_payments"] = module  # pydantic resolves the models' annotations through it
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop("fastapi_payments", None)
    document = module.build_app("correct", 1).openapi()
    path = tmp_path / "openapi.json"
    path.write_text(__import__("json").dumps(document))
    assert main(["probe", "init", "--openapi", str(path)]) == 0
    text = capsys.readouterr().out
    [endpoint] = parse_config(yaml.safe_load(text), source="starter").endpoints
    assert endpoint.path == "/payments" and endpoint.expect.missing_key == 422, text
    assert "missing_key" in endpoint.expect.written
    assert "# documented: 422 Validation Error" in text
