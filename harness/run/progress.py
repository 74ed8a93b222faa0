"""The live progress line of `harness run`: elapsed, operations, failures, faults.

It reads the growing history files incrementally (new bytes only), so it costs
little and needs no channel to the Locust processes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from harness.history import history_files


class ProgressLine:
    """Counts the completions in a run's histories directory (harness.run.rundir) as they grow."""

    def __init__(self, histories: Path, *, out: TextIO, enabled: bool = True) -> None:
        self.histories = Path(histories)
        self.out = out
        self.enabled = enabled
        self.started = time.monotonic()
        self._offsets: dict[Path, int] = {}
        self.counts = {"ok": 0, "fail": 0, "info": 0}
        self._interactive = bool(getattr(out, "isatty", lambda: False)())
        self._last_print = 0.0

    def _read_new(self) -> None:
        for path in history_files(self.histories):
            offset = self._offsets.get(path, 0)
            with open(path, "rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            # Only whole lines count; a torn tail is read again next time.
            end = chunk.rfind(b"\n") + 1
            chunk = chunk[:end]
            self._offsets[path] = offset + end
            for kind in self.counts:
                self.counts[kind] += chunk.count(b'"type":"%s"' % kind.encode())

    def line(self, active_faults: Sequence[str] = ()) -> str:
        elapsed = time.monotonic() - self.started
        done = sum(self.counts.values())
        faults = ", ".join(active_faults) if active_faults else "none"
        return (
            f"[{elapsed:5.1f}s] operations {done}  ok {self.counts['ok']}  "
            f"fail {self.counts['fail']}  info {self.counts['info']}  faults: {faults}"
        )

    def update(self, *, active_faults: Sequence[str] = ()) -> None:
        if not self.enabled:
            return
        self._read_new()
        now = time.monotonic()
        if self._interactive:
            self.out.write("\r" + self.line(active_faults).ljust(100))
            self.out.flush()
        elif now - self._last_print >= 5.0:
            # Logs (CI) get a line every few seconds instead of a redrawn one.
            print(self.line(active_faults), file=self.out, flush=True)
            self._last_print = now

    def finish(self) -> None:
        if not self.enabled:
            return
        self._read_new()
        if self._interactive:
            self.out.write("\n")
        print(self.line(), file=self.out, flush=True)
