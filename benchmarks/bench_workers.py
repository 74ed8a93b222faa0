"""Operations/s against the number of Locust worker processes (1, 2, 4), side by side.

Each point is one headless Locust master with N worker processes (`--processes N`,
the way `harness run --workers N` scales: the workers send their histories to the
master over Locust's messaging), the same users in all, recorded operations counted
from the master's history files (completions per second of the history's span).
Rounds alternate the order of N so drift on the shared machine hits each alike.

Targets:
- `stub` (default): a one-process asyncio endpoint that answers every request at
  once, with bench_history_transport.py's recorded create_order user: measures the
  load side (Locust, the recording, the transport);
- `stack`: a real stack (`harness.stack.local.start_stack`: the app under gunicorn, Redis,
  the embedded Toxiproxy, consumers) and the `mixed` scenario: what a `harness run
  mixed --workers N` gets on this machine.

Besides operations/s it prints how busy the machine's cores were during the load
(from /proc/stat), which is where the saturation shows, and writes an SVG plot
(harness.report.plots.line_chart) and the table to `benchmarks/results/`.

    .venv/bin/python benchmarks/bench_workers.py [--target stub|stack|both] [--workers 1,2,4]
        [--seconds 10] [--rounds 2] [--users 40] [--stack-users 100]
        [--plot benchmarks/results/workers.svg]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
COLORS = {"stub": "#2563eb", "stack": "#dc2626"}


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all cores since boot."""
    fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])
    return total - idle, total


def count_operations(history: Path) -> tuple[int, float]:
    """(completed operations, seconds from the first invoke to the last completion)."""
    sys.path.insert(0, str(REPO))
    from harness.history import history_files

    completed, first, last = 0, float("inf"), 0.0
    for path in history_files(history):
        with open(path, "rb") as handle:
            for line in handle:
                record = orjson.loads(line)
                stamp = float(record["time"])
                first, last = min(first, stamp), max(last, stamp)
                if record["type"] != "invoke":
                    completed += 1
    return completed, max(last - first, 1e-9)


def run_point(workers: int, locustfile: Path, host: str, env: dict[str, str], *, users: int,
              seconds: int, scratch: Path) -> tuple[float, float, int, float]:
    """(operations per second, share of all cores busy, history files, cores used by the
    Locust processes) of one run, the last two over the whole run (start and stop included)."""
    from harness.ports import free_port

    history = scratch / f"n{workers}-{os.urandom(3).hex()}"
    port = free_port()
    args = [sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "-u", str(users),
            "-r", str(users), "-t", f"{seconds}s", "--host", host, "--only-summary",
            "--stop-timeout", "3", "--exit-code-on-error", "0", "--harness-root", "",
            "--harness-history-dir", str(history),
            "--processes", str(workers), "--master-bind-host", "127.0.0.1",
            "--master-bind-port", str(port), "--master-host", "127.0.0.1", "--master-port", str(port)]
    busy0, total0 = cpu_times()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, env=env, capture_output=True, text=True, timeout=seconds + 120, cwd=REPO,
                   check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy1, total1 = cpu_times()
    operations, span = count_operations(history)
    files = len(list(history.glob("*.jsonl")))
    # Jiffies of all cores -> seconds per core: total/ncpu is the elapsed wall time.
    cores = os.cpu_count() or 1
    wall = (total1 - total0) / cores / os.sysconf("SC_CLK_TCK")
    locust_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return (operations / span, (busy1 - busy0) / max(total1 - total0, 1e-9), files,
            locust_cpu / max(wall, 1e-9))


