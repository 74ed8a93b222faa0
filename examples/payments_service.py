"""A small payments API on aiohttp and SQLite, independent of the harness, with an
Idempotency-Key layer in two variants: the classic naive one and a fixed one.

    python examples/payments_service.py --mode naive --port 8081   # the race
    python examples/payments_service.py --mode fixed --port 8082   # passes the probe
    harness probe --config examples/payments_service.yaml --upstream 127.0.0.1:8081

POST /payments {"amount_cents": int, "currency": str, "reference": str}, with an
`Idempotency-Key` header (required: 400 without), answers 201 with the payment;
GET /payments/{id} reads one back, GET /payments?idempotency_key=K lists those
created under a key. Errors are application/problem+json.

naive: look the key up, and if it is unknown, charge (an awaited call to the
provider, `--work-ms`), insert the payment, then store the response under the key.
Check-then-insert without a lock: two requests with the same key that arrive
within the provider call both miss the lookup, and both charge. Everything else
(fingerprint check, replay, 400 without a key) is done right, so the only bug is
the race, which is exactly what concurrency and faults expose.

`--missing-key-status 422` answers a request without the key the way FastAPI's and
DRF's validation does (a correct service that misses the draft's SHOULD of 400: the
probe passes it with advice); `--mismatch-status 403` refuses a key reused with
another payload with a code none of the draft's errors is (its MUST: the probe fails it).

fixed: claim the key first with an INSERT that the primary key makes atomic (a
second request sees the claim: 409 while in flight, 422 for another payload, the
stored answer once done), charge, then write the payment and the stored answer in
one transaction; a failed charge releases the claim so the retry runs again.

--forget-keys-after SECONDS (either mode; default 0: never): a stored key older than
that, by the service's own clock, is forgotten, and a retry with it charges again.
With 3600 it is the store that keeps keys 1 h while its docs promise 24 h: the
negative control of `key_lifetime` (harness probe's bundled plan `probe-clocks`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sqlite3
import time
import uuid
from typing import Any

from aiohttp import web

SCHEMA = """
CREATE TABLE IF NOT EXISTS payments (
    id TEXT PRIMARY KEY, idempotency_key TEXT, amount_cents INTEGER NOT NULL,
    currency TEXT NOT NULL, reference TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, state TEXT NOT NULL,
    status INTEGER, body TEXT, created_at REAL NOT NULL DEFAULT 0);
