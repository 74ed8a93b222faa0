"""The fake clocks of a local stack's app and consumers, as a plan's `ClockFaults`.

A stack started with `StackSettings.fake_clocks` runs those services under libfaketime,
each reading its offset from ROOT/clocks/NAME.offset (harness.stack.settings
`clock_control_file`); `StackClocks(root, info)` moves them for a plan's `clock:`
windows (harness.nemesis.clock_faults) and reads each one's clock as the service shows
it:

- `redis` (a stack's Redis never runs under libfaketime, harness.nemesis.plans
  `NO_FAKE_CLOCK`; read here for a Redis that some day does): its `TIME` command on
  its direct port (never through its proxy, which a network fault may cut);
- `app`: the `Date` header of GET /healthz on its direct URL;
- `consumer-N`: a consumer answers nothing and stamps nothing with its own clock, so
  its change is verified on its process instead: libfaketime loaded and reading its
  control file (/proc), and the file holding the offset asked. This is the one
  target verified short of its own clock reading (docs/clocks.md).

A service without a control file (a stack `harness up` started, a compose stack) was
not started under the fake clock: its clock fault fails, exit 2.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlsplit

from harness.nemesis.clock_readers import date_header_reader, redis_time_reader
from harness.nemesis.fake_clock import ClockReading, FakeClock, started_under
from harness.nemesis.toxiproxy_client import NemesisError
from harness.stack.info import StackInfo, read_info
from harness.stack.settings import clock_control_file


class StackClocks:
    """ClockFaults over one local stack (module docstring)."""

    def __init__(self, root: Path, info: StackInfo) -> None:
        self.root = Path(root)
        self.info = info

    def fake_clock(self, target: str) -> FakeClock:
        path = clock_control_file(self.root, target)
        if not path.exists():
            raise NemesisError(f"{target} of the stack in {self.root} was not started under the fake clock "
                               "(a plan with clock faults needs a run's own local stack, not --attach)")
        return FakeClock(path)

    def read_clock(self, target: str) -> ClockReading:
        if target == "redis":
            url = urlsplit(self.info.redis_url)
            return redis_time_reader(f"{url.hostname}:{url.port}")()
        if target == "app":
            return date_header_reader(f"{self.info.app_direct_url}/healthz")()
        return self._consumer(target)

    def _consumer(self, target: str) -> ClockReading:
        clock = self.fake_clock(target)
        info = read_info(self.root) or self.info
        pid = next((service.pid for service in info.services if service.name == target), None)
        if pid is None or not started_under(pid, clock.control_file):
            raise NemesisError(f"{target} (pid {pid}) does not run with libfaketime reading {clock.control_file}")
        now = time.time()
        # The file is what libfaketime reads on each of the process's time calls.
        return ClockReading(clock=now + clock.offset(), real=now, resolution=0.0)
