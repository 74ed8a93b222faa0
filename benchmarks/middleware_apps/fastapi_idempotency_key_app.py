"""The README quick start of `fastapi-idempotency-key` (global ASGI middleware, memory
backend), with `required=True` from its options, around a payments endpoint that
takes 30 ms (the provider call) and a read-back route (fastapi_payments.py). Run by
probe_middlewares.py."""

from fastapi import FastAPI
from fastapi_idempotency_key import IdempotencyMiddleware, MemoryBackend
from fastapi_payments import add_payment_routes, serve

app = FastAPI(title="Payment API")
app.add_middleware(IdempotencyMiddleware, backend=MemoryBackend(), header_name="Idempotency-Key",
                   default_ttl=86400, required=True)
add_payment_routes(app)


if __name__ == "__main__":
    serve(app)
