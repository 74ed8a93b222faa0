"""`flask-idempotent` as its README shows it (`Idempotent(app)`, Redis at REDIS_URL;
the key travels in `X-Idempotent-Key`), around a payments view that takes 30 ms (the
provider call) and a read-back view, served by Flask's threaded development server.
The package imports names that Flask 2.3 and Jinja2 3.1 removed, so its venv pins
flask<2.3, werkzeug<2.3, jinja2<3.1. Run by probe_middlewares.py:
`flask_idempotent_app.py PORT REDIS_URL [DB_URL]`; with DB_URL the handler also records
each payment in the app's own database (a Redis there), so a database failure is the
handler's 500 while the middleware's Redis is well."""

import json
import sys
import threading
import time
import uuid

import redis
from flask import Flask, abort, jsonify, request
from flask_idempotent import Idempotent

app = Flask(__name__)
app.config["REDIS_URL"] = sys.argv[2]
Idempotent(app)
PAYMENTS: dict[str, dict] = {}
LOCK = threading.Lock()
DATABASE = redis.Redis.from_url(sys.argv[3], socket_timeout=1) if len(sys.argv) > 3 else None


@app.post("/payments")
def create_payment():
    body = request.get_json(force=True)
    time.sleep(0.03)  # the payment provider
    record = {"id": uuid.uuid4().hex, "status": "paid", "amount": body["amount"]}
    if DATABASE is not None:  # the app's own database: its failure is this handler's 500
        DATABASE.hset("payments", record["id"], json.dumps(record))
        DATABASE.hset("owners", record["id"], request.headers.get("Authorization", ""))
    with LOCK:  # owned by the caller: a user reads only their own payments
        PAYMENTS[record["id"]] = {**record, "owner": request.headers.get("Authorization")}
    return jsonify(record), 201


@app.get("/payments/<payment_id>")
def read_payment(payment_id):
    if DATABASE is not None:  # the payments outlive a restart of the app
        raw = DATABASE.hget("payments", payment_id)
        stored = json.loads(raw) if raw else None
        found = {**stored, "owner": DATABASE.hget("owners", payment_id).decode()} if stored else None
    else:
        found = PAYMENTS.get(payment_id)
    if found is None or found["owner"] != request.headers.get("Authorization"):
        abort(404)
    return jsonify({name: value for name, value in found.items() if name != "owner"})


@app.get("/healthz")
def healthz():
    return jsonify(status="ok")


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=int(sys.argv[1]), threaded=True)
