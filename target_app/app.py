"""The Flask application factory and its routes (one app per process, no globals).

Public routes (`/api/v1/...`, `/webhooks/...`, `/healthz`) and internal ones
(`/internal/v1/...`: the state export and stock changes). Internal routes need
`Authorization: Bearer <TARGET_APP_INTERNAL_TOKEN>`: a wrong or missing token is 401,
and with no token configured they do not exist (404). Every error is problem+json.
Orders belong to their tenant (`X-Tenant-ID`, default `default`): another tenant's
order is unknown (404) to reads and payments. Bodies are read whole or refused
(`validation.read_body`): a short body is 400, an oversized one 413, on every route.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import threading

import redis
from flask import Flask, Response, request, stream_with_context
from werkzeug.exceptions import HTTPException

from target_app import validation
from target_app.domain import MAX_AMOUNT_CENTS, MAX_QUANTITY, MAX_STOCK, OUTCOME_STATUS, Domain
from target_app.errors import PROBLEM_CONTENT_TYPE, Problem, StoreUnavailable
from target_app.export import export_lines
from target_app.idempotency import (
    IDEMPOTENCY_CONTEXT_ENVIRON,
    RELEASE_ENVIRON,
    IdempotencyContext,
    IdempotencyMiddleware,
    tenant_of,
)
from target_app.idempotency_store import IdempotencyStore, RedisStore
from target_app.redis_client import make_redis
from target_app.settings import Settings
from target_app.webhooks import SIGNATURE_HEADER, SignatureError, verify_signature

log = logging.getLogger(__name__)

_PAYMENTS_PATH = re.compile(r"/api/v1/orders/[^/]+/payments")
# Where a route's complete body is kept once read (read_body consumes wsgi.input).
_BODY_ENVIRON = "target_app.app.body"


def requires_idempotency_key(method: str, path: str) -> bool:
    """The POST endpoints that go through the Idempotency-Key layer."""
    return method == "POST" and (path == "/api/v1/orders" or _PAYMENTS_PATH.fullmatch(path) is not None)


def bearer_token_matches(header: str | None, token: str) -> bool:
    """`Authorization: Bearer <token>`, compared in constant time."""
    if not header or not token:
        return False
    scheme, _, offered = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(offered.strip().encode("utf-8", "surrogateescape"),
                               token.encode("utf-8", "surrogateescape"))


def _json(document: dict, status: int = 200, headers: dict | None = None) -> Response:
    body = json.dumps(document, separators=(",", ":"))
    return Response(body, status=status, mimetype="application/json", headers=headers)


def _problem(problem: Problem) -> Response:
    return Response(problem.body(), status=problem.status, content_type=PROBLEM_CONTENT_TYPE,
                    headers=problem.headers)


_OUTCOME_PROBLEMS = {
    "conflict": ("Payment conflict", "the order is already paid with another provider_ref",
                 "/problems/payment-conflict"),
    "amount_mismatch": ("Amount mismatch", "amount_cents differs from the order's amount",
                        "/problems/amount-mismatch"),
    "unknown_order": ("Unknown order", "no such order", "/problems/unknown-order"),
}


class _Seeder:
    """Seeds the inventory once per process; retried on a request if Redis was down."""

    def __init__(self, domain: Domain, inventory: dict[str, int]) -> None:
        self.domain, self.inventory, self.done = domain, dict(inventory), False
        self._lock = threading.Lock()

    def ensure(self) -> None:
        if self.done:
            return
        with self._lock:
            if not self.done:
                self.domain.seed_inventory(self.inventory)
                self.done = True


def create_app(settings: Settings | None = None, *,
               idempotency_store: IdempotencyStore | None = None) -> Flask:
    settings = settings or Settings()
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    client = make_redis(settings.redis_url, timeout=settings.redis_timeout)
    domain = Domain(client, guard=not settings.unsafe("domain"),
                    amount_check=not settings.unsafe("domain-amount"),
                    tenant_check=not settings.unsafe("order-tenant"))
    seeder = _Seeder(domain, dict(settings.inventory))
    app.extensions["target_app"] = {"settings": settings, "domain": domain, "redis": client}
    try:
        seeder.ensure()
    except redis.RedisError as exc:
        log.warning("inventory not seeded at start (Redis unavailable: %s); will retry", exc)

    @app.before_request
    def _seed() -> None:
        seeder.ensure()

    @app.errorhandler(Problem)
    def _on_problem(problem: Problem):
        return _problem(problem)

    @app.errorhandler(HTTPException)
    def _on_http(exc: HTTPException):
        status = exc.code or 500
        allowed = getattr(exc, "valid_methods", None)
        return _problem(Problem(status, exc.name, exc.description or exc.name,
                                type_=f"/problems/http-{status}",
                                headers={"Allow": ", ".join(allowed)} if allowed else None))

    @app.errorhandler(redis.RedisError)
    @app.errorhandler(StoreUnavailable)
    def _on_redis(exc: Exception):
        log.warning("Redis unavailable: %s", exc)
        return _problem(Problem(503, "Service unavailable", "the data store cannot be reached",
                                type_="/problems/store-unavailable", headers={"Retry-After": "1"}))

    @app.errorhandler(Exception)
    def _on_unexpected(exc: Exception):
        log.exception("unexpected error")
        return _problem(Problem(500, "Internal error", "an unexpected error occurred",
                                type_="/problems/internal"))

    def body() -> bytes:
        """The request's complete body (400 when cut off, 413 when too large)."""
        environ = request.environ
        if _BODY_ENVIRON not in environ:
            try:
                environ[_BODY_ENVIRON] = validation.read_body(
                    environ, settings.max_body_bytes,
                    allow_incomplete=settings.unsafe("incomplete-body"))
            except validation.IncompleteBody:
                try:
                    domain.incr_counter("api_incomplete_bodies")
                except redis.RedisError:
                    pass  # the 400 matters more than the counter
                raise
        return environ[_BODY_ENVIRON]

    def require_internal() -> None:
        if not settings.internal_token:
            # Disabled: answer exactly like a route that does not exist.
            raise Problem(404, "Not Found", "The requested URL was not found on the server.",
                          type_="/problems/http-404")
        if not bearer_token_matches(request.headers.get("Authorization"), settings.internal_token):
            raise Problem(401, "Unauthorized", "internal endpoints need Authorization: Bearer <token>",
                          type_="/problems/unauthorized", headers={"WWW-Authenticate": "Bearer"})

    # health ------------------------------------------------------------------
    @app.get("/healthz")
    def healthz():
        client.ping()
        return _json({"status": "ok", "unsafe_disable": sorted(settings.unsafe_disable)})

    # orders --------------------------------------------------------------------
    @app.post("/api/v1/orders")
    def create_order():
        tenant = tenant_of(request.environ)
        document = validation.json_object(body())
        sku = validation.key_identifier(document, "sku")
        quantity = validation.positive_int(document, "quantity", maximum=MAX_QUANTITY)
        amount = validation.positive_int(document, "amount_cents", maximum=MAX_AMOUNT_CENTS)
        currency = validation.currency(document)
        # Only requests the middleware guards carry a context and get a recovery
        # point, so the `api` mutant (no middleware) really has no protection at all.
        context = request.environ.get(IDEMPOTENCY_CONTEXT_ENVIRON)
        if not isinstance(context, IdempotencyContext):
            context = None
        result = domain.create_order(tenant=tenant, idempotency_key=request.headers.get("Idempotency-Key"),
                                     sku=sku, quantity=quantity, amount_cents=amount, currency=currency,
                                     recovery=context)
        if result.outcome == "mismatch":
            # Refused like the API layer refuses a reused key, but not stored: the
            # original request's retry must still find its order.
            request.environ[RELEASE_ENVIRON] = True
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
        return _json(order, 201, headers={"Location": f"/api/v1/orders/{order['id']}"})

    @app.get("/api/v1/orders/<order_id>")
    def get_order(order_id: str):
        tenant = tenant_of(request.environ)
        validation.path_identifier(order_id, "order")
        order = domain.get_order(order_id, tenant=tenant)
        if order is None:
            raise Problem(404, "Unknown order", f"no order {order_id!r}", type_="/problems/unknown-order")
        return _json(order)

    def _pay(order_id: str, provider_ref: str, amount: int, source: str, source_id: str,
             tenant: str | None) -> Response:
        outcome = domain.mark_paid(order_id, provider_ref=provider_ref, amount_cents=amount,
                                   source=source, source_id=source_id, tenant=tenant)
        if outcome in _OUTCOME_PROBLEMS:
            title, detail, type_ = _OUTCOME_PROBLEMS[outcome]
            raise Problem(OUTCOME_STATUS[outcome], title, detail, type_=type_, order_id=order_id)
        order = domain.get_order(order_id)
        return _json({"order": order, "already_paid": outcome == "already_paid"}, OUTCOME_STATUS[outcome])

    @app.post("/api/v1/orders/<order_id>/payments")
    def pay_order(order_id: str):
        tenant = tenant_of(request.environ)
        validation.path_identifier(order_id, "order")
        document = validation.json_object(body())
        provider_ref = validation.identifier(document, "provider_ref")
        amount = validation.positive_int(document, "amount_cents", maximum=MAX_AMOUNT_CENTS)
        return _pay(order_id, provider_ref, amount, "api", request.headers.get("Idempotency-Key") or "",
                    tenant)

    # webhooks --------------------------------------------------------------------
    @app.post("/webhooks/payments")
    def webhook():
        raw = body()  # the whole body or 400/413: a signature is never checked over a prefix
        try:
            if not settings.unsafe("webhook-signature"):
                verify_signature(settings.webhook_secret, raw, request.headers.get(SIGNATURE_HEADER))
        except SignatureError as exc:
            try:
                domain.incr_counter("webhook_bad_signatures")
            except redis.RedisError:
                pass
            raise Problem(401, "Invalid signature", str(exc), type_="/problems/invalid-signature") from None
        document = validation.json_object(raw)
        event_id = validation.identifier(document, "event_id")
        if document.get("type") != "payment.succeeded":
            raise Problem(422, "Unsupported event", "type must be 'payment.succeeded'",
                          type_="/problems/unsupported-event", field="type")
        order_id = validation.key_identifier(document, "order_id")
        provider_ref = validation.identifier(document, "provider_ref")
        amount = validation.positive_int(document, "amount_cents", maximum=MAX_AMOUNT_CENTS)
        return _pay(order_id, provider_ref, amount, "webhook", event_id, None)

    # inventory ---------------------------------------------------------------------
    @app.get("/api/v1/inventory/<sku>")
    def get_inventory(sku: str):
        validation.path_identifier(sku, "sku")
        stock = domain.get_stock(sku)
        if stock is None:
            raise Problem(404, "Unknown SKU", f"no inventory for sku {sku!r}", type_="/problems/unknown-sku")
        return _json(stock)

    # internal ------------------------------------------------------------------------
    @app.put("/internal/v1/inventory/<sku>")
    def put_inventory(sku: str):
        require_internal()
        validation.path_identifier(sku, "sku")
        document = validation.json_object(body())
        available = validation.positive_int(document, "available", minimum=0, maximum=MAX_STOCK)
        return _json(domain.put_stock(sku, available))

    @app.get("/internal/v1/export")
    def export():
        require_internal()
        client.ping()  # fail with 503 before the stream starts, not in the middle
        lines = export_lines(client, dead_letter_stream=settings.dead_letter_stream)
        return Response(stream_with_context(lines), mimetype="application/x-ndjson")

    if not settings.unsafe("api"):
        store = idempotency_store or RedisStore(
            make_redis(settings.redis_url, timeout=settings.redis_timeout, decode=False))
        app.wsgi_app = IdempotencyMiddleware(
            app.wsgi_app, store=store, applies=requires_idempotency_key,
            ttl_seconds=settings.idempotency_ttl, lease_seconds=settings.inflight_lease,
            max_body_bytes=settings.max_body_bytes,
            ignore_fingerprint=settings.unsafe("api-fingerprint"),
            tenant_scoped=not settings.unsafe("api-tenant"),
            accept_incomplete=settings.unsafe("incomplete-body"))
    return app
