"""Report benchmark: time of `write_reports` (result.json, junit.xml, report.html with
a timeline per violation) on a generated run of 10^5 operations.

    .venv/bin/python benchmarks/bench_report.py                  # 10^5 operations, 50 violations
    .venv/bin/python benchmarks/bench_report.py --operations 1000000 --repeat 1

The run is bench_checker's (8 load processes, a correct app's export) with
`--violations` orders paid twice, so `one_payment_per_order` fails and the report
draws its timelines (at most harness.report.timeline.MAX_TIMELINES). The run is
checked once, untimed; then `write_reports` is timed `--repeat` times, alternating
with the history pass the report made before timelines (the per-second series alone), so
what the timelines add is measured on the same machine in the same run.
Results go to benchmarks/README.md by hand.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_checker import generate  # noqa: E402

from harness.check.checker import check_run  # noqa: E402
from harness.history import iter_operations  # noqa: E402
from harness.report.run_report import write_reports  # noqa: E402
from harness.report.series import build_series  # noqa: E402
from harness.run.rundir import RunDir  # noqa: E402

OPS_PER_ORDER = 11  # bench_checker: 7 per order plus 4 per duplicate round (one round)


def _alternating(first: Callable[[], object], second: Callable[[], object],
                 repeat: int) -> tuple[list[float], list[float]]:
    """Each action `repeat` times, alternating, so a busy machine slows both alike."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for action, into in ((first, times[0]), (second, times[1])):
            started = time.perf_counter()
            action()
            into.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=100_000)
    parser.add_argument("--violations", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        run_dir = Path(folder) / "run"
        operations = generate(run_dir, orders=args.operations // OPS_PER_ORDER, rounds=1,
                              duplicates=args.violations)
        run = RunDir(run_dir)
        result = check_run(run)
        series_only, reports = _alternating(lambda: build_series(iter_operations(run.history_files())),
                                            lambda: write_reports(run, result), args.repeat)
        html = run.report.read_text()
        print(f"operations {operations:,}, verdict {result.verdict}, "
              f"violations {sum(i.violation_count for i in result.invariants)}")
        print(f"history pass, series only (the report before timelines): "
              f"median {statistics.median(series_only):.2f} s  (runs: {', '.join(f'{t:.2f}' for t in series_only)})")
        print(f"write_reports with timelines: median {statistics.median(reports):.2f} s  "
              f"(runs: {', '.join(f'{t:.2f}' for t in reports)})")
        print(f"report.html {len(html.encode()) / 1024:.0f} KiB, {html.count('data-timeline=')} timelines, "
              f"{html.count(chr(60) + 'rect class=' + chr(39) + 'op ')} operation bars")


if __name__ == "__main__":
    main()
