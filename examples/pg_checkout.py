"""A checkout's pay endpoint on aiohttp and PostgreSQL that charges through the official
`stripe` SDK, with a correct mode and named buggy modes to probe. Independent of the
harness; mounted by examples/pg_payments_service.py (`--provider-url`), or run alone:

    python examples/pg_checkout.py --dsn postgresql://postgres@127.0.0.1:5432/shop \\
        --port 8091 --provider-url http://127.0.0.1:12111 --pay-mode correct

The provider's base URL also comes from STRIPE_API_BASE and the secret key from
STRIPE_API_KEY (default sk_test_probe), so a probe can hand it `{provider.url}`.

POST /orders/{order_id}/pay {"amount": int, "currency": "eur", "payment_method": "pm_card_visa"}:
the order's natural key is in the path, so no Idempotency-Key header is needed. 200 with
{"order_id", "status": "paid", "payment_intent", "charge", "amount", "currency"} (the
same body for every retry of a paid order); 402 when the card is declined (stored: a
retry gets it again); 422 for a bad body or an order already made with another amount;
409 with Retry-After while another request pays the order; 503 when the provider or the
database failed and the outcome is unknown (retry).

Pay modes (`--pay-mode`); the SDK's own retries are set explicitly (`max_network_retries`):
- `correct`: the order row first (pending), then one PaymentIntent created and confirmed
  with a stable idempotency key `pay-<order_id>` and metadata[order_id]; a retry of a
  pending order, or any provider error, first looks the order's charge up by metadata
  (search), so a reply lost after the charge (a reset, a timeout, a 500 after the
  charge, even one Stripe stored under the key) is found, recorded and answered, never
  charged again. SDK retries: 1 (they keep the key).
- `no-key-own-retry`: no idempotency key, the SDK's retries off, and a retry loop of its
  own (3 attempts) on errors and timeouts: stripe-python gives each fresh call a new key
  of its own, so a charge whose reply was lost is made again.
- `fresh-key-per-attempt`: a new key `pay-<order_id>-<uuid>` for every request the
  service handles (the SDK's 1 retry keeps it); no lookup: a client's retry after a lost
  reply charges again.
- `record-after-second-transaction`: an attempt row commits first and its id is the
  charge's key (`pay-<attempt id>`); the charge is recorded on the order in a second
  transaction after the receipt is sent (`--work-ms`). A retry between the two, or after
  an error between them, finds the order unpaid, makes a new attempt and charges again.
- `ack-on-provider-error`: a provider error is taken as "it went through": the order is
  answered paid without a charge (a 500 *before* the charge made none).
- `refuse-on-provider-error`: a provider error is taken as a failed payment, recorded
  and answered 402 for good, although the provider may have charged (a 500 after it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import stripe
from aiohttp import web
from stripe import APIConnectionError, APIError, CardError, RateLimitError, StripeError

PAY_MODES = ("correct", "no-key-own-retry", "fresh-key-per-attempt", "record-after-second-transaction",
             "ack-on-provider-error", "refuse-on-provider-error")
SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    order_id text PRIMARY KEY, amount integer NOT NULL, currency text NOT NULL, status text NOT NULL,
    answer_status integer, answer text, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS pay_attempts (
    id text PRIMARY KEY, order_id text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
"""
PROBLEM = "application/problem+json"
CONNECT_TIMEOUT = 3
PROVIDER_TIMEOUT = 0.5  # seconds per provider request: a lost reply must not hold a request long
OWN_ATTEMPTS = 3
UNKNOWN = (APIConnectionError, APIError, RateLimitError)  # the outcome is unknown: it may have charged


def problem(status: int, title: str, detail: str) -> web.Response:
    body = {"type": f"https://example.invalid/problems/{status}", "title": title, "status": status,
            "detail": detail}
    return web.Response(status=status, text=json.dumps(body), content_type=PROBLEM)


