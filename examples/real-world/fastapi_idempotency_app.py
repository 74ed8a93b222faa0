"""`fastapi-idempotency` as its README deploys it: `app.add_middleware(IdempotencyMiddleware)`
with the default in-memory store (the key is optional), around the payments service
of payment_routes.py.

    python examples/real-world/fastapi_idempotency_app.py 8092
    harness probe --config examples/real-world/fastapi-idempotency.yaml --upstream 127.0.0.1:8092
"""

from fastapi import FastAPI
from fastapi_idempotency import IdempotencyMiddleware
from payment_routes import add_payment_routes, serve

app = FastAPI()
app.add_middleware(IdempotencyMiddleware)
add_payment_routes(app)


if __name__ == "__main__":
    serve(app)
