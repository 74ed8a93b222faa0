"""A Stripe webhook receiver on PostgreSQL (psycopg 3), mounted by the payments example
(examples/pg_payments_service.py), independent of the harness, with documented buggy
modes to probe.

    python examples/pg_payments_service.py --dsn postgresql://postgres@127.0.0.1:5432/payments \\
        --port 8090 --webhook-mode correct --webhook-secret whsec_test_123
    harness probe --config examples/pg_webhook_receiver.yaml --upstream 127.0.0.1:8090

POST /webhooks/stripe takes Stripe's events: `payment_intent.succeeded` marks the
payment intent paid and books the payment (one row of `webhook_payments`: the effect,
which must exist once per intent), `payment_intent.created` records the intent as
created unless it is known already (so a `created` arriving after its `succeeded`
changes nothing); other types are acknowledged and ignored. Answers: 200 (applied, or
a duplicate), 400 for a delivery whose signature does not verify, 503 when the database
fails (nothing committed: the provider's retry applies it), all within milliseconds
(`--webhook-work-ms`, 30 ms of processing inside the transaction).

The signature (`Stripe-Signature: t=<unix>,v1=<hex>`): the hex HMAC-SHA256 of
`"<t>.<raw body>"` keyed with the whole secret, compared in constant time with every
`v1` entry (any other label, such as the test-mode `v0`, is ignored), over the body's
bytes exactly as received, then the timestamp within `--webhook-tolerance` (300 s)
of now, in both directions.

Modes (`--webhook-mode`, separate from the API's `--mode`):
- `correct`: in one transaction, insert the event id (`webhook_events`, primary key;
  `ON CONFLICT DO NOTHING`: a concurrent copy waits for the first to commit, then finds
  it) and the object with the event type (`webhook_objects`, primary key: Stripe
  sometimes sends two events for one change), then apply, then commit. A duplicate of
  either is answered 200 and changes nothing.
- `event-id-check-then-insert`: the event id and the object are looked up first, and
  recorded after the processing, without a lock or a unique insert deciding: two
  copies of one event that arrive together both miss the lookup and both apply.
- `event-id-only`: dedupe by event id only: a second event for the same intent
  (a new event id) books the payment again.
- `no-tolerance`: the signature is checked but not the timestamp: a delivery signed
  long ago (a replay) or in the future is applied.
- `past-only-tolerance`: the timestamp checked for age only, as stripe-python's
  `Webhook.construct_event` checks it: one signed too far in the future is applied.
  Not a bug by Stripe's own verifier: the probe passes it with advice.
- `duplicate-500`: the event id and the object are inserted without `ON CONFLICT`, and
  the unique violation of a duplicate is answered 500 (as dj-stripe #1239 did): nothing
  applies twice, but every duplicate, and every retry of it, fails, so a provider
  retries it for days and then disables the endpoint.
- `created-overwrites`: a `payment_intent.created` overwrites the intent's status, so one
  that arrives after its `succeeded` (out of order) makes a paid intent `created` again:
  the payment is booked but the intent no longer paid (the effect the probe's oracle
  counts joins the two).
- `slow-handler`: correct, but the processing takes 1 s before the answer (a slow
  handler instead of a queue): the provider gives up waiting and retries every first
  delivery (a duplicate is found before the processing and answered at once).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from typing import Any

import psycopg
from aiohttp import web

WEBHOOK_MODES = ("correct", "event-id-check-then-insert", "event-id-only", "no-tolerance", "past-only-tolerance",
                 "duplicate-500", "created-overwrites", "slow-handler")
SLOW_HANDLER = 1.0  # seconds of processing in slow-handler: longer than a probe's provider waits
PATH = "/webhooks/stripe"
SCHEMA = """
CREATE TABLE IF NOT EXISTS webhook_events (
    event_id text PRIMARY KEY, event_type text NOT NULL, received_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS webhook_objects (
    object_id text NOT NULL, event_type text NOT NULL, PRIMARY KEY (object_id, event_type));
CREATE TABLE IF NOT EXISTS payment_intents (
    id text PRIMARY KEY, status text NOT NULL, amount integer NOT NULL);
CREATE TABLE IF NOT EXISTS webhook_payments (
    id bigserial PRIMARY KEY, intent_id text NOT NULL, event_id text NOT NULL, amount integer NOT NULL,
    booked_at timestamptz NOT NULL DEFAULT now());
"""
CONNECT_TIMEOUT = 3


class BadSignature(Exception):
    """The delivery's Stripe-Signature does not verify (the message says why)."""


def verify(body: bytes, header: str, secret: str, *, tolerance: int, now: float | None = None,
           ahead: bool = True) -> None:
    """Raise BadSignature unless `header` signs `body` with `secret` within `tolerance` (0: not checked),
    in both directions, or (`ahead=False`) only against age."""
    timestamp: str | None = None
    signatures = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t":
            timestamp = value
        elif name == "v1":
            signatures.append(value)
    if timestamp is None or not timestamp.isdigit():
        raise BadSignature("no t=<unix seconds>")
    if not signatures:
        raise BadSignature("no v1 signature")
    expected = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(expected, signature) for signature in signatures):
        raise BadSignature("no v1 signature matches the body")
    age = (time.time() if now is None else now) - int(timestamp)
    if tolerance > 0 and (age if not ahead else abs(age)) > tolerance:
        raise BadSignature(f"timestamp outside the tolerance of {tolerance}s")


def answer(status: int, **body: Any) -> web.Response:
    return web.json_response(body, status=status)