class Answered(Exception):
    """An answer decided on the way (a replay, a refusal)."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


class Checkout:
    """The pay endpoint; `mount(app)` adds its route and its tables to an aiohttp app."""

    def __init__(self, *, dsn: str, provider_url: str, api_key: str = "sk_test_probe",
                 pay_mode: str = "correct", work_ms: int = 30) -> None:
        if pay_mode not in PAY_MODES:
            raise ValueError(f"pay mode must be one of {', '.join(PAY_MODES)}, not {pay_mode!r}")
        self.dsn = dsn
        self.mode = pay_mode
        self.work = work_ms / 1000.0
        retries = 0 if pay_mode == "no-key-own-retry" else 1
        self.stripe = stripe.StripeClient(api_key, base_addresses={"api": provider_url.rstrip("/")},
                                          max_network_retries=retries,
                                          http_client=stripe.RequestsClient(timeout=PROVIDER_TIMEOUT))
        # The SDK is synchronous: its calls run on threads, enough for every client at once.
        self._threads = ThreadPoolExecutor(max_workers=32, thread_name_prefix="stripe")

    def mount(self, app: web.Application) -> None:
        app.router.add_post("/orders/{order_id}/pay", self.pay)
        app.on_startup.append(self._create_schema)

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self.dsn, connect_timeout=CONNECT_TIMEOUT)

    async def _create_schema(self, _: web.Application) -> None:
        async with await self._connect() as connection:
            await connection.execute(SCHEMA)

    async def _provider(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._threads, lambda: call(*args, **kwargs))

    # --- the request ------------------------------------------------------------------
    async def pay(self, request: web.Request) -> web.Response:
        order_id = request.match_info["order_id"]
        try:
            body = json.loads(await request.read())
            amount, currency, method = body["amount"], body["currency"], body["payment_method"]
            if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
                raise ValueError
            if not isinstance(currency, str) or not isinstance(method, str):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            return problem(422, "Invalid payment", "amount, currency and payment_method are required")
        try:
            return await self._pay(order_id, amount, currency.lower(), method)
        except Answered as answered:
            return answered.response
        except (psycopg.Error, OSError) as error:
            return problem(503, "Database unavailable", f"{type(error).__name__}; retry later")

    async def _open_order(self, order_id: str, amount: int, currency: str) -> bool:
        """The order row (pending) exists after this; raise the stored answer of a finished
        order, or 422 for another amount. True when the order was there already."""
        async with await self._connect() as connection, connection.transaction():
            cursor = await connection.execute(
                "INSERT INTO orders (order_id, amount, currency, status) VALUES (%s, %s, %s, 'pending') "
                "ON CONFLICT DO NOTHING RETURNING order_id", (order_id, amount, currency))
            created = await cursor.fetchone() is not None
            cursor = await connection.execute(
                "SELECT amount, currency, status, answer_status, answer FROM orders WHERE order_id = %s",
                (order_id,))
            row = await cursor.fetchone()
        assert row is not None
        if (row[0], row[1]) != (amount, currency):
            raise Answered(problem(422, "Order exists", "the order was made with another amount or currency"))
        if row[2] != "pending":
            raise Answered(web.Response(status=row[3], text=row[4],
                                        content_type="application/json" if row[3] < 300 else PROBLEM))
        return not created

    async def _finish(self, order_id: str, status: str, answer_status: int, answer: str) -> web.Response:
        """Record the outcome once (the first writer wins) and answer what is recorded."""
        async with await self._connect() as connection, connection.transaction():
            await connection.execute(
                "UPDATE orders SET status = %s, answer_status = %s, answer = %s "
                "WHERE order_id = %s AND status = 'pending'", (status, answer_status, answer, order_id))
            cursor = await connection.execute("SELECT answer_status, answer FROM orders WHERE order_id = %s",
                                              (order_id,))
            row = await cursor.fetchone()
        assert row is not None
        return web.Response(status=row[0], text=row[1], content_type="application/json" if row[0] < 300 else PROBLEM)

    @staticmethod
    def _paid(order_id: str, intent: Any) -> str:
        return json.dumps({"order_id": order_id, "status": "paid", "payment_intent": intent.id,
                           "charge": intent.latest_charge, "amount": intent.amount, "currency": intent.currency})

    async def _paid_answer(self, order_id: str, intent: Any) -> web.Response:
        return await self._finish(order_id, "paid", 200, self._paid(order_id, intent))

    async def _declined(self, order_id: str, error: CardError) -> web.Response:
        text = problem(402, "Card declined", str(error.code or "card_declined")).text
        assert text is not None
        return await self._finish(order_id, "declined", 402, text)

    async def _find(self, order_id: str) -> Any:
        """The order's PaymentIntents at the provider: the succeeded one, else a declined one
        (its last payment error), else None (nothing ran)."""
        found = await self._provider(self.stripe.v1.payment_intents.search,
                                     params={"query": f"metadata['order_id']:'{order_id}'"})
        intents = list(found.data)
        return next((i for i in intents if i.status == "succeeded"),
                    next((i for i in intents if i.last_payment_error is not None), None))

    async def _found(self, order_id: str, intent: Any) -> web.Response:
        if intent.status == "succeeded":
            return await self._paid_answer(order_id, intent)
        code = intent.last_payment_error.code or "card_declined"
        text = problem(402, "Card declined", str(code)).text
        assert text is not None
        return await self._finish(order_id, "declined", 402, text)

    async def _create(self, order_id: str, amount: int, currency: str, method: str, key: str | None) -> Any:
        params: dict[str, Any] = {"amount": amount, "currency": currency, "payment_method": method,
                                  "confirm": True, "metadata": {"order_id": order_id}}
        options = {"idempotency_key": key} if key is not None else None
        return await self._provider(self.stripe.v1.payment_intents.create, params=params, options=options)

    async def _pay(self, order_id: str, amount: int, currency: str, method: str) -> web.Response:
        mode = self.mode
        if mode == "record-after-second-transaction":
            return await self._pay_recorded_late(order_id, amount, currency, method)
        existed = await self._open_order(order_id, amount, currency)
        try:
            if mode == "correct" and existed:
                intent = await self._find(order_id)  # a retry: did an earlier attempt charge?
                if intent is not None:
                    return await self._found(order_id, intent)
            if mode == "no-key-own-retry":
                intent = await self._own_retries(order_id, amount, currency, method)
            else:
                key = f"pay-{order_id}" if mode != "fresh-key-per-attempt" else f"pay-{order_id}-{uuid.uuid4()}"
                intent = await self._create(order_id, amount, currency, method, key)
        except CardError as error:
            return await self._declined(order_id, error)
        except UNKNOWN as error:
            return await self._unknown(order_id, amount, currency, error)
        except StripeError as error:
            if error.http_status == 409:  # the key is in use: another request pays this order
                response = problem(409, "Payment in progress", "another request is paying this order")
                response.headers["Retry-After"] = "1"
                return response
            return problem(502, "Provider refused", f"{type(error).__name__}: {error.code}")
        return await self._paid_answer(order_id, intent)

    async def _own_retries(self, order_id: str, amount: int, currency: str, method: str) -> Any:
        for attempt in range(1, OWN_ATTEMPTS + 1):
            try:
                return await self._create(order_id, amount, currency, method, None)
            except UNKNOWN:
                if attempt == OWN_ATTEMPTS:
                    raise
                await asyncio.sleep(0.05 * attempt)
        raise AssertionError("unreachable")

    async def _unknown(self, order_id: str, amount: int, currency: str, error: StripeError) -> web.Response:
        """The provider's answer was lost or an error: it may have charged."""
        if self.mode == "ack-on-provider-error":
            return await self._finish(order_id, "paid", 200, json.dumps(
                {"order_id": order_id, "status": "paid", "payment_intent": None, "charge": None,
                 "amount": amount, "currency": currency}))
        if self.mode == "refuse-on-provider-error":
            text = problem(402, "Payment failed", f"the provider failed: {type(error).__name__}").text
            assert text is not None
            return await self._finish(order_id, "failed", 402, text)
        if self.mode == "correct":
            try:
                intent = await self._find(order_id)
            except StripeError:
                intent = None
            if intent is not None:
                return await self._found(order_id, intent)
        return problem(503, "Provider unavailable", f"{type(error).__name__}; retry later")

    async def _pay_recorded_late(self, order_id: str, amount: int, currency: str, method: str) -> web.Response:
        await self._open_order(order_id, amount, currency)
        attempt = f"att_{uuid.uuid4().hex[:16]}"
        async with await self._connect() as connection, connection.transaction():
            await connection.execute("INSERT INTO pay_attempts (id, order_id) VALUES (%s, %s)", (attempt, order_id))
        try:
            intent = await self._create(order_id, amount, currency, method, f"pay-{attempt}")
        except CardError as error:
            return await self._declined(order_id, error)
        except StripeError as error:
            return problem(503, "Provider unavailable", f"{type(error).__name__}; retry later")
        await asyncio.sleep(self.work)  # send the receipt, then record the charge
        return await self._paid_answer(order_id, intent)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pay-mode", choices=PAY_MODES, default="correct")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8091")))
    parser.add_argument("--dsn", default=os.environ.get("PAYMENTS_DSN", ""))
    parser.add_argument("--provider-url", default=os.environ.get("STRIPE_API_BASE", ""))
    parser.add_argument("--work-ms", type=int, default=30, help="how long sending the receipt takes")
    args = parser.parse_args(argv)
    if not args.dsn or not args.provider_url:
        parser.error("--dsn (or PAYMENTS_DSN) and --provider-url (or STRIPE_API_BASE) are required")
    app = web.Application()
    app.router.add_get("/healthz", lambda _: _health(args.pay_mode))
    Checkout(dsn=args.dsn, provider_url=args.provider_url, api_key=os.environ.get("STRIPE_API_KEY", "sk_test_probe"),
             pay_mode=args.pay_mode, work_ms=args.work_ms).mount(app)
    web.run_app(app, host=args.host, port=args.port, print=lambda *_: print(
        f"checkout ({args.pay_mode}) on http://{args.host}:{args.port}", flush=True))


async def _health(mode: str) -> web.Response:
    return web.json_response({"status": "ok", "pay_mode": mode})


if __name__ == "__main__":
    main()
