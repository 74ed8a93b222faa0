"""The HTTP routes, one blueprint per resource, registered by `create_app`.

- orders.py: `POST /api/v1/orders`, `GET /api/v1/orders/<id>`,
  `POST /api/v1/orders/<id>/payments` (the two POSTs are guarded by the
  Idempotency-Key layer);
- inventory.py: `GET /api/v1/inventory/<sku>`;
- webhooks.py: `POST /webhooks/payments` (signed);
- internal.py: `PUT /internal/v1/inventory/<sku>`, `GET /internal/v1/export`
  (bearer token);
- health.py: `GET /healthz`;
- problems.py: the error handlers (every error is problem+json);
- common.py: what several blueprints share (whole bodies, JSON answers, payments).
"""
