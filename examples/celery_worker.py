"""An example Celery worker on RabbitMQ or Redis and PostgreSQL, for `harness probe` with
`messages:` entries of `protocol: celery` (docs/celery.md).

The task `shop.charge(order_id, amount_cents)` writes one charge row. Every mode runs
with `acks_late=True` and `task_reject_on_worker_lost=True`, as teams configure
Celery so that a task whose worker died is not lost: the message is acknowledged only
after the task returns, so a worker killed after the charge and before the ack gets
the message back.

- `naive`: inserts a row on every run: a redelivered message (after a kill), a
  re-sent task id or the same order under a new task id each charges again.
- `dedupe`: `INSERT ... ON CONFLICT (order_id) DO NOTHING` in the task's transaction
  (a unique index on order_id): every copy after the first is a no-op. Correct.
- `mark-after`: checks a `charged` table for the order, charges in one transaction,
  then marks the order in a second one: correct for copies that come after the mark,
  wrong only in the crash window between the two commits.

    python examples/celery_worker.py --mode dedupe --port 8096 \\
        --broker amqp://guest:guest@127.0.0.1:5672// --queue celery \\
        --dsn postgresql://postgres@127.0.0.1:5432/shop

The worker runs in this process (`--pool solo`, one task at a time: a kill of this
process is a kill of the task), or with `--pool prefork` in `--concurrency` (default 2)
child processes it forks, where a kill of one child (`process: {action: kill_child}`
in a plan) is Celery's WorkerLostError: the task's message is rejected and requeued. A worker has no HTTP port, so a small health thread
answers GET /healthz on `--port` with 200 once the schema exists and Celery's
`worker_ready` signal came (the probe's readiness waits for it). Each task sleeps
`--work-ms` (default 60 ms) after the charge's commit, before it returns (and is
acknowledged), so a kill lands in the window the buggy modes get wrong.
`--visibility-timeout` (Redis only, default 5 s) is kombu's: how long a delivered,
unacknowledged message waits before a worker's restore sweep puts it back.
"""

from __future__ import annotations

import argparse
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
from celery import Celery
from celery.signals import worker_ready

MODES = ("naive", "dedupe", "mark-after")
TASK = "shop.charge"
READY = threading.Event()
SETTINGS: dict[str, Any] = {}

app = Celery("shop")


def schema(dsn: str, mode: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS charges (id bigserial PRIMARY KEY, order_id text NOT NULL, "
                     "amount_cents integer NOT NULL, task_id text, at timestamptz DEFAULT now())")
        conn.execute("CREATE TABLE IF NOT EXISTS charged (order_id text PRIMARY KEY)")
        if mode == "dedupe":
            conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS charges_order_once ON charges (order_id)")


@app.task(name=TASK, bind=True, acks_late=True, reject_on_worker_lost=True)
def charge(self: Any, order_id: str, amount_cents: int) -> str:
    mode, dsn = SETTINGS["mode"], SETTINGS["dsn"]
    task_id = self.request.id
    with psycopg.connect(dsn) as conn:
        if mode == "naive":
            conn.execute("INSERT INTO charges (order_id, amount_cents, task_id) VALUES (%s, %s, %s)",
                         (order_id, int(amount_cents), task_id))
        elif mode == "dedupe":
            conn.execute("INSERT INTO charges (order_id, amount_cents, task_id) VALUES (%s, %s, %s) "
                         "ON CONFLICT (order_id) DO NOTHING", (order_id, int(amount_cents), task_id))
        else:  # mark-after: the check, the charge, and only then (a second transaction) the mark
            if conn.execute("SELECT 1 FROM charged WHERE order_id = %s", (order_id,)).fetchone():
                return "already"
            conn.execute("INSERT INTO charges (order_id, amount_cents, task_id) VALUES (%s, %s, %s)",
                         (order_id, int(amount_cents), task_id))
            conn.commit()
            time.sleep(SETTINGS["work"])  # the crash window: charged, not yet marked
            conn.execute("INSERT INTO charged (order_id) VALUES (%s) ON CONFLICT DO NOTHING", (order_id,))
    time.sleep(SETTINGS["work"])  # committed, not yet acknowledged
    return "charged"


@worker_ready.connect
def _ready(**_: Any) -> None:
    READY.set()


def serve_health(port: int) -> None:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            status = 200 if READY.is_set() and self.path == "/healthz" else 503
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server API
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, default="dedupe")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--broker", required=True)
    parser.add_argument("--queue", default="celery")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--work-ms", type=float, default=60.0)
    parser.add_argument("--visibility-timeout", type=float, default=5.0)
    parser.add_argument("--pool", choices=("solo", "prefork"), default="solo")
    parser.add_argument("--concurrency", type=int, default=2, help="child processes with --pool prefork")
    args = parser.parse_args()
    SETTINGS.update(mode=args.mode, dsn=args.dsn, work=args.work_ms / 1000)
    schema(args.dsn, args.mode)
    app.conf.update(broker_url=args.broker, task_default_queue=args.queue, worker_prefetch_multiplier=1,
                    broker_connection_retry_on_startup=True, worker_hijack_root_logger=False,
                    broker_transport_options={"visibility_timeout": args.visibility_timeout},
                    task_acks_late=True, task_reject_on_worker_lost=True)
    serve_health(args.port)
    pool = ["--pool", "solo"] if args.pool == "solo" else ["--pool", "prefork", "--concurrency", str(args.concurrency)]
    app.worker_main(["worker", *pool, "--queues", args.queue, "--loglevel", "INFO",
                     "--without-gossip", "--without-mingle", "--without-heartbeat"])


if __name__ == "__main__":
    main()
