"""A minimal payments API in FastAPI, written the way FastAPI's docs teach, with an
Idempotency-Key layer in two modes: a correct one and its buggy check-then-act twin.

    pip install -e '.[frameworks]'
    python examples/frameworks/fastapi_payments.py --mode correct --port 8091
    harness probe --config examples/frameworks/payments.yaml --upstream 127.0.0.1:8091

POST /payments {"amount_cents": int, "currency": str, "reference": str} with the
required header `Idempotency-Key` (declared `Header(..., alias=...)`: FastAPI itself
answers a request without it with 422, its validation error, where the IETF draft
SHOULDs 400) answers 201 with the payment; GET /payments/{id} reads one back,
GET /payments?idempotency_key=K lists those created under a key. Errors are FastAPI's
own `{"detail": ...}` JSON (not problem details).

correct: one claim per key, taken under a lock before the charge; a concurrent
duplicate waits for the first request's answer and gets it, a reuse with another
payload is refused with 422, a retry after the answer gets the stored answer.

check-then-act: look the key up and, if it is unknown, charge (the awaited provider
call, `--work-ms`), then store the answer; two requests with one key that arrive
within the charge both miss the lookup and both charge: two payments for one key.
Everything else is as in `correct`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Header, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

MODES = ("correct", "check-then-act")
WAIT_FOR_FIRST = 10.0  # seconds a concurrent duplicate waits for the first answer


class PaymentIn(BaseModel):
    amount_cents: int = Field(gt=0)
    currency: str
    reference: str


@dataclass
class Claim:
    """One key's request: its payload's fingerprint, and its answer once it is done."""

    fingerprint: str
    done: asyncio.Event = field(default_factory=asyncio.Event)
    answer: dict[str, Any] | None = None


def build_app(mode: str, work_ms: int) -> FastAPI:
    """The app; its state lives in this closure (one process, one event loop)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    app = FastAPI()
    payments: dict[str, dict[str, Any]] = {}
    claims: dict[str, Claim] = {}
    lock = asyncio.Lock()

    async def charge_and_store(key: str, payment: PaymentIn) -> dict[str, Any]:
        await asyncio.sleep(work_ms / 1000.0)  # the payment provider's call
        created = {"id": f"pay_{uuid.uuid4().hex[:16]}", "idempotency_key": key, **payment.model_dump()}
        payments[created["id"]] = created
        return created

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/payments", status_code=201)
    async def create(payment: PaymentIn,
                     idempotency_key: str = Header(..., alias="Idempotency-Key")) -> JSONResponse:
        fingerprint = json.dumps(payment.model_dump(), sort_keys=True)
        if mode == "correct":
            async with lock:  # the claim: one request per key gets past here first
                claim = claims.get(idempotency_key)
                first = claim is None
                if claim is None:
                    claim = claims[idempotency_key] = Claim(fingerprint)
        else:
            claim = claims.get(idempotency_key)  # check ... (then act, below, after an await)
            first = claim is None
        if claim is not None and not first:
            if claim.fingerprint != fingerprint:
                raise HTTPException(status_code=422, detail="Idempotency-Key reused with another payload")
            try:
                await asyncio.wait_for(claim.done.wait(), WAIT_FOR_FIRST)
            except TimeoutError:
                raise HTTPException(status_code=409, detail="a request with this key is in progress") from None
            if claim.answer is None:  # the first request failed and let go of the key: retry
                raise HTTPException(status_code=409, detail="the first request with this key failed; retry")
            return JSONResponse(status_code=201, content=claim.answer)
        try:
            created = await charge_and_store(idempotency_key, payment)
        except BaseException:
            # Nothing was charged (or the request was cancelled): free the key for the retry.
            if claim is not None and claims.get(idempotency_key) is claim:
                del claims[idempotency_key]
                claim.done.set()
            raise
        stored = claims.setdefault(idempotency_key, Claim(fingerprint)) if claim is None else claim
        if stored.answer is None:
            stored.answer = created
        stored.done.set()
        return JSONResponse(status_code=201, content=created)

    @app.get("/payments/{payment_id}")
    async def read(payment_id: str) -> dict[str, Any]:
        if payment_id not in payments:
            raise HTTPException(status_code=404, detail="no such payment")
        return payments[payment_id]

    @app.get("/payments")
    async def search(idempotency_key: str = "") -> dict[str, Any]:
        return {"items": [{"id": p["id"]} for p in payments.values() if p["idempotency_key"] == idempotency_key]}

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, default="correct")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8091)
    parser.add_argument("--work-ms", type=int, default=30, help="how long the provider call takes")
    args = parser.parse_args(argv)
    uvicorn.run(build_app(args.mode, args.work_ms), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
