"""Small request helpers shared by the target app's tests."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from target_app.settings import Settings
from target_app.webhooks import sign_webhook

ROOT = Path(__file__).resolve().parents[2]

SECRET = "test-webhook-secret"
INTERNAL_TOKEN = "test-internal-token"
# Authorization for the internal endpoints (export, stock changes).
INTERNAL = {"Authorization": f"Bearer {INTERNAL_TOKEN}"}
ORDER = {"sku": "sku-1", "quantity": 1, "amount_cents": 1000, "currency": "EUR"}


def create_order(client, *, key: str | None = None, **fields) -> dict:
    response = client.post("/api/v1/orders", json={**ORDER, **fields},
                           headers={"Idempotency-Key": key or uuid.uuid4().hex})
    assert response.status_code == 201, response.data
    return response.json


def webhook_body(order_id: str, provider_ref: str, amount_cents: int = 1000, event_id: str = "evt_1") -> bytes:
    return json.dumps({"event_id": event_id, "type": "payment.succeeded", "order_id": order_id,
                       "provider_ref": provider_ref, "amount_cents": amount_cents}).encode()


def signed_headers(body: bytes, *, secret: str = SECRET, at: int | None = None) -> dict[str, str]:
    return {"Webhook-Signature": sign_webhook(secret, body, int(time.time()) if at is None else at),
            "Content-Type": "application/json"}


def settings_env(settings: Settings) -> dict[str, str]:
    return {
        "TARGET_APP_REDIS_URL": settings.redis_url,
        "TARGET_APP_WEBHOOK_SECRET": settings.webhook_secret,
        "TARGET_APP_IDEMPOTENCY_TTL": str(settings.idempotency_ttl),
        "TARGET_APP_INFLIGHT_LEASE": str(settings.inflight_lease),
        "TARGET_APP_UNSAFE_DISABLE": ",".join(sorted(settings.unsafe_disable)),
        "TARGET_APP_INVENTORY": ",".join(f"{k}={v}" for k, v in settings.inventory.items()),
        "TARGET_APP_STREAM": settings.stream,
        "TARGET_APP_GROUP": settings.group,
        "TARGET_APP_INTERNAL_TOKEN": settings.internal_token,
        "TARGET_APP_CRASH_POINTS_DIR": settings.crash_points_dir,
    }
