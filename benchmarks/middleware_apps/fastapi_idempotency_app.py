"""The README example of `fastapi-idempotency` (`app.add_middleware(IdempotencyMiddleware)`,
the in-memory default store), around a payments endpoint that takes 30 ms (the
provider call) and a read-back route (fastapi_payments.py). Run by probe_middlewares.py."""

from fastapi import FastAPI
from fastapi_idempotency import IdempotencyMiddleware
from fastapi_payments import add_payment_routes, serve

app = FastAPI()
app.add_middleware(IdempotencyMiddleware)
add_payment_routes(app)


if __name__ == "__main__":
    serve(app)