class WebhookReceiver:
    def __init__(self, *, mode: str, dsn: str, secret: str, tolerance: int = 300, work_ms: int = 30) -> None:
        if mode not in WEBHOOK_MODES:
            raise ValueError(f"webhook mode must be one of {', '.join(WEBHOOK_MODES)}, not {mode!r}")
        self.mode = mode
        self.dsn = dsn
        self.secret = secret
        self.tolerance = 0 if mode == "no-tolerance" else tolerance
        self.ahead = mode != "past-only-tolerance"
        self.work = max(work_ms / 1000.0, SLOW_HANDLER) if mode == "slow-handler" else work_ms / 1000.0

    def mount(self, app: web.Application) -> None:
        """Add POST /webhooks/stripe to `app`, and its tables to the app's startup."""
        app.router.add_post(PATH, self.receive)
        app.on_startup.append(self._create_schema)

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self.dsn, connect_timeout=CONNECT_TIMEOUT)

    async def _create_schema(self, _: web.Application) -> None:
        async with await self._connect() as connection:
            await connection.execute(SCHEMA)

    async def receive(self, request: web.Request) -> web.Response:
        raw = await request.read()  # the bytes as sent: the signature covers exactly these
        try:
            verify(raw, request.headers.get("Stripe-Signature", ""), self.secret, tolerance=self.tolerance,
                   ahead=self.ahead)
            event = json.loads(raw)
            event_id, event_type = str(event["id"]), str(event["type"])
            intent = event["data"]["object"]
            intent_id, amount = str(intent["id"]), int(intent.get("amount") or 0)
        except BadSignature as error:
            return answer(400, error=f"signature: {error}")
        except (ValueError, KeyError, TypeError):
            return answer(400, error="not a Stripe event")
        if event_type not in ("payment_intent.succeeded", "payment_intent.created"):
            return answer(200, ignored=event_type)
        try:
            if self.mode == "event-id-check-then-insert":
                return await self._check_then_insert(event_id, event_type, intent_id, amount)
            return await self._claimed(event_id, event_type, intent_id, amount)
        except psycopg.errors.UniqueViolation:
            # duplicate-500 only (every other mode inserts ON CONFLICT DO NOTHING).
            return answer(500, error="duplicate key value violates unique constraint")
        except (psycopg.Error, OSError) as error:
            return answer(503, error=f"database unavailable: {type(error).__name__}")

    async def _claimed(self, event_id: str, event_type: str, intent_id: str, amount: int) -> web.Response:
        """correct, event-id-only, no-tolerance, duplicate-500: unique inserts decide, in the effect's transaction."""
        conflict = "" if self.mode == "duplicate-500" else " ON CONFLICT DO NOTHING"
        async with await self._connect() as connection, connection.transaction():
            cursor = await connection.execute(
                f"INSERT INTO webhook_events (event_id, event_type) VALUES (%s, %s){conflict} RETURNING event_id",
                (event_id, event_type))
            if await cursor.fetchone() is None:
                return answer(200, duplicate="event")
            if self.mode != "event-id-only":
                cursor = await connection.execute(
                    f"INSERT INTO webhook_objects (object_id, event_type) VALUES (%s, %s){conflict} "
                    "RETURNING object_id", (intent_id, event_type))
                if await cursor.fetchone() is None:
                    return answer(200, duplicate="object")  # the event id is recorded with the commit
            await self._apply(connection, event_id, event_type, intent_id, amount)
        return answer(200, applied=event_id)

    async def _check_then_insert(self, event_id: str, event_type: str, intent_id: str, amount: int) -> web.Response:
        async with await self._connect() as connection, connection.transaction():
            cursor = await connection.execute("SELECT 1 FROM webhook_events WHERE event_id = %s", (event_id,))
            if await cursor.fetchone() is not None:
                return answer(200, duplicate="event")
            cursor = await connection.execute(
                "SELECT 1 FROM webhook_objects WHERE object_id = %s AND event_type = %s", (intent_id, event_type))
            if await cursor.fetchone() is not None:
                return answer(200, duplicate="object")
            await self._apply(connection, event_id, event_type, intent_id, amount)
            await connection.execute("INSERT INTO webhook_events (event_id, event_type) VALUES (%s, %s) "
                                     "ON CONFLICT DO NOTHING", (event_id, event_type))
            await connection.execute("INSERT INTO webhook_objects (object_id, event_type) VALUES (%s, %s) "
                                     "ON CONFLICT DO NOTHING", (intent_id, event_type))
        return answer(200, applied=event_id)

    async def _apply(self, connection: psycopg.AsyncConnection[Any], event_id: str, event_type: str,
                     intent_id: str, amount: int) -> None:
        await asyncio.sleep(self.work)  # the processing: where copies that arrive together overlap
        if event_type == "payment_intent.created":
            # Out-of-order tolerant: a `created` after its `succeeded` leaves the intent paid.
            overwrite = "UPDATE SET status = 'created'" if self.mode == "created-overwrites" else "NOTHING"
            await connection.execute("INSERT INTO payment_intents (id, status, amount) VALUES (%s, 'created', %s) "
                                     f"ON CONFLICT (id) DO {overwrite}", (intent_id, amount))
            return
        await connection.execute("INSERT INTO payment_intents (id, status, amount) VALUES (%s, 'succeeded', %s) "
                                 "ON CONFLICT (id) DO UPDATE SET status = 'succeeded'", (intent_id, amount))
        await connection.execute("INSERT INTO webhook_payments (intent_id, event_id, amount) VALUES (%s, %s, %s)",
                                 (intent_id, event_id, amount))
