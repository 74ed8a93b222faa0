"""Histories over Locust's messaging vs local files: requests/s side by side in one run.

Every variant runs the same recorded create_order request (bench_history.py's
locustfile and stub server, imported: fingerprint, invoke, classification,
completion, Locust event) from ONE
load-generating Locust process against the same fast stub endpoint; they differ in
where the records go:

- `files`: a standalone Locust process appends its records to its own history file
  (how a single-process run records);
- `messages`: a Locust master and one worker (`--processes 1`): the worker sends its
  records to the master in batches (harness.load.transport), the master writes them;
- `distributed-none`: the same master and worker with no history at all, to tell the
  cost of the transport from the cost of Locust's master/worker mode itself.

Rounds alternate the variants so drift on the shared machine hits each alike. The
goal: `messages` at most 10% fewer requests/s than `files`.

    .venv/bin/python benchmarks/bench_history_transport.py [--seconds 10] [--rounds 3] [--users 20]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VARIANTS = ("files", "messages", "distributed-none")


def run_variant(variant: str, locustfile: Path, host: str, *, users: int, seconds: int,
                scratch: Path) -> tuple[float, float, int]:
    """(requests per second, CPU microseconds per request of all Locust processes, records)."""
    sys.path.insert(0, str(REPO))
    from harness.history import history_files
    from harness.ports import free_port

    history = scratch / f"{variant}-{os.urandom(3).hex()}"
    args = [sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "-u", str(users),
            "-r", str(users), "-t", f"{seconds}s", "--host", host, "--only-summary", "--json",
            "--stop-timeout", "2", "--harness-root", "", "--harness-fresh-connections", "0",
            "--harness-seed", "1"]
    if variant != "distributed-none":
        args += ["--harness-history-dir", str(history)]
    if variant != "files":
        port = free_port()
        args += ["--processes", "1", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                 "--master-host", "127.0.0.1", "--master-port", str(port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "TARGET_APP_"))}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=seconds + 90,
                            cwd=REPO, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    stats = _last_json(result.stdout)
    requests = sum(entry["num_requests"] for entry in stats)
    first = min(entry["start_time"] for entry in stats)
    last = max(entry["last_request_timestamp"] for entry in stats)
    lines = sum(1 for path in history_files(history) for _ in open(path, "rb")) if history.exists() else 0
    return requests / max(last - first, 1e-9), cpu / max(requests, 1) * 1e6, lines


def _last_json(stdout: str) -> list[dict[str, Any]]:
    decoder, position, stats = json.JSONDecoder(), 0, []
    while stdout[position:].strip():
        position += len(stdout[position:]) - len(stdout[position:].lstrip())
        stats, position = decoder.raw_decode(stdout, position)
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--users", type=int, default=20)
    args = parser.parse_args(argv)

    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(HERE))
    import bench_history

    from harness.ports import free_port, wait_for_port

    port = free_port()
    server = subprocess.Popen([sys.executable, bench_history.__file__, "--serve", str(port)])
    try:
        if not wait_for_port("127.0.0.1", port, timeout=10):
            raise SystemExit("the stub server did not start")
        with tempfile.TemporaryDirectory() as scratch_dir:
            scratch = Path(scratch_dir)
            locustfile = scratch / "bench_locustfile.py"
            locustfile.write_text(bench_history.LOCUSTFILE)  # its user and request, one copy
            rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
            cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for round_number in range(args.rounds):
                order = VARIANTS if round_number % 2 == 0 else tuple(reversed(VARIANTS))
                for variant in order:
                    rps, micros, lines = run_variant(variant, locustfile, f"http://127.0.0.1:{port}",
                                                     users=args.users, seconds=args.seconds,
                                                     scratch=scratch)
                    rates[variant].append(rps)
                    cpu[variant].append(micros)
                    print(f"round {round_number + 1} {variant:16}: {rps:8.0f} requests/s, "
                          f"{micros:6.0f} us CPU per request (all Locust processes), "
                          f"{lines} history records", flush=True)
            medians = {v: statistics.median(rates[v]) for v in VARIANTS}
            cpu_medians = {v: statistics.median(cpu[v]) for v in VARIANTS}
            print("| variant | median requests/s | median CPU us/request |")
            print("|---|---:|---:|")
            for variant in VARIANTS:
                print(f"| {variant} | {medians[variant]:.0f} | {cpu_medians[variant]:.0f} |")
            files, messages = medians["files"], medians["messages"]
            print(f"messages vs files: {(files - messages) / files * 100:+.1f}% fewer requests/s "
                  f"(goal <= 10%); vs distributed without history: "
                  f"{(medians['distributed-none'] - messages) / medians['distributed-none'] * 100:+.1f}%")
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
