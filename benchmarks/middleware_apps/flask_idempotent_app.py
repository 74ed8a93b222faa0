"""`flask-idempotent` as its README shows it (`Idempotent(app)`, Redis at REDIS_URL;
the key travels in `X-Idempotent-Key`), around a payments view that takes 30 ms (the
provider call) and a read-back view, served by Flask's threaded development server.
The package imports names that Flask 2.3 and Jinja2 3.1 removed, so its venv pins
flask<2.3, werkzeug<2.3, jinja2<3.1. Run by probe_middlewares.py."""

import sys
import threading
import time
import uuid

from flask import Flask, abort, jsonify, request
from flask_idempotent import Idempotent

app = Flask(__name__)
app.config["REDIS_URL"] = sys.argv[2]
Idempotent(app)
PAYMENTS: dict[str, dict] = {}
LOCK = threading.Lock()


@app.post("/payments")
def create_payment():
    body = request.get_json(force=True)
    time.sleep(0.03)  # the payment provider
    record = {"id": uuid.uuid4().hex, "status": "paid", "amount": body["amount"]}
    with LOCK:
        PAYMENTS[record["id"]] = record
    return jsonify(record), 201


@app.get("/payments/<payment_id>")
def read_payment(payment_id):
    if payment_id not in PAYMENTS:
        abort(404)
    return jsonify(PAYMENTS[payment_id])


@app.get("/healthz")
def healthz():
    return jsonify(status="ok")


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=int(sys.argv[1]), threaded=True)
