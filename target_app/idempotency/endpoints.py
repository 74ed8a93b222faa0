"""Which endpoints the Idempotency-Key layer guards: the two POSTs that create
something (an order, a payment). Every other request passes the layer untouched.
"""

from __future__ import annotations

import re

ORDERS_PATH = "/api/v1/orders"
# fullmatch: a trailing newline or extra segment is another path, not a payment.
_PAYMENTS_PATH = re.compile(r"/api/v1/orders/[^/]+/payments")


def requires_idempotency_key(method: str, path: str) -> bool:
    """True for `POST /api/v1/orders` and `POST /api/v1/orders/<id>/payments`."""
    return method == "POST" and (path == ORDERS_PATH or _PAYMENTS_PATH.fullmatch(path) is not None)
