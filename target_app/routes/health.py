"""`GET /healthz`: 200 `{"status":"ok","unsafe_disable":[...]}` when Redis answers a
PING, 503 problem+json when it does not (the harness waits on this)."""

from __future__ import annotations

from flask import Blueprint, Response

from target_app.routes.common import json_response
from target_app.services import services

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> Response:
    app = services()
    app.redis.ping()
    return json_response({"status": "ok", "unsafe_disable": sorted(app.settings.unsafe_disable)})
