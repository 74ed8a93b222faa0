"""End to end: the `mixed` scenario with no faults through the embedded Toxiproxy.

Runs `harness run mixed` (its own stack: gunicorn, two consumers, the embedded
Toxiproxy; Locust on the same machine) and reads the run's histories: completed
operations per second over the load window, and p50 / p99 latency per operation
type. With `--smoke` it also times a whole `harness smoke` (stack starts included).

    .venv/bin/python benchmarks/bench_e2e.py [--users 30] [--duration 30] [--processes 1] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from harness.history import iter_operations
from harness.run.rundir import RunDir
from harness.run.runner import RunSpec, run


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure_mixed(users: int, duration: float, processes: int, workdir: Path) -> int:
    outcome = run(RunSpec(scenario="mixed", users=users, duration=duration, processes=processes,
                          runs_root=workdir / "runs", attach=False, progress=False))
    latencies: dict[str, list[float]] = defaultdict(list)
    outcomes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    first, last = float("inf"), 0.0
    for op in iter_operations(RunDir(outcome.run_dir).history_files()):
        outcomes[op["op"]][op["type"]] += 1
        if op.get("complete_time") is None:
            continue
        first = min(first, op["invoke_time"])
        last = max(last, op["complete_time"])
        if op["type"] != "info":
            latencies[op["op"]].append((op["complete_time"] - op["invoke_time"]) * 1000)
    window = last - first
    total = sum(sum(kinds.values()) for kinds in outcomes.values())
    print(f"mixed, {users} users, {processes} Locust process(es), {duration:g}s, no faults")
    print(f"verdict: {outcome.summary}")
    print(f"operations: {total} in {window:.1f}s = {total / window:.0f} ops/s")
    print(f"{'operation':<14}{'count':>8}{'ok':>8}{'fail':>7}{'info':>7}{'p50 ms':>9}{'p99 ms':>9}")
    for name in sorted(outcomes):
        kinds = outcomes[name]
        values = latencies[name]
        p50 = percentile(values, 0.50) if values else float("nan")
        p99 = percentile(values, 0.99) if values else float("nan")
        print(f"{name:<14}{sum(kinds.values()):>8}{kinds['ok']:>8}{kinds['fail']:>7}{kinds['info']:>7}"
              f"{p50:>9.1f}{p99:>9.1f}")
    every = [v for values in latencies.values() for v in values]
    if every:
        print(f"{'all':<14}{total:>8}{'':>22}{statistics.median(every):>9.1f}{percentile(every, 0.99):>9.1f}")
    return outcome.exit_code


def measure_smoke(workdir: Path) -> int:
    started = time.monotonic()
    completed = subprocess.run([sys.executable, "-m", "harness.cli", "smoke", "--runs-dir",
                                str(workdir / "smoke-runs")], cwd=workdir,
                               capture_output=True, text=True)
    elapsed = time.monotonic() - started
    print(f"harness smoke (defaults): exit {completed.returncode}, wall {elapsed:.0f}s")
    return completed.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="also time `harness smoke`")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as scratch:
        workdir = Path(scratch)
        code = measure_mixed(args.users, args.duration, args.processes, workdir)
        if args.smoke:
            code = max(code, measure_smoke(workdir))
    return code


if __name__ == "__main__":
    sys.exit(main())
