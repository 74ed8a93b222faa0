"""A payments API on aiohttp and PostgreSQL (psycopg 3), independent of the harness,
with an Idempotency-Key layer done right and documented buggy modes to probe.

    python examples/pg_payments_service.py --dsn postgresql://postgres@127.0.0.1:5432/payments \\
        --port 8090 --mode correct
    harness probe --config examples/pg_payments_service.yaml --upstream 127.0.0.1:8090

The port and the database also come from the environment (PORT, PAYMENTS_DSN), so a
probe that starts the service can hand it `{port}` and the address of a proxy in front
of the database.

API (every request needs `Authorization: Bearer <user>`, 401 without; errors are
application/problem+json):
- POST /payments {"amount_cents": int, "currency": str, "reference": str} with an
  `Idempotency-Key` header (400 without): 201 with the payment; the same key and body
  again: the stored answer, marked `Idempotent-Replayed: true`; the key with another
  body: 422; while the first request with the key is still running: 409 with
  Retry-After; the database failing: 503 (never stored, so the retry runs again).
- GET /payments/{id}: the payment, to its owner only (404 to anyone else).
- GET /payments?idempotency_key=K: the caller's payments made under K.
- GET /healthz.
- POST /orders/{order_id}/pay: with `--provider-url` (or STRIPE_API_BASE), the checkout's
  pay endpoint charging through the `stripe` SDK (examples/pg_checkout.py, `--pay-mode`).
- POST /webhooks/stripe: Stripe's `payment_intent` events (examples/pg_webhook_receiver.py,
  mounted here; its modes are `--webhook-mode`, separate from `--mode`).

Each request opens its own connection (no pool), so a fault on the database's link
hits requests one by one, as a flaky network does. The provider call (`--work-ms`,
30 ms) runs inside the payment's transaction.

Modes (`--mode`):
- `correct`: in one transaction, take a transaction-scoped advisory lock on (user,
  key) (`pg_try_advisory_xact_lock`: not taken means a request with this key is in
  flight: 409), look the key up (stored: 422 on another payload, else the replay),
  charge, insert the payment and the stored answer, commit. The effect and the answer
  commit together; a failure rolls both back and answers 503, stored nowhere.
- `unscoped-keys`: as correct, but keys are not scoped per user: user B sending a key
  user A used gets A's stored answer (A's payment) and B's own payment is never made.
- `store-after-commit`: the payment commits in one transaction and the answer is
  stored in a second one, after the payment event is published (`--publish-ms`, by
  default as long as `--work-ms`); a retry between the two finds no stored answer and
  charges again.
- `store-5xx`: as correct, but when the payment's transaction fails the 503 is stored
  under the key (on a fresh connection) and replayed to every retry.
- `store-5xx-unmarked`: store-5xx whose replays carry no `Idempotent-Replayed` mark
  (as many middlewares do): from outside, a replayed 503 looks like a new failure.
- `check-then-insert`: the key is looked up, and if unknown the payment is made and
  the answer stored, without a lock: two requests with one key that arrive within the
  provider call both miss the lookup and both charge.
- `effect-before-check`: the payment is inserted (committed) before the key and the
  payload are checked: a request without the key, or a key reused with another body,
  is refused (400, 422) after its charge was made.
- `split-commit`: the payment commits in one transaction and its answer in a second
  one right after it (one INSERT in autocommit: a round trip later), the key claimed in the process for the whole request (a request
  with the key meanwhile: 409; a lost database connection does not release it, the
  process's end does). Every error is handled: a failed payment transaction is looked
  up on a fresh connection (a lost COMMIT reply is a made payment) and answered 503
  only when it was not made, a failed store of the answer is tried again on fresh
  connections (some 10 s) before answering, and the answer is sent only once it is
  stored (no lost-reply hole). Its one hole is a crash
  between the two commits: the payment is made, no answer is kept, and the client's
  retry charges again. A random kill rarely lands in that gap; a crash at a step
  (`harness probe` with the plan `every-step`: after the payment's COMMIT, before the
  answer's INSERT) finds it (docs/probe.md, Crash at every step).
- `claim-not-released`: the key is claimed in a transaction of its own (committed,
  state in flight), then the payment and the answer in a second one; when that one
  fails the claim is never released, so every later request with the key is answered
  409 for ever (a stuck key).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from aiohttp import web

MODES = ("correct", "unscoped-keys", "store-after-commit", "store-5xx", "store-5xx-unmarked",
         "check-then-insert", "effect-before-check", "claim-not-released", "split-commit")
SCHEMA = """
CREATE TABLE IF NOT EXISTS payments (
    id text PRIMARY KEY, owner text NOT NULL, idempotency_key text, amount_cents integer NOT NULL,
    currency text NOT NULL, reference text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS idempotency_keys (
    scope text NOT NULL, key text NOT NULL, fingerprint text NOT NULL, status integer NOT NULL,
    body text NOT NULL, PRIMARY KEY (scope, key));
"""
PROBLEM = "application/problem+json"
CONNECT_TIMEOUT = 3
STORE_TRIES, STORE_PAUSE = 5, 0.15  # store-5xx: how hard the failure is kept
SPLIT_STORE_TRIES = 60  # split-commit: a made payment's answer is kept through some 10 s of outage


def problem(status: int, title: str, detail: str) -> web.Response:
    body = {"type": f"https://example.invalid/problems/{status}", "title": title, "status": status,
            "detail": detail}
    return web.Response(status=status, text=json.dumps(body), content_type=PROBLEM)


class Refusal(Exception):
    """An answer decided inside a transaction (409, 422, a replay), returned after it ends."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


def replay(status: int, body: str, *, mark: bool = True) -> web.Response:
    response = web.Response(status=status, text=body, content_type=PROBLEM if status >= 400 else "application/json")
    if mark:
        response.headers["Idempotent-Replayed"] = "true"
    return response


class PaymentsService:
    def __init__(self, *, mode: str, dsn: str, work_ms: int, publish_ms: int | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self.dsn = dsn
        self.work = work_ms / 1000.0
        self.publish = (work_ms if publish_ms is None else publish_ms) / 1000.0
        self.claimed: set[str] = set()  # split-commit: the keys of requests running in this process

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/payments", self.create)
        app.router.add_get("/payments/{id}", self.read)
        app.router.add_get("/payments", self.search)
        app.router.add_get("/healthz", self.health)
        app.on_startup.append(self._create_schema)
        return app

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self.dsn, connect_timeout=CONNECT_TIMEOUT)

    async def _create_schema(self, _: web.Application) -> None:
        async with await self._connect() as connection:
            await connection.execute(SCHEMA)

    # --- requests ---------------------------------------------------------------------
    @staticmethod
    def _user(request: web.Request) -> str | None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        return token.strip() or None if scheme.lower() == "bearer" else None

    async def _database(self, call: Callable[[], Awaitable[web.Response]]) -> web.Response:
        """Run `call`; a database failure is a 503 (the transaction rolled back)."""
        try:
            return await call()
        except Refusal as refusal:
            return refusal.response
        except (psycopg.Error, OSError) as error:
            return problem(503, "Database unavailable", f"{type(error).__name__}; retry later")

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "mode": self.mode})

    async def create(self, request: web.Request) -> web.Response:
        user = self._user(request)
        if user is None:
            return problem(401, "Unauthorized", "send Authorization: Bearer <user>")
        key = request.headers.get("Idempotency-Key")
        raw = await request.read()
        try:
            body = json.loads(raw)
            amount, currency, reference = body["amount_cents"], body["currency"], body["reference"]
            if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
                raise ValueError
            if not isinstance(currency, str) or not isinstance(reference, str):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            return problem(422, "Invalid payment", "amount_cents, currency and reference are required")
        payment = {"id": f"pay_{uuid.uuid4().hex[:16]}", "owner": user, "idempotency_key": key,
                   "amount_cents": amount, "currency": currency, "reference": reference}
        fingerprint = hashlib.sha256(raw).hexdigest()
        if self.mode == "effect-before-check":
            return await self._database(lambda: self._effect_before_check(user, key, fingerprint, payment))
        if not key:
            return problem(400, "Idempotency-Key required", "POST /payments needs an Idempotency-Key header")
        # The scope of a key: its user (keys of two users are two keys), but not in the bug.
        scope = "*" if self.mode == "unscoped-keys" else user
        if self.mode == "check-then-insert":
            return await self._database(lambda: self._check_then_insert(scope, key, fingerprint, payment))
        if self.mode == "claim-not-released":
            return await self._database(lambda: self._claim_first(scope, key, fingerprint, payment))
        if self.mode == "store-after-commit":
            return await self._database(lambda: self._store_after_commit(scope, key, fingerprint, payment))
        if self.mode == "split-commit":
            return await self._database(lambda: self._split_commit(scope, key, fingerprint, payment))
        response = await self._database(lambda: self._claimed(scope, key, fingerprint, payment))
        if self.mode in ("store-5xx", "store-5xx-unmarked") and response.status >= 500:
            await self._store_failure(scope, key, fingerprint, response)
        return response

    async def _charge(self) -> None:
        # The payment provider: slow, and the moment a race opens.
        await asyncio.sleep(self.work)

    async def _lookup(self, connection: psycopg.AsyncConnection[Any], scope: str, key: str, fingerprint: str) -> None:
        """Raise the answer a stored key gives (422 or the replay); return when the key is new."""
        cursor = await connection.execute(
            "SELECT fingerprint, status, body FROM idempotency_keys WHERE scope = %s AND key = %s", (scope, key))
        row = await cursor.fetchone()
        if row is None:
            return
        if row[0] != fingerprint:
            raise Refusal(problem(422, "Idempotency-Key reused", "the key was used with another payload"))
        raise Refusal(replay(row[1], row[2], mark=self.mode != "store-5xx-unmarked"))

    @staticmethod
    async def _insert_payment(connection: psycopg.AsyncConnection[Any], payment: dict[str, Any]) -> str:
        await connection.execute(
            "INSERT INTO payments (id, owner, idempotency_key, amount_cents, currency, reference) "
            "VALUES (%(id)s, %(owner)s, %(idempotency_key)s, %(amount_cents)s, %(currency)s, %(reference)s)",
            payment)
        return json.dumps({name: value for name, value in payment.items() if name != "owner"})

    @staticmethod
    async def _store(connection: psycopg.AsyncConnection[Any], scope: str, key: str, fingerprint: str,
                     status: int, text: str) -> None:
        await connection.execute(
            "INSERT INTO idempotency_keys (scope, key, fingerprint, status, body) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (scope, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, "
            "status = EXCLUDED.status, body = EXCLUDED.body", (scope, key, fingerprint, status, text))

    # --- correct (and unscoped-keys, store-5xx): claim, charge, commit together ----------
    async def _claimed(self, scope: str, key: str, fingerprint: str, payment: dict[str, Any]) -> web.Response:
        async with await self._connect() as connection, connection.transaction():
            cursor = await connection.execute("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))",
                                              (f"{scope}\x1f{key}",))
            locked = await cursor.fetchone()
            if not locked or not locked[0]:
                response = problem(409, "Request in progress", "a request with this key is still running")
                response.headers["Retry-After"] = "1"
                raise Refusal(response)
            await self._lookup(connection, scope, key, fingerprint)
            await self._charge()
            text = await self._insert_payment(connection, payment)
            await self._store(connection, scope, key, fingerprint, 201, text)
        return web.Response(status=201, text=text, content_type="application/json")

    async def _store_failure(self, scope: str, key: str, fingerprint: str, response: web.Response) -> None:
        """The store-5xx bug: the failure is kept as the key's answer (a few tries, as a
        response cache writes, so a short outage still ends with the 503 stored)."""
        assert isinstance(response.text, str)
        for _ in range(STORE_TRIES):
            try:
                async with await self._connect() as connection, connection.transaction():
                    await self._store(connection, scope, key, fingerprint, response.status, response.text)
                return
            except (psycopg.Error, OSError):
                await asyncio.sleep(STORE_PAUSE)  # the database is still away

    # --- store-after-commit: the answer in a second transaction ----------------------------
    async def _store_after_commit(self, scope: str, key: str, fingerprint: str,
                                  payment: dict[str, Any]) -> web.Response:
        async with await self._connect() as connection:
            async with connection.transaction():
                cursor = await connection.execute("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))",
                                                  (f"{scope}\x1f{key}",))
                locked = await cursor.fetchone()
                if not locked or not locked[0]:
                    raise Refusal(problem(409, "Request in progress", "a request with this key is still running"))
                await self._lookup(connection, scope, key, fingerprint)
                await self._charge()
                text = await self._insert_payment(connection, payment)
            await asyncio.sleep(self.publish)  # publish the payment event, then remember the answer
            async with connection.transaction():
                await self._store(connection, scope, key, fingerprint, 201, text)
        return web.Response(status=201, text=text, content_type="application/json")

    # --- split-commit: two transactions, careful everywhere but between them ---------------
    async def _split_commit(self, scope: str, key: str, fingerprint: str, payment: dict[str, Any]) -> web.Response:
        claim = f"{scope}\x1f{key}"
        if claim in self.claimed:
            response = problem(409, "Request in progress", "a request with this key is still running")
            response.headers["Retry-After"] = "1"
            raise Refusal(response)
        self.claimed.add(claim)
        text = json.dumps({name: value for name, value in payment.items() if name != "owner"})
        committed = stored = False
        try:
            # Autocommit: the `transaction()` is a BEGIN ... COMMIT of its own (not a savepoint).
            async with await psycopg.AsyncConnection.connect(self.dsn, connect_timeout=CONNECT_TIMEOUT,
                                                             autocommit=True) as connection:
                async with connection.transaction():
                    await self._lookup(connection, scope, key, fingerprint)
                    await self._charge()
                    await self._insert_payment(connection, payment)
                committed = True
                # One statement, in autocommit its own transaction: the second commit.
                await self._store(connection, scope, key, fingerprint, 201, text)
                stored = True
        except (psycopg.Error, OSError):
            # A lost COMMIT reply is no failed payment: look, then keep the made payment's answer.
            if not committed and not await self._payment_made(payment["id"]):
                raise
            if not stored and not await self._store_again(scope, key, fingerprint, text):
                raise
        finally:
            self.claimed.discard(claim)
        return web.Response(status=201, text=text, content_type="application/json")

    async def _payment_made(self, payment_id: str) -> bool:
        """Whether a payment whose transaction failed was committed after all (its
        COMMIT's reply lost), asked on fresh connections; False if never answered."""
        for _ in range(SPLIT_STORE_TRIES):
            try:
                async with await self._connect() as connection:
                    cursor = await connection.execute("SELECT 1 FROM payments WHERE id = %s", (payment_id,))
                    return await cursor.fetchone() is not None
            except (psycopg.Error, OSError):
                await asyncio.sleep(STORE_PAUSE)
        return False

    async def _store_again(self, scope: str, key: str, fingerprint: str, text: str) -> bool:
        """Store a made payment's answer on fresh connections (the first one failed),
        the key still claimed: a retry meanwhile is answered 409."""
        for _ in range(SPLIT_STORE_TRIES):
            try:
                async with await self._connect() as connection, connection.transaction():
                    await self._store(connection, scope, key, fingerprint, 201, text)
                return True
            except (psycopg.Error, OSError):
                await asyncio.sleep(STORE_PAUSE)
        return False

    # --- claim-not-released: the claim commits alone, and a failure leaves it --------------
    async def _claim_first(self, scope: str, key: str, fingerprint: str, payment: dict[str, Any]) -> web.Response:
        async with await self._connect() as connection:
            async with connection.transaction():
                cursor = await connection.execute(
                    "INSERT INTO idempotency_keys (scope, key, fingerprint, status, body) "
                    "VALUES (%s, %s, %s, 0, '') ON CONFLICT DO NOTHING RETURNING key", (scope, key, fingerprint))
                claimed = await cursor.fetchone()
            if claimed is None:
                async with connection.transaction():
                    cursor = await connection.execute(
                        "SELECT fingerprint, status, body FROM idempotency_keys WHERE scope = %s AND key = %s",
                        (scope, key))
                    row = await cursor.fetchone()
                if row is not None and row[0] != fingerprint:
                    return problem(422, "Idempotency-Key reused", "the key was used with another payload")
                if row is None or row[1] == 0:
                    return problem(409, "Request in progress", "a request with this key is still running")
                return replay(row[1], row[2])
            async with connection.transaction():
                await self._charge()
                text = await self._insert_payment(connection, payment)
                await self._store(connection, scope, key, fingerprint, 201, text)
        return web.Response(status=201, text=text, content_type="application/json")

    # --- check-then-insert: no lock --------------------------------------------------------
    async def _check_then_insert(self, scope: str, key: str, fingerprint: str,
                                 payment: dict[str, Any]) -> web.Response:
        async with await self._connect() as connection, connection.transaction():
            await self._lookup(connection, scope, key, fingerprint)
            await self._charge()
            text = await self._insert_payment(connection, payment)
            await self._store(connection, scope, key, fingerprint, 201, text)
        return web.Response(status=201, text=text, content_type="application/json")

    # --- effect-before-check: the charge, then the checks ----------------------------------
    async def _effect_before_check(self, user: str, key: str | None, fingerprint: str,
                                   payment: dict[str, Any]) -> web.Response:
        async with await self._connect() as connection:
            async with connection.transaction():
                await self._charge()
                text = await self._insert_payment(connection, payment)
            if not key:
                return problem(400, "Idempotency-Key required", "POST /payments needs an Idempotency-Key header")
            async with connection.transaction():
                cursor = await connection.execute("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))",
                                                  (f"{user}\x1f{key}",))
                locked = await cursor.fetchone()
                if not locked or not locked[0]:
                    raise Refusal(problem(409, "Request in progress", "a request with this key is still running"))
                await self._lookup(connection, user, key, fingerprint)
                await self._store(connection, user, key, fingerprint, 201, text)
        return web.Response(status=201, text=text, content_type="application/json")

    # --- reads: a user sees only their own payments ---------------------------------------
    async def read(self, request: web.Request) -> web.Response:
        user = self._user(request)
        if user is None:
            return problem(401, "Unauthorized", "send Authorization: Bearer <user>")

        async def fetch() -> web.Response:
            async with await self._connect() as connection:
                cursor = await connection.execute(
                    "SELECT id, idempotency_key, amount_cents, currency, reference FROM payments "
                    "WHERE id = %s AND owner = %s", (request.match_info["id"], user))
                row = await cursor.fetchone()
            if row is None:
                return problem(404, "Not found", "no such payment")
            names = ("id", "idempotency_key", "amount_cents", "currency", "reference")
            return web.json_response(dict(zip(names, row, strict=True)))

        return await self._database(fetch)

    async def search(self, request: web.Request) -> web.Response:
        user = self._user(request)
        if user is None:
            return problem(401, "Unauthorized", "send Authorization: Bearer <user>")

        async def fetch() -> web.Response:
            async with await self._connect() as connection:
                cursor = await connection.execute(
                    "SELECT id FROM payments WHERE idempotency_key = %s AND owner = %s ORDER BY created_at",
                    (request.query.get("idempotency_key", ""), user))
                rows = await cursor.fetchall()
            return web.json_response({"items": [{"id": row[0]} for row in rows]})

        return await self._database(fetch)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mode", choices=MODES, default="correct")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8090")))
    parser.add_argument("--dsn", default=os.environ.get("PAYMENTS_DSN", ""),
                        help="postgresql://user@host:port/db (default: $PAYMENTS_DSN)")
    parser.add_argument("--work-ms", type=int, default=30, help="how long the provider call takes")
    parser.add_argument("--publish-ms", type=int, default=None,
                        help="store-after-commit: how long publishing the payment event takes (default: --work-ms)")
    # The Stripe webhook receiver beside the API (examples/pg_webhook_receiver.py, next to this file).
    from pg_webhook_receiver import WEBHOOK_MODES, WebhookReceiver

    parser.add_argument("--webhook-mode", choices=WEBHOOK_MODES, default="correct")
    parser.add_argument("--webhook-secret", default=os.environ.get("WEBHOOK_SECRET", "whsec_test_123"))
    parser.add_argument("--webhook-tolerance", type=int, default=300, help="seconds, both ways")
    parser.add_argument("--webhook-work-ms", type=int, default=30, help="how long processing an event takes")
    # The checkout's pay endpoint (examples/pg_checkout.py, next to this file), through the stripe SDK.
    from pg_checkout import PAY_MODES, Checkout

    parser.add_argument("--pay-mode", choices=PAY_MODES, default="correct")
    parser.add_argument("--provider-url", default=os.environ.get("STRIPE_API_BASE", ""),
                        help="the payment provider's API base (default: $STRIPE_API_BASE); none: no pay endpoint")
    args = parser.parse_args(argv)
    if not args.dsn:
        parser.error("--dsn (or PAYMENTS_DSN) is required")
    service = PaymentsService(mode=args.mode, dsn=args.dsn, work_ms=args.work_ms, publish_ms=args.publish_ms)
    app = service.app()
    WebhookReceiver(mode=args.webhook_mode, dsn=args.dsn, secret=args.webhook_secret,
                    tolerance=args.webhook_tolerance, work_ms=args.webhook_work_ms).mount(app)
    if args.provider_url:  # POST /orders/{order_id}/pay
        Checkout(dsn=args.dsn, provider_url=args.provider_url, pay_mode=args.pay_mode,
                 api_key=os.environ.get("STRIPE_API_KEY", "sk_test_probe")).mount(app)
    web.run_app(app, host=args.host, port=args.port, print=lambda *_: print(
        f"payments service ({args.mode}) on http://{args.host}:{args.port}", flush=True))


if __name__ == "__main__":
    main()
