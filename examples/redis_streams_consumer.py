"""An example message consumer on Redis Streams and PostgreSQL, for `harness probe` with `messages:`.

The same payments as examples/rabbitmq_consumer.py, read from a stream by a consumer
group. Redis redelivers nothing by itself: an entry stays pending until XACK, so the
consumer claims every entry idle for more than 1 s (`XAUTOCLAIM`: its own previous
incarnation's after a crash, or a dead colleague's) before it reads new ones.

- `--mode correct`: per batch (up to 5 entries), one transaction with each entry's
  inbox row (its `message_id` field, primary key) and the payment (`payment_ref`
  unique); XACK only after the commit.
- `--mode ack-before-commit` (the bug): XACK first, then the transaction; a crash
  between them loses the batch.

    python examples/redis_streams_consumer.py --mode correct --port 8097 \\
        --redis redis://127.0.0.1:6379/0 --stream payments \\
        --dsn postgresql://postgres@127.0.0.1:5432/payments

GET /healthz answers 200 once the schema and the group exist. A lost Redis
connection is survived by trying again; only SIGTERM ends the process.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
import redis

MODES = ("correct", "ack-before-commit")
GROUP = "payments"
BATCH = 5
CLAIM_IDLE_MS = 1000
SCHEMA = ("CREATE TABLE IF NOT EXISTS inbox (message_id text PRIMARY KEY, received_at timestamptz DEFAULT now());"
          "CREATE TABLE IF NOT EXISTS payments (id bigserial PRIMARY KEY, payment_ref text NOT NULL UNIQUE, "
          "amount_cents integer NOT NULL, message_id text NOT NULL)")


class Consumer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.mode: str = args.mode
        self.stream: str = args.stream
        self.work = args.work_ms / 1000.0
        self.client = redis.Redis.from_url(args.redis, socket_timeout=2, socket_connect_timeout=2)
        self.db = psycopg.connect(args.dsn, autocommit=True)
        self.db.execute(SCHEMA)
        self.ready = threading.Event()

    def apply(self, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        with self.db.transaction():
            for _, fields in entries:
                body = json.loads(fields[b"body"])
                message_id = fields.get(b"message_id", b"").decode() or body["message_id"]
                new = self.db.execute("INSERT INTO inbox (message_id) VALUES (%s) ON CONFLICT DO NOTHING "
                                      "RETURNING 1", (message_id,)).fetchone()
                if new is None:
                    continue
                time.sleep(self.work)
                self.db.execute("INSERT INTO payments (payment_ref, amount_cents, message_id) VALUES (%s, %s, %s) "
                                "ON CONFLICT (payment_ref) DO NOTHING",
                                (body["payment"], int(body["amount_cents"]), message_id))

    def next_batch(self) -> list[tuple[bytes, dict[bytes, bytes]]]:
        claimed = self.client.xautoclaim(self.stream, GROUP, "worker", min_idle_time=CLAIM_IDLE_MS, count=BATCH)
        entries = [entry for entry in claimed[1] if entry[1]] if claimed else []
        if entries:
            return entries
        read = self.client.xreadgroup(GROUP, "worker", {self.stream: ">"}, count=BATCH, block=200)
        return list(read[0][1]) if read else []

    def run(self) -> None:
        while True:
            try:
                try:
                    self.client.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
                except redis.ResponseError as error:
                    if "BUSYGROUP" not in str(error):
                        raise
                self.ready.set()
                while True:
                    entries = self.next_batch()
                    if not entries:
                        continue
                    ids = [entry_id for entry_id, _ in entries]
                    if self.mode == "ack-before-commit":
                        self.client.xack(self.stream, GROUP, *ids)
                    self.apply(entries)
                    if self.mode == "correct":
                        self.client.xack(self.stream, GROUP, *ids)
            except (redis.ConnectionError, redis.TimeoutError, OSError) as error:
                print(f"consumer: redis connection lost ({type(error).__name__}); again", file=sys.stderr,
                      flush=True)
                time.sleep(0.2)


def serve_health(port: int, consumer: Consumer) -> None:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            ready = self.path == "/healthz" and consumer.ready.is_set()
            self.send_response(200 if ready else 503)
            self.end_headers()
            self.wfile.write(json.dumps({"ready": ready, "mode": consumer.mode}).encode())

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server API
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, default="correct")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--redis", required=True)
    parser.add_argument("--stream", default="payments")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--work-ms", type=float, default=40.0)
    args = parser.parse_args()
    consumer = Consumer(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve_health(args.port, consumer)
    consumer.run()


if __name__ == "__main__":
    main()