def measure(target: str, counts: list[int], args: argparse.Namespace
            ) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """Medians per worker count, for one target: operations/s, share of all cores busy,
    cores used by the Locust processes."""
    from harness.ports import free_port, wait_for_port

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "TARGET_APP_"))}
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        server = None
        stack = None
        try:
            if target == "stub":
                import bench_history
                import bench_history_transport

                port = free_port()
                server = subprocess.Popen([sys.executable, bench_history.__file__, "--serve", str(port)])
                if not wait_for_port("127.0.0.1", port, timeout=10):
                    raise SystemExit("the stub server did not start")
                locustfile = scratch / "bench_locustfile.py"
                locustfile.write_text(bench_history_transport.LOCUSTFILE)
                host = f"http://127.0.0.1:{port}"
                env["HARNESS_FRESH_CONNECTIONS"] = "0"
            else:
                from harness.load.settings import load_environment
                from harness.stack.local import StackSettings, start_stack

                stack = start_stack(StackSettings(
                    root=scratch / "stack", app_workers=2, consumers=2,
                    env={"TARGET_APP_INVENTORY": "sku-1=100000000,sku-2=5"}))
                locustfile = REPO / "harness" / "locustfiles" / "mixed.py"
                host = stack.info.app_url
                env.update(load_environment(stack.info, seed=7))
            rates: dict[int, list[float]] = {n: [] for n in counts}
            busy: dict[int, list[float]] = {n: [] for n in counts}
            load: dict[int, list[float]] = {n: [] for n in counts}
            for round_number in range(args.rounds):
                order = counts if round_number % 2 == 0 else list(reversed(counts))
                for workers in order:
                    users = args.stack_users if target == "stack" else args.users
                    rate, share, files, locust_cores = run_point(
                        workers, locustfile, host, env, users=users, seconds=args.seconds,
                        scratch=scratch)
                    rates[workers].append(rate)
                    busy[workers].append(share)
                    load[workers].append(locust_cores)
                    print(f"round {round_number + 1} {target} workers={workers}: {rate:8.0f} "
                          f"operations/s, all cores busy {share * 100:5.1f}%, Locust processes "
                          f"{locust_cores:.2f} cores ({files} history files)", flush=True)
                    time.sleep(1)
        finally:
            if server is not None:
                server.terminate()
                server.wait(10)
            if stack is not None:
                stack.down()
    return ({n: statistics.median(rates[n]) for n in counts},
            {n: statistics.median(busy[n]) for n in counts},
            {n: statistics.median(load[n]) for n in counts})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("stub", "stack", "both"), default="stub")
    parser.add_argument("--workers", default="1,2,4", help="comma list of worker process counts")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--users", type=int, default=40, help="users against the stub (default 40)")
    parser.add_argument("--stack-users", type=int, default=100,
                        help="users against the stack: mixed waits between steps, so more (default 100)")
    parser.add_argument("--plot", type=Path, help="write the SVG plot here")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.workers.split(",") if x.strip()]
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(HERE))

    targets = ("stub", "stack") if args.target == "both" else (args.target,)
    medians: dict[str, dict[int, float]] = {}
    for target in targets:
        medians[target], busy, load = measure(target, counts, args)
        print(f"| worker processes | median operations/s ({target}) | vs 1 worker | all cores busy "
              f"| cores used by Locust |")
        print("|---:|---:|---:|---:|---:|")
        base = medians[target][counts[0]]
        for n in counts:
            print(f"| {n} | {medians[target][n]:,.0f} | {medians[target][n] / base:.2f}x | "
                  f"{busy[n] * 100:.0f}% | {load[n]:.2f} |", flush=True)
    if args.plot:
        write_plot(args.plot, medians, cpu=os.cpu_count() or 0)
        print(f"plot: {args.plot}")
    return 0


def write_plot(path: Path, medians: dict[str, dict[int, float]], *, cpu: int) -> None:
    """An SVG line per target: operations/s over worker processes (x)."""
    from harness.report.plots import Series, line_chart

    series = [Series(name=f"{target} (median ops/s)", color=COLORS.get(target, "#111827"),
                     points=sorted((float(n), value) for n, value in points.items()))
              for target, points in medians.items()]
    top = max(n for points in medians.values() for n in points)
    svg = line_chart("workers", f"Operations/s against Locust worker processes ({cpu} cores)", series,
                     duration=float(top), y_label="operations/s")
    # line_chart draws run time on x; here x is the number of worker processes.
    svg = svg.replace("seconds since run start", "Locust worker processes")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(svg)


if __name__ == "__main__":
    raise SystemExit(main())
