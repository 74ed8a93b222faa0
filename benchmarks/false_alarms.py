"""False alarms: the correct app under a fault plan, on many seeds, must always pass.

A checker that fails correct runs is as useless as one that passes broken ones, and
a flaky verdict teaches users to ignore it. This runs `mixed` (every channel at
once) under each plan, by default `chaos` (random network and process faults) and
`crash-points` (a failure at every step boundary of the app), on N different seeds,
each with a fresh stack, and prints one line per seed with the verdict, the
operations and the faults applied (for crash points, how often they fired). Any
verdict other than PASS is listed with its reason; the exit code is 0 only when
every seed of every plan passed.

    .venv/bin/python benchmarks/false_alarms.py [--seeds 20] [--users 10] [--duration 10]
    .venv/bin/python benchmarks/false_alarms.py --plan crash-points --seeds 20
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path

from harness.bundled import plan_path
from harness.errors import HarnessError
from harness.run.rundir import RunDir
from harness.run.runner import RunSpec, run

PLANS = ("chaos", "crash-points")


def crash_point_hits(run_dir: Path) -> int:
    """How often the run's crash points fired (faults.jsonl's `hits`)."""
    return sum(int(fault.get("hits") or 0) for fault in RunDir(run_dir).read_faults(strict=False)
               if fault.get("kind") == "crash_point")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="how many seeds (1..N; default 20)")
    parser.add_argument("--first-seed", type=int, default=1, help="the first seed (default 1)")
    parser.add_argument("--users", type=int, default=10, help="Locust users per run (default 10)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load per run (default 10)")
    parser.add_argument("--scenario", default="mixed", help="scenario (default mixed)")
    parser.add_argument("--plan", action="append", dest="plans", metavar="NAME|PATH",
                        help=f"a bundled plan or a plan file; repeat for several (default {', '.join(PLANS)})")
    args = parser.parse_args(argv)

    failed = 0
    started = time.monotonic()
    for plan in args.plans or PLANS:
        path = plan_path(plan)
        verdicts: dict[str, int] = {}
        began_plan = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="false-alarms-") as workdir:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                spec = RunSpec(scenario=args.scenario, users=args.users, duration=args.duration,
                               plan=path, seed=seed, runs_root=Path(workdir) / "runs",
                               attach=False, progress=False, app_workers=2)
                began = time.monotonic()
                try:
                    outcome = run(spec, out=io.StringIO())
                except HarnessError as error:  # the harness failed: counted, and the next seed runs
                    verdicts["harness error"] = verdicts.get("harness error", 0) + 1
                    print(f"{path.stem} seed {seed:3d}: HARNESS ERROR {time.monotonic() - began:5.1f} s  {error}",
                          flush=True)
                    continue
                check = outcome.check
                verdict = check.verdict
                verdicts[verdict] = verdicts.get(verdict, 0) + 1
                counts = check.counts
                hits = crash_point_hits(outcome.run_dir)
                print(f"{path.stem} seed {seed:3d}: {verdict.upper():12s} "
                      f"{counts.get('operations', 0):6d} operations {counts.get('faults', 0):3d} faults "
                      + (f"{hits:3d} crash-point hits " if hits else "")
                      + f"{time.monotonic() - began:5.1f} s"
                      + ("" if verdict == "pass" else f"  {outcome.summary}"), flush=True)
        total = sum(verdicts.values())
        failed += total - verdicts.get("pass", 0)
        print(f"{path.stem}: {verdicts.get('pass', 0)}/{total} seeds passed "
              f"({', '.join(f'{n} {v}' for v, n in sorted(verdicts.items()))}) "
              f"in {time.monotonic() - began_plan:.0f} s", flush=True)
    print(f"{'every seed passed' if not failed else f'{failed} seed(s) did not pass'} "
          f"in {time.monotonic() - started:.0f} s")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
