"""Internal endpoints: `/internal/v1/...`, for the harness, not for clients.

- `PUT /internal/v1/inventory/<sku>` `{"available": N}`: set a SKU's stock;
- `GET /internal/v1/export`: the state export, streamed NDJSON (export.py).
Every route needs `Authorization: Bearer <TARGET_APP_INTERNAL_TOKEN>` (compared in
constant time): a wrong or missing token is 401 with `WWW-Authenticate: Bearer`;
with no token configured every route answers 404, like a route that does not exist.
"""

from __future__ import annotations

import hmac

from flask import Blueprint, Response, request, stream_with_context

from target_app import validation
from target_app.domain import MAX_STOCK
from target_app.errors import Problem
from target_app.export import export_lines
from target_app.routes.common import json_response, request_body
from target_app.services import services

bp = Blueprint("internal", __name__, url_prefix="/internal/v1")


def bearer_token_matches(header: str | None, token: str) -> bool:
    """`Authorization: Bearer <token>`, compared in constant time."""
    if not header or not token:
        return False
    scheme, _, offered = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(offered.strip().encode("utf-8", "surrogateescape"),
                               token.encode("utf-8", "surrogateescape"))


@bp.before_request
def require_internal_token() -> None:
    token = services().settings.internal_token
    if not token:
        # Disabled: answer exactly like a route that does not exist.
        raise Problem(404, "Not Found", "The requested URL was not found on the server.",
                      type_="/problems/http-404")
    if not bearer_token_matches(request.headers.get("Authorization"), token):
        raise Problem(401, "Unauthorized", "internal endpoints need Authorization: Bearer <token>",
                      type_="/problems/unauthorized", headers={"WWW-Authenticate": "Bearer"})


@bp.put("/inventory/<sku>")
def put_inventory(sku: str) -> Response:
    validation.path_identifier(sku, "sku")
    document = validation.json_object(request_body())
    available = validation.positive_int(document, "available", minimum=0, maximum=MAX_STOCK)
    return json_response(services().domain.put_stock(sku, available))


@bp.get("/export")
def export() -> Response:
    app = services()
    app.redis.ping()  # fail with 503 before the stream starts, not in the middle
    lines = export_lines(app.redis, dead_letter_stream=app.settings.dead_letter_stream)
    return Response(stream_with_context(lines), mimetype="application/x-ndjson")
