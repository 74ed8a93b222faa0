"""The payments service each real-world middleware is deployed around, written once so
that the apps beside it differ only in their middleware.

`add_payment_routes(app)` adds POST /payments (takes 30 ms: the provider call; 201
with the new payment, owned by the caller's Authorization header), GET /payments/{id}
(the read-back: 404 when unknown or another caller's, so a user reads only their own)
and GET /healthz. `serve(app)` runs the app with uvicorn on 127.0.0.1 at the port given
as the first argument, as these middlewares' users run them. Imported by the apps
beside it (their folder is on sys.path when they run as scripts).
"""

import asyncio
import sys
import uuid

import uvicorn
from fastapi import FastAPI, HTTPException, Request

PAYMENTS: dict[str, dict] = {}


def add_payment_routes(app: FastAPI) -> None:
    """The payments endpoint, its read-back route and the health check, on `app`."""

    @app.post("/payments", status_code=201)
    async def create_payment(payment: dict, request: Request):
        # The provider call: long enough for a retry to arrive while it runs.
        await asyncio.sleep(0.03)
        record = {"id": uuid.uuid4().hex, "status": "paid", "amount": payment["amount"]}
        PAYMENTS[record["id"]] = {**record, "owner": request.headers.get("Authorization")}
        return record

    @app.get("/payments/{payment_id}")
    async def read_payment(payment_id: str, request: Request):
        found = PAYMENTS.get(payment_id)
        if found is None or found["owner"] != request.headers.get("Authorization"):
            raise HTTPException(404)
        return {name: value for name, value in found.items() if name != "owner"}

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}


def serve(app: FastAPI) -> None:
    """Run `app` on 127.0.0.1:<argv[1]> until stopped."""
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
