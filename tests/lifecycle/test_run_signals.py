"""`harness run` stopped by SIGTERM or SIGKILL at each moment of a run: while its stack
starts, under load (a toxic active), while the consumers drain, during the check.

Soon after the signal (waited for within a bound; the seconds it took are printed as
a measurement, not asserted: a busy machine stretches them) no process of the run is
left (the janitor, Locust, the stack's supervisor and services included), every port
it held is free, its lease is gone and its run directory is marked interrupted. SIGTERM exits 143 and leaves a run
that `harness check` can judge (except before the stack was up: nothing to check).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from lifecycle_helpers import (
    REPO,
    HarnessRun,
    checking,
    draining,
    interrupted_mark,
    stack_starting,
    under_load_with_toxic,
)

from tests.support.cli import run_harness

pytestmark = pytest.mark.timeout(240)

SMALL = ["--app-workers", "1", "--consumers", "2"]
# A slow message handler and one consumer leave a backlog the drain takes seconds on.
SLOW_CONSUMER = {"TARGET_APP_HANDLER_DELAY_MS": "100"}

MOMENTS: dict[str, tuple[list[str], dict[str, str], Callable[[HarnessRun], bool], float]] = {
    "stack-starting": (["--duration", "6s", "--users", "2", *SMALL], {}, stack_starting, 30),
    "load": (["--duration", "20s", "--users", "3", "--plan", "flaky-network", *SMALL], {},
             under_load_with_toxic, 40),
    "drain": (["--duration", "4s", "--users", "4", "--app-workers", "1", "--consumers", "1",
               "--drain-timeout", "90s"], SLOW_CONSUMER, draining, 60),
    "check": (["--duration", "8s", "--users", "6", *SMALL], {}, checking, 90),
}


def start(tmp_path: Path, runs: list[HarnessRun], moment: str) -> HarnessRun:
    args, env, _, _ = MOMENTS[moment]
    run = HarnessRun(tmp_path / "w", ["run", "mixed", *args, "--runs-dir", str(tmp_path / "w" / "runs"),
                                      "--root", str(tmp_path / "no-stack-here")], env)
    runs.append(run.start())
    return run


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("moment", list(MOMENTS))
def test_a_signal_at_any_moment_leaves_nothing_and_marks_the_run(
        tmp_path: Path, runs: list[HarnessRun], moment: str, signum: int) -> None:
    run = start(tmp_path, runs, moment)
    _, _, reached, timeout = MOMENTS[moment]
    assert run.wait_until(reached, timeout), f"never reached {moment}:\n{run.output()[-3000:]}"
    since = run.signal(signum)
    left = run.leftovers(since)
    print(f"{moment} {signal.Signals(signum).name}: clean after {left['seconds']} s")  # the measurement
    assert left["processes"] == [] and left["ports"] == [], left
    expected_exit = 143 if signum == signal.SIGTERM else -signal.SIGKILL
    assert left["harness_exit"] == expected_exit, run.output()[-3000:]

    run_dir = run.run_dir()
    assert run_dir is not None
    marker, result = interrupted_mark(run_dir)
    assert marker is not None and marker["interrupted"] is True, run.output()[-2000:]
    assert result is not None and result["valid"] is None and result["interrupted"]["interrupted"] is True
    if signum == signal.SIGTERM:
        assert marker["signal"] == "SIGTERM" and marker["by"] == "harness"
    else:
        assert marker["by"] == "lifeline"
    assert list((run.registry / "leases").glob("*.json")) == []
    assert list((run.registry / "stacks").glob("*.json")) == []

    if signum == signal.SIGTERM and moment != "stack-starting":
        # What was recorded so far stays checkable, and a re-check keeps the mark.
        assert marker["checkable"] is True
        check = run_harness("check", str(run_dir), cwd=REPO, timeout=120)
        assert check.returncode in (0, 1, 3), check.stderr
        _, rechecked = interrupted_mark(run_dir)
        assert rechecked is not None and rechecked["valid"] is not None
        assert rechecked["interrupted"]["signal"] == "SIGTERM"
