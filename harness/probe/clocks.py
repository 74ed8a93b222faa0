"""The fake clocks of the processes a probe starts, and how their time is read.

A probe plan's `clock:` window (harness.nemesis.clock_faults) may name `service` (the
config's `service:`) and a dependency the probe starts itself (`dependencies: {NAME:
{command: [...]}}`). Those processes, and only when the plan moves their clock, are
started under libfaketime with a control file `clocks/<name>.offset` in the run
directory (harness.nemesis.fake_clock); `ProbeClocks` is the plan's `ClockFaults`.

How a target's clock is read, to verify each change on the target itself:

- `service`: the `Date` header of its answer to GET on its ready path (or `/`); a
  service that sends no `Date` header cannot be verified, and its clock fault fails
  (exit 2) saying so;
- a dependency: a `clock` reader named in its config: `redis` (the `TIME` command).

`clock_targets(plan)` are the names a plan's clock faults move.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from pathlib import Path

import requests

from harness.nemesis.clock_faults import ClockFault
from harness.nemesis.fake_clock import ClockReading, FakeClock
from harness.nemesis.plans import Plan
from harness.nemesis.toxiproxy_client import NemesisError

CLOCKS_DIR = "clocks"
READ_TIMEOUT = 2.0
ClockReader = Callable[[], ClockReading]


def clock_targets(plan: Plan | None) -> tuple[str, ...]:
    """The targets of a plan's clock faults, in the plan's order."""
    if plan is None:
        return ()
    faults = [window.fault for window in plan.windows]
    if plan.random is not None:
        faults.extend(plan.random.faults)
    return tuple(dict.fromkeys(fault.target for fault in faults if isinstance(fault, ClockFault)))


def control_file(run_dir: Path, name: str) -> Path:
    return Path(run_dir) / CLOCKS_DIR / f"{name}.offset"


def date_header_reader(url: str) -> ClockReader:
    """The service's clock from the `Date` header of GET `url` (1 s resolution)."""

    def read() -> ClockReading:
        before = time.time()
        try:
            answer = requests.get(url, timeout=READ_TIMEOUT)
        except requests.RequestException as error:
            raise NemesisError(f"GET {url} for its Date header failed: {error}") from None
        after = time.time()
        header = answer.headers.get("Date")
        if not header:
            raise NemesisError(f"GET {url} answered without a Date header, so the service's clock cannot be "
                               "read (send one to verify a clock fault)")
        try:
            moment = parsedate_to_datetime(header).timestamp()
        except (TypeError, ValueError):
            raise NemesisError(f"GET {url}: its Date header {header!r} is not an HTTP date") from None
        # A Date header truncates to the second: its middle is half a second later.
        return ClockReading(clock=moment + 0.5, real=(before + after) / 2, resolution=1.0)

    return read


def redis_time_reader(address: str) -> ClockReader:
    """A Redis server's clock from its `TIME` command (microseconds), over RESP by hand
    so that no client library is needed for one command."""
    host, _, port = address.rpartition(":")

    def read() -> ClockReading:
        before = time.time()
        try:
            with socket.create_connection((host, int(port)), timeout=READ_TIMEOUT) as connection:
                connection.sendall(b"*1\r\n$4\r\nTIME\r\n")
                data = b""
                while data.count(b"\r\n") < 5:
                    chunk = connection.recv(256)
                    if not chunk:
                        break
                    data += chunk
        except OSError as error:
            raise NemesisError(f"TIME on Redis at {address} failed: {error}") from None
        after = time.time()
        lines = data.split(b"\r\n")
        try:
            seconds, micros = int(lines[2]), int(lines[4])
        except (IndexError, ValueError):
            raise NemesisError(f"TIME on Redis at {address} answered {data[:80]!r}") from None
        return ClockReading(clock=seconds + micros / 1e6, real=(before + after) / 2, resolution=0.01)

    return read


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
