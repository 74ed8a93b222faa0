"""The payments service both FastAPI middlewares are probed around, written once so
that the two apps differ only in their middleware (what probe_middlewares.py compares).

`add_payment_routes(app)` adds POST /payments (takes 30 ms: the provider call, 201
with the new payment), GET /payments/{id} (the read-back, 404 when unknown) and GET
/healthz; `serve(app)` runs the app with uvicorn on 127.0.0.1 at the port given as the
first argument. Imported by the apps beside it (their directory is on sys.path when
run as a script).
"""

import asyncio
import sys
import uuid

import uvicorn
from fastapi import FastAPI, HTTPException

PAYMENTS: dict[str, dict] = {}


def add_payment_routes(app: FastAPI) -> None:
    """The payments endpoint, its read-back route and the health check, on `app`."""

    @app.post("/payments", status_code=201)
    async def create_payment(payment: dict):
        await asyncio.sleep(0.03)  # the payment provider
        record = {"id": uuid.uuid4().hex, "status": "paid", "amount": payment["amount"]}
        PAYMENTS[record["id"]] = record
        return record

    @app.get("/payments/{payment_id}")
    async def read_payment(payment_id: str):
        if payment_id not in PAYMENTS:
            raise HTTPException(404)
        return PAYMENTS[payment_id]

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}


def serve(app: FastAPI) -> None:
    """Run `app` on 127.0.0.1:<argv[1]> until stopped."""
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
