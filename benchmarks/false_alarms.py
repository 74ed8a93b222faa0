"""False alarms: the correct app under a fault plan, on many seeds, must always pass.

A checker that fails correct runs is as useless as one that passes broken ones, and
a flaky verdict teaches users to ignore it. This runs `mixed` (every channel at
once) under `harness/plans/chaos.yaml` on N different seeds, each with a fresh stack, and
prints one line per seed with the verdict, the operations and the faults applied.
Any verdict other than PASS is listed with its reason; the exit code is 0 only when
every seed passed.

    .venv/bin/python benchmarks/false_alarms.py [--seeds 20] [--users 10] [--duration 10]
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path

from harness.run.runner import RunSpec, run

PLAN = Path(__file__).resolve().parent.parent / "harness" / "plans" / "chaos.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="how many seeds (1..N; default 20)")
    parser.add_argument("--first-seed", type=int, default=1, help="the first seed (default 1)")
    parser.add_argument("--users", type=int, default=10, help="Locust users per run (default 10)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load per run (default 10)")
    parser.add_argument("--scenario", default="mixed", help="scenario (default mixed)")
    parser.add_argument("--plan", type=Path, default=PLAN, help="fault plan (default harness/plans/chaos.yaml)")
    args = parser.parse_args(argv)

    verdicts: dict[str, int] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="false-alarms-") as workdir:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            spec = RunSpec(scenario=args.scenario, users=args.users, duration=args.duration,
                           plan=args.plan, seed=seed, runs_root=Path(workdir) / "runs",
                           attach=False, progress=False, app_workers=2)
            began = time.monotonic()
            outcome = run(spec, out=io.StringIO())
            check = outcome.check
            verdict = check.verdict if check is not None else "error"
            verdicts[verdict] = verdicts.get(verdict, 0) + 1
            counts = check.counts if check is not None else {}
            print(f"seed {seed:3d}: {verdict.upper():12s} {counts.get('operations', 0):6d} operations "
                  f"{counts.get('faults', 0):3d} faults {time.monotonic() - began:5.1f} s"
                  + ("" if verdict == "pass" else f"  {outcome.summary}"), flush=True)
    total = sum(verdicts.values())
    print(f"{verdicts.get('pass', 0)}/{total} seeds passed "
          f"({', '.join(f'{n} {v}' for v, n in sorted(verdicts.items()))}) "
          f"in {time.monotonic() - started:.0f} s")
    return 0 if verdicts.get("pass", 0) == total else 1


if __name__ == "__main__":
    sys.exit(main())
