"""Payment-provider webhooks: `POST /webhooks/payments`.

The whole body is read first (400 when cut off, 413 when too large, chunked or
not), so a signature is never checked over a prefix. A missing, malformed, stale
or wrong signature is 401 (counted as `webhook_bad_signatures`) unless the
`webhook-signature` control is on. Only `payment.succeeded` is accepted (422
otherwise); the payment goes through the domain guard tenant-less (source
`webhook`, source id the event id). Crash points: `webhook.after_verify` once the
signature is verified, `webhook.after_apply` once the payment is applied
(`drop-reply` there: the connection closes without the answer).
"""

from __future__ import annotations

import redis
from flask import Blueprint, Response, request

from target_app import validation
from target_app.crashpoints import drop_reply
from target_app.domain import MAX_AMOUNT_CENTS
from target_app.errors import Problem
from target_app.routes.common import pay, request_body
from target_app.services import services
from target_app.webhooks import SIGNATURE_HEADER, SignatureError, verify_signature

bp = Blueprint("webhooks", __name__, url_prefix="/webhooks")


@bp.post("/payments")
def payment_webhook() -> Response:
    app = services()
    raw = request_body()
    try:
        if not app.settings.unsafe("webhook-signature"):
            verify_signature(app.settings.webhook_secret, raw, request.headers.get(SIGNATURE_HEADER))
    except SignatureError as exc:
        try:
            app.domain.incr_counter("webhook_bad_signatures")
        except redis.RedisError:
            pass  # the 401 matters more than the counter
        raise Problem(401, "Invalid signature", str(exc), type_="/problems/invalid-signature") from None
    app.crash_points.reach("webhook.after_verify")
    document = validation.json_object(raw)
    event_id = validation.identifier(document, "event_id")
    if document.get("type") != "payment.succeeded":
        raise Problem(422, "Unsupported event", "type must be 'payment.succeeded'",
                      type_="/problems/unsupported-event", field="type")
    order_id = validation.key_identifier(document, "order_id")
    provider_ref = validation.identifier(document, "provider_ref")
    amount = validation.positive_int(document, "amount_cents", maximum=MAX_AMOUNT_CENTS)
    response = pay(order_id, provider_ref=provider_ref, amount_cents=amount, source="webhook",
                   source_id=event_id, tenant=None)
    if app.crash_points.reach("webhook.after_apply"):
        drop_reply(request.environ)
    return response
