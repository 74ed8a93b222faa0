"""Orders and their payments: `/api/v1/orders...` (tenant-scoped by `X-Tenant-ID`).

- `POST /api/v1/orders` creates an order (201 + `Location`); guarded by the
  Idempotency-Key layer, whose `IdempotencyContext` is the only thing this handler
  takes from it: the recovery point is written under the context's identity, and a
  recovery point of another fingerprint is refused with `context.release_key()`
  so the refusal is answered but not stored;
- `GET /api/v1/orders/<id>`: the order with its payments; another tenant's order
  is unknown (404);
- `POST /api/v1/orders/<id>/payments`: pays through the domain guard (source
  `api`, source id the Idempotency-Key).
"""

from __future__ import annotations

from flask import Blueprint, Response, request

from target_app import validation
from target_app.domain import MAX_AMOUNT_CENTS, MAX_QUANTITY
from target_app.errors import Problem
from target_app.idempotency import IdempotencyContext, context_of
from target_app.routes.common import json_response, pay, request_body
from target_app.services import services
from target_app.tenants import tenant_of

bp = Blueprint("orders", __name__, url_prefix="/api/v1/orders")


def _recorded_key(context: IdempotencyContext | None) -> str | None:
    """The Idempotency-Key an order or payment records (the checker reads it).

    A guarded request's key is the context's. Only without the layer (the `api`
    negative control) is the header taken as the client sent it: recorded, never
    used to guard anything."""
    if context is not None:
        return context.key
    return request.headers.get("Idempotency-Key")


@bp.post("")
def create_order() -> Response:
    tenant = tenant_of(request.environ)
    document = validation.json_object(request_body())
    sku = validation.key_identifier(document, "sku")
    quantity = validation.positive_int(document, "quantity", maximum=MAX_QUANTITY)
    amount = validation.positive_int(document, "amount_cents", maximum=MAX_AMOUNT_CENTS)
    currency = validation.currency(document)
    # Only requests the layer guards carry a context and get a recovery point, so
    # the `api` control (no layer) really has no protection at all.
    context = context_of(request.environ)
    result = services().domain.create_order(
        tenant=tenant, idempotency_key=_recorded_key(context), sku=sku, quantity=quantity,
        amount_cents=amount, currency=currency, recovery=context)
    if result.outcome == "mismatch":
        if context is not None:
            # Refused like the layer refuses a reused key, but not stored: the
            # original request's retry must still find its order.
            context.release_key()
        raise Problem(409, "Idempotency-Key reused",
                      "this key was already used with a different request (method, path or body)",
                      type_="/problems/idempotency-key-mismatch")
    if result.outcome == "unknown_sku":
        raise Problem(422, "Unknown SKU", f"no inventory for sku {sku!r}", type_="/problems/unknown-sku")
    if result.outcome == "out_of_stock":
        raise Problem(409, "Out of stock", f"fewer than {quantity} of {sku!r} available",
                      type_="/problems/out-of-stock")
    order = result.order
    if order is None:  # recovered, but the order is gone: nothing sane to answer
        raise Problem(500, "Internal error", "the order of this key no longer exists",
                      type_="/problems/internal")
    return json_response(order, 201, headers={"Location": f"/api/v1/orders/{order['id']}"})


@bp.get("/<order_id>")
def get_order(order_id: str) -> Response:
    tenant = tenant_of(request.environ)
    validation.path_identifier(order_id, "order")
    order = services().domain.get_order(order_id, tenant=tenant)
    if order is None:
        raise Problem(404, "Unknown order", f"no order {order_id!r}", type_="/problems/unknown-order")
    return json_response(order)


@bp.post("/<order_id>/payments")
def pay_order(order_id: str) -> Response:
    tenant = tenant_of(request.environ)
    validation.path_identifier(order_id, "order")
    document = validation.json_object(request_body())
    provider_ref = validation.identifier(document, "provider_ref")
    amount = validation.positive_int(document, "amount_cents", maximum=MAX_AMOUNT_CENTS)
    return pay(order_id, provider_ref=provider_ref, amount_cents=amount, source="api",
               source_id=_recorded_key(context_of(request.environ)) or "", tenant=tenant)
