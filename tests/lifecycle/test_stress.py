"""Runs killed at random moments, repeatedly (bounded: HARNESS_STRESS_RUNS, default 6),
and `harness smoke` stopped by SIGTERM mid-way.

Each run gets a random signal (SIGTERM or SIGKILL) at a random time between the start
of its stack and shortly after its end; whatever the moment, nothing of it is left
(waited for within a bound; the seconds it took are printed, about 1-3 s on a quiet
machine), and a run that did not finish is marked interrupted.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest
from lifecycle_helpers import HarnessRun, interrupted_mark, under_load

from harness.run.smoke import CONTROL_PLANS_DIR, DEFAULT_PARALLEL, LANE_STACKS_DIR

RUNS = int(os.environ.get("HARNESS_STRESS_RUNS", "6"))
SEED = int(os.environ.get("HARNESS_STRESS_SEED", "14"))

pytestmark = pytest.mark.timeout(60 + 45 * RUNS)


def test_runs_killed_at_random_moments_leave_nothing(tmp_path: Path, runs: list[HarnessRun]) -> None:
    rng = random.Random(SEED)
    measured = []
    for index in range(RUNS):
        signum = rng.choice([signal.SIGTERM, signal.SIGKILL])
        delay = round(rng.uniform(0.3, 14.0), 2)
        workdir = tmp_path / f"r{index}"
        run = HarnessRun(workdir, ["run", "mixed", "--duration", "6s", "--users", "3",
                                   "--plan", "flaky-network", "--app-workers", "1",
                                   "--consumers", "2", "--root", str(tmp_path / "none"),
                                   "--runs-dir", str(workdir / "runs")])
        runs.append(run.start())
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and run.process is not None and run.process.poll() is None:
            run.observe()
            time.sleep(0.02)
        since = run.signal(signum)
        left = run.leftovers(since)
        label = f"run {index}: {signal.Signals(signum).name} at {delay}s"
        measured.append(f"{label} -> clean after {left['seconds']} s, exit {left['harness_exit']}")
        assert left["processes"] == [] and left["ports"] == [], (label, left)
        assert list((run.registry / "leases").glob("*.json")) == [], label
        run_dir = run.run_dir()
        finished = left["harness_exit"] in (0, 1, 3)
        if run_dir is not None and not finished:
            marker, result = interrupted_mark(run_dir)
            assert marker is not None and result is not None and result["valid"] is None, (label, left)
        if not finished:
            expected = 143 if signum == signal.SIGTERM else -signal.SIGKILL
            assert left["harness_exit"] == expected, (label, left, run.output()[-2000:])
    print("\n".join(measured))


def test_smoke_stopped_by_sigterm_mid_run(tmp_path: Path, runs: list[HarnessRun]) -> None:
    run = HarnessRun(tmp_path / "w", ["smoke", "--duration", "5s", "--users", "2", "--app-workers", "1",
                                      "--runs-dir", str(tmp_path / "w" / "runs")])
    runs.append(run.start())
    assert run.wait_until(under_load, 90), run.output()[-3000:]
    time.sleep(1.0)
    signalled_at = time.time()
    left = run.leftovers(run.signal(signal.SIGTERM))
    print(f"smoke SIGTERM: clean after {left['seconds']} s")
    assert left["processes"] == [] and left["ports"] == [] and left["harness_exit"] == 143, left
    # The runs root also keeps the plans the control cells run under (smoke.CONTROL_PLANS_DIR)
    # and the lanes' stacks (smoke.LANE_STACKS_DIR), none of which is a run.
    run_dirs = sorted(p for p in (tmp_path / "w" / "runs").iterdir()
                      if p.is_dir() and p.name not in (CONTROL_PLANS_DIR, LANE_STACKS_DIR))
    # The steps side by side were all stopped and marked; no further step started.
    assert 1 <= len(run_dirs) <= DEFAULT_PARALLEL, run_dirs
    for run_dir in run_dirs:
        marker, result = interrupted_mark(run_dir)
        if marker is None and result is not None and result.get("valid") is not None:
            # A step that had its verdict before the signal was sent is finished, not
            # stopped: the one run directory without a mark that is right. (A run that
            # went on to its verdict after the signal is not: its interrupt was lost,
            # as when a finalizer swallowed it, harness.stack.lifeline.)
            written = (run_dir / "result.json").stat().st_mtime
            assert written < signalled_at, (run_dir, f"judged {written - signalled_at:.2f} s after the signal",
                                            run.output()[-3000:])
            continue
        assert marker is not None and marker["signal"] == "SIGTERM", (run_dir, marker, result, run.output()[-3000:])
