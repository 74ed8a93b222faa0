"""A minimal payments API in Flask, written the way Flask's docs teach, with an
Idempotency-Key layer in two modes: a correct one and its buggy check-then-act twin.

    pip install -e '.[frameworks]'
    python examples/frameworks/flask_payments.py --mode correct --port 8092
    harness probe --config examples/frameworks/payments.yaml --upstream 127.0.0.1:8092

POST /payments {"amount_cents": int, "currency": str, "reference": str} with the
required header `Idempotency-Key`: without it the view calls `abort(400)`, and Flask
answers its HTML error page (not problem details); a reuse with another payload is
`abort(422)`. 201 with the payment; GET /payments/<id>
reads one back, GET /payments?idempotency_key=K lists those created under a key.
Served by Werkzeug's threaded server: one thread per request, the state in memory.

correct: one claim per key, taken under a lock before the charge; a concurrent
duplicate waits for the first request's answer and gets it.

check-then-act: look the key up and, if it is unknown, charge (the provider call,
`--work-ms`), then store the answer; two requests with one key that arrive within the
charge both miss the lookup and both charge: two payments for one key.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, abort, jsonify, request
from flask.typing import ResponseReturnValue
from werkzeug.serving import make_server

MODES = ("correct", "check-then-act")
WAIT_FOR_FIRST = 10.0  # seconds a concurrent duplicate waits for the first answer


@dataclass
class Claim:
    """One key's request: its payload's fingerprint, and its answer once it is done."""

    fingerprint: str
    done: threading.Event = field(default_factory=threading.Event)
    answer: dict[str, Any] | None = None


def build_app(mode: str, work_ms: int) -> Flask:
    """The app; its state lives in this closure (one process, many threads)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    app = Flask(__name__)
    payments: dict[str, dict[str, Any]] = {}
    claims: dict[str, Claim] = {}
    lock = threading.Lock()

    @app.get("/healthz")
    def healthz() -> ResponseReturnValue:
        return {"status": "ok"}

    @app.post("/payments")
    def create() -> ResponseReturnValue:
        key = request.headers.get("Idempotency-Key")
        if not key:
            abort(400, "the Idempotency-Key header is required")  # Flask's HTML error page
        body = request.get_json()
        if not isinstance(body, dict) or not isinstance(body.get("amount_cents"), int) \
                or not isinstance(body.get("currency"), str) or not isinstance(body.get("reference"), str):
            abort(400, "amount_cents, currency and reference are required")
        payment = {name: body[name] for name in ("amount_cents", "currency", "reference")}
        fingerprint = json.dumps(payment, sort_keys=True)
        if mode == "correct":
            with lock:  # the claim: one request per key gets past here first
                claim = claims.get(key)
                first = claim is None
                if claim is None:
                    claim = claims[key] = Claim(fingerprint)
        else:
            with lock:
                claim = claims.get(key)  # check ... (then act, below, after the charge)
            first = claim is None
        if claim is not None and not first:
            if claim.fingerprint != fingerprint:
                abort(422, "Idempotency-Key reused with another payload")
            if not claim.done.wait(WAIT_FOR_FIRST) or claim.answer is None:
                abort(409, "a request with this key is in progress or failed; retry")
            return jsonify(claim.answer), 201
        try:
            time.sleep(work_ms / 1000.0)  # the payment provider's call
        except BaseException:
            if claim is not None:
                with lock:  # nothing was charged: free the key for the retry
                    claims.pop(key, None)
                claim.done.set()
            raise
        created = {"id": f"pay_{uuid.uuid4().hex[:16]}", "idempotency_key": key, **payment}
        with lock:
            payments[created["id"]] = created
            stored = claims.setdefault(key, Claim(fingerprint)) if claim is None else claim
            if stored.answer is None:
                stored.answer = created
        stored.done.set()
        return jsonify(created), 201

    @app.get("/payments/<payment_id>")
    def read(payment_id: str) -> ResponseReturnValue:
        if payment_id not in payments:
            abort(404)
        return jsonify(payments[payment_id])

    @app.get("/payments")
    def search() -> ResponseReturnValue:
        key = request.args.get("idempotency_key", "")
        with lock:
            found = [{"id": p["id"]} for p in payments.values() if p["idempotency_key"] == key]
        return jsonify({"items": found})

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, default="correct")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8092)
    parser.add_argument("--work-ms", type=int, default=30, help="how long the provider call takes")
    args = parser.parse_args(argv)
    server = make_server(args.host, args.port, build_app(args.mode, args.work_ms), threaded=True)
    print(f"flask payments ({args.mode}) on http://{args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
