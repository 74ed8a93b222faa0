"""`fastapi-idempotency-key` as its README's quick start deploys it: the global ASGI
middleware with the memory backend, plus `required=True` from its options (every POST
must carry `Idempotency-Key`), around the payments service of payment_routes.py.

    python examples/real-world/fastapi_idempotency_key_app.py 8091
    harness probe --config examples/real-world/fastapi-idempotency-key.yaml --upstream 127.0.0.1:8091
"""

from fastapi import FastAPI
from fastapi_idempotency_key import IdempotencyMiddleware, MemoryBackend
from payment_routes import add_payment_routes, serve

app = FastAPI(title="Payment API")
app.add_middleware(IdempotencyMiddleware, backend=MemoryBackend(), header_name="Idempotency-Key",
                   default_ttl=86400, required=True)
add_payment_routes(app)


if __name__ == "__main__":
    serve(app)
