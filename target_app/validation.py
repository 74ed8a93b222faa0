"""Strict request-body parsing: every bad input becomes a 400/422 Problem."""

from __future__ import annotations

import json
import re

from target_app.errors import Problem

_CURRENCY = re.compile(r"^[A-Z]{3}$")
_IDENTIFIER = re.compile(r"^[\x21-\x7e]{1,200}$")


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def json_object(body: bytes) -> dict:
    if not body:
        raise Problem(400, "Malformed JSON", "the request body is empty; a JSON object is required",
                      type_="/problems/malformed-json")
    try:
        document = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Problem(400, "Malformed JSON", f"the request body is not valid JSON: {exc}",
                      type_="/problems/malformed-json") from None
    if not isinstance(document, dict):
        raise Problem(400, "Malformed JSON", "the request body must be a JSON object",
                      type_="/problems/malformed-json")
    return document


def _invalid(field: str, detail: str) -> Problem:
    return Problem(422, "Invalid field", f"{field}: {detail}", type_="/problems/invalid-field",
                   field=field)


def positive_int(document: dict, field: str, *, maximum: int, minimum: int = 1) -> int:
    if field not in document:
        raise _invalid(field, "is required")
    value = document[field]
    # bool is a subclass of int in Python; JSON true is not a number.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(field, "must be an integer")
    if value < minimum:
        raise _invalid(field, f"must be >= {minimum}")
    if value > maximum:
        raise _invalid(field, f"must be <= {maximum}")
    return value


def identifier(document: dict, field: str) -> str:
    if field not in document:
        raise _invalid(field, "is required")
    value = document[field]
    if not isinstance(value, str):
        raise _invalid(field, "must be a string")
    if not _IDENTIFIER.match(value):
        raise _invalid(field, "must be 1-200 printable ASCII characters without spaces")
    return value


def currency(document: dict, field: str = "currency") -> str:
    value = document.get(field, None)
    if field not in document:
        raise _invalid(field, "is required")
    if not isinstance(value, str) or not _CURRENCY.match(value):
        raise _invalid(field, "must be a three-letter upper-case ISO 4217 code")
    return value


def path_identifier(value: str, what: str) -> str:
    if not _IDENTIFIER.match(value):
        raise Problem(404, f"Unknown {what}", f"no {what} {value!r}", type_=f"/problems/unknown-{what}")
    return value
