"""Recorded publishing of payment messages to the app's Redis stream.

A message's fields are the app consumer's contract (`harness.names`: `MESSAGE_ID`,
`ORDER_ID`, `PROVIDER_REF`, `AMOUNT_CENTS`, every value sent as text;
docs/target-app.md). `ok` means XADD returned an entry id; any error means the
outcome is unknown (`info`), because the entry may have been appended before the
connection broke.
"""

from __future__ import annotations

from typing import Any

import redis
from locust.event import Events

from harness.history import Client
from harness.load.recording import Completion, recorded_operation
from harness.names import AMOUNT_CENTS, MESSAGE_ID, ORDER_ID, PROVIDER_REF

PUBLISH = "publish"


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
        MESSAGE_ID: message_id,
        ORDER_ID: order_id,
        PROVIDER_REF: provider_ref,
        AMOUNT_CENTS: amount_cents,
    }
    unanswered = {"status": None, "body_digest": None, "replayed": False}

    def call() -> Completion[str]:
        raw = connection.xadd(stream, {name: str(value) for name, value in fields.items()})
        entry_id = raw.decode() if isinstance(raw, bytes) else str(raw)
        return Completion("ok", entry_id, {**unanswered, "error": None})

    recorded = recorded_operation(
        client, events, call, op=PUBLISH, request_type="XADD",
        name=PUBLISH if expect is None else f"{PUBLISH} [{expect}]", expect=expect,
        fields=fields, unanswered=unanswered,
    )
    return recorded.value
