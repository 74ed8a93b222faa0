"""`harness probe` running the service itself (`service:`) versus probing one started by
hand (`--upstream`), and how fast nothing is left after SIGTERM and SIGKILL of a probe.

    .venv/bin/python benchmarks/bench_probe_service.py [--rounds 3] [--duration 3]

The service is the aiohttp payments example (`--mode fixed`, SQLite on disk). Each
round runs both variants back to back, alternating which goes first, as users run
them (`python -m harness probe`, no plan), and times the whole command. Then, twice
per signal, a probe with `service:` on a Toxiproxy it does not own (an embedded one
in this process, given by URL) is signalled two seconds into its load: the time until
the probe has exited, until no process carrying the service's marker is left (/proc),
and until the Toxiproxy holds no proxy. After SIGKILL those two are the janitor's work
(harness.stack.lifeline). Prints Markdown.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import requests

from harness.ports import free_port, wait_for_port
from harness.process_handle import pid_alive
from harness.toxiproxy.server import EmbeddedToxiproxy

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples/payments_service.py"
MARK = "BENCH_PROBE_SERVICE_MARK"
ENDPOINT = """endpoints:
  - {name: pay, path: /payments, body: {amount_cents: "{int:100-999}", currency: EUR, reference: "{uuid}"},
     id: {pointer: /id}, read: {path: "/payments/{id}"}, expect: {created: [201]}}
"""


def service_config(work: Path, token: str, duration: float) -> Path:
    path = work / f"service-{token}.yaml"
    path.write_text(f"""service:
  command: [{sys.executable}, {EXAMPLE}, --mode, fixed, --port, "{{port}}", --db, "{token}.sqlite"]
  env: {{{MARK}: "{token}"}}
  cwd: {work}
  ready: /healthz
{ENDPOINT}load: {{users: 8, duration: {duration}s}}
""")
    return path


def upstream_config(work: Path, duration: float) -> Path:
    path = work / "upstream.yaml"
    path.write_text(f"{ENDPOINT}load: {{users: 8, duration: {duration}s}}\n")
    return path


def probe(*args: str, env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "harness", "probe", *args], env=env, capture_output=True,
                          text=True, timeout=180, check=False)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"probe failed ({done.returncode}): {done.stdout}{done.stderr}")
    return took


def marked(token: str) -> list[int]:
    needle = f"{MARK}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if needle in environ and pid_alive(int(entry)):
                found.append(int(entry))
    return found


def with_service(work: Path, duration: float, env: dict[str, str]) -> float:
    token = uuid.uuid4().hex[:8]
    return probe("--config", str(service_config(work, token, duration)), "--out", str(work / f"own-{token}"),
                 env=env)


def with_upstream(work: Path, duration: float, env: dict[str, str]) -> float:
    token = uuid.uuid4().hex[:8]
    port = free_port()
    server = subprocess.Popen([sys.executable, str(EXAMPLE), "--mode", "fixed", "--port", str(port),
                               "--db", str(work / f"hand-{token}.sqlite")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Started by hand, and ready, before the clock starts: what a user does first.
        if not wait_for_port("127.0.0.1", port, timeout=20):
            raise SystemExit("the example did not start")
        return probe("--config", str(upstream_config(work, duration)), "--upstream", f"127.0.0.1:{port}",
                     "--out", str(work / f"hand-{token}"), env=env)
    finally:
        server.terminate()
        server.wait(timeout=10)


def wall_times(work: Path, rounds: int, duration: float, env: dict[str, str]) -> tuple[list[float], list[float]]:
    own: list[float] = []
    by_hand: list[float] = []
    for index in range(rounds):
        if index % 2 == 0:
            own.append(with_service(work, duration, env))
            by_hand.append(with_upstream(work, duration, env))
        else:
            by_hand.append(with_upstream(work, duration, env))
            own.append(with_service(work, duration, env))
    return own, by_hand


def cleanup_times(work: Path, signum: int, env: dict[str, str]) -> tuple[float, float, float]:
    token = uuid.uuid4().hex[:8]
    out = work / f"signal-{token}"
    with EmbeddedToxiproxy() as toxiproxy:
        child = subprocess.Popen([sys.executable, "-m", "harness", "probe", "--config",
                                  str(service_config(work, token, 30.0)), "--out", str(out),
                                  "--toxiproxy-url", toxiproxy.url], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not any((out / "history").glob("*.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(2.0)
        if not marked(token):
            raise SystemExit("the service was not running when the probe was signalled")
        started = time.monotonic()
        child.send_signal(signum)
        child.wait(timeout=60)
        exited = time.monotonic() - started
        while marked(token) and time.monotonic() - started < 60:
            time.sleep(0.01)
        processes = time.monotonic() - started
        while requests.get(f"{toxiproxy.url}/proxies", timeout=5).json() and time.monotonic() - started < 60:
            time.sleep(0.01)
        proxies = time.monotonic() - started
    return exited, processes, proxies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the wall-time comparison")
    parser.add_argument("--duration", type=float, default=3.0, help="load seconds of each probe")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-probe-service-"))
    env = {**os.environ, "HARNESS_REGISTRY": str(work / "registry")}
    try:
        own, by_hand = wall_times(work, args.rounds, args.duration, env)
        print(f"## `harness probe`, {args.duration:g} s of load, {args.rounds} alternating rounds\n")
        print("| variant | median wall time | all rounds |\n|---|---|---|")
        for name, times in (("`service:` (the probe starts and stops the example)", own),
                            ("`--upstream` (the example started by hand, ready)", by_hand)):
            print(f"| {name} | {statistics.median(times):.2f} s | "
                  f"{', '.join(f'{t:.2f}' for t in times)} |")
        print(f"\nmedian overhead of `service:`: {statistics.median(own) - statistics.median(by_hand):+.2f} s\n")
        print("## Nothing left after a signal mid-run (service on a shared Toxiproxy)\n")
        print("| signal | probe exited | service processes gone | proxies gone |\n|---|---|---|---|")
        for signum in (signal.SIGTERM, signal.SIGKILL):
            for _ in range(2):
                exited, processes, proxies = cleanup_times(work, signum, env)
                print(f"| {signal.Signals(signum).name} | {exited:.2f} s | {processes:.2f} s | {proxies:.2f} s |")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
