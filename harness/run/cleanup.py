"""The run's cleanup steps: each one runs, each failure is reported, none is swallowed.

A step (stop the load, stop the nemesis, heal the faults, resume a paused consumer,
copy the logs, stop the run's stack) is wrapped by `Cleanup.step` and registered on
an `ExitStack` as soon as what it undoes exists. The wrapper runs the step; when it
raises, the failure is printed on stderr at once (`harness: cleanup: ...`), appended
to the run directory's `cleanup_errors.jsonl`, and kept, so the later steps still
run. Once the steps ran, `raise_if_failed` turns what was kept into a
`CleanupFailed`: a HarnessError, exit code 2. A run whose fault could not be
healed is a harness failure, never a PASS.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from harness.errors import HarnessError
from harness.run.rundir import CleanupFailure, RunDir


class HealFailed(HarnessError):
    """A heal left something faulted (a toxic, a disabled proxy, a paused or dead service)."""

    def __init__(self, failures: Sequence[str]) -> None:
        self.failures = tuple(failures)
        super().__init__("; ".join(self.failures))


class CleanupFailed(HarnessError):
    """One or more cleanup steps of a run failed; the run is a harness failure."""

    def __init__(self, failures: Sequence[CleanupFailure]) -> None:
        self.failures = tuple(failures)
        listed = "; ".join(f"{failure.step}: {failure.error}" for failure in self.failures)
        super().__init__(f"cleanup failed ({listed})")


class Cleanup:
    """The failures of one run's cleanup steps, reported as they happen."""

    def __init__(self, run_dir: RunDir | None, *, out: TextIO = sys.stderr) -> None:
        self.run_dir = run_dir
        self.out = out
        self.failures: list[CleanupFailure] = []
        self._raised = 0  # failures already raised: a later check raises only new ones

    def step(self, name: str, action: Callable[[], object]) -> Callable[[], None]:
        """`action` as a cleanup step: run it; an Exception is reported, not raised."""

        def run_step() -> None:
            try:
                action()
            except Exception as error:  # noqa: BLE001 - reported, recorded and raised after the other steps
                self.failed(name, error)

        return run_step

    def failed(self, step: str, error: BaseException | str) -> None:
        """Report a failed step (one line per failure a `HealFailed` lists)."""
        messages = error.failures if isinstance(error, HealFailed) else (str(error),)
        failures = [CleanupFailure(step, message or type(error).__name__, time.time()) for message in messages]
        for failure in failures:
            print(f"harness: cleanup: {failure.step} failed: {failure.error}", file=self.out, flush=True)
        self.failures += failures
        if self.run_dir is not None:
            try:
                self.run_dir.record_cleanup_errors(failures)
            except OSError as write_error:
                print(f"harness: cleanup: could not record it in {self.run_dir.cleanup_errors}: {write_error}",
                      file=self.out, flush=True)

    def raise_if_failed(self) -> None:
        """CleanupFailed for the failures not raised yet."""
        new = self.failures[self._raised:]
        self._raised = len(self.failures)
        if new:
            raise CleanupFailed(new)
