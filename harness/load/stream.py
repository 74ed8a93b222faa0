"""Recorded publishing of payment messages to the app's Redis stream.

The fields are the consumer's contract (DESIGN.md): `message_id`, `order_id`,
`provider_ref`, `amount_cents`. `ok` means XADD returned an entry id; any error
means the outcome is unknown (`info`), because the entry may have been appended
before the connection broke.
"""

from __future__ import annotations

import time
from typing import Any

import redis
from locust.event import Events

from harness.history import Client


def publish(
    client: Client,
    connection: redis.Redis,
    stream: str,
    events: Events,
    *,
    message_id: str,
    order_id: str,
    provider_ref: str,
    amount_cents: int,
    expect: str | None = None,
) -> str | None:
    """XADD one payment message and record it; the entry id, or None when unknown."""
    fields: dict[str, Any] = {
        "message_id": message_id,
        "order_id": order_id,
        "provider_ref": provider_ref,
        "amount_cents": amount_cents,
    }
    operation = client.invoke("publish", expect=expect, **fields)
    started = time.perf_counter()
    exception: Exception | None = None
    entry_id: str | None = None
    try:
        raw = connection.xadd(stream, {k: str(v) for k, v in fields.items()})
        entry_id = raw.decode() if isinstance(raw, bytes) else str(raw)
    except Exception as error:  # noqa: BLE001 - any failure leaves the XADD outcome unknown
        exception = error
        operation.info(status=None, body_digest=None, replayed=False,
                       error=f"{type(error).__name__}: {error}"[:300])
    else:
        operation.ok(status=None, body_digest=None, replayed=False, error=None)
    events.request.fire(
        request_type="XADD",
        name="publish" if expect is None else f"publish [{expect}]",
        response_time=(time.perf_counter() - started) * 1000.0,
        response_length=0,
        exception=exception,
        context={},
    )
    return entry_id
