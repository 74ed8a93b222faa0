"""A process's wall clock under libfaketime: its control file and its environment.

libfaketime (Debian's `libfaketime`, brought by the `faketime` package) is a library
loaded with `LD_PRELOAD` that answers `time()`, `gettimeofday()`, `clock_gettime()`
and their kin with the real time plus an offset. Read from a file named by
`FAKETIME_TIMESTAMP_FILE` and, with `FAKETIME_NO_CACHE=1`, read again on every call,
that offset can be changed while the process runs: no restart, no signal. That is
the clock fault's whole mechanism (harness.nemesis.clock_faults, docs/clocks.md).

`FakeClock(control_file)` is one such clock: `environment()` is what a process is
started with to run on it, `set_offset(seconds)` moves it (the file is replaced
whole, by a rename, so a process never reads half a line), `offset()` reads it back.
A process started with `environment()` keeps its clock across restarts of itself as
long as the same file is used.

`ClockFaults` is what a clock fault needs of whoever started the processes: each
target's `FakeClock` and a `ClockReading` of its clock as the target itself shows it
(harness.nemesis.clock_faults verifies every change with it).

`libfaketime_path()` finds the library (`HARNESS_LIBFAKETIME` overrides the search)
or raises `ClockUnavailable` saying how to install it.

Monotonic clocks: libfaketime 0.9.10 (Debian bookworm) fakes CLOCK_MONOTONIC as
well, with the same offset: a process's monotonic clock jumps with its wall clock,
forward and back (measured: Python's `time.monotonic()` reads the faked epoch time
and went back 7290 s on a jump from +2h to -90s). `FAKETIME_DONT_FAKE_MONOTONIC=1`
keeps it real, but then Python's `time.sleep` fails with EINVAL after a forward jump
(libfaketime shifts its CLOCK_MONOTONIC deadline by the wall-clock offset), so the
harness leaves monotonic faked: a jump is seen by every clock of the process.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from harness.errors import HarnessError

LIBRARY_ENV = "HARNESS_LIBFAKETIME"
# Where Debian and a source build put it; the multiarch folder is globbed.
_LIBRARY_GLOBS = ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
                  "/usr/local/lib/faketime/libfaketime.so.1", "/usr/local/lib/libfaketime.so.1")
INSTALL_HINT = ("install Debian's faketime package (`apt-get install faketime`, which `./scripts/setup.sh` "
                f"does) or point {LIBRARY_ENV} at libfaketime.so.1")


class ClockUnavailable(HarnessError):
    """libfaketime is not installed, so no process can be started under a fake clock."""


def libfaketime_path() -> Path:
    """The libfaketime library to preload; ClockUnavailable with the install hint."""
    given = os.environ.get(LIBRARY_ENV)
    if given:
        if not Path(given).is_file():
            raise ClockUnavailable(f"{LIBRARY_ENV}={given}: no such file; {INSTALL_HINT}")
        return Path(given)
    for pattern in _LIBRARY_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return Path(found[0])
    raise ClockUnavailable(f"the clock fault needs libfaketime, which is not installed: {INSTALL_HINT}")


def format_offset(seconds: float) -> str:
    """libfaketime's spelling of a relative offset: `+7200`, `-90`, `+0.5`."""
    text = f"{seconds:+.3f}".rstrip("0").rstrip(".")
    return "+0" if text in ("+", "-", "-0", "+0") else text


@dataclass(frozen=True)
class FakeClock:
    """One process's clock: the control file libfaketime reads its offset from."""

    control_file: Path

    def create(self) -> FakeClock:
        """Write offset 0 (the real time) unless the file exists; returns self."""
        if not self.control_file.exists():
            self.control_file.parent.mkdir(parents=True, exist_ok=True)
            self.set_offset(0.0)
        return self

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The variables that start a process on this clock (added to `base`'s
        LD_PRELOAD, which is kept after libfaketime)."""
        library = str(libfaketime_path())
        preload = (base or {}).get("LD_PRELOAD", "")
        return {
            "LD_PRELOAD": f"{library} {preload}".strip(),
            "FAKETIME_TIMESTAMP_FILE": str(self.control_file),
            "FAKETIME_NO_CACHE": "1",  # read the offset on every call: a change is seen at once
        }

    def set_offset(self, seconds: float) -> None:
        """Move the clock to real time + `seconds` (replace the file whole)."""
        temporary = self.control_file.with_name(f".{self.control_file.name}.{os.getpid()}.tmp")
        temporary.write_text(format_offset(seconds) + "\n")
        os.replace(temporary, self.control_file)

    def offset(self) -> float:
        """The offset in force (0 when the file is missing or unreadable)."""
        try:
            return float(self.control_file.read_text().strip() or 0)
        except (OSError, ValueError):
            return 0.0


def started_under(pid: int, control_file: Path) -> bool:
    """True when process `pid` runs with libfaketime loaded and reading `control_file`
    (its environment and its mapped libraries, from /proc)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        maps = Path(f"/proc/{pid}/maps").read_text(errors="replace")
    except OSError:
        return False
    wanted = f"FAKETIME_TIMESTAMP_FILE={control_file}".encode()
    return wanted in environ and "libfaketime" in maps


@dataclass(frozen=True)
class ClockReading:
    """A target's clock read once: its time and the real time at the reading's middle,
    both unix seconds, and how finely it tells time (1 s for a `Date` header)."""

    clock: float
    real: float
    resolution: float

    @property
    def offset(self) -> float:
        return self.clock - self.real


class ClockFaults(Protocol):
    """The clocks a nemesis may move: NemesisError for a target without a fake clock,
    and for a clock that cannot be read."""

    def fake_clock(self, target: str) -> FakeClock: ...
    def read_clock(self, target: str) -> ClockReading: ...