"""
PROBLEM = "application/problem+json"


def problem(status: int, title: str, detail: str) -> web.Response:
    body = {"type": f"https://example.invalid/problems/{status}", "title": title, "status": status,
            "detail": detail}
    return web.Response(status=status, text=json.dumps(body), content_type=PROBLEM)


class PaymentsService:
    def __init__(self, *, mode: str, database: str, work_ms: int, missing_key_status: int = 400,
                 mismatch_status: int = 422, forget_keys_after: float = 0.0) -> None:
        if mode not in ("naive", "fixed"):
            raise ValueError(f"mode must be naive or fixed, not {mode!r}")
        self.mode = mode
        self.forget_keys_after = forget_keys_after
        self.work = work_ms / 1000.0
        self.missing_key_status = missing_key_status
        self.mismatch_status = mismatch_status
        # One connection, used from the event loop only: SQLite serializes writes,
        # and no statement here awaits, so each statement runs whole.
        self.db = sqlite3.connect(database, isolation_level=None)
        self.db.executescript(SCHEMA)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/payments", self.create)
        app.router.add_get("/payments/{id}", self.read)
        app.router.add_get("/payments", self.search)
        app.router.add_get("/healthz", lambda _: web.json_response({"status": "ok"}))
        return app

    # --- shared -------------------------------------------------------------------
    async def _parse(self, request: web.Request) -> tuple[str | None, bytes, dict[str, Any] | web.Response]:
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
            return key, raw, problem(422, "Invalid payment", "amount_cents, currency and reference are required")
        return key, raw, body

    async def _charge(self) -> None:
        # The call to the payment provider: slow, and the moment a race opens.
        await asyncio.sleep(self.work)

    def _insert_payment(self, key: str, body: dict[str, Any]) -> dict[str, Any]:
        payment = {"id": f"pay_{uuid.uuid4().hex[:16]}", "idempotency_key": key,
                   "amount_cents": body["amount_cents"], "currency": body["currency"],
                   "reference": body["reference"]}
        self.db.execute("INSERT INTO payments VALUES (:id, :idempotency_key, :amount_cents, :currency, :reference)",
                        payment)
        return payment

    @staticmethod
    def _replay(status: int, body: str) -> web.Response:
        response = web.Response(status=status, text=body, content_type="application/json")
        response.headers["Idempotent-Replayed"] = "true"
        return response

    async def create(self, request: web.Request) -> web.Response:
        key, raw, parsed = await self._parse(request)
        if not key:
            return problem(self.missing_key_status, "Idempotency-Key required",
                           "POST /payments needs an Idempotency-Key header")
        if isinstance(parsed, web.Response):
            return parsed
        fingerprint = hashlib.sha256(raw).hexdigest()
        if self.forget_keys_after > 0:  # the early-forgetting store (module docstring)
            self.db.execute("DELETE FROM idempotency WHERE key = ? AND state = 'done' AND created_at < ?",
                            (key, time.time() - self.forget_keys_after))
        if self.mode == "naive":
            return await self._create_naive(key, fingerprint, parsed)
        return await self._create_fixed(key, fingerprint, parsed)

    # --- naive: check, then insert -----------------------------------------------------
    async def _create_naive(self, key: str, fingerprint: str, body: dict[str, Any]) -> web.Response:
        row = self.db.execute("SELECT fingerprint, status, body FROM idempotency WHERE key = ?", (key,)).fetchone()
        if row is not None:
            if row[0] != fingerprint:
                return problem(self.mismatch_status, "Idempotency-Key reused", "the key was used with another payload")
            return self._replay(row[1], row[2])
        await self._charge()
        payment = self._insert_payment(key, body)
        text = json.dumps(payment)
        self.db.execute("INSERT OR REPLACE INTO idempotency (key, fingerprint, state, status, body, created_at) "
                        "VALUES (?, ?, 'done', 201, ?, ?)", (key, fingerprint, text, time.time()))
        return web.Response(status=201, text=text, content_type="application/json")

    # --- fixed: claim, charge, commit effect and answer together -----------------------
    async def _create_fixed(self, key: str, fingerprint: str, body: dict[str, Any]) -> web.Response:
        try:
            self.db.execute("INSERT INTO idempotency (key, fingerprint, state, created_at) "
                            "VALUES (?, ?, 'in_flight', ?)", (key, fingerprint, time.time()))
        except sqlite3.IntegrityError:
            row = self.db.execute("SELECT fingerprint, state, status, body FROM idempotency WHERE key = ?",
                                  (key,)).fetchone()
            if row is None:  # released between the insert and the read: ask for a retry
                return problem(409, "Request in progress", "retry shortly")
            if row[0] != fingerprint:
                return problem(self.mismatch_status, "Idempotency-Key reused", "the key was used with another payload")
            if row[1] == "in_flight":
                response = problem(409, "Request in progress", "a request with this key is still running")
                response.headers["Retry-After"] = "1"
                return response
            return self._replay(row[2], row[3])
        try:
            await self._charge()
        except BaseException:
            # Nothing was charged: release the key so the client's retry runs again.
            self.db.execute("DELETE FROM idempotency WHERE key = ? AND state = 'in_flight'", (key,))
            raise
        self.db.execute("BEGIN")
        payment = self._insert_payment(key, body)
        text = json.dumps(payment)
        self.db.execute("UPDATE idempotency SET state = 'done', status = 201, body = ? WHERE key = ?", (text, key))
        self.db.execute("COMMIT")
        return web.Response(status=201, text=text, content_type="application/json")

    # --- reads ----------------------------------------------------------------------------
    async def read(self, request: web.Request) -> web.Response:
        row = self.db.execute("SELECT id, idempotency_key, amount_cents, currency, reference FROM payments "
                              "WHERE id = ?", (request.match_info["id"],)).fetchone()
        if row is None:
            return problem(404, "Not found", "no such payment")
        return web.json_response(dict(zip(("id", "idempotency_key", "amount_cents", "currency", "reference"), row, strict=True)))

    async def search(self, request: web.Request) -> web.Response:
        key = request.query.get("idempotency_key", "")
        rows = self.db.execute("SELECT id FROM payments WHERE idempotency_key = ? ORDER BY rowid", (key,)).fetchall()
        return web.json_response({"items": [{"id": row[0]} for row in rows]})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("naive", "fixed"), default="fixed")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--db", default=":memory:", help="SQLite file (default: in memory)")
    parser.add_argument("--work-ms", type=int, default=30, help="how long the provider call takes")
    parser.add_argument("--missing-key-status", type=int, default=400, help="the answer to a request without the key")
    parser.add_argument("--mismatch-status", type=int, default=422,
                        help="the answer to a key reused with another payload")
    parser.add_argument("--forget-keys-after", type=float, default=0.0,
                        help="seconds after which a stored key is forgotten (default 0: never)")
    args = parser.parse_args(argv)
    service = PaymentsService(mode=args.mode, database=args.db, work_ms=args.work_ms,
                              missing_key_status=args.missing_key_status, mismatch_status=args.mismatch_status,
                              forget_keys_after=args.forget_keys_after)
    web.run_app(service.app(), host=args.host, port=args.port, print=lambda *_: print(
        f"payments service ({args.mode}) on http://{args.host}:{args.port}", flush=True))


if __name__ == "__main__":
    main()
