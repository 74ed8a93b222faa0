"""An example message consumer on RabbitMQ and PostgreSQL, for `harness probe` with `messages:`.

Each message is a payment: `{"message_id": ..., "payment": "pay-...", "amount_cents": N}`.
The consumer records the payment once, however often the message comes:

- `--mode correct`: in one transaction per batch, the inbox row (the message id, primary key:
  a redelivery or a copy of the same id finds it and is acknowledged without effect)
  and the payment, whose `payment_ref` is the domain's unique key (the same payment
  under a new message id is a no-op); the ack is sent only after the commit, so a
  crash before it means a redelivery, which the inbox absorbs.

The buggy modes, each a classic way of losing or doubling a message:

- `auto-ack`: the broker counts a message as acknowledged when it sends it; the
  messages a killed consumer held are lost.
- `ack-before-commit`: ack first, then the transaction; a crash between them loses it.
- `inbox-outside-transaction`: the inbox row commits on its own before the handler
  runs; a crash in between, and the redelivery is skipped as a duplicate: lost.
- `no-domain-guard`: the inbox dedupes by message id only and the payment table has
  no unique key on `payment_ref`: the same payment under a new id is paid twice.
- `reject-redelivered`: a message flagged `redelivered` is taken for a poison message
  and rejected without requeue, so it goes to the dead-letter queue (`--dead-letter`):
  a valid payment whose first delivery died with a crashed consumer is never paid.
- `discard`: every message is acknowledged and nothing is written: a consumer that
  applies nothing, which no run may ever PASS (even against the rows and the broker
  counters an earlier run left).

    python examples/rabbitmq_consumer.py --mode correct --port 8095 \\
        --amqp amqp://guest:guest@127.0.0.1:5672/%2F --queue payments \\
        --dsn postgresql://postgres@127.0.0.1:5432/payments

Messages are handled in batches (what arrives within 50 ms, at most the prefetch
count of 5), one transaction per batch, acknowledged together (`multiple`). GET
/healthz answers 200 once the schema exists and the consumer is connected (the probe
waits for it; without `--port` there is no health server, and the consumer prints
"consumer: consuming QUEUE" when it is connected: `service.ready.log`); each
message's work takes `--work-ms` (default 40 ms), inside the window
each buggy mode gets wrong, so a kill lands there while the consumer is busy. Broker
connection losses are survived by reconnecting (pika heartbeats of 2 s, so a
blackholed link is noticed quickly); only SIGTERM ends the process.
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

import pika  # type: ignore[import-untyped]
import pika.exceptions  # type: ignore[import-untyped]
import psycopg

MODES = ("correct", "auto-ack", "ack-before-commit", "inbox-outside-transaction", "no-domain-guard",
         "reject-redelivered", "discard")
PREFETCH = 5


def schema(mode: str) -> str:
    unique = "" if mode == "no-domain-guard" else " UNIQUE"
    return ("CREATE TABLE IF NOT EXISTS inbox (message_id text PRIMARY KEY, received_at timestamptz DEFAULT now());"
            f"CREATE TABLE IF NOT EXISTS payments (id bigserial PRIMARY KEY, payment_ref text NOT NULL{unique}, "
            "amount_cents integer NOT NULL, message_id text NOT NULL)")


class Consumer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.mode: str = args.mode
        self.amqp: str = args.amqp
        self.queue: str = args.queue
        self.dead_letter: str | None = args.dead_letter
        self.work = args.work_ms / 1000.0
        self.db = psycopg.connect(args.dsn, autocommit=True)
        self.db.execute(schema(self.mode))
        self.connected = threading.Event()
        self.stopping = threading.Event()

    # --- the handler -----------------------------------------------------------------

    def _inbox(self, message_id: str) -> bool:
        """True when the message id is new (the row is inserted in the current transaction)."""
        row = self.db.execute("INSERT INTO inbox (message_id) VALUES (%s) ON CONFLICT DO NOTHING RETURNING 1",
                              (message_id,)).fetchone()
        return row is not None

    def _pay(self, body: dict[str, Any], message_id: str) -> None:
        conflict = "" if self.mode == "no-domain-guard" else " ON CONFLICT (payment_ref) DO NOTHING"
        self.db.execute("INSERT INTO payments (payment_ref, amount_cents, message_id) VALUES (%s, %s, %s)"
                        + conflict, (body["payment"], int(body["amount_cents"]), message_id))

    def handle(self, channel: Any, batch: list[tuple[Any, Any, bytes]]) -> None:
        """One batch of deliveries (up to the prefetch count), in one transaction."""
        if self.mode == "reject-redelivered":
            for method, _, _ in batch:
                if method.redelivered:
                    channel.basic_reject(method.delivery_tag, requeue=False)
            batch = [item for item in batch if not item[0].redelivered]
            if not batch:
                return
        messages = [(properties.message_id or json.loads(raw)["message_id"], json.loads(raw))
                    for _, properties, raw in batch]
        last = batch[-1][0].delivery_tag
        if self.mode == "discard":
            channel.basic_ack(last, multiple=True)
            return

        def ack() -> None:
            if self.mode != "auto-ack":
                channel.basic_ack(last, multiple=True)

        if self.mode == "ack-before-commit":
            ack()
        if self.mode == "inbox-outside-transaction":
            with self.db.transaction():
                new = [(message_id, body) for message_id, body in messages if self._inbox(message_id)]
            # The inbox rows are committed here, before the effects.
            with self.db.transaction():
                for message_id, body in new:
                    time.sleep(self.work)
                    self._pay(body, message_id)
        else:
            with self.db.transaction():
                for message_id, body in messages:
                    if self._inbox(message_id):
                        time.sleep(self.work)
                        self._pay(body, message_id)
        if self.mode != "ack-before-commit":
            ack()

    # --- the broker ------------------------------------------------------------------

    def run(self) -> None:
        while not self.stopping.is_set():
            connection = None
            try:
                parameters = pika.URLParameters(self.amqp)
                parameters.heartbeat = 2
                parameters.blocked_connection_timeout = 5
                parameters.socket_timeout = 1
                parameters.connection_attempts = 1
                connection = pika.BlockingConnection(parameters)
                channel = connection.channel()
                arguments = {}
                if self.dead_letter:
                    channel.queue_declare(self.dead_letter, durable=True)
                    arguments = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": self.dead_letter}
                channel.queue_declare(self.queue, durable=True, arguments=arguments)
                channel.basic_qos(prefetch_count=PREFETCH)
                if not self.connected.is_set():
                    print(f"consumer: consuming {self.queue}", file=sys.stderr, flush=True)
                self.connected.set()
                batch: list[tuple[Any, Any, bytes]] = []
                for method, properties, raw in channel.consume(self.queue, auto_ack=self.mode == "auto-ack",
                                                               inactivity_timeout=0.05):
                    if self.stopping.is_set():
                        break
                    if method is not None:
                        batch.append((method, properties, raw))
                        if len(batch) < PREFETCH:
                            continue  # a batch is what arrives within 50 ms, at most PREFETCH
                    if batch:
                        self.handle(channel, batch)
                        batch = []
            except (pika.exceptions.AMQPError, OSError) as error:
                print(f"consumer: broker connection lost ({type(error).__name__}); reconnecting", file=sys.stderr,
                      flush=True)
                time.sleep(0.2)
            finally:
                if connection is not None and connection.is_open:
                    try:
                        connection.close()
                    except (pika.exceptions.AMQPError, OSError):
                        pass


def serve_health(port: int, consumer: Consumer) -> ThreadingHTTPServer:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            ready = self.path == "/healthz" and consumer.connected.is_set()
            self.send_response(200 if ready else 503)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"ready": ready, "mode": consumer.mode}).encode())

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server API
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, default="correct")
    parser.add_argument("--port", type=int, help="the health server's port (none without it)")
    parser.add_argument("--amqp", required=True)
    parser.add_argument("--queue", default="payments")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--work-ms", type=float, default=40.0)
    parser.add_argument("--dead-letter", help="the dead-letter queue of --queue (declared with it)")
    args = parser.parse_args()
    consumer = Consumer(args)
    signal.signal(signal.SIGTERM, lambda *_: (consumer.stopping.set(), sys.exit(0)))
    if args.port is not None:
        serve_health(args.port, consumer)
    consumer.run()


if __name__ == "__main__":
    main()
