"""Public stock levels: `GET /api/v1/inventory/<sku>` → `{"sku","available","added_total"}`
(404 for an unknown SKU). Changing stock is internal (internal.py).
"""

from __future__ import annotations

from flask import Blueprint, Response

from target_app import validation
from target_app.errors import Problem
from target_app.routes.common import json_response
from target_app.services import services

bp = Blueprint("inventory", __name__, url_prefix="/api/v1/inventory")


@bp.get("/<sku>")
def get_inventory(sku: str) -> Response:
    validation.path_identifier(sku, "sku")
    stock = services().domain.get_stock(sku)
    if stock is None:
        raise Problem(404, "Unknown SKU", f"no inventory for sku {sku!r}", type_="/problems/unknown-sku")
    return json_response(stock)
