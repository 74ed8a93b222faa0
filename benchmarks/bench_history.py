"""History recording overhead: Locust requests/s with and without history, side by side.

Both variants run the same recorded create_order request (harness.load's channel:
fingerprint, invoke, classification, completion, Locust event) against the same
fast stub endpoint; only HARNESS_HISTORY_DIR differs, so the difference is the cost
of writing the records. Runs alternate (off, on, off, on, ...) to spread drift.
bench_history_transport.py imports this module's LOCUSTFILE and stub server.

    .venv/bin/python benchmarks/bench_history.py [--seconds 10] [--rounds 2] [--users 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LOCUSTFILE = '''
from locust import User, constant, events, task

from harness.load.actor import Actor
from harness.load.recording import install, load_process

install(events)
PAYLOAD = {"sku": "sku-1", "quantity": 1, "amount_cents": 1000, "currency": "EUR"}


class BenchUser(User):
    wait_time = constant(0)

    def on_start(self):
        self.actor = Actor(load_process(self.environment), self.host)

    @task
    def create(self):
        key = self.actor.new_id("k")
        self.actor.post("create_order", "/api/v1/orders", PAYLOAD,
                        headers={"Idempotency-Key": key}, tenant="default",
                        fields={"idempotency_key": key, "sku": "sku-1",
                                "quantity": 1, "amount_cents": 1000})
'''

RESPONSE = (b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 44\r\n\r\n"
            b'{"id":"ord-1","status":"INVENTORY_RESERVED"}')


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
            writer.write(RESPONSE)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve(port: int) -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", port, backlog=512)
    async with server:
        await server.serve_forever()


def run_locust(locustfile: Path, host: str, *, users: int, seconds: int,
               history: Path | None) -> tuple[float, float]:
    """(requests per second, CPU microseconds of the Locust process per request)."""
    from harness.names import ENV_FRESH_CONNECTIONS, ENV_HISTORY_DIR, ENV_SEED

    env = {**os.environ, ENV_FRESH_CONNECTIONS: "0", ENV_SEED: "1"}
    env.pop(ENV_HISTORY_DIR, None)
    if history is not None:
        env[ENV_HISTORY_DIR] = str(history)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "-u", str(users),
         "-r", str(users), "-t", f"{seconds}s", "--host", host, "--only-summary", "--json",
         "--stop-timeout", "1"],
        env=env, capture_output=True, text=True, timeout=seconds + 60, cwd=REPO, check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    stats = json.loads(result.stdout)
    requests = sum(entry["num_requests"] for entry in stats)
    first = min(entry["start_time"] for entry in stats)
    last = max(entry["last_request_timestamp"] for entry in stats)
    return requests / max(last - first, 1e-9), cpu / max(requests, 1) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(_serve(args.serve))
        return 0

    sys.path.insert(0, str(REPO))
    from harness.ports import free_port, wait_for_port

    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        if not wait_for_port("127.0.0.1", port, timeout=10):
            raise SystemExit("the stub server did not start")
        with tempfile.TemporaryDirectory() as scratch:
            locustfile = Path(scratch) / "bench_locustfile.py"
            locustfile.write_text(LOCUSTFILE)
            results: dict[str, list[float]] = {"off": [], "on": []}
            cpu: dict[str, list[float]] = {"off": [], "on": []}
            for round_number in range(args.rounds):
                for mode in ("off", "on"):
                    history = Path(scratch) / f"h{round_number}" if mode == "on" else None
                    rps, micros = run_locust(locustfile, f"http://127.0.0.1:{port}", users=args.users,
                                             seconds=args.seconds, history=history)
                    results[mode].append(rps)
                    cpu[mode].append(micros)
                    print(f"round {round_number + 1} history {mode:3}: {rps:8.0f} requests/s, "
                          f"{micros:6.0f} us CPU per request", flush=True)
            off, on = statistics.median(results["off"]), statistics.median(results["on"])
            cpu_off, cpu_on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
            print(f"median requests/s: without history {off:.0f}, with history {on:.0f} "
                  f"({(off - on) / off * 100:.1f}% lower with recording; goal <= 10%)")
            print(f"median CPU per request: without {cpu_off:.0f} us, with {cpu_on:.0f} us "
                  f"({(cpu_on - cpu_off) / cpu_off * 100:.1f}% more; a CPU-bound Locust loses that much rate)")
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
