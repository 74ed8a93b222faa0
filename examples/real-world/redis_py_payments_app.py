"""A payments service on Flask and Redis, written with redis-py's default client, whose
Idempotency-Key layer is correct and whose charge is charged twice by the client library.

    python examples/real-world/redis_py_payments_app.py --port 8093 --redis-port 6379 [--no-retry]
    harness probe --config examples/real-world/redis-py-payments.yaml

POST /payments {"amount_cents": int, "currency": str, "reference": str} with the
required header `Idempotency-Key` (400 without it, 422 for a key reused with another
payload, 409 with Retry-After while the key's first request runs; refusals are
application/problem+json) answers 201 with the payment, and the same 201 (marked
`Idempotent-Replayed: true`) to every retry. GET /payments/<id> reads one back;
GET /ledger?idempotency_key=K lists the ledger entries of the payments made under K
(read-only: the probe's effects oracle); GET /healthz.

The key's layer, all in Redis:

1. claim: `SET idem:K {pending, owner token} NX PX <lease>`; a request that finds the
   key claimed by another gets 409 until the lease ends (a claim left by a killed
   request frees itself), one that finds its own token (its SET was re-sent by the
   client) goes on;
2. charge: one MULTI/EXEC that stores the payment, RPUSHes its entry to the ledger and
   replaces the claim by the answer, so the ledger entry and the stored answer exist
   together or not at all;
3. an error of the charge is resolved by reading the key back: the answer there means
   the transaction ran and only its reply was lost (201 with it), the claim means it
   did not run (503; a retry gets 409 until the lease ends, then charges).

The client is `redis.Redis(host=..., port=..., db=...)`, nothing tuned, as redis-py's
README writes it. In redis-py 8 that constructor gives every connection a
`Retry(ExponentialWithJitterBackoff(...), 10)` on ConnectionError and TimeoutError, and
`Pipeline.execute` runs a whole transaction inside it: when the connection is reset
after Redis ran EXEC (its reply lost), the client reconnects and sends MULTI ... EXEC
again, and the ledger gets the entry twice. No layer above the client can tell, since
the retry succeeds and answers like the first attempt would have. (`Redis.from_url`
builds its pool without that default and retries nothing; a WATCH before MULTI turns
the re-send into a WatchError instead.)

`--no-retry` passes `retry=Retry(NoBackoff(), 0)` (what `retry=None` means to a
connection, and what `from_url` gets): the lost reply is a ConnectionError that step 3
resolves, and the service is correct. That is the whole difference between the modes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import uuid
from typing import Any

import redis
from flask import Flask, Response, jsonify, request
from flask.typing import ResponseReturnValue
from redis.backoff import NoBackoff
from redis.retry import Retry
from werkzeug.serving import make_server

LEASE_MS = 5000  # how long a claim holds its key; far above one request's slowest path
ANSWER_TTL = 86400  # seconds a stored answer is replayed (the expiry policy)
LEDGER = "ledger"  # the merchant's ledger: one entry per charge, in order
CLAIM_ATTEMPTS = 3  # a claim that expires between SET NX and GET is tried again


def problem(status: int, title: str, detail: str, **headers: str) -> Response:
    """A refusal as problem details (RFC 9457)."""
    response = jsonify({"type": "about:blank", "title": title, "status": status, "detail": detail})
    response.status_code = status
    response.content_type = "application/problem+json"
    response.headers.update(headers)
    return response


def answer(record: dict[str, Any], *, replayed: bool) -> Response:
    """The stored answer of a key, as the first request got it."""
    response = jsonify(record["body"])
    response.status_code = int(record["status"])
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return response


def text(value: bytes | str) -> str:
    """A value as redis-py returns it without `decode_responses` (bytes), as text."""
    return value.decode() if isinstance(value, bytes) else value


def build_app(client: redis.Redis) -> Flask:
    """The app on `client`; every bit of state is in Redis."""
    app = Flask(__name__)

    @app.errorhandler(redis.RedisError)
    def store_unavailable(error: redis.RedisError) -> ResponseReturnValue:
        # Nothing was decided (a claim whose reply was lost frees itself with its lease).
        return problem(503, "Payments unavailable", f"the payment store did not answer: {type(error).__name__}",
                       **{"Retry-After": "1"})

    @app.get("/healthz")
    def healthz() -> ResponseReturnValue:
        return {"status": "ok"}

    @app.post("/payments")
    def create() -> ResponseReturnValue:
        key = request.headers.get("Idempotency-Key")
        if not key:
            return problem(400, "Idempotency-Key required", "POST /payments needs an Idempotency-Key header")
        body = request.get_json(silent=True)
        if not isinstance(body, dict) or not isinstance(body.get("amount_cents"), int) \
                or not isinstance(body.get("currency"), str) or not isinstance(body.get("reference"), str):
            return problem(400, "Invalid payment", "amount_cents (int), currency and reference are required")
        fields = {name: body[name] for name in ("amount_cents", "currency", "reference")}
        fingerprint = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
        slot = f"idem:{key}"
        token = uuid.uuid4().hex
        claim = json.dumps({"state": "pending", "owner": token, "fingerprint": fingerprint})
        for _ in range(CLAIM_ATTEMPTS):
            if client.set(slot, claim, nx=True, px=LEASE_MS):
                break
            raw = client.get(slot)
            if raw is None:
                continue  # the other claim's lease ended just now: try to claim again
            record = json.loads(raw)
            if record["fingerprint"] != fingerprint:
                return problem(422, "Idempotency-Key reused", "this key was used with another payload")
            if record["state"] == "done":
                return answer(record, replayed=True)
            if record["owner"] == token:
                break  # our own claim: the SET ran and only its reply was lost
            wait = max(1, math.ceil(max(client.pttl(slot), 0) / 1000))
            return problem(409, "Request in progress", "a request with this key is in progress; retry later",
                           **{"Retry-After": str(wait)})
        else:
            return problem(409, "Request in progress", "the key changed hands while it was claimed",
                           **{"Retry-After": "1"})

        payment = {"id": f"pay_{uuid.uuid4().hex[:16]}", "idempotency_key": key, **fields}
        entry = {"id": f"le_{uuid.uuid4().hex[:16]}", "payment_id": payment["id"], "idempotency_key": key,
                 "amount_cents": fields["amount_cents"], "currency": fields["currency"]}
        done = {"state": "done", "fingerprint": fingerprint, "status": 201, "body": payment}
        try:
            with client.pipeline(transaction=True) as pipe:  # MULTI ... EXEC
                pipe.hset(f"payment:{payment['id']}", mapping={k: str(v) for k, v in payment.items()})
                pipe.rpush(LEDGER, json.dumps(entry))
                pipe.set(slot, json.dumps(done), ex=ANSWER_TTL)
                pipe.execute()
        except redis.RedisError:
            # Did EXEC run? The key says: the answer is there only if it did.
            try:
                raw = client.get(slot)
            except redis.RedisError:
                raw = None
            record = json.loads(raw) if raw is not None else None
            if record is not None and record["state"] == "done" and record["body"]["id"] == payment["id"]:
                return answer(record, replayed=False)
            # Not charged; the claim frees the key when its lease ends.
            return problem(503, "Payments unavailable", "the payment store did not answer; retry later",
                           **{"Retry-After": str(math.ceil(LEASE_MS / 1000))})
        return answer(done, replayed=False)

    @app.get("/payments/<payment_id>")
    def read(payment_id: str) -> ResponseReturnValue:
        stored = client.hgetall(f"payment:{payment_id}")
        if not stored:
            return problem(404, "Not found", f"no payment {payment_id}")
        payment: dict[str, Any] = {text(k): text(v) for k, v in stored.items()}
        payment["amount_cents"] = int(payment["amount_cents"])
        return jsonify(payment)

    @app.get("/ledger")
    def ledger() -> ResponseReturnValue:
        key = request.args.get("idempotency_key", "")
        entries = [json.loads(raw) for raw in client.lrange(LEDGER, 0, -1)]
        return jsonify({"items": [entry for entry in entries if entry["idempotency_key"] == key]})

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8093)
    parser.add_argument("--redis-host", default="127.0.0.1")
    parser.add_argument("--redis-port", type=int, default=6379)
    parser.add_argument("--redis-db", type=int, default=0)
    parser.add_argument("--no-retry", action="store_true",
                        help="Retry(NoBackoff(), 0): a lost reply is an error the service resolves, "
                             "never a re-sent EXEC")
    args = parser.parse_args(argv)
    if args.no_retry:
        client = redis.Redis(host=args.redis_host, port=args.redis_port, db=args.redis_db,
                             retry=Retry(NoBackoff(), 0))
    else:
        client = redis.Redis(host=args.redis_host, port=args.redis_port, db=args.redis_db)
    server = make_server(args.host, args.port, build_app(client), threaded=True)
    mode = "no retry" if args.no_retry else "redis-py's default retry"
    print(f"redis-py payments ({mode}) on http://{args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
