"""The README example of `fastapi-idempotency` (`app.add_middleware(IdempotencyMiddleware)`,
the in-memory default store), around a payments endpoint that takes 30 ms (the
provider call) and a read-back route. Run by probe_middlewares.py."""

import asyncio
import sys
import uuid

import uvicorn
from fastapi import FastAPI, HTTPException
from fastapi_idempotency import IdempotencyMiddleware

app = FastAPI()
app.add_middleware(IdempotencyMiddleware)
PAYMENTS: dict[str, dict] = {}


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


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
