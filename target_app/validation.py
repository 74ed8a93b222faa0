"""Strict request parsing: every bad input becomes a 400/413/422 Problem.

- `read_body`: the raw body, exactly Content-Length bytes; fewer (a body cut off in
  transit) is `IncompleteBody` (400), more than the limit is 413, with or without
  Content-Length (a chunked body is read up to the limit + 1 byte, never cut silently).
- Ids that become part of a Redis key (SKUs, order ids) must match
  `[A-Za-z0-9_.-]{1,200}`; other identifiers (provider_ref, event_id) 1-200 printable
  ASCII characters without spaces. Every pattern is applied with `fullmatch`, so a
  trailing newline is refused.
"""

from __future__ import annotations

import json
import re
from typing import IO, TYPE_CHECKING, NoReturn

from target_app.errors import Problem
from target_app.keys import is_safe_id

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

# A parsed JSON object: member values are whatever JSON holds; each field is
# checked by the function that reads it.
JSONObject = dict[str, object]

_CURRENCY = re.compile(r"[A-Z]{3}")
_IDENTIFIER = re.compile(r"[\x21-\x7e]{1,200}")
# Read a body in pieces of this size, so a short body is noticed without trusting
# one read() call to return everything that arrived.
_READ_CHUNK = 65536


class IncompleteBody(Problem):
    """Fewer bytes arrived than Content-Length announced."""

    def __init__(self, expected: int, received: int) -> None:
        super().__init__(400, "Incomplete body",
                         f"Content-Length announced {expected} bytes but only {received} arrived",
                         type_="/problems/incomplete-body")


def read_body(environ: WSGIEnvironment, max_bytes: int, *, allow_incomplete: bool = False) -> bytes:
    """The request body from `wsgi.input` (see the module docstring).

    `allow_incomplete` is the `incomplete-body` negative control: a short body is
    returned as if it were complete.
    """
    too_large = Problem(413, "Body too large", f"the request body exceeds {max_bytes} bytes",
                        type_="/problems/body-too-large")
    stream: IO[bytes] | None = environ.get("wsgi.input")
    raw_length = (environ.get("CONTENT_LENGTH") or "").strip()
    if raw_length:
        if not raw_length.isascii() or not raw_length.isdigit():
            raise Problem(400, "Bad Content-Length", "Content-Length is not a non-negative integer",
                          type_="/problems/bad-request")
        length = int(raw_length)
        if length > max_bytes:
            raise too_large
        body = _read_up_to(stream, length)
        if len(body) < length and not allow_incomplete:
            raise IncompleteBody(length, len(body))
        return body
    if environ.get("wsgi.input_terminated"):
        # Chunked: the server ends the stream; read one byte past the limit to know.
        body = _read_up_to(stream, max_bytes + 1)
        if len(body) > max_bytes:
            raise too_large
        return body
    return b""


def _read_up_to(stream: IO[bytes] | None, limit: int) -> bytes:
    if stream is None or limit <= 0:
        return b""
    parts: list[bytes] = []
    received = 0
    while received < limit:
        part = stream.read(min(_READ_CHUNK, limit - received))
        if not part:
            break  # end of stream: the peer sent no more
        parts.append(part)
        received += len(part)
    return b"".join(parts)


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def json_object(body: bytes) -> JSONObject:
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


def positive_int(document: JSONObject, field: str, *, maximum: int, minimum: int = 1) -> int:
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


def is_identifier(value: object) -> bool:
    """1-200 printable ASCII characters without spaces (provider_ref, event_id, message_id)."""
    return isinstance(value, str) and _IDENTIFIER.fullmatch(value) is not None


def identifier(document: JSONObject, field: str) -> str:
    if field not in document:
        raise _invalid(field, "is required")
    value = document[field]
    if not isinstance(value, str):
        raise _invalid(field, "must be a string")
    if not is_identifier(value):
        raise _invalid(field, "must be 1-200 printable ASCII characters without spaces")
    return value


def key_identifier(document: JSONObject, field: str) -> str:
    """An id that becomes part of a Redis key (sku, order_id): 422 unless safe."""
    value = identifier(document, field)
    if not is_safe_id(value):
        raise _invalid(field, "must be 1-200 characters of A-Z a-z 0-9 _ . -")
    return value


def currency(document: JSONObject, field: str = "currency") -> str:
    value = document.get(field, None)
    if field not in document:
        raise _invalid(field, "is required")
    if not isinstance(value, str) or not _CURRENCY.fullmatch(value):
        raise _invalid(field, "must be a three-letter upper-case ISO 4217 code")
    return value


def path_identifier(value: str, what: str) -> str:
    """An id from the URL path: anything but a safe id names nothing (404)."""
    if not is_safe_id(value):
        raise Problem(404, f"Unknown {what}", f"no {what} {value!r}", type_=f"/problems/unknown-{what}")
    return value
