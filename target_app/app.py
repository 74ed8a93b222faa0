"""The Flask application factory: `create_app(settings)` → one app, no globals.

It builds the app's services (settings, Redis client, domain, inventory seeder;
services.py; the process's crash points, crashpoints.py), registers one blueprint per resource (routes/) and the problem+json
error handlers, and, unless the `api` control is on, wraps the app in the
Idempotency-Key layer (idempotency/). Building an app connects to nothing but a
best-effort inventory seed; a Redis outage then is retried on the next request.
`idempotency_store` replaces the layer's RedisStore (tests).
"""

from __future__ import annotations

import logging
import time

import redis
from flask import Flask

from target_app.crashpoints import CrashPoints
from target_app.domain import Domain
from target_app.idempotency import IdempotencyMiddleware, IdempotencyStore, RedisStore
from target_app.redis_client import make_redis
from target_app.routes import health, internal, inventory, orders, webhooks
from target_app.routes.problems import register_error_handlers
from target_app.services import InventorySeeder, Services, install, services
from target_app.settings import Settings

log = logging.getLogger(__name__)


def _seed_inventory() -> None:
    services().seeder.ensure()


def create_app(settings: Settings | None = None, *,
               idempotency_store: IdempotencyStore | None = None) -> Flask:
    settings = settings or Settings()
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    client = make_redis(settings.redis_url, timeout=settings.redis_timeout)
    crash_points = CrashPoints.for_settings(settings, "app")
    domain = Domain(client, guard=not settings.unsafe("domain"),
                    amount_check=not settings.unsafe("domain-amount"),
                    tenant_check=not settings.unsafe("order-tenant"),
                    atomic_payment=not settings.unsafe("domain-nonatomic"),
                    atomic_recovery=not settings.unsafe("recovery-nonatomic"),
                    crash_points=crash_points)
    built = Services(settings=settings, redis=client, domain=domain,
                     seeder=InventorySeeder(domain, settings.inventory), crash_points=crash_points)
    install(app, built)
    try:
        built.seeder.ensure()
    except redis.RedisError as exc:
        log.warning("inventory not seeded at start (Redis unavailable: %s); will retry", exc)
    app.before_request(_seed_inventory)
    register_error_handlers(app)
    for blueprint in (health.bp, orders.bp, inventory.bp, webhooks.bp, internal.bp):
        app.register_blueprint(blueprint)

    if not settings.unsafe("api"):
        store = idempotency_store or RedisStore(
            make_redis(settings.redis_url, timeout=settings.redis_timeout, decode=False),
            lease_clock=time.time if settings.unsafe("lease-wall-clock") else None)
        # Werkzeug's documented way to add WSGI middleware to a Flask app.
        app.wsgi_app = IdempotencyMiddleware(  # type: ignore[method-assign]
            app.wsgi_app, store=store,
            ttl_seconds=settings.idempotency_ttl, lease_seconds=settings.inflight_lease,
            max_body_bytes=settings.max_body_bytes,
            ignore_fingerprint=settings.unsafe("api-fingerprint"),
            tenant_scoped=not settings.unsafe("api-tenant"),
            accept_incomplete=settings.unsafe("incomplete-body"), crash_points=crash_points)
    return app
