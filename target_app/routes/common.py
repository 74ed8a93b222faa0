"""Helpers the blueprints share; every one works on the current request.

- `request_body()`: the complete body, read once per request (400 when cut off,
  counted as `api_incomplete_bodies`; 413 when too large);
- `json_response(document, status, headers)`: compact JSON;
- `pay(...)`: the domain's `mark_paid` and its answer, shared by the payments
  route and the webhook (one mapping from outcome to status and problem).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import redis
from flask import Response, request

from target_app import validation
from target_app.domain import OUTCOME_STATUS
from target_app.errors import Problem
from target_app.services import services

# Where the request's complete body is kept once read (reading consumes wsgi.input).
_BODY_ENVIRON = "target_app.routes.body"

_OUTCOME_PROBLEMS = {
    "conflict": ("Payment conflict", "the order is already paid with another provider_ref",
                 "/problems/payment-conflict"),
    "amount_mismatch": ("Amount mismatch", "amount_cents differs from the order's amount",
                        "/problems/amount-mismatch"),
    "unknown_order": ("Unknown order", "no such order", "/problems/unknown-order"),
}


def json_response(document: Mapping[str, object], status: int = 200,
                  headers: Mapping[str, str] | None = None) -> Response:
    body = json.dumps(document, separators=(",", ":"))
    return Response(body, status=status, mimetype="application/json", headers=headers)


def request_body() -> bytes:
    """The request's complete body (400 when cut off, 413 when too large)."""
    environ = request.environ
    cached = environ.get(_BODY_ENVIRON)
    if isinstance(cached, bytes):
        return cached
    app = services()
    try:
        body = validation.read_body(environ, app.settings.max_body_bytes,
                                    allow_incomplete=app.settings.unsafe("incomplete-body"))
    except validation.IncompleteBody:
        try:
            app.domain.incr_counter("api_incomplete_bodies")
        except redis.RedisError:
            pass  # the 400 matters more than the counter
        raise
    environ[_BODY_ENVIRON] = body
    return body


def pay(order_id: str, *, provider_ref: str, amount_cents: int, source: str, source_id: str,
        tenant: str | None) -> Response:
    """Pay the order through the domain guard; a refusal raises its Problem."""
    domain = services().domain
    outcome = domain.mark_paid(order_id, provider_ref=provider_ref, amount_cents=amount_cents,
                               source=source, source_id=source_id, tenant=tenant)
    if outcome in _OUTCOME_PROBLEMS:
        title, detail, type_ = _OUTCOME_PROBLEMS[outcome]
        raise Problem(OUTCOME_STATUS[outcome], title, detail, type_=type_, order_id=order_id)
    order = domain.get_order(order_id)
    return json_response({"order": order, "already_paid": outcome == "already_paid"},
                         OUTCOME_STATUS[outcome])
