"""The fake clocks of the processes a probe starts, and how their time is read.

A probe plan's `clock:` window (harness.nemesis.clock_faults) may name `service` (the
config's `service:`) and a dependency the probe starts itself (`dependencies: {NAME:
{command: [...]}}`). Those processes, and only when the plan moves their clock, are
started under libfaketime with a control file `clocks/<name>.offset` in the run
directory (harness.nemesis.fake_clock); `ProbeClocks` is the plan's `ClockFaults`.

How a target's clock is read, to verify each change on the target itself
(harness.nemesis.clock_readers):

- `service`: the `Date` header of its answer to GET on its ready path (or `/`); a
  service that sends no `Date` header cannot be verified, and its clock fault fails
  (exit 2) saying so;
- a dependency: a `clock` reader named in its config: `redis` (the `TIME` command).

`clock_targets(plan)` (harness.nemesis.plans) are the names a plan's clock faults move.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from harness.nemesis.clock_readers import ClockReader
from harness.nemesis.fake_clock import ClockReading, FakeClock
from harness.nemesis.plans import clock_targets
from harness.nemesis.toxiproxy_client import NemesisError

CLOCKS_DIR = "clocks"
__all__ = ["CLOCKS_DIR", "ProbeClocks", "clock_targets", "control_file"]


def control_file(run_dir: Path, name: str) -> Path:
    return Path(run_dir) / CLOCKS_DIR / f"{name}.offset"


class ProbeClocks:
    """The plan's `ClockFaults` of one probe run: name -> its fake clock and reader."""

    def __init__(self) -> None:
        self._clocks: dict[str, FakeClock] = {}
        self._readers: dict[str, ClockReader] = {}

    def add(self, name: str, clock: FakeClock, reader: ClockReader) -> None:
        self._clocks[name] = clock
        self._readers[name] = reader

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._clocks)

    def offsets(self) -> Mapping[str, float]:
        return {name: clock.offset() for name, clock in self._clocks.items()}

    def fake_clock(self, target: str) -> FakeClock:
        try:
            return self._clocks[target]
        except KeyError:
            raise NemesisError(f"{target!r} was not started under a fake clock") from None

    def read_clock(self, target: str) -> ClockReading:
        if target not in self._readers:
            raise NemesisError(f"{target!r} was not started under a fake clock")
        return self._readers[target]()
