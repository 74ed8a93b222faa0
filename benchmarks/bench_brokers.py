"""The probe's message side per broker: how fast it publishes and how fast it judges.

    .venv/bin/python benchmarks/bench_brokers.py [--messages 300] [--rounds 3]

Starts a private redis-server, RabbitMQ node (with its management plugin) and
nats-server with JetStream on free loopback ports (the tests' own fixtures'
classes), then per round and per broker, alternating:

- **publish**: the probe's producer (harness.probe.messages.producer) playing
  `--messages` logical messages with no pacing: every kind (duplicates, concurrent
  pairs, same fact under a new id, bursts), each publish confirmed by the broker
  (publisher confirms, JetStream acks, XADD) and recorded in the history;
  publishes per second, wall clock;
- **check**: the message invariants (harness.probe.messages.checks) over that
  history with every fact applied once: publishes judged per second;
- **stats**: one read of the broker's own counts (`Broker.stats()`, the probe's
  redelivery count), in milliseconds.

Prints a Markdown table of the medians. Every server is stopped and its folder
removed at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.history import history_files, iter_operations  # noqa: E402
from harness.probe.brokers import open_broker  # noqa: E402
from harness.probe.config import parse_config  # noqa: E402
from harness.probe.messages.checks import check_messages  # noqa: E402
from harness.probe.messages.play import MessageOutcome  # noqa: E402
from harness.probe.messages.producer import Producer  # noqa: E402
from harness.stack.redis_server import RedisServer  # noqa: E402
from tests.support.nats import NatsServer  # noqa: E402
from tests.support.rabbitmq import RabbitServer  # noqa: E402

BODY = {"message_id": "{message_id}", "payment": "pay-{uuid}", "amount_cents": "{int:100-99999}"}
EFFECTS = {"dsn": "postgresql://postgres@127.0.0.1:5432/unused", "query": "SELECT count(*) FROM p WHERE r = :fact"}


def one_round(broker: str, url: str, management: str | None, messages: int, number: int) -> tuple[float, float, float]:
    entry = {"name": "bench", "broker": broker, "url": url, "queue": f"bench-{number}-{time.monotonic_ns()}",
             "body": BODY, "fact": "/payment", "count": messages, "effects": EFFECTS}
    if management:
        entry["management"] = management
    spec = parse_config({"messages": [entry]}).messages[0].spec
    with tempfile.TemporaryDirectory(prefix="bench-brokers-") as folder:
        history = Path(folder) / "history"
        producer = Producer(spec, history, seed=number, nonce="bench", spread=0.0)
        producer.setup()
        started = time.perf_counter()
        producer.start()
        producer.wait(600)
        publish_seconds = time.perf_counter() - started
        producer.stop()
        if producer.error is not None:
            raise producer.error
        operations = [op for op in iter_operations(history_files(history)) if op.get("op") == "publish"]
        facts = list({str(op["fact"]): op["fact"] for op in operations}.values())
        outcome = MessageOutcome(name="bench", broker=broker, effects=[(fact, 1) for fact in facts], drained=True,
                                 backlog=0, redeliveries=1, stats_current=True)
        started = time.perf_counter()
        check = check_messages(operations, [outcome])
        check_seconds = time.perf_counter() - started
        assert all(inv.passed for inv in check.invariants)
    reader = open_broker(spec.target)
    try:
        reader.stats()  # connect first
        started = time.perf_counter()
        for _ in range(10):
            reader.stats()
        stats_ms = (time.perf_counter() - started) / 10 * 1000
    finally:
        reader.close()
    return len(operations) / publish_seconds, len(operations) / check_seconds, stats_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300, help="logical messages per round and broker")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    redis_dir = Path(tempfile.mkdtemp(prefix="bench-redis-"))
    redis = RedisServer(data_dir=redis_dir)
    rabbit, nats = RabbitServer(), NatsServer()
    stops: list[Callable[[], None]] = []
    try:
        for server in (redis, rabbit, nats):
            server.start()
            stops.append(server.stop)
        targets = {"redis-streams": (redis.url, None), "rabbitmq": (rabbit.url, rabbit.management_url),
                   "nats": (nats.url, None)}
        results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in targets}
        for number in range(args.rounds):
            for name, (url, management) in targets.items():
                results[name].append(one_round(name, url, management, args.messages, number))
        print(f"{args.messages} logical messages per round, {args.rounds} rounds (medians)\n")
        print("| broker | publishes/s (confirmed, recorded) | judged publishes/s | one stats read (ms) |")
        print("|---|---:|---:|---:|")
        for name, rows in results.items():
            publish, judged, stats_ms = (statistics.median(column) for column in zip(*rows, strict=True))
            print(f"| {name} | {publish:,.0f} | {judged:,.0f} | {stats_ms:.1f} |")
    finally:
        for stop in reversed(stops):
            stop()
        import shutil

        shutil.rmtree(redis_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
