"""The nemesis beside the load: a schedule of fault windows applied and healed on time.

`NemesisRunner(network, processes, fault_log_path, crash_points=None)` runs a
schedule (a list of `FaultWindow`, from `harness.nemesis.plans.schedule`) against its
targets (crash points: the `crash_points` given, or those of a `StackNemesis` given
as `network`; fake clocks: the `clocks` given, harness.nemesis.clock_faults): `start(windows)` runs it in the background (`run(windows)` in the
caller's thread), each window applied at its `at` and healed at its `end`: the
network and process faults in one lane (a thread), each crash point in a lane of its
own, so a slow arming call does not delay the other windows; `stop()` ends it early
(or waits for its end) and heals whatever is still active before it returns. The
crash-point client therefore takes calls from several threads (each call its own
connection).
Every window is written to `faults.jsonl` with its real start and end and its `error` (null when all went well).

Nothing that fails is dropped:

- a fault that cannot be applied stops the schedule (the run no longer tests what it
  claims), is logged with its error, and the faults already on are healed;
- a fault that cannot be healed is logged with its error, stops the schedule, and the
  other active faults are still healed;
- a `stop()` that times out leaves the faults still active on record as unhealed.

`runner.report()` is the outcome, a `NemesisReport`: `failures` (each a `FaultFailure`
with the window, the phase `apply` or `heal`, the error), `unhealed` (windows whose
fault may still be on: its heal failed or never ran) and `ok`. A caller ends the run
with `runner.report().raise_for_failure()`, which raises `NemesisFailed` (a
HarnessError: exit 2) with a one-line summary; `runner.failure` is the first
failure's message, for a quick look while the load runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from harness.errors import HarnessError
from harness.nemesis.fake_clock import ClockFaults
from harness.nemesis.faults import (
    ChildProcessFaults,
    CrashPointFaults,
    FaultTargets,
    FaultWindow,
    NetworkFaults,
    ProcessFaults,
)
from harness.nemesis.stack_proxies import StackNemesis

Phase = Literal["apply", "heal"]


class NemesisFailed(HarnessError):
    """A fault of the schedule could not be applied or healed."""


@dataclass(frozen=True)
class FaultFailure:
    """One window that could not be applied or healed."""

    window: str
    phase: Phase
    error: str

    @property
    def message(self) -> str:
        return f"could not {self.phase} {self.window}: {self.error}"


@dataclass(frozen=True)
class NemesisReport:
    """What went wrong in a schedule; `ok` when nothing did."""

    failures: tuple[FaultFailure, ...] = ()
    unhealed: tuple[str, ...] = ()  # windows whose fault may still be on

    @property
    def ok(self) -> bool:
        return not self.failures and not self.unhealed

    def summary(self) -> str:
        """One line: every failure, then the faults that may still be on."""
        if self.ok:
            return "every fault applied and healed"
        parts = [failure.message for failure in self.failures]
        if self.unhealed:
            parts.append(f"possibly still active: {', '.join(self.unhealed)}")
        return "; ".join(parts)

    def raise_for_failure(self) -> None:
        """NemesisFailed with the summary unless `ok`."""
        if not self.ok:
            raise NemesisFailed(f"the nemesis failed: {self.summary()}")


class NemesisRunner:
    """Runs a schedule beside the load, in lanes (`run`); heals in `finally`."""

    def __init__(self, nemesis: NetworkFaults, processes: ProcessFaults, fault_log_path: Path,
                 clock: Callable[[], float] = time.monotonic, *,
                 crash_points: CrashPointFaults | None = None, clocks: ClockFaults | None = None,
                 children: ChildProcessFaults | None = None) -> None:
        if crash_points is None and isinstance(nemesis, StackNemesis):
            crash_points = nemesis.crash_points  # a stack's nemesis carries its app's crash points
        self.targets = FaultTargets(network=nemesis, processes=processes, crash_points=crash_points,
                                    clocks=clocks, children=children)
        self.fault_log_path = Path(fault_log_path)
        self.clock = clock
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._active: dict[str, tuple[FaultWindow, float]] = {}
        self._failures: list[FaultFailure] = []
        self._unhealed: list[str] = []
        self._thread: threading.Thread | None = None

    @property
    def failure(self) -> str | None:
        """The first failure's message, None while all is well."""
        with self._lock:
            return self._failures[0].message if self._failures else None

    def report(self) -> NemesisReport:
        with self._lock:
            return NemesisReport(failures=tuple(self._failures), unhealed=tuple(self._unhealed))

    def start(self, windows: Sequence[FaultWindow], *, hold_from: float | None = None) -> None:
        self._thread = threading.Thread(target=self.run, args=(list(windows),), kwargs={"hold_from": hold_from},
                                        name="nemesis-runner", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop early (or after the schedule) and wait until everything is healed; what
        is still active after `timeout` seconds is reported unhealed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                with self._lock:
                    stuck = sorted(self._active)
                    self._failures.append(FaultFailure("nemesis-runner", "heal",
                                                       f"did not finish healing within {timeout:g}s"))
                    self._unhealed.extend(name for name in stuck if name not in self._unhealed)

    def active(self) -> list[str]:
        with self._lock:
            return sorted(self._active)

    def run(self, windows: Sequence[FaultWindow], *, hold_from: float | None = None) -> None:
        """Apply and heal every window on time; returns when done or stopped.

        Each crash point has its own lane (a thread that applies and heals its windows
        in time order); the network and process faults share one. Lanes run side by
        side, so a slow arming call never delays another target's windows. (With one
        thread for all, an arming that waited 3.5 s for a crashed app worker pushed a
        crash-points plan's last windows past the end of its load.) A crash point is a
        switch inside the app, apart from everything else; a network fault and a
        process fault are not: a service started again (a kill's heal) needs its
        dependencies' network, so a proxy's next window waits for that heal, as the
        plan's order says.

        A window ending at or after `hold_from` (the load's duration) runs to the end of
        the load: it is not healed on the clock but stays on until `stop()`, which the
        runner calls once the load has stopped (its users may still be retrying)."""
        held = {w.name for w in windows if hold_from is not None and w.end >= hold_from}
        lanes: dict[str, list[FaultWindow]] = {}
        for window in windows:
            lanes.setdefault(_lane(window), []).append(window)
        began = self.clock()
        threads = [threading.Thread(target=self._run_lane, args=(lane, began, held),
                                    name=f"nemesis-{name}", daemon=True)
                   for name, lane in sorted(lanes.items())]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            self._stop.set()  # a lane that could not be started: the others stop too
            for thread in threads:
                if thread.is_alive():
                    thread.join()
            for name in self.active():
                self._heal(self._active[name][0])

    def _run_lane(self, windows: Sequence[FaultWindow], began: float, held: set[str]) -> None:
        """One lane's windows, applied and healed in time order (at equal times a heal
        comes first, so a target's next window finds it healed)."""
        events = sorted(
            [(w.at, 1, w) for w in windows] + [(w.end, 0, w) for w in windows if w.name not in held],
            key=lambda event: (event[0], event[1], event[2].name),
        )
        for when, is_apply, window in events:
            if self._stop.wait(max(0.0, began + when - self.clock())):
                return
            if is_apply:
                if not self._apply(window):
                    return
            elif window.name in self.active():
                self._heal(window)
        if any(w.name in held for w in windows):
            self._stop.wait()  # the held faults stay on until the load has stopped

    def _apply(self, window: FaultWindow) -> bool:
        started = time.time()
        try:
            window.fault.apply(self.targets, window.name)
        except Exception as error:  # noqa: BLE001 - any failure to apply is a harness failure
            self._fail(FaultFailure(window.name, "apply", str(error)))
            self._log(window, started, time.time(), f"could not apply {window.name}: {error}")
            return False
        with self._lock:
            self._active[window.name] = (window, started)
        return True

    def _heal(self, window: FaultWindow) -> None:
        with self._lock:
            _, started = self._active.pop(window.name)
        error: str | None = None
        try:
            window.fault.heal(self.targets, window.name)
        except Exception as failure:  # noqa: BLE001 - healing must go on for the others
            error = f"could not heal {window.name}: {failure}"
            self._fail(FaultFailure(window.name, "heal", str(failure)), unhealed=True)
        self._log(window, started, time.time(), error)

    def _fail(self, failure: FaultFailure, *, unhealed: bool = False) -> None:
        with self._lock:
            self._failures.append(failure)
            if unhealed:
                self._unhealed.append(failure.window)
        self._stop.set()

    def _log(self, window: FaultWindow, start: float, end: float, error: str | None) -> None:
        with self._lock:
            log_fault(self.fault_log_path, window.fault.record(window.name), start=start, end=end, error=error)


def _lane(window: FaultWindow) -> str:
    """The lane a window runs in (NemesisRunner.run): its crash point's own, its clock's
    own (a clock's verification waits for the target to show it), or the one the
    network and process faults share."""
    fault = window.fault
    if fault.target_type == "crash_point":
        return f"crash-point-{fault.target}"
    if fault.target_type == "clock":
        return f"clock-{fault.target}"
    return "network-and-processes"


def log_fault(path: Path, record: Mapping[str, Any], *, start: float, end: float, error: str | None) -> None:
    """Append one fault's line to a run's fault log (faults.jsonl; docs/internals.md):
    the fault's record with when it was on and the error that ended it, if any. The
    nemesis and the web UI's Chaos tab both write it here."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as log:
        log.write(orjson.dumps({**record, "start": start, "end": end, "error": error},
                               option=orjson.OPT_APPEND_NEWLINE))
