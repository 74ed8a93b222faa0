"""The clock fault: one process's wall clock jumped, skewed or strobed, and verified.

A plan's window `clock: {target: NAME, jump: 2h}` (or `skew: 90s`, or
`strobe: {delta: 30s, every: 1s}`; a `-` in front of a duration moves the clock back)
is a `ClockFault`. Its target is a process the harness started on a fake clock
(harness.nemesis.fake_clock: libfaketime under LD_PRELOAD, reading its offset from a
control file); the fault changes that file while the process runs.

- `jump`: the clock steps by the delta at the window's start and stays there (a step,
  like an NTP step or a VM resumed: nothing steps it back; the window's length is only
  how long the plan waits before its next window on that target). Jumps add up.
- `skew`: the clock runs `delta` off for the window and is set back at its end.
- `strobe`: the clock flips between its offset and offset + delta every `every`
  seconds for the window, and is set back at its end.

Every change is verified on the target itself (`ClockFaults.read_clock`: Redis's `TIME`,
the `Date` header of an HTTP service, ...): the offset the target shows must be the
one asked within the reading's resolution plus `SLACK`, within `VERIFY_TIMEOUT`
seconds, or the apply fails with `NemesisError` (the nemesis stops, the run exits 2).
A strobe verifies its first flip; the flips after it are counted in its log line.

`ClockFaults` (harness.nemesis.fake_clock) is what the fault needs of the harness: the target's `FakeClock`
(NemesisError for a process that was not started on one) and a reading of its clock.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from harness.nemesis.fake_clock import ClockFaults, ClockReading, FakeClock
from harness.nemesis.faults import FaultRecord, FaultTargets, TargetType
from harness.nemesis.toxiproxy_client import NemesisError

ClockMode = Literal["jump", "skew", "strobe"]
CLOCK_MODES: tuple[ClockMode, ...] = ("jump", "skew", "strobe")
VERIFY_TIMEOUT = 5.0
VERIFY_POLL = 0.2
SLACK = 1.0  # seconds beyond a reading's resolution: the reading's own round trip, a busy machine
MIN_STROBE_EVERY = 0.2


def verify_offset(clocks: ClockFaults, target: str, expected: float, *,
                  timeout: float | None = None) -> float:
    """Wait until `target`'s own clock shows `expected` seconds off the real time
    (within `timeout`, default VERIFY_TIMEOUT); the offset seen, or NemesisError
    saying what it showed instead."""
    timeout = VERIFY_TIMEOUT if timeout is None else timeout
    deadline = time.monotonic() + timeout
    seen: ClockReading | None = None
    problem = "no reading"
    while True:
        try:
            seen = clocks.read_clock(target)
            if abs(seen.offset - expected) <= seen.resolution + SLACK:
                return seen.offset
            problem = f"it reads {seen.offset:+.1f}s off the real time"
        except NemesisError as error:
            problem = str(error)
        if time.monotonic() >= deadline:
            raise NemesisError(f"the clock of {target} did not move to {expected:+g}s within {timeout:g}s "
                               f"({problem}); is it running under the fake clock?")
        time.sleep(VERIFY_POLL)


@dataclass
class _Strobe:
    """A strobe's flipping thread and what it did."""

    stop: threading.Event
    thread: threading.Thread | None = None
    flips: int = 0


@dataclass(frozen=True)
class ClockFault:
    """One target's clock moved by `delta` seconds (`mode`: jump, skew or strobe,
    module docstring); `every` is a strobe's period."""

    kind: ClassVar[str] = "clock"
    target_type: ClassVar[TargetType] = "clock"
    target_field: ClassVar[str] = "clock.target"

    process: str
    mode: ClockMode
    delta: float
    every: float | None = None
    # Per window: the offset before it, the offset verified, a strobe's thread.
    _base: dict[str, float] = field(default_factory=dict, compare=False, hash=False, repr=False)
    _seen: dict[str, float] = field(default_factory=dict, compare=False, hash=False, repr=False)
    _strobes: dict[str, _Strobe] = field(default_factory=dict, compare=False, hash=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, hash=False, repr=False)

    @property
    def target(self) -> str:
        return self.process

    def label(self) -> str:
        return f"clock-{self.mode}-{self.process}"

    def describe(self) -> str:
        every = f" every {self.every:g}s" if self.every is not None else ""
        return f"clock {self.mode} {self.delta:+g}s{every} on {self.process}"

    @staticmethod
    def _clocks(targets: FaultTargets) -> ClockFaults:
        clocks = targets.clocks
        if clocks is None:
            raise NemesisError("no fake clocks here: the clock fault needs processes the harness started itself")
        return clocks

    def apply(self, targets: FaultTargets, window: str) -> None:
        clocks = self._clocks(targets)
        clock = clocks.fake_clock(self.process)
        base = clock.offset()
        with self._lock:
            self._base[window] = base
        clock.set_offset(base + self.delta)
        seen = verify_offset(clocks, self.process, base + self.delta)
        with self._lock:
            self._seen[window] = seen
        if self.mode == "strobe":
            assert self.every is not None
            strobe = _Strobe(stop=threading.Event())
            strobe.thread = threading.Thread(target=self._flip, args=(clock, base, strobe),
                                             name=f"strobe-{window}", daemon=True)
            with self._lock:
                self._strobes[window] = strobe
            strobe.thread.start()

    def _flip(self, clock: FakeClock, base: float, strobe: _Strobe) -> None:
        assert self.every is not None
        moved = True  # apply left it at base + delta
        while not strobe.stop.wait(self.every):
            moved = not moved
            clock.set_offset(base + self.delta if moved else base)
            strobe.flips += 1

    def heal(self, targets: FaultTargets, window: str) -> None:
        if self.mode == "jump":
            return  # a step stays: nothing steps a real clock back (module docstring)
        clocks = self._clocks(targets)
        with self._lock:
            strobe = self._strobes.get(window)
            base = self._base.get(window)
        if strobe is not None:
            strobe.stop.set()
            if strobe.thread is not None:
                strobe.thread.join()
        if base is None:
            return  # never applied
        clocks.fake_clock(self.process).set_offset(base)
        verify_offset(clocks, self.process, base)

    def record(self, window: str) -> FaultRecord:
        with self._lock:
            base = self._base.get(window)
            seen = self._seen.get(window)
            strobe = self._strobes.get(window)
        record: FaultRecord = {"name": window, "kind": self.kind, "target": self.process, "type": None, "stream": None,
                "attributes": None, "toxicity": None, "action": None, "clock": self.mode, "delta": self.delta,
                "every": self.every, "offset_before": base,
                "offset_after": None if base is None else base + self.delta,
                "observed_offset": None if seen is None else round(seen, 3),
                "flips": strobe.flips if strobe is not None else None}
        return record
