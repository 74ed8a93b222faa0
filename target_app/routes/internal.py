"""Internal endpoints: `/internal/v1/...`, for the harness, not for clients.

- `PUT /internal/v1/inventory/<sku>` `{"available": N}`: set a SKU's stock;
- `GET /internal/v1/export`: the state export, streamed NDJSON (export.py);
- crash points (crashpoints.py; the contract in docs/target-app.md):
  `GET /internal/v1/crash-points` (every point: where, what a crash there leaves,
  its actions, how it is armed, its hits), `PUT /internal/v1/crash-points/<name>`
  `{"action", "probability", "count", "delay_ms"}` (arm; answers the point as read
  back from the shared folder), `DELETE /internal/v1/crash-points/<name>` and
  `DELETE /internal/v1/crash-points` (disarm one, all), `GET
  /internal/v1/crash-points/hits` (every firing, oldest first). An unknown point is
  404, a bad field 422 naming it, arming without a crash-point folder 409.
Every route needs `Authorization: Bearer <TARGET_APP_INTERNAL_TOKEN>` (compared in
constant time): a wrong or missing token is 401 with `WWW-Authenticate: Bearer`;
with no token configured every route answers 404, like a route that does not exist.
"""

from __future__ import annotations

import hmac

from flask import Blueprint, Response, request, stream_with_context

from target_app import validation
from target_app.crashpoints import CrashPointsDisabled, InvalidArming, UnknownCrashPoint
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


def _unknown_point(name: str) -> Problem:
    return Problem(404, "Unknown crash point", f"no crash point {name!r}",
                   type_="/problems/unknown-crash-point")


@bp.get("/crash-points")
def crash_points() -> Response:
    return json_response({"points": services().crash_points.entries()})


@bp.get("/crash-points/hits")
def crash_point_hits() -> Response:
    return json_response({"hits": [hit.to_json() for hit in services().crash_points.hits()]})


@bp.put("/crash-points/<name>")
def arm_crash_point(name: str) -> Response:
    points = services().crash_points
    try:
        points.entry(name)  # 404 before the body is looked at
        document = validation.json_object(request_body())
        return json_response(points.arm(name, document))
    except UnknownCrashPoint:
        raise _unknown_point(name) from None
    except InvalidArming as exc:
        raise Problem(422, "Invalid field", str(exc), type_="/problems/invalid-field",
                      field=exc.field) from None
    except CrashPointsDisabled as exc:
        raise Problem(409, "Crash points disabled", str(exc),
                      type_="/problems/crash-points-disabled") from None


@bp.delete("/crash-points/<name>")
def disarm_crash_point(name: str) -> Response:
    try:
        return json_response(services().crash_points.disarm(name))
    except UnknownCrashPoint:
        raise _unknown_point(name) from None


@bp.delete("/crash-points")
def disarm_crash_points() -> Response:
    return json_response({"points": services().crash_points.disarm_all()})
