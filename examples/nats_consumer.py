"""An example message consumer on NATS JetStream and PostgreSQL, for `harness probe` with `messages:`.

The same payments as examples/rabbitmq_consumer.py, consumed from a JetStream stream
by a durable pull consumer (AckWait 2 s: an unacknowledged message comes back 2 s
after it was delivered, whoever held it):

- `--mode correct`: per fetched batch (up to 5 messages), one transaction with each
  message's inbox row (its id: `Nats-Msg-Id`, primary key) and the payment
  (`payment_ref` unique, the domain's key); every message is acknowledged only after
  the commit (and the ack waits for the server's confirmation).
- `--mode ack-before-commit` (the bug): each message is acknowledged as it is fetched,
  before the transaction; a crash before the commit loses the batch.

    python examples/nats_consumer.py --mode correct --port 8096 --nats nats://127.0.0.1:4222 \\
        --subject payments --dsn postgresql://postgres@127.0.0.1:5432/payments

GET /healthz answers 200 once the schema exists and the consumer is subscribed. The
client reconnects on its own after a lost connection; only SIGTERM ends the process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import nats
import nats.errors
import nats.js.errors
import psycopg
from nats.js.api import ConsumerConfig

MODES = ("correct", "ack-before-commit")
BATCH = 5
ACK_WAIT = 2.0
SCHEMA = ("CREATE TABLE IF NOT EXISTS inbox (message_id text PRIMARY KEY, received_at timestamptz DEFAULT now());"
          "CREATE TABLE IF NOT EXISTS payments (id bigserial PRIMARY KEY, payment_ref text NOT NULL UNIQUE, "
          "amount_cents integer NOT NULL, message_id text NOT NULL)")


class Consumer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.mode: str = args.mode
        self.url: str = args.nats
        self.subject: str = args.subject
        self.work = args.work_ms / 1000.0
        self.db = psycopg.connect(args.dsn, autocommit=True)
        self.db.execute(SCHEMA)
        self.ready = threading.Event()

    def apply(self, messages: list[Any]) -> None:
        """One transaction for the batch: inbox row, then the payment, per new message id."""
        with self.db.transaction():
            for msg in messages:
                body = json.loads(msg.data)
                message_id = (msg.headers or {}).get("Nats-Msg-Id") or body["message_id"]
                new = self.db.execute("INSERT INTO inbox (message_id) VALUES (%s) ON CONFLICT DO NOTHING "
                                      "RETURNING 1", (message_id,)).fetchone()
                if new is None:
                    continue  # a redelivery or a copy: already applied, only acknowledged
                # The handler's work (a blocking call, as a synchronous driver makes it).
                threading.Event().wait(self.work)
                self.db.execute("INSERT INTO payments (payment_ref, amount_cents, message_id) VALUES (%s, %s, %s) "
                                "ON CONFLICT (payment_ref) DO NOTHING",
                                (body["payment"], int(body["amount_cents"]), message_id))

    async def run(self) -> None:
        nc = await nats.connect(self.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2, connect_timeout=2)
        js = nc.jetstream()
        try:
            await js.find_stream_name_by_subject(self.subject)
        except nats.js.errors.NotFoundError:
            await js.add_stream(name=re.sub(r"[^A-Za-z0-9_-]", "_", self.subject), subjects=[self.subject])
        sub = await js.pull_subscribe(self.subject, durable="payments-consumer",
                                      config=ConsumerConfig(ack_wait=ACK_WAIT, max_ack_pending=BATCH * 4))
        self.ready.set()
        while True:
            try:
                messages = await sub.fetch(BATCH, timeout=0.5)
            except nats.errors.TimeoutError:
                continue
            except (nats.errors.Error, nats.js.errors.Error, OSError) as error:
                print(f"consumer: fetch failed ({type(error).__name__}); again", file=sys.stderr, flush=True)
                await asyncio.sleep(0.2)
                continue
            try:
                if self.mode == "ack-before-commit":
                    for msg in messages:
                        await msg.ack_sync(timeout=2)
                self.apply(messages)
                if self.mode == "correct":
                    for msg in messages:
                        await msg.ack_sync(timeout=2)
            except (TimeoutError, nats.errors.Error, nats.js.errors.Error, OSError) as error:
                # The ack did not get through (a cut link): JetStream redelivers after AckWait.
                print(f"consumer: ack failed ({type(error).__name__})", file=sys.stderr, flush=True)


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
    parser.add_argument("--nats", required=True)
    parser.add_argument("--subject", default="payments")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--work-ms", type=float, default=40.0)
    args = parser.parse_args()
    consumer = Consumer(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve_health(args.port, consumer)
    asyncio.run(consumer.run())


if __name__ == "__main__":
    main()
